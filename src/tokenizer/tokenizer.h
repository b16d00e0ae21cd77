// Text to token ids and back, for the vocabularies of GGUF files.
//
//   Tokenizer tok = Tokenizer::from_gguf(file);
//   std::vector<int32_t> ids = tok.encode("Hello", /*add_special=*/true, /*parse_special=*/false);
//   std::string text = tok.decode(ids);
//
// encode() first cuts the text at special tokens written in it (user-defined tokens always; control
// tokens such as <|im_start|> only with parse_special), then runs the vocabulary's algorithm on each
// piece of plain text: SentencePiece merging by score with byte fallback ("llama"), byte-level or
// raw-UTF-8 BPE after the model's pre-tokenizer ("gpt2", "gemma4"), or WordPiece ("bert"). The
// results match llama.cpp's tokenizer, and Hugging Face tokenizers' for the vocabularies converted
// from a tokenizer.json. Streaming output goes through Detokenizer (detokenizer.h).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/reader.h"
#include "tokenizer/vocab.h"

namespace zinc::tokenizer {

struct DecodeOptions {
  bool remove_special = false;  // drop a leading BOS / trailing EOS that the model adds itself
  bool render_special = true;   // control tokens as their text (otherwise they render as nothing)
  // The ids start the text, so the space a SentencePiece tokenizer put in front of it is dropped.
  // Set to false for ids that continue text already shown, such as tokens generated after a prompt.
  bool at_start = true;
};

class Tokenizer {
 public:
  explicit Tokenizer(Vocab vocab);
  static Tokenizer from_gguf(const gguf::File& file) { return Tokenizer(Vocab::load(file)); }

  const Vocab& vocab() const { return vocab_; }

  // add_special: prepend BOS / append EOS (WordPiece: CLS/SEP) when the vocabulary asks for them.
  // parse_special: control tokens written in the text become single tokens; otherwise they are
  // tokenized as the characters they are made of.
  // Throws zinc::Error when the text is not well-formed UTF-8 (unicode::sanitize_utf8 replaces
  // ill-formed bytes with U+FFFD for callers that prefer that).
  std::vector<int32_t> encode(std::string_view text, bool add_special = true, bool parse_special = false) const;
  // Text that continues a sequence already under way (words the engine writes in the model's place):
  // special tokens parsed, no BOS or EOS, and no SentencePiece space prefix in front of it.
  std::vector<int32_t> encode_continuation(std::string_view text) const;

  // The bytes one token stands for: ▁ becomes a space, byte tokens their byte, byte-level BPE tokens
  // their original bytes. Control and unknown tokens give their text only when `special` is set.
  // `lstrip` removes up to that many leading spaces. Throws zinc::Error for an id out of range.
  std::string token_to_piece(int32_t id, bool special = true, int lstrip = 0) const;

  // The text of a sequence of ids, as llama.cpp's detokenizer produces it: the leading space a
  // SentencePiece vocabulary adds is removed from the first token (unless a BOS that
  // remove_special drops came first), and vocabularies that ask for it get Hugging Face's
  // clean_up_tokenization_spaces (" ," -> ","). The result may end inside a UTF-8 sequence when the
  // ids do; Detokenizer handles streams. Throws zinc::Error for ids out of range.
  std::string decode(std::span<const int32_t> ids, const DecodeOptions& options = {}) const;

  // The token "\n" encodes to, or -1.
  int32_t newline_token() const { return newline_; }

  // Checks that every id is in range; throws zinc::Error naming the first bad one.
  void check_ids(std::span<const int32_t> ids) const;

 private:
  struct TrieNode {
    int32_t token = -1;
    std::vector<std::pair<uint8_t, int32_t>> next;  // sorted by byte
  };
  struct Fragment {
    int32_t token;  // -1 for text
    size_t begin, end;
  };
  struct Scratch;

  void build_special_trie();
  void partition(std::string_view text, bool parse_special, std::vector<Fragment>& out) const;
  std::vector<int32_t> encode_impl(std::string_view text, bool add_special, bool parse_special, bool at_start) const;
  void encode_spm(std::string_view text, std::vector<int32_t>& out, Scratch& s) const;
  void encode_bpe(std::string_view text, std::vector<int32_t>& out, Scratch& s) const;
  void encode_bpe_word(std::string_view word, std::vector<int32_t>& out, Scratch& s) const;
  void encode_wpm(std::string_view text, std::vector<int32_t>& out) const;

  Vocab vocab_;
  std::vector<TrieNode> trie_;  // special tokens matched in text; node 0 is the root
  bool trie_first_byte_[256] = {};
  int32_t newline_ = -1;
};

}  // namespace zinc::tokenizer
