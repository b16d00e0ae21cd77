// Test helper: small vocabularies built by hand as GGUF metadata, so expected ids follow from the
// algorithm's definition rather than from the tokenizer under test.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "gguf/value.h"
#include "tokenizer/vocab.h"

namespace zinc::test {

using tokenizer::TokenType;

using gguf::Metadata;
using gguf::Value;

struct Tok {
  std::string text;
  float score = 0.0f;
  TokenType type = TokenType::Normal;
};

inline Metadata make_vocab(const std::string& model, const std::vector<Tok>& toks,
                           const std::vector<std::string>& merges = {}, const std::string& pre = "") {
  Metadata md;
  md.set("tokenizer.ggml.model", Value::str(model));
  if (!pre.empty()) md.set("tokenizer.ggml.pre", Value::str(pre));
  std::vector<std::string> texts;
  std::vector<float> scores;
  std::vector<int32_t> types;
  for (const auto& t : toks) {
    texts.push_back(t.text);
    scores.push_back(t.score);
    types.push_back(static_cast<int32_t>(t.type));
  }
  md.set("tokenizer.ggml.tokens", Value::strings(texts));
  md.set("tokenizer.ggml.scores", Value::f32s(scores));
  md.set("tokenizer.ggml.token_type", Value::i32s(types));
  if (!merges.empty()) md.set("tokenizer.ggml.merges", Value::strings(merges));
  return md;
}

// A SentencePiece vocabulary: <unk> <s> </s>, the 256 byte tokens (ids 3..258), then pieces.
inline Metadata spm_vocab(std::vector<Tok> pieces) {
  std::vector<Tok> toks = {{"<unk>", 0, TokenType::Unknown}, {"<s>", 0, TokenType::Control}, {"</s>", 0, TokenType::Control}};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    toks.push_back({buf, 0, TokenType::Byte});
  }
  for (auto& p : pieces) toks.push_back(std::move(p));
  return make_vocab("llama", toks);
}
constexpr int32_t kByte0 = 3, kFirstPiece = 259;

}  // namespace zinc::test
