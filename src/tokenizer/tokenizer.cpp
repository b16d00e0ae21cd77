// Encoding: special-token partitioning, then SentencePiece, BPE or WordPiece on the plain text.
//
// The merge loops keep symbols in a linked list over an array and candidate pairs in a heap that is
// allowed to hold stale entries (checked when popped), the way both llama.cpp and Hugging Face
// tokenizers do it: O(n log n) in the length of a word, so a 100 kB line without spaces (Gemma 4
// merges whole lines) costs milliseconds, not minutes.
#include "tokenizer/tokenizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <queue>

#include "core/error.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/unicode.h"

namespace zinc::tokenizer {

namespace {

constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";  // ▁ U+2581, SentencePiece's space

inline bool is_ascii_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }
inline bool is_continuation(char c) { return (static_cast<uint8_t>(c) & 0xC0) == 0x80; }

void escape_spaces(std::string_view text, std::string& out) {
  for (char c : text) {
    if (c == ' ') out.append(kSpaceMarker);
    else out.push_back(c);
  }
}

struct Symbol {
  int32_t id;          // symbol id (see Vocab::find_merge), -1 when the text is not a known symbol
  int32_t prev, next;  // neighbours in the list, -1 at the ends
  uint32_t begin, end; // bytes of the word; end == begin once merged away
};

struct BpePair {
  int32_t rank, left, right, left_id, right_id;
  bool operator<(const BpePair& o) const {  // std::priority_queue pops the "largest"
    return rank != o.rank ? rank > o.rank : left > o.left;
  }
};

struct SpmPair {
  float score;
  int32_t left, right;
  uint32_t size;
  bool operator<(const SpmPair& o) const { return score != o.score ? score < o.score : left > o.left; }
};

}  // namespace

struct Tokenizer::Scratch {
  std::vector<Fragment> fragments;
  std::vector<Span> words;
  std::vector<Symbol> symbols;
  std::vector<BpePair> bpe_heap;
  std::vector<SpmPair> spm_heap;
  std::string text;
};

Tokenizer::Tokenizer(Vocab vocab) : vocab_(std::move(vocab)) {
  build_special_trie();
  switch (vocab_.type()) {
    case VocabType::Spm: newline_ = vocab_.byte_token('\n'); break;
    case VocabType::Wpm: newline_ = vocab_.pad(); break;
    case VocabType::Bpe: {
      const auto ids = encode("\n", false, false);
      newline_ = ids.empty() ? vocab_.pad() : ids[0];
      break;
    }
  }
}

void Tokenizer::build_special_trie() {
  trie_.assign(1, TrieNode{});
  for (int32_t id : vocab_.special_candidates()) {
    const std::string_view text = vocab_.text(id);
    int32_t node = 0;
    for (char ch : text) {
      const auto byte = static_cast<uint8_t>(ch);
      auto& next = trie_[static_cast<size_t>(node)].next;
      auto it = std::lower_bound(next.begin(), next.end(), byte,
                                 [](const std::pair<uint8_t, int32_t>& e, uint8_t b) { return e.first < b; });
      if (it != next.end() && it->first == byte) {
        node = it->second;
      } else {
        const auto child = static_cast<int32_t>(trie_.size());
        next.insert(it, {byte, child});
        trie_.emplace_back();
        node = child;
      }
    }
    if (trie_[static_cast<size_t>(node)].token < 0) trie_[static_cast<size_t>(node)].token = id;
    if (!text.empty()) trie_first_byte_[static_cast<uint8_t>(text[0])] = true;
  }
}

// Cuts text at special tokens, leftmost first and longest at each position (Hugging Face's added-token
// matching). Matches must start and end on character boundaries.
void Tokenizer::partition(std::string_view text, bool parse_special, std::vector<Fragment>& out) const {
  const uint32_t allowed = kAttrUserDefined | (parse_special ? (kAttrControl | kAttrUnknown) : 0u);
  size_t text_start = 0, pos = 0;
  while (pos < text.size()) {
    if (!trie_first_byte_[static_cast<uint8_t>(text[pos])] || is_continuation(text[pos])) {
      ++pos;
      continue;
    }
    int32_t best = -1;
    size_t best_len = 0;
    int32_t node = 0;
    for (size_t i = pos; i < text.size(); ++i) {
      const auto& next = trie_[static_cast<size_t>(node)].next;
      const auto byte = static_cast<uint8_t>(text[i]);
      auto it = std::lower_bound(next.begin(), next.end(), byte,
                                 [](const std::pair<uint8_t, int32_t>& e, uint8_t b) { return e.first < b; });
      if (it == next.end() || it->first != byte) break;
      node = it->second;
      const int32_t tok = trie_[static_cast<size_t>(node)].token;
      if (tok >= 0 && (vocab_.attr(tok) & allowed) && (i + 1 == text.size() || !is_continuation(text[i + 1]))) {
        best = tok;
        best_len = i + 1 - pos;
      }
    }
    if (best < 0) {
      ++pos;
      continue;
    }
    size_t left_end = pos;
    if (vocab_.attr(best) & kAttrLstrip) {
      while (left_end > text_start && is_ascii_space(text[left_end - 1])) --left_end;
    }
    if (left_end > text_start) out.push_back({-1, text_start, left_end});
    out.push_back({best, pos, pos + best_len});
    pos += best_len;
    if (vocab_.attr(best) & kAttrRstrip) {
      while (pos < text.size() && is_ascii_space(text[pos])) ++pos;
    }
    text_start = pos;
  }
  if (text_start < text.size()) out.push_back({-1, text_start, text.size()});
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
  return encode_impl(text, add_special, parse_special, true);
}

std::vector<int32_t> Tokenizer::encode_continuation(std::string_view text) const {
  return encode_impl(text, false, true, false);
}

std::vector<int32_t> Tokenizer::encode_impl(std::string_view text, bool add_special, bool parse_special,
                                            bool at_start) const {
  if (const size_t bad = unicode::utf8_first_invalid(text); bad != std::string_view::npos) {
    throw Error(fmt::format("text to tokenize is not valid UTF-8: byte 0x{:02x} at offset {} does not start a "
                            "well-formed sequence; convert the text to UTF-8 (or replace bad bytes with U+FFFD)",
                            static_cast<uint8_t>(text[bad]), bad));
  }
  Scratch s;
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  partition(text, parse_special, s.fragments);

  const Vocab& v = vocab_;
  switch (v.type()) {
    case VocabType::Spm: {
      if (add_special && v.add_bos()) out.push_back(v.bos());
      bool prev_special = true;  // text at the start or after a special token gets the space prefix (not a continuation)
      for (const Fragment& f : s.fragments) {
        if (f.token >= 0) {
          out.push_back(f.token);
          prev_special = true;
          continue;
        }
        s.text.clear();
        if (v.add_space_prefix() && prev_special && at_start) s.text.append(kSpaceMarker);
        escape_spaces(text.substr(f.begin, f.end - f.begin), s.text);
        encode_spm(s.text, out, s);
        prev_special = false;
      }
      if (add_special && v.add_eos()) out.push_back(v.eos());
      break;
    }
    case VocabType::Bpe: {
      if (add_special && v.add_bos()) out.push_back(v.bos());
      for (const Fragment& f : s.fragments) {
        if (f.token >= 0) {
          out.push_back(f.token);
        } else if (v.escape_whitespaces()) {
          std::string escaped;
          escape_spaces(text.substr(f.begin, f.end - f.begin), escaped);
          encode_bpe(escaped, out, s);
        } else {
          encode_bpe(text.substr(f.begin, f.end - f.begin), out, s);
        }
      }
      if (add_special && v.add_eos()) out.push_back(v.eos());
      break;
    }
    case VocabType::Wpm: {
      if (add_special && v.bos() >= 0) out.push_back(v.bos());
      for (const Fragment& f : s.fragments) {
        if (f.token >= 0) out.push_back(f.token);
        else encode_wpm(text.substr(f.begin, f.end - f.begin), out);
      }
      if (add_special && v.add_sep() && v.sep() >= 0) out.push_back(v.sep());
      break;
    }
  }
  return out;
}

// ---- SentencePiece (llama.cpp's "SPM"): merge the adjacent pair whose concatenation is the
// highest-scoring token, leftmost on ties; pieces left that are not tokens fall back to bytes.

void Tokenizer::encode_spm(std::string_view text, std::vector<int32_t>& out, Scratch& s) const {
  if (text.empty()) return;
  auto& sym = s.symbols;
  sym.clear();
  for (size_t pos = 0; pos < text.size();) {
    const size_t len = std::min(unicode::utf8_length(static_cast<uint8_t>(text[pos])), text.size() - pos);
    const auto index = static_cast<int32_t>(sym.size());
    sym.push_back({0, index - 1, pos + len == text.size() ? -1 : index + 1, static_cast<uint32_t>(pos),
                   static_cast<uint32_t>(pos + len)});
    pos += len;
  }
  auto& heap = s.spm_heap;
  heap.clear();
  auto try_pair = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const Symbol& l = sym[static_cast<size_t>(left)];
    const Symbol& r = sym[static_cast<size_t>(right)];
    const int32_t id = vocab_.find(text.substr(l.begin, r.end - l.begin));
    if (id < 0) return;
    heap.push_back({vocab_.score(id), left, right, r.end - l.begin});
    std::push_heap(heap.begin(), heap.end());
  };
  for (int32_t i = 1; i < static_cast<int32_t>(sym.size()); ++i) try_pair(i - 1, i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end());
    const SpmPair p = heap.back();
    heap.pop_back();
    Symbol& l = sym[static_cast<size_t>(p.left)];
    Symbol& r = sym[static_cast<size_t>(p.right)];
    // Stale when either side has changed since the pair was queued.
    if (l.end == l.begin || r.end == r.begin || (l.end - l.begin) + (r.end - r.begin) != p.size) continue;
    l.end = r.end;
    r.end = r.begin;
    l.next = r.next;
    if (r.next >= 0) sym[static_cast<size_t>(r.next)].prev = p.left;
    try_pair(l.prev, p.left);
    try_pair(p.left, l.next);
  }
  for (int32_t i = 0; i >= 0; i = sym[static_cast<size_t>(i)].next) {
    const Symbol& x = sym[static_cast<size_t>(i)];
    const std::string_view piece = text.substr(x.begin, x.end - x.begin);
    const int32_t id = vocab_.find(piece);
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    for (char c : piece) {
      const int32_t b = vocab_.byte_token(static_cast<uint8_t>(c));
      if (b >= 0) out.push_back(b);
      else if (vocab_.unk() >= 0) out.push_back(vocab_.unk());
    }
  }
}

// ---- BPE: pre-tokenize into words, then apply merges by rank within each word.

void Tokenizer::encode_bpe(std::string_view text, std::vector<int32_t>& out, Scratch& s) const {
  s.words.clear();
  pretokenize(vocab_.pre_type(), text, s.words);
  for (const Span& w : s.words) encode_bpe_word(text.substr(w.begin, w.end - w.begin), out, s);
}

void Tokenizer::encode_bpe_word(std::string_view word, std::vector<int32_t>& out, Scratch& s) const {
  const Vocab& v = vocab_;
  const bool byte_level = v.byte_encode();
  if (v.ignore_merges()) {
    std::string encoded;
    if (byte_level) {
      for (char c : word) unicode::append_utf8(encoded, byte_to_unicode(static_cast<uint8_t>(c)));
    }
    const int32_t id = v.find(byte_level ? std::string_view(encoded) : word);
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  } else if (v.pre_type() == PreType::Gemma4 && word.find_first_not_of('\n') == std::string_view::npos) {
    // A run of newlines that is a token stays whole (Gemma 4 has tokens for long runs).
    const int32_t id = v.find(word);
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }

  auto& sym = s.symbols;
  sym.clear();
  for (size_t pos = 0; pos < word.size();) {
    const size_t len = byte_level ? 1 : std::min(unicode::utf8_length(static_cast<uint8_t>(word[pos])), word.size() - pos);
    const int32_t id = byte_level ? v.byte_symbol(static_cast<uint8_t>(word[pos])) : v.find_symbol(word.substr(pos, len));
    const auto index = static_cast<int32_t>(sym.size());
    sym.push_back({id, index - 1, pos + len == word.size() ? -1 : index + 1, static_cast<uint32_t>(pos),
                   static_cast<uint32_t>(pos + len)});
    pos += len;
  }

  auto& heap = s.bpe_heap;
  heap.clear();
  auto try_pair = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const int32_t lid = sym[static_cast<size_t>(left)].id, rid = sym[static_cast<size_t>(right)].id;
    if (lid < 0 || rid < 0) return;
    const Vocab::Merge m = v.find_merge(lid, rid);
    if (m.rank < 0) return;
    heap.push_back({m.rank, left, right, lid, rid});
    std::push_heap(heap.begin(), heap.end());
  };
  for (int32_t i = 1; i < static_cast<int32_t>(sym.size()); ++i) try_pair(i - 1, i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end());
    const BpePair p = heap.back();
    heap.pop_back();
    Symbol& l = sym[static_cast<size_t>(p.left)];
    Symbol& r = sym[static_cast<size_t>(p.right)];
    if (l.end == l.begin || r.end == r.begin || l.next != p.right || l.id != p.left_id || r.id != p.right_id) continue;
    l.id = v.find_merge(p.left_id, p.right_id).result;
    l.end = r.end;
    r.end = r.begin;
    l.next = r.next;
    if (r.next >= 0) sym[static_cast<size_t>(r.next)].prev = p.left;
    try_pair(l.prev, p.left);
    try_pair(p.left, l.next);
  }

  for (int32_t i = 0; i >= 0; i = sym[static_cast<size_t>(i)].next) {
    const Symbol& x = sym[static_cast<size_t>(i)];
    if (x.id >= 0 && x.id < v.size()) {
      out.push_back(x.id);
      continue;
    }
    // Not a token: fall back to single bytes. Byte-level vocabularies look up each byte of the
    // symbol's mapped text as a one-byte token (what llama.cpp does; such symbols only exist when
    // the vocabulary lacks some of the 256 byte characters); raw-UTF-8 ones use <0xXX> tokens.
    for (uint32_t k = x.begin; k < x.end; ++k) {
      const auto byte = static_cast<uint8_t>(word[k]);
      if (byte_level) {
        const std::string mapped = unicode::to_utf8(byte_to_unicode(byte));
        for (char c : mapped) {
          const int32_t id = v.find(std::string_view(&c, 1));
          if (id >= 0) out.push_back(id);
        }
      } else if (const int32_t id = v.byte_token(byte); id >= 0) {
        out.push_back(id);
      }
    }
  }
}

// ---- WordPiece (BERT): normalize, split at whitespace and punctuation, then take the longest
// vocabulary prefix repeatedly. Word-initial pieces carry ▁ in GGUF vocabularies ("##" pieces do not).

namespace {

bool is_chinese_char(uint32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) || (cp >= 0x20000 && cp <= 0x2A6DF) ||
         (cp >= 0x2A700 && cp <= 0x2B73F) || (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B920 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

}  // namespace

void Tokenizer::encode_wpm(std::string_view text, std::vector<int32_t>& out) const {
  const Vocab& v = vocab_;
  std::vector<std::string> words(1);
  auto finish_word = [&] {
    if (!words.back().empty()) words.emplace_back();
  };
  for (size_t pos = 0; pos < text.size();) {
    const uint32_t cp = unicode::utf8_decode(text, pos);
    const uint16_t f = unicode::flags(cp);
    if (f & unicode::kSpace) {
      finish_word();
      continue;
    }
    if (cp == 0 || cp == unicode::kReplacement || (f & unicode::kOther)) continue;
    uint32_t parts[3] = {cp, 0, 0};
    const int n = v.strip_accents() ? unicode::strip_accents(cp, parts) : 1;
    for (int k = 0; k < n; ++k) {
      const uint32_t c = v.lowercase() ? unicode::to_lower(parts[k]) : parts[k];
      const uint16_t cf = unicode::flags(c);
      if ((cf & unicode::kPunct) || (c < 0x7F && (cf & unicode::kSymbol)) || is_chinese_char(c)) {
        finish_word();
        unicode::append_utf8(words.back(), c);
        words.emplace_back();
      } else {
        unicode::append_utf8(words.back(), c);
      }
    }
  }
  const size_t max_len = v.max_token_length();
  for (const std::string& w : words) {
    if (w.empty()) continue;
    std::string word(kSpaceMarker);
    word += w;
    const size_t start_size = out.size();
    for (size_t i = 0; i < word.size();) {
      size_t j = std::min(word.size(), i + max_len);
      int32_t id = -1;
      for (; j > i; --j) {
        id = v.find(std::string_view(word).substr(i, j - i));
        if (id >= 0) break;
      }
      if (id < 0) {
        out.resize(start_size);
        break;
      }
      out.push_back(id);
      i = j;
    }
    if (out.size() == start_size && v.unk() >= 0) out.push_back(v.unk());
  }
}

void Tokenizer::check_ids(std::span<const int32_t> ids) const {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!vocab_.contains(ids[i])) {
      throw Error(fmt::format("token id {} (position {}) is out of range: the vocabulary of {} has {} tokens, "
                              "ids 0 to {}",
                              ids[i], i, vocab_.source(), vocab_.size(), vocab_.size() - 1));
    }
  }
}

}  // namespace zinc::tokenizer
