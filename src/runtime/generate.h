// The generation loop shared by `zinc run`, `zinc chat` and the server: prefill a prompt (reusing what
// the context already holds), then sample, stream text, and stop at an end-of-generation token, a stop
// string, the token limit, a cancel request or a full context (or shift the context and go on).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/session.h"
#include "sample/sampler.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace zinc::runtime {

enum class StopReason { Length, EndOfGeneration, StopString, Cancelled, ContextFull };

// "length", "eog", "stop", "cancelled", "context_full".
const char* stop_reason_name(StopReason r);

struct GenerateOptions {
  int32_t max_tokens = 128;  // < 0: no limit but the context
  std::vector<std::string> stop;
  // A full context ends generation (ContextFull) unless context_shift is set: then the first n_keep
  // tokens stay, half of the rest is dropped and generation goes on.
  bool context_shift = false;
  int32_t n_keep = 0;
  const std::atomic<bool>* cancel = nullptr;  // polled between tokens (set from a signal handler)
  tokenizer::DecodeOptions decode;            // at_start = false when the text continues shown text
  bool sampler_sees_prompt = true;            // penalties include the prompt tokens not already accepted
};

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated tokens, without the end-of-generation token
  std::string text;             // the text streamed, stop string excluded
  StopReason reason = StopReason::Length;
  int32_t stop_index = -1;      // StopString: which one
  int64_t prompt_tokens = 0;    // the prompt's length
  int64_t cached_tokens = 0;    // of which already in the context (not evaluated again)
  int32_t context_shifts = 0;
  double prefill_s = 0;         // evaluating the uncached prompt tokens
  double first_token_s = 0;     // from the call to the first token's text (time to first token)
  double decode_s = 0;          // from the first sampled token to the end

  double prefill_tokens_per_s() const;
  double decode_tokens_per_s() const;
};

using TextSink = std::function<void(std::string_view text)>;

// Prefills `prompt` (the whole context wanted: tokens the session already holds as a prefix are
// reused) and generates. on_text receives the text as it becomes certain (never part of a stop string).
// Throws zinc::Error when the prompt itself does not fit the context.
GenerateResult generate(Session& session, const tokenizer::Tokenizer& tok, sample::Sampler& sampler,
                        std::span<const int32_t> prompt, const GenerateOptions& options, const TextSink& on_text);

}  // namespace zinc::runtime
