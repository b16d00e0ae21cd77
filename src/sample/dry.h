// DRY ("Don't Repeat Yourself", p-e-w, text-generation-webui PR #5677, as llama.cpp implements it):
// a token that would extend a repetition of the recent text gets logit -= multiplier *
// base^(length - allowed_length), where `length` is the longest suffix of the window that also
// occurred earlier in the window followed by that token (capped so it never reaches back across a
// sequence breaker). Tokens whose whole text contains a breaker are never penalized.
//
// Sequence breakers are strings ("\n", ":", "\"", "*" by default) matched against token text: every
// token whose text contains the breaker is a one-token breaker, and a token whose text ends with the
// breaker's beginning becomes the head of a multi-token breaker whose tail is the rest of the breaker,
// tokenized (at most 40 bytes per breaker and 20 tail tokens, llama.cpp's limits).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "sample/candidates.h"

namespace zinc::tokenizer {
class Tokenizer;
}

namespace zinc::sample {

// What DRY needs to know about the vocabulary: each token's text and how plain text tokenizes.
struct TokenTexts {
  int32_t n_vocab = 0;
  std::function<std::string(int32_t)> text;                      // the text one token decodes to
  std::function<std::vector<int32_t>(std::string_view)> encode;  // plain text to ids, no special tokens
};

// The texts of a tokenizer's vocabulary: a token's text is Tokenizer::decode of that one token
// (llama.cpp's single-token detokenization), encoding adds and parses no special tokens. The
// tokenizer must outlive the returned object.
TokenTexts token_texts(const tokenizer::Tokenizer& tokenizer);

class DryBreakers {
 public:
  // Token sequences from breaker strings, scanning every token's text once.
  static DryBreakers from_strings(std::span<const std::string> breakers, const TokenTexts& texts);
  // A breaker given as tokens: its first token is the head, the rest the tail.
  void add(std::span<const int32_t> sequence);

  bool empty() const { return by_head_.empty(); }
  // A token that is a whole breaker by itself: never penalized.
  bool is_single_token(int32_t token) const;
  // Tails of the breakers starting with `head` (nullptr when none).
  const std::vector<std::vector<int32_t>>* tails(int32_t head) const;

 private:
  std::unordered_map<int32_t, std::vector<std::vector<int32_t>>> by_head_;
};

struct DryParams {
  float multiplier = 0.0f;  // 0: disabled
  float base = 1.75f;
  int32_t allowed_length = 2;  // repetitions up to this many tokens are free
};

// The penalty step of one sampling step, with its scratch kept between steps.
class Dry {
 public:
  Dry() = default;
  Dry(DryParams params, DryBreakers breakers) : params_(params), breakers_(std::move(breakers)) {}

  // For each token that would extend a repetition of `window` (oldest first, already cut to the
  // penalty window), the longest such repetition: (token, length) pairs with length >=
  // allowed_length, breaker tokens included. Exposed for tests.
  const std::vector<std::pair<int32_t, int32_t>>& repeat_lengths(std::span<const int32_t> window);
  // Applies the penalties to the candidates.
  void apply(Candidates& c, std::span<const int32_t> window);

 private:
  DryParams params_;
  DryBreakers breakers_;
  std::vector<int32_t> recent_;  // window, most recent first
  std::vector<int32_t> z_;       // Z-function of recent_
  std::unordered_map<int32_t, int32_t> longest_;
  std::vector<std::pair<int32_t, int32_t>> lengths_;
  std::vector<int32_t> ids_;
  std::vector<float> amounts_;
};

}  // namespace zinc::sample
