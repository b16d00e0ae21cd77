// Loading and validating tokenizer.ggml.* metadata into a Vocab.
//
// Defaults and fix-ups follow llama.cpp's vocabulary loader, because GGUF files in the wild rely on
// them: missing special-token ids fall back to per-model defaults, end-of-generation tokens are
// recognised by their text, and a few model-specific attribute rules apply. Where llama.cpp walks
// a hash map (and so picks among candidates in an unspecified order), this loader walks the
// candidate list in its written order, so the result is deterministic.
#include "tokenizer/vocab.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <functional>
#include <unordered_map>

#include "core/error.h"
#include "tokenizer/unicode.h"

namespace zinc::tokenizer {

namespace detail {
struct MetadataSource {
  std::string name;
  std::function<std::optional<gguf::ValueView>(std::string_view)> find;
};
}  // namespace detail

using Source = detail::MetadataSource;

namespace {

using gguf::ArrayView;
using gguf::ValueType;
using gguf::ValueView;

[[noreturn]] void fail(const std::string& source, const std::string& what) {
  throw Error(fmt::format("{}: tokenizer: {}", source, what));
}

std::string printable(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, 64)) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7F) out += fmt::format("\\x{:02x}", u);
    else out += c;
  }
  if (s.size() > 64) out += "…";
  return out;
}

std::optional<std::string> get_string(const Source& src, std::string_view key) {
  const auto v = src.find(key);
  if (!v) return std::nullopt;
  if (v->type() != ValueType::STRING) {
    fail(src.name, fmt::format("{} must be a string, but it is a {}", key, gguf::value_type_name(v->type())));
  }
  return std::string(v->string());
}

std::optional<bool> get_bool(const Source& src, std::string_view key) {
  const auto v = src.find(key);
  if (!v) return std::nullopt;
  if (const auto b = v->as<bool>()) return b;
  fail(src.name, fmt::format("{} must be a bool, but it is a {}", key, gguf::value_type_name(v->type())));
}

std::optional<int64_t> get_int(const Source& src, std::string_view key) {
  const auto v = src.find(key);
  if (!v) return std::nullopt;
  if (const auto i = v->as<int64_t>()) return i;
  fail(src.name, fmt::format("{} must be an integer, but it is a {}", key, gguf::value_type_name(v->type())));
}

std::optional<ArrayView> get_array(const Source& src, std::string_view key) {
  const auto v = src.find(key);
  if (!v) return std::nullopt;
  if (v->type() != ValueType::ARRAY) {
    fail(src.name, fmt::format("{} must be an array, but it is a {}", key, gguf::value_type_name(v->type())));
  }
  return v->array();
}

// Per-pre-tokenizer settings, as llama.cpp derives them from tokenizer.ggml.pre.
struct PreInfo {
  const char* name;
  PreType type;
  bool ignore_merges = false;
  bool add_bos = false;
  bool clean_spaces = true;
  bool add_sep = false;
  bool no_bos = false;  // the model has no BOS token at all
};

const PreInfo kPreTypes[] = {
    {"default", PreType::Default},
    {"llama3", PreType::Llama3, true, true},
    {"llama-v3", PreType::Llama3, true, true},
    {"llama-bpe", PreType::Llama3, true, true},
    {"falcon3", PreType::Llama3, true, true},
    {"falcon-h1", PreType::Llama3, true, true},
    {"pixtral", PreType::Llama3, true, true},
    {"midm-2.0", PreType::Llama3, true, true},
    {"lfm2", PreType::Llama3, true, true},
    {"dbrx", PreType::Llama3},
    {"smaug-bpe", PreType::Llama3},
    {"chatglm-bpe", PreType::Llama3, false, false, true, false, true},
    {"glm4", PreType::Llama3, false, false, true, false, true},
    {"deepseek-llm", PreType::DeepseekLlm, false, false, false},
    {"deepseek-coder", PreType::DeepseekCoder, false, false, false},
    {"falcon", PreType::Falcon},
    {"mpt", PreType::Gpt2},
    {"olmo", PreType::Gpt2},
    {"jais", PreType::Gpt2},
    {"gpt-2", PreType::Gpt2},
    {"phi-2", PreType::Gpt2},
    {"jina-es", PreType::Gpt2},
    {"jina-de", PreType::Gpt2},
    {"gigachat", PreType::Gpt2},
    {"jina-v2-es", PreType::Gpt2},
    {"jina-v2-de", PreType::Gpt2},
    {"a.x-4.0", PreType::Gpt2},
    {"mellum", PreType::Gpt2},
    {"modern-bert", PreType::Gpt2},
    {"exaone4", PreType::Gpt2},
    {"jina-v1-en", PreType::Gpt2, false, false, true, true},
    {"jina-v2-code", PreType::Gpt2, false, false, true, true},
    {"roberta-bpe", PreType::Gpt2, false, false, true, true},
    {"trillion", PreType::Gpt2, false, false, false},
    {"granite-docling", PreType::Gpt2, false, false, false},
    {"starcoder", PreType::Starcoder},
    {"refact", PreType::Starcoder},
    {"codeshell", PreType::Starcoder},
    {"exaone", PreType::Starcoder},
    {"minerva-7b", PreType::Starcoder},
    {"command-r", PreType::Starcoder, false, false, false},
    {"smollm", PreType::Starcoder, false, false, false},
    {"qwen2", PreType::Qwen2, false, false, false},
    {"deepseek-r1-qwen", PreType::Qwen2, false, false, false},
    {"kormo", PreType::Qwen2, false, false, false},
    {"f2llmv2", PreType::Qwen2, false, false, false},
    {"hunyuan", PreType::Qwen2, false, false, false},
    {"solar-open", PreType::Qwen2, false, false, false},
    {"megrez", PreType::Qwen2},
    {"stablelm2", PreType::Qwen2},
    {"qwen35", PreType::Qwen35, false, false, false},
    {"gpt-4o", PreType::Gpt4o, false, false, false},
    {"llama4", PreType::Gpt4o, false, false, false},
    {"kanana2", PreType::Gpt4o, false, false, false},
    {"talkie", PreType::Gpt4o, false, false, false},
    {"minimax-m2", PreType::Gpt4o, false, false, false},
    {"tekken", PreType::Tekken, true, true, false},
    {"gemma4", PreType::Gemma4},
};

const PreInfo* find_pre(std::string_view name) {
  for (const auto& p : kPreTypes) {
    if (name == p.name) return &p;
  }
  return nullptr;
}

std::string supported_pre_names() {
  std::string out;
  for (const auto& p : kPreTypes) out += (out.empty() ? "" : ", ") + std::string(p.name);
  return out;
}

uint32_t attr_from_type(int64_t type) {
  switch (static_cast<TokenType>(type)) {
    case TokenType::Unknown: return kAttrUnknown;
    case TokenType::Unused: return kAttrUnused;
    case TokenType::Normal: return kAttrNormal;
    case TokenType::Control: return kAttrControl;
    case TokenType::UserDefined: return kAttrUserDefined;
    case TokenType::Byte: return kAttrByte;
    default: return kAttrUndefined;
  }
}

size_t table_size_for(size_t n) {
  size_t size = 16;
  while (size < 2 * n) size <<= 1;
  return size;
}

uint64_t mix(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  return k;
}

}  // namespace

const char* pre_type_name(PreType t) {
  switch (t) {
    case PreType::Default: return "default";
    case PreType::Gpt2: return "gpt2";
    case PreType::Llama3: return "llama3";
    case PreType::Qwen2: return "qwen2";
    case PreType::Qwen35: return "qwen35";
    case PreType::Gpt4o: return "gpt-4o";
    case PreType::Tekken: return "tekken";
    case PreType::DeepseekLlm: return "deepseek-llm";
    case PreType::DeepseekCoder: return "deepseek-coder";
    case PreType::Falcon: return "falcon";
    case PreType::Starcoder: return "starcoder";
    case PreType::Gemma4: return "gemma4";
  }
  return "?";
}

uint32_t byte_to_unicode(uint8_t byte) {
  // Printable Latin-1 bytes map to themselves; the other 68 bytes to U+0100.. in byte order.
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      t[b] = printable ? b : next++;
    }
    return t;
  }();
  return table[byte];
}

int unicode_to_byte(uint32_t cp) {
  static const std::array<int16_t, 512> table = [] {
    std::array<int16_t, 512> t{};
    t.fill(-1);
    for (uint32_t b = 0; b < 256; ++b) t[byte_to_unicode(static_cast<uint8_t>(b))] = static_cast<int16_t>(b);
    return t;
  }();
  return cp < 512 ? table[cp] : -1;
}

Vocab Vocab::load(const gguf::File& file) {
  Source src;
  src.name = file.name();
  src.find = [&file](std::string_view key) -> std::optional<ValueView> {
    const gguf::KeyValue* kv = file.find(key);
    if (!kv) return std::nullopt;
    return kv->value;
  };
  Vocab v;
  v.load_from(src);
  return v;
}

Vocab Vocab::load(const gguf::Metadata& metadata, std::string name) {
  Source src;
  src.name = std::move(name);
  src.find = [&metadata](std::string_view key) -> std::optional<ValueView> {
    const gguf::Value* value = metadata.find(key);
    if (!value) return std::nullopt;
    return value->view();
  };
  Vocab v;
  v.load_from(src);
  return v;
}

void Vocab::load_from(const Source& src) {
  source_ = src.name;
  const auto model = get_string(src, "tokenizer.ggml.model");
  if (!model) {
    fail(source_, "tokenizer.ggml.model is missing, so this file carries no vocabulary; use a GGUF that "
                  "includes its tokenizer");
  }
  model_ = *model;
  pre_ = get_string(src, "tokenizer.ggml.pre").value_or("");

  // Per-model defaults (llama.cpp's), before the file's own keys override them.
  if (model_ == "llama") {
    type_ = VocabType::Spm;
    special_.bos = 1, special_.eos = 2, special_.unk = 0;
    add_space_prefix_ = true, escape_whitespaces_ = true, add_bos_ = true;
    pre_ = "default";
  } else if (model_ == "gpt2" || model_ == "gemma4") {
    type_ = VocabType::Bpe;
    if (model_ == "gpt2") special_.bos = 11, special_.eos = 11;
    if (model_ == "gemma4") pre_ = "gemma4";  // the file's value is ignored, as llama.cpp does
    if (pre_.empty()) pre_ = "default";
    const PreInfo* info = find_pre(pre_);
    if (!info) {
      fail(source_, fmt::format("pre-tokenizer '{}' (tokenizer.ggml.pre) is not supported; supported: {}",
                                printable(pre_), supported_pre_names()));
    }
    pre_type_ = info->type;
    ignore_merges_ = info->ignore_merges;
    add_bos_ = info->add_bos;
    clean_spaces_ = info->clean_spaces;
    add_sep_ = info->add_sep;
    if (info->no_bos) special_.bos = -1;
    if (pre_type_ == PreType::Gemma4) escape_whitespaces_ = true, byte_encode_ = false;
  } else if (model_ == "bert") {
    type_ = VocabType::Wpm;
    special_.bos = 101, special_.unk = 100, special_.sep = 102, special_.pad = 0, special_.mask = 103;
    add_bos_ = true, add_sep_ = true, clean_spaces_ = true;
    pre_ = "default";
  } else if (model_ == "no_vocab" || model_ == "none") {
    fail(source_, "this file has no vocabulary (tokenizer.ggml.model is '" + model_ + "')");
  } else {
    fail(source_, fmt::format("tokenizer model '{}' (tokenizer.ggml.model) is not supported; supported: "
                              "llama (SentencePiece), gpt2 and gemma4 (BPE), bert (WordPiece)",
                              printable(model_)));
  }
  if (const auto b = get_bool(src, "tokenizer.ggml.add_space_prefix")) add_space_prefix_ = *b;

  // Tokens, scores, types.
  const auto tokens = get_array(src, "tokenizer.ggml.tokens");
  if (!tokens) fail(source_, "tokenizer.ggml.tokens is missing; the file has no token list");
  if (tokens->element_type() != ValueType::STRING) {
    fail(source_, fmt::format("tokenizer.ggml.tokens must be an array of strings, not of {}",
                              gguf::value_type_name(tokens->element_type())));
  }
  if (tokens->empty()) fail(source_, "tokenizer.ggml.tokens is empty");
  if (tokens->size() >= static_cast<uint64_t>(INT32_MAX / 2)) fail(source_, "tokenizer.ggml.tokens is too long");
  n_tokens_ = static_cast<int32_t>(tokens->size());
  const auto n = static_cast<size_t>(n_tokens_);

  text_offsets_.reserve(n + 1);
  text_offsets_.push_back(0);
  size_t i = 0;
  for (ValueView t : *tokens) {
    std::string_view s = t.string();
    if (s.empty()) {
      // An empty token would match everywhere; llama.cpp renames it, so ids stay aligned.
      text_data_ += fmt::format("[EMPTY_{}]", i);
    } else {
      text_data_.append(s);
    }
    if (text_data_.size() > UINT32_MAX / 2) fail(source_, "token texts are too large");
    text_offsets_.push_back(static_cast<uint32_t>(text_data_.size()));
    max_token_len_ = std::max<size_t>(max_token_len_, text_offsets_.back() - text_offsets_[i]);
    ++i;
  }

  scores_.assign(n, 0.0f);
  if (const auto scores = get_array(src, "tokenizer.ggml.scores")) {
    if (scores->size() < n) {
      fail(source_, fmt::format("tokenizer.ggml.scores has {} entries for {} tokens", scores->size(), n));
    }
    i = 0;
    for (ValueView s : *scores) {
      if (i == n) break;
      const auto f = s.as<float>();
      if (!f) fail(source_, "tokenizer.ggml.scores must be an array of numbers");
      scores_[i++] = *f;
    }
  }
  attrs_.assign(n, kAttrNormal);
  if (const auto types = get_array(src, "tokenizer.ggml.token_type")) {
    if (types->size() < n) {
      fail(source_, fmt::format("tokenizer.ggml.token_type has {} entries for {} tokens", types->size(), n));
    }
    i = 0;
    for (ValueView t : *types) {
      if (i == n) break;
      const auto v = t.as<int64_t>();
      if (!v) fail(source_, "tokenizer.ggml.token_type must be an array of integers");
      attrs_[i++] = attr_from_type(*v);
    }
  }

  index_texts();
  for (int32_t id = 0; id < n_tokens_; ++id) {
    const int32_t found = find(text(id));
    if (found != id) {
      fail(source_, fmt::format("duplicate token in the vocabulary: '{}' has ids {} and {}", printable(text(id)),
                                found, id));
    }
  }

  if (type_ == VocabType::Bpe) load_merges(src);

  // Special-token ids: keys override the defaults when they are in range.
  const std::pair<const char*, int32_t*> id_keys[] = {
      {"tokenizer.ggml.bos_token_id", &special_.bos},       {"tokenizer.ggml.eos_token_id", &special_.eos},
      {"tokenizer.ggml.eot_token_id", &special_.eot},       {"tokenizer.ggml.eom_token_id", &special_.eom},
      {"tokenizer.ggml.unknown_token_id", &special_.unk},   {"tokenizer.ggml.seperator_token_id", &special_.sep},
      {"tokenizer.ggml.padding_token_id", &special_.pad},   {"tokenizer.ggml.mask_token_id", &special_.mask},
      {"tokenizer.ggml.fim_pre_token_id", &special_.fim_pre}, {"tokenizer.ggml.fim_suf_token_id", &special_.fim_suf},
      {"tokenizer.ggml.fim_mid_token_id", &special_.fim_mid}, {"tokenizer.ggml.fim_pad_token_id", &special_.fim_pad},
      {"tokenizer.ggml.fim_rep_token_id", &special_.fim_rep}, {"tokenizer.ggml.fim_sep_token_id", &special_.fim_sep},
      {"tokenizer.ggml.prefix_token_id", &special_.fim_pre},  {"tokenizer.ggml.suffix_token_id", &special_.fim_suf},
      {"tokenizer.ggml.middle_token_id", &special_.fim_mid},
  };
  for (const auto& [key, id] : id_keys) {
    if (*id >= n_tokens_) *id = -1;  // a default the vocabulary is too small for
    const auto v = get_int(src, key);
    if (v && *v >= 0 && *v < n_tokens_) *id = static_cast<int32_t>(*v);
  }
  if (const auto b = get_bool(src, "tokenizer.ggml.add_bos_token")) add_bos_ = *b;
  if (const auto b = get_bool(src, "tokenizer.ggml.add_eos_token")) add_eos_ = *b;
  if (const auto b = get_bool(src, "tokenizer.ggml.add_sep_token")) add_sep_ = *b;
  if (pre_type_ == PreType::Gemma4) add_bos_ = true;  // Gemma 4 always starts with BOS (llama.cpp overrides the key)
  if (add_bos_ && special_.bos < 0) fail(source_, "add_bos_token is true, but tokenizer.ggml.bos_token_id is not set");
  if (add_eos_ && special_.eos < 0) fail(source_, "add_eos_token is true, but tokenizer.ggml.eos_token_id is not set");
  if (type_ == VocabType::Wpm && special_.sep < 0) add_sep_ = false;
  if (const auto b = get_bool(src, "tokenizer.ggml.normalizer.lowercase")) lowercase_ = *b;
  strip_accents_ = lowercase_;
  if (const auto b = get_bool(src, "tokenizer.ggml.normalizer.strip_accents")) strip_accents_ = *b;

  apply_fixups(src);

  // Byte fallback tokens: <0xXX>, else the byte as a one-byte token.
  for (int b = 0; b < 256; ++b) {
    int32_t id = find(fmt::format("<0x{:02X}>", b));
    if (id < 0) id = find(std::string(1, static_cast<char>(b)));
    byte_tokens_[b] = id;
    byte_symbols_[b] = find_symbol(unicode::to_utf8(byte_to_unicode(static_cast<uint8_t>(b))));
  }

  for (int32_t id = 0; id < n_tokens_; ++id) {
    if (attr(id) & (kAttrControl | kAttrUserDefined | kAttrUnknown)) special_candidates_.push_back(id);
  }
}

void Vocab::index_texts() {
  const size_t n_symbols = text_offsets_.size() - 1;
  text_index_.assign(table_size_for(n_symbols), -1);
  const size_t mask = text_index_.size() - 1;
  for (size_t id = 0; id < n_symbols; ++id) {
    const std::string_view s = symbol_text(static_cast<int32_t>(id));
    size_t slot = std::hash<std::string_view>{}(s) & mask;
    while (text_index_[slot] >= 0) {
      if (symbol_text(text_index_[slot]) == s) break;  // duplicate: keep the first id
      slot = (slot + 1) & mask;
    }
    if (text_index_[slot] < 0) text_index_[slot] = static_cast<int32_t>(id);
  }
}

int32_t Vocab::find_symbol(std::string_view text) const {
  const size_t mask = text_index_.size() - 1;
  size_t slot = std::hash<std::string_view>{}(text) & mask;
  while (true) {
    const int32_t id = text_index_[slot];
    if (id < 0) return -1;
    if (symbol_text(id) == text) return id;
    slot = (slot + 1) & mask;
  }
}

int32_t Vocab::find(std::string_view text) const {
  const int32_t id = find_symbol(text);
  return id < n_tokens_ ? id : -1;
}

bool Vocab::is_eog(int32_t id) const { return std::find(eog_.begin(), eog_.end(), id) != eog_.end(); }

uint8_t Vocab::token_byte(int32_t id) const {
  const std::string_view t = text(id);
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  if (t.size() == 6 && t.starts_with("<0x") && t.back() == '>' && hex(t[3]) >= 0 && hex(t[4]) >= 0) {
    return static_cast<uint8_t>(hex(t[3]) * 16 + hex(t[4]));
  }
  return t.empty() ? 0 : static_cast<uint8_t>(t[0]);  // a byte token spelled as the byte itself
}

int32_t Vocab::add_symbol(std::string_view text) {
  text_data_.append(text);
  text_offsets_.push_back(static_cast<uint32_t>(text_data_.size()));
  return static_cast<int32_t>(text_offsets_.size() - 2);
}

void Vocab::load_merges(const Source& src) {
  const auto merges = get_array(src, "tokenizer.ggml.merges");
  if (!merges) fail(source_, "tokenizer.ggml.merges is missing; a BPE vocabulary needs its merges");
  if (merges->element_type() != ValueType::STRING) fail(source_, "tokenizer.ggml.merges must be an array of strings");

  // Strings that occur in merges but are not tokens get symbol ids after the tokens.
  std::unordered_map<std::string, int32_t> extra;
  auto symbol = [&](std::string_view s) -> int32_t {
    const int32_t id = find(s);
    if (id >= 0) return id;
    auto it = extra.find(std::string(s));
    if (it != extra.end()) return it->second;
    const int32_t added = add_symbol(s);
    extra.emplace(std::string(s), added);
    return added;
  };

  struct Entry {
    uint64_t key;
    Merge merge;
  };
  std::vector<Entry> entries;
  entries.reserve(merges->size());
  int32_t rank = 0;
  for (ValueView m : *merges) {
    const std::string_view s = m.string();
    const size_t space = s.size() > 1 ? s.find(' ', 1) : std::string_view::npos;
    if (space == std::string_view::npos) {
      ++rank;  // malformed entries keep their rank slot, as llama.cpp's do
      continue;
    }
    const std::string_view left = s.substr(0, space), right = s.substr(space + 1);
    std::string joined;
    joined.reserve(s.size() - 1);
    joined.append(left).append(right);
    const int32_t l = symbol(left), r = symbol(right), result = symbol(joined);
    entries.push_back({(static_cast<uint64_t>(static_cast<uint32_t>(l)) << 32) | static_cast<uint32_t>(r),
                       {rank++, result}});
  }
  merge_table_.assign(table_size_for(entries.size()), MergeSlot{});
  const size_t mask = merge_table_.size() - 1;
  for (const Entry& e : entries) {
    size_t slot = mix(e.key) & mask;
    while (merge_table_[slot].key != ~uint64_t{0} && merge_table_[slot].key != e.key) slot = (slot + 1) & mask;
    if (merge_table_[slot].key == e.key) continue;  // the first occurrence of a pair wins
    merge_table_[slot] = {e.key, e.merge};
    ++n_merges_;
  }
  index_texts();  // now covering the extra symbols too
}

Vocab::Merge Vocab::find_merge(int32_t left, int32_t right) const {
  if (merge_table_.empty()) return {};
  const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  const size_t mask = merge_table_.size() - 1;
  size_t slot = mix(key) & mask;
  while (true) {
    const MergeSlot& s = merge_table_[slot];
    if (s.key == key) return s.merge;
    if (s.key == ~uint64_t{0}) return {};
    slot = (slot + 1) & mask;
  }
}

void Vocab::apply_fixups(const Source& src) {
  auto force_control = [&](int32_t id) { attrs_[static_cast<size_t>(id)] |= kAttrControl; };
  // The first listed text present in the vocabulary fills an unset id and becomes a control token.
  auto detect = [&](int32_t& id, std::initializer_list<std::string_view> texts) {
    if (id >= 0) return;
    for (std::string_view t : texts) {
      const int32_t found = find(t);
      if (found >= 0) {
        id = found;
        force_control(found);
        return;
      }
    }
  };
  detect(special_.eot, {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
                        "<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>", "<end_of_utterance>"});
  detect(special_.eom, {"<|eom_id|>"});
  detect(special_.fim_pre, {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>",
                            "<|code_prefix|>", "<|prefix|>"});
  detect(special_.fim_suf, {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>",
                            "<|code_suffix|>", "<|suffix|>"});
  detect(special_.fim_mid, {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>",
                            "<|code_middle|>", "<|middle|>"});
  detect(special_.fim_pad, {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"});
  detect(special_.fim_rep, {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"});
  detect(special_.fim_sep, {"<|file_sep|>"});

  // Control tokens named "unused" are placeholders.
  for (int32_t id = 0; id < n_tokens_; ++id) {
    if (is_control(id) && text(id).find("unused") != std::string_view::npos) attrs_[static_cast<size_t>(id)] |= kAttrUnused;
  }

  // End-of-generation tokens: the FIM padding/repo/file separators and known end markers by text.
  auto add_eog = [&](int32_t id) {
    if (id >= 0 && !is_eog(id)) eog_.push_back(id);
  };
  add_eog(special_.fim_pad);
  add_eog(special_.fim_rep);
  add_eog(special_.fim_sep);
  for (std::string_view t : {"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
                             "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
                             "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
                             "<｜end▁of▁sentence｜>", "[e~["}) {
    const int32_t id = find(t);
    if (id < 0) continue;
    // Unlike llama.cpp, an ordinary "</s>" (an HTML tag in Qwen's vocabulary, for instance) stays
    // ordinary: forcing it to control would make the tokenizer parse it differently from the
    // model's own tokenizer and stop generation at a strikethrough tag.
    if (t == "</s>" && attr(id) == kAttrNormal) continue;
    add_eog(id);
    force_control(id);
  }
  // GPT-OSS (harmony) format tokens are always rendered, so a chat parser can read them.
  for (std::string_view t : {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"}) {
    const int32_t id = find(t);
    if (id >= 0) attrs_[static_cast<size_t>(id)] = kAttrUserDefined | kAttrFormat;
  }
  add_eog(special_.eos);
  add_eog(special_.eot);
  add_eog(special_.eom);
  // Harmony: <|end|> ends a message, not the generation, when <|return|> and <|call|> exist.
  auto eog_has = [&](std::string_view t) {
    const int32_t id = find(t);
    return id >= 0 && is_eog(id);
  };
  if (eog_has("<|end|>") && ((eog_has("<|return|>") && (eog_has("<|call|>") || eog_has("<|calls|>"))) ||
                             ((eog_has("<|call|>") || eog_has("<|calls|>")) && eog_has("<|flush|>")))) {
    const int32_t end = find("<|end|>");
    eog_.erase(std::find(eog_.begin(), eog_.end(), end));
    attrs_[static_cast<size_t>(end)] = kAttrUserDefined | kAttrFormat;
  }
  // Gemma 4 and PaddleOCR: </s> is an ordinary HTML-ish token there.
  if (eog_has("<|tool_response>") && eog_has("</s>")) {
    const int32_t s = find("</s>");
    eog_.erase(std::find(eog_.begin(), eog_.end(), s));
    attrs_[static_cast<size_t>(s)] = kAttrNormal;
  }

  // Per-model attributes llama.cpp sets by name (the GGUF has no field for them).
  std::string name = get_string(src, "general.name").value_or("");
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  const std::string arch = get_string(src, "general.architecture").value_or("");
  auto set_attr = [&](std::string_view t, uint32_t bit, bool on) {
    const int32_t id = find(t);
    if (id < 0) return;
    auto& a = attrs_[static_cast<size_t>(id)];
    a = on ? (a | bit) : (a & ~bit);
  };
  const bool jina = pre_.find("jina-v2-de") != std::string::npos || pre_.find("jina-v2-es") != std::string::npos ||
                    pre_.find("jina-v2-code") != std::string::npos ||
                    arch.find("nomic-bert-moe") != std::string::npos || arch.find("jina-bert-v3") != std::string::npos;
  if (jina) {
    set_attr("<mask>", kAttrLstrip, true);
  } else if (name.find("phi-3") != std::string::npos || name.find("phi3") != std::string::npos) {
    for (int32_t id = 0; id < n_tokens_; ++id) {
      if (attr(id) & (kAttrControl | kAttrUserDefined | kAttrUnknown)) attrs_[static_cast<size_t>(id)] |= kAttrRstrip;
    }
    set_attr("</s>", kAttrRstrip, true);
    for (std::string_view t : {"<unk>", "<s>", "<|endoftext|>"}) set_attr(t, kAttrRstrip, false);
  } else if (name.find("modern-bert") != std::string::npos) {
    set_attr("[MASK]", kAttrLstrip, true);
  }
}

}  // namespace zinc::tokenizer
