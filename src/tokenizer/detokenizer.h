// Streaming detokenizer: token ids in, text out, never a broken character.
//
// A token can end in the middle of a UTF-8 sequence (byte-fallback tokens <0xF0> <0x9F> ..., or
// byte-level BPE tokens that split an emoji), so push() returns only the code points that are
// complete and holds back at most 3 trailing bytes until a later token completes them. Bytes that
// can never become a character (a stray continuation byte, a sequence cut short by the next
// token) come out as U+FFFD, so the output is always valid UTF-8. flush() ends the stream.
//
// The first token follows llama.cpp's detokenizer: in a SentencePiece vocabulary the space the
// tokenizer put before the text is dropped, except after a BOS that remove_special skips. A stream
// that continues text already shown (generation after a prompt) sets DecodeOptions::at_start =
// false, so its first token keeps its space. Unlike
// Tokenizer::decode, no clean_up_tokenization_spaces is applied: that rewrites text across token
// boundaries, which a stream that has already sent the text cannot take back (llama.cpp's
// streaming output does not apply it either).
#pragma once

#include <cstdint>
#include <string>

#include "tokenizer/tokenizer.h"

namespace zinc::tokenizer {

class Detokenizer {
 public:
  explicit Detokenizer(const Tokenizer& tokenizer, DecodeOptions options = {});

  // Text completed by this token (possibly empty). Throws zinc::Error for an id out of range.
  // With remove_special, the BOS and EOS tokens the vocabulary adds itself produce nothing.
  std::string push(int32_t id);
  // Whatever is still held back, with incomplete sequences as U+FFFD; the stream can go on after.
  std::string flush();
  // Starts a new stream (the first-token rule applies again).
  void reset();
  size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer* tokenizer_;
  DecodeOptions options_;
  bool first_ = true;
  bool remove_space_ = false;
  std::string pending_;
};

}  // namespace zinc::tokenizer
