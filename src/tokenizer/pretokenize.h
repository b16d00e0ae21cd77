// Pre-tokenizers: split text into the words that BPE merges within.
//
// Each PreType stands for the regular expression(s) of a model family's tokenizer.json, applied in
// sequence: every expression splits each piece from the previous one into its matches and the text
// between them (Hugging Face's Split with "Isolated" behaviour; llama.cpp does the same). They are
// hand-written matchers over code points and their Unicode classes rather than a regex engine:
// faster, and free of the regex library's limits on Unicode classes.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace zinc::tokenizer {

struct Span {
  uint32_t begin, end;  // byte offsets
};

// Appends the words of `text` (well-formed UTF-8) to `words`, in order, covering all of it.
void pretokenize(PreType type, std::string_view text, std::vector<Span>& words);

}  // namespace zinc::tokenizer
