// Token ids back to text: the bytes of one token, whole sequences (llama.cpp's rules), and streams.
#include "tokenizer/detokenizer.h"

#include <fmt/format.h>

#include "core/error.h"
#include "tokenizer/unicode.h"

namespace zinc::tokenizer {

namespace {

constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";

void unescape_spaces(std::string_view text, std::string& out) {
  for (size_t pos = 0; pos < text.size();) {
    if (text.substr(pos, 3) == kSpaceMarker) {
      out.push_back(' ');
      pos += 3;
    } else {
      out.push_back(text[pos++]);
    }
  }
}

// Byte-level BPE text back to bytes. A character outside the 256-character alphabet cannot come
// from the byte mapping; it is passed through as UTF-8.
void unmap_bytes(std::string_view text, std::string& out) {
  for (size_t pos = 0; pos < text.size();) {
    const size_t start = pos;
    const size_t n = unicode::utf8_valid_length(text, pos);
    if (n == 0) {  // ill-formed token text: copy the byte as it is
      out.push_back(text[pos++]);
      continue;
    }
    const uint32_t cp = unicode::utf8_decode(text, pos);
    const int b = unicode_to_byte(cp);
    if (b >= 0) out.push_back(static_cast<char>(b));
    else out.append(text.substr(start, pos - start));
  }
}

// clean_up_tokenization_spaces as llama.cpp applies it: " ." " ?" " !" " ," lose the space,
// " ' " becomes "'", and " 's" " 'm" " 're" " 've" lose the space.
std::string clean_up_spaces(std::string text) {
  auto pass = [&text](auto&& step) {
    if (text.size() < 2) return;
    std::string out(1, text[0]);
    for (size_t i = 1; i < text.size(); ++i) step(out, i);
    text = std::move(out);
  };
  pass([&text](std::string& out, size_t& i) {
    const char x = text[i];
    if (text[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) out.pop_back();
    out.push_back(x);
  });
  pass([&text](std::string& out, size_t& i) {
    const char x = text[i];
    if (x == '\'' && i + 1 < text.size() && text[i - 1] == ' ' && text[i + 1] == ' ') {
      out.pop_back();
      out.push_back(x);
      ++i;  // the space after it goes too
      return;
    }
    out.push_back(x);
  });
  pass([&text](std::string& out, size_t& i) {
    const char x = text[i];
    if (text[i - 1] == ' ' && x == '\'' && i + 1 < text.size()) {
      const char x1 = text[i + 1];
      if (x1 == 's' || x1 == 'm') {
        out.pop_back();
      } else if (x1 != 't' && x1 != 'd' && i + 2 < text.size()) {
        const char x2 = text[i + 2];
        if ((x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e')) out.pop_back();
      }
    }
    out.push_back(x);
  });
  return text;
}

}  // namespace

std::string Tokenizer::token_to_piece(int32_t id, bool special, int lstrip) const {
  check_ids(std::span<const int32_t>(&id, 1));
  const uint32_t attr = vocab_.attr(id);
  if (!special && (attr & (kAttrUnknown | kAttrControl))) return {};
  const std::string_view text = vocab_.text(id);
  std::string out;
  if (attr & (kAttrUnknown | kAttrControl | kAttrUserDefined)) {
    out.assign(text);
  } else if (attr & kAttrNormal) {
    if (vocab_.type() == VocabType::Bpe && !vocab_.escape_whitespaces()) unmap_bytes(text, out);
    else unescape_spaces(text, out);
  } else if (attr & kAttrByte) {
    out.push_back(static_cast<char>(vocab_.token_byte(id)));
  }
  size_t skip = 0;
  while (static_cast<int>(skip) < lstrip && skip < out.size() && out[skip] == ' ') ++skip;
  return out.erase(0, skip);
}

std::string Tokenizer::decode(std::span<const int32_t> ids, const DecodeOptions& options) const {
  check_ids(ids);
  bool remove_space = options.at_start && vocab_.add_space_prefix();
  if (options.at_start && options.remove_special && vocab_.add_bos() && !ids.empty() && ids.front() == vocab_.bos()) {
    remove_space = false;
    ids = ids.subspan(1);
  }
  if (options.remove_special && vocab_.add_eos() && !ids.empty() && ids.back() == vocab_.eos()) {
    ids = ids.subspan(0, ids.size() - 1);
  }
  std::string out;
  for (int32_t id : ids) {
    out += token_to_piece(id, options.render_special, remove_space ? 1 : 0);
    remove_space = false;
  }
  return vocab_.clean_spaces() ? clean_up_spaces(std::move(out)) : out;
}

Detokenizer::Detokenizer(const Tokenizer& tokenizer, DecodeOptions options)
    : tokenizer_(&tokenizer), options_(options) {
  reset();
}

void Detokenizer::reset() {
  first_ = true;
  remove_space_ = options_.at_start && tokenizer_->vocab().add_space_prefix();
  pending_.clear();
}

std::string Detokenizer::push(int32_t id) {
  const Vocab& v = tokenizer_->vocab();
  tokenizer_->check_ids(std::span<const int32_t>(&id, 1));
  if (options_.remove_special) {
    if (first_ && options_.at_start && v.add_bos() && id == v.bos()) {
      first_ = false;
      remove_space_ = false;
      return {};
    }
    if (v.add_eos() && id == v.eos()) return {};
  }
  first_ = false;
  pending_ += tokenizer_->token_to_piece(id, options_.render_special, remove_space_ ? 1 : 0);
  remove_space_ = false;

  // Emit every complete character; keep a trailing prefix that a later token may complete.
  std::string out;
  size_t pos = 0;
  while (pos < pending_.size()) {
    if (static_cast<uint8_t>(pending_[pos]) < 0x80) {
      out.push_back(pending_[pos++]);
      continue;
    }
    if (const size_t n = unicode::utf8_valid_length(pending_, pos)) {
      out.append(pending_, pos, n);
      pos += n;
      continue;
    }
    const size_t bad = unicode::utf8_invalid_length(pending_, pos);
    const size_t need = unicode::utf8_length(static_cast<uint8_t>(pending_[pos]));
    const bool can_complete = static_cast<uint8_t>(pending_[pos]) >= 0xC2 && static_cast<uint8_t>(pending_[pos]) <= 0xF4 &&
                              pos + bad == pending_.size() && bad < need;
    if (can_complete) break;
    unicode::append_utf8(out, unicode::kReplacement);
    pos += bad;
  }
  pending_.erase(0, pos);
  return out;
}

std::string Detokenizer::flush() {
  std::string out = unicode::sanitize_utf8(pending_);
  pending_.clear();
  return out;
}

}  // namespace zinc::tokenizer
