// Hugging Face tokenizer.json (+ tokenizer_config.json) to GGUF tokenizer metadata.
//
// Produces the tokenizer.* keys the standard GGUF converter (llama.cpp's convert_hf_to_gguf.py) writes
// for BPE tokenizers, so the model converter can put them in a GGUF and Vocab::load() can read them:
//
//   byte-level BPE (GPT-2 style: Llama 3, Qwen 2/3, GPT-OSS, ...) -> tokenizer.ggml.model "gpt2" with
//     tokenizer.ggml.pre recognised from the pre-tokenizer's regular expression;
//   BPE with byte fallback over ▁-escaped text (Gemma 3/4)      -> "gemma4", as the Gemma 4 converter
//     writes it (scores of -1000, no pre; llama.cpp implies pre "gemma4").
//
// plus tokens, token_type, merges, the special-token ids and add_bos/add_eos flags derived from
// tokenizer_config.json and the post-processor (SpecialVocab's rules), and the chat template.
// Token types: tokens listed in added_tokens are CONTROL when marked special (or named like a control
// token: <|...|>, <unused...>), USER_DEFINED otherwise, so they are matched in text the way Hugging
// Face matches added tokens; <0xXX> tokens are BYTE; ids missing from the vocabulary become
// "[PADn]" UNUSED entries. One deliberate difference from llama.cpp's Gemma 4 converter: there,
// added tokens that are already in the base vocabulary ("\n\n", "<b>", tabs) stay NORMAL; here they
// are USER_DEFINED (except those containing ▁, which must decode to spaces), which reproduces
// Hugging Face's encoding exactly.
//
// What GGUF cannot carry is reported in `notes` (for instance Qwen's NFC normalizer, which llama.cpp
// does not apply either).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "gguf/value.h"

namespace zinc::tokenizer {

struct HfTokenizerOptions {
  // tokenizer.ggml.pre to write; empty to recognise it from the pre-tokenizer. Needed when one
  // tokenizer.json serves a family whose GGUF names another pre type (e.g. "qwen35").
  std::string pre;
  // tokenizer.ggml.model to write ("gpt2" or "gemma4"); empty to derive it from the model section.
  std::string model;
  // config.json's vocab_size when it exceeds the tokenizer's (the list is padded with [PADn]).
  std::optional<uint32_t> vocab_size;
};

struct HfTokenizerResult {
  gguf::Metadata metadata;         // tokenizer.* keys, in the order the standard converter writes them
  std::vector<std::string> notes;  // what the conversion could not represent, for the caller to log
};

// tokenizer_json: parsed tokenizer.json; tokenizer_config: parsed tokenizer_config.json (or null);
// config: parsed config.json (or null; supplies *_token_id fallbacks). `source` names the input in
// error messages. Throws zinc::Error for tokenizers that GGUF BPE cannot express (WordPiece,
// Unigram, a SentencePiece BPE that prepends a space, an unrecognised pre-tokenizer without
// options.pre) or malformed input.
HfTokenizerResult convert_hf_tokenizer(const nlohmann::json& tokenizer_json, const nlohmann::json& tokenizer_config,
                                       const nlohmann::json& config = nullptr, const HfTokenizerOptions& options = {},
                                       const std::string& source = "tokenizer.json");

// Reads dir/tokenizer.json and, when present, tokenizer_config.json, config.json and
// chat_template.jinja (used when tokenizer_config.json has no chat_template).
HfTokenizerResult convert_hf_tokenizer_dir(const std::filesystem::path& dir, const HfTokenizerOptions& options = {});

// The tokenizer.ggml.pre name of a pre-tokenizer regular expression from a tokenizer.json, or "".
std::string hf_pre_name_for_regex(const std::string& regex);

}  // namespace zinc::tokenizer
