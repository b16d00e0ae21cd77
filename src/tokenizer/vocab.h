// Vocabulary loaded from GGUF tokenizer metadata (tokenizer.ggml.*), validated once.
//
// The keys and their meaning are those the GGUF converters write and llama.cpp reads: the token list,
// per-token types and scores, BPE merges, special-token ids, add_bos/add_eos, and the model/pre names
// that pick the algorithm. Where a key is absent, the defaults are llama.cpp's, including its
// load-time fix-ups (end-of-generation tokens found by their text, "unused" control tokens, the
// Phi-3 right-strip attribute), so a GGUF tokenizes here exactly as it does there.
//
// Everything here is immutable after load; Tokenizer (tokenizer.h) runs the algorithms on it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/reader.h"
#include "gguf/value.h"

namespace zinc::tokenizer {

namespace detail {
struct MetadataSource;  // a key -> value lookup over a File or a Metadata (vocab.cpp)
}

// tokenizer.ggml.token_type values.
enum class TokenType : int32_t { Undefined = 0, Normal = 1, Unknown = 2, Control = 3, UserDefined = 4,
                                 Unused = 5, Byte = 6 };

// Token attributes as bits: the type, plus markers added at load (a control token can also be unused).
enum TokenAttr : uint32_t {
  kAttrUndefined = 0,
  kAttrUnknown = 1 << 0,
  kAttrUnused = 1 << 1,
  kAttrNormal = 1 << 2,
  kAttrControl = 1 << 3,
  kAttrUserDefined = 1 << 4,
  kAttrByte = 1 << 5,
  kAttrLstrip = 1 << 7,  // whitespace before the token is dropped when it is matched in text
  kAttrRstrip = 1 << 8,  // whitespace after it is dropped
  // A protocol marker rendered as its text (Harmony's <|channel|>, <|message|>, ...: user-defined here so
  // chat parsers read them) that is still no text to a grammar: only a token element takes it.
  kAttrFormat = 1 << 9,
};

// The algorithm, from tokenizer.ggml.model.
enum class VocabType {
  Spm,  // "llama": SentencePiece pieces merged by score, byte fallback <0xXX>
  Bpe,  // "gpt2" (byte-level BPE) and "gemma4" (BPE over raw UTF-8 with ▁ for spaces)
  Wpm,  // "bert": WordPiece, greedy longest match
};

// Pre-tokenizer (word splitting before BPE), from tokenizer.ggml.pre. Each is hand-written after the
// regular expression(s) of the model's tokenizer.json; see pretokenize.cpp.
enum class PreType {
  Default,        // llama.cpp's fallback when a BPE file names none
  Gpt2,           // GPT-2 / MPT / OLMo
  Llama3,         // Llama 3 (digits in threes)
  Qwen2,          // Qwen 2/3 (single digits)
  Qwen35,         // Qwen 3.5 (marks join words)
  Gpt4o,          // o200k (GPT-4o, GPT-OSS, Llama 4): case-aware words
  Tekken,         // Mistral Tekken: o200k without contractions, single digits
  DeepseekLlm,
  DeepseekCoder,
  Falcon,
  Starcoder,      // StarCoder / Refact / Command-R: digits split, then GPT-2
  Gemma4,         // newlines split off, BPE over the raw (▁-escaped) text
};

struct SpecialTokens {
  int32_t bos = -1, eos = -1, eot = -1, eom = -1, unk = -1, sep = -1, pad = -1, mask = -1;
  int32_t fim_pre = -1, fim_suf = -1, fim_mid = -1, fim_pad = -1, fim_rep = -1, fim_sep = -1;
};

class Vocab {
 public:
  // Throws zinc::Error naming the file and the key when the tokenizer metadata is missing,
  // malformed, or asks for an algorithm this build does not implement.
  static Vocab load(const gguf::File& file);
  static Vocab load(const gguf::Metadata& metadata, std::string name = "metadata");

  const std::string& source() const { return source_; }  // file name, for messages
  VocabType type() const { return type_; }
  PreType pre_type() const { return pre_type_; }
  const std::string& model_name() const { return model_; }  // tokenizer.ggml.model
  const std::string& pre_name() const { return pre_; }      // tokenizer.ggml.pre, or what it defaulted to

  int32_t size() const { return n_tokens_; }
  bool contains(int32_t id) const { return id >= 0 && id < n_tokens_; }
  std::string_view text(int32_t id) const { return symbol_text(id); }
  float score(int32_t id) const { return scores_[static_cast<size_t>(id)]; }
  uint32_t attr(int32_t id) const { return attrs_[static_cast<size_t>(id)]; }
  // Id of the token with exactly this text, or -1.
  int32_t find(std::string_view text) const;

  bool is_normal(int32_t id) const { return attr(id) & kAttrNormal; }
  bool is_control(int32_t id) const { return attr(id) & kAttrControl; }
  bool is_user_defined(int32_t id) const { return attr(id) & kAttrUserDefined; }
  bool is_unknown(int32_t id) const { return attr(id) & kAttrUnknown; }
  bool is_unused(int32_t id) const { return attr(id) & kAttrUnused; }
  bool is_byte(int32_t id) const { return attr(id) & kAttrByte; }
  bool is_eog(int32_t id) const;  // ends generation (EOS, EOT, <|im_end|>, ...)
  const std::vector<int32_t>& eog_ids() const { return eog_; }

  const SpecialTokens& special() const { return special_; }
  int32_t bos() const { return special_.bos; }
  int32_t eos() const { return special_.eos; }
  int32_t eot() const { return special_.eot; }
  int32_t unk() const { return special_.unk; }
  int32_t pad() const { return special_.pad; }
  int32_t sep() const { return special_.sep; }

  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  bool add_sep() const { return add_sep_; }
  bool add_space_prefix() const { return add_space_prefix_; }    // SPM: " " before the text
  bool escape_whitespaces() const { return escape_whitespaces_; }  // spaces become ▁ before merging
  bool clean_spaces() const { return clean_spaces_; }  // clean_up_tokenization_spaces on decode
  bool ignore_merges() const { return ignore_merges_; }  // a word that is a token is taken whole
  bool byte_encode() const { return byte_encode_; }  // GPT-2 byte-to-unicode mapping of words
  bool lowercase() const { return lowercase_; }          // WPM normalizer
  bool strip_accents() const { return strip_accents_; }  // WPM normalizer
  size_t max_token_length() const { return max_token_len_; }  // bytes

  // Byte fallback: the token for a raw byte (<0xXX>, or the byte itself), or -1.
  int32_t byte_token(uint8_t byte) const { return byte_tokens_[byte]; }
  // The byte a BYTE token stands for.
  uint8_t token_byte(int32_t id) const;

  // BPE merges over symbol ids. Symbols are token ids, or ids >= size() for strings that appear in
  // merges without being tokens themselves (kept so such merges still apply as llama.cpp's do).
  struct Merge {
    int32_t rank = -1;    // lower merges first
    int32_t result = -1;  // symbol id of left + right
  };
  Merge find_merge(int32_t left, int32_t right) const;
  int32_t find_symbol(std::string_view text) const;  // token id, extra symbol id, or -1
  std::string_view symbol_text(int32_t symbol) const {
    return std::string_view(text_data_).substr(text_offsets_[static_cast<size_t>(symbol)],
                                               text_offsets_[static_cast<size_t>(symbol) + 1] -
                                                   text_offsets_[static_cast<size_t>(symbol)]);
  }
  size_t merge_count() const { return n_merges_; }
  // Symbol id of each byte's GPT-2 unicode character (-1 when absent); for byte-level BPE.
  int32_t byte_symbol(uint8_t byte) const { return byte_symbols_[byte]; }

  // Tokens matched verbatim in text before the algorithm runs: control, user-defined and unknown
  // tokens (user-defined ones always, the others only when special tokens are parsed).
  const std::vector<int32_t>& special_candidates() const { return special_candidates_; }

 private:
  Vocab() = default;
  void load_from(const detail::MetadataSource& src);
  int32_t add_symbol(std::string_view text);  // interns a merge-only string
  void index_texts();
  void load_merges(const detail::MetadataSource& src);
  void apply_fixups(const detail::MetadataSource& src);

  std::string source_;
  VocabType type_ = VocabType::Spm;
  PreType pre_type_ = PreType::Default;
  std::string model_, pre_;

  int32_t n_tokens_ = 0;
  std::string text_data_;               // all token texts, then the extra merge symbols
  std::vector<uint32_t> text_offsets_;  // (n_symbols + 1)
  std::vector<float> scores_;
  std::vector<uint32_t> attrs_;
  std::vector<int32_t> text_index_;  // open-addressing hash table of symbol ids, -1 = empty
  size_t max_token_len_ = 0;

  struct MergeSlot {
    uint64_t key = ~uint64_t{0};
    Merge merge;
  };
  std::vector<MergeSlot> merge_table_;
  size_t n_merges_ = 0;
  int32_t byte_symbols_[256];
  int32_t byte_tokens_[256];

  SpecialTokens special_;
  std::vector<int32_t> eog_;
  std::vector<int32_t> special_candidates_;
  bool add_bos_ = false, add_eos_ = false, add_sep_ = false, add_space_prefix_ = false;
  bool escape_whitespaces_ = false, clean_spaces_ = false, ignore_merges_ = false, byte_encode_ = true;
  bool lowercase_ = true, strip_accents_ = true;
};

// Name of a pre-tokenizer type (for messages and `zinc inspect`-style output).
const char* pre_type_name(PreType t);

// GPT-2's reversible byte-to-unicode mapping used by byte-level BPE vocabularies ("Ġ" is 0x20).
uint32_t byte_to_unicode(uint8_t byte);
// Inverse: the byte a mapped code point stands for, or -1.
int unicode_to_byte(uint32_t cp);

}  // namespace zinc::tokenizer
