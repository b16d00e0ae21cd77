// Jinja lexer: preprocessing (trim_blocks, lstrip_blocks, generation markers) and tokenization. The
// rules mirror the reference renderer exactly, including its quirks (lstrip_blocks also applies before
// "{-", trim_blocks also after "-}"), because the bytes of the rendered prompt depend on them.
#include "chat/jinja_lexer.h"

#include <fmt/format.h>

#include "chat/jinja_text.h"
#include "chat/jinja_value.h"

namespace zinc::chat::jinja {

const char* tok_name(Tok t) {
  switch (t) {
    case Tok::Text: return "text";
    case Tok::Number: return "number";
    case Tok::String: return "string";
    case Tok::Identifier: return "name";
    case Tok::Equals: return "'='";
    case Tok::OpenParen: return "'('";
    case Tok::CloseParen: return "')'";
    case Tok::OpenStatement: return "'{%'";
    case Tok::CloseStatement: return "'%}'";
    case Tok::OpenExpression: return "'{{'";
    case Tok::CloseExpression: return "'}}'";
    case Tok::OpenSquare: return "'['";
    case Tok::CloseSquare: return "']'";
    case Tok::OpenCurly: return "'{'";
    case Tok::CloseCurly: return "'}'";
    case Tok::Comma: return "','";
    case Tok::Dot: return "'.'";
    case Tok::Colon: return "':'";
    case Tok::Pipe: return "'|'";
    case Tok::Additive: return "operator";
    case Tok::Multiplicative: return "operator";
    case Tok::Power: return "'**'";
    case Tok::Comparison: return "comparison";
    case Tok::Unary: return "sign";
    case Tok::Comment: return "comment";
  }
  return "?";
}

namespace {

// Preprocessed text plus, for every byte, its offset in the original source.
struct Mapped {
  std::string text;
  std::vector<uint32_t> origin;

  void push(char c, uint32_t at) {
    text += c;
    origin.push_back(at);
  }
  void push_range(const Mapped& from, size_t begin, size_t end) {
    text.append(from.text, begin, end - begin);
    origin.insert(origin.end(), from.origin.begin() + static_cast<std::ptrdiff_t>(begin),
                  from.origin.begin() + static_cast<std::ptrdiff_t>(end));
  }
};

bool starts_with_at(std::string_view s, size_t i, std::string_view prefix) {
  return i <= s.size() && s.substr(i).starts_with(prefix);
}

// After a line terminator in JavaScript's sense (\n, \r, U+2028, U+2029), where a multiline ^ matches.
bool at_line_start(std::string_view s, size_t i) {
  if (i == 0) return true;
  if (s[i - 1] == '\n' || s[i - 1] == '\r') return true;
  if (i < 3) return false;
  const std::string_view prev = s.substr(i - 3, 3);
  return prev == "\xE2\x80\xA8" || prev == "\xE2\x80\xA9";
}

// lstrip_blocks: /^[ \t]*({[#%-])/gm -> "$1"
Mapped lstrip_blocks(const Mapped& in) {
  Mapped out;
  const std::string_view s = in.text;
  for (size_t i = 0; i < s.size();) {
    if (at_line_start(s, i)) {
      size_t j = i;
      while (j < s.size() && (s[j] == ' ' || s[j] == '\t')) ++j;
      if (j + 1 < s.size() && s[j] == '{' && (s[j + 1] == '#' || s[j + 1] == '%' || s[j + 1] == '-')) {
        out.push_range(in, j, j + 2);
        i = j + 2;
        continue;
      }
    }
    out.push(s[i], in.origin[i]);
    ++i;
  }
  return out;
}

// trim_blocks: /([#%-]})\n/g -> "$1"
Mapped trim_blocks(const Mapped& in) {
  Mapped out;
  const std::string_view s = in.text;
  for (size_t i = 0; i < s.size();) {
    if (i + 2 < s.size() && (s[i] == '#' || s[i] == '%' || s[i] == '-') && s[i + 1] == '}' && s[i + 2] == '\n') {
      out.push_range(in, i, i + 2);
      i += 3;
      continue;
    }
    out.push(s[i], in.origin[i]);
    ++i;
  }
  return out;
}

size_t skip_js_space(std::string_view s, size_t i) {
  while (size_t n = text::js_space_at(s, i)) i += n;
  return i;
}

// Matches "{%" "-"? \s* "end"? "generation" \s* "-"? "%}" at i; returns the end, or 0.
size_t match_generation_tag(std::string_view s, size_t i, bool& strip_before, bool& strip_after) {
  if (!starts_with_at(s, i, "{%")) return 0;
  size_t j = i + 2;
  strip_before = j < s.size() && s[j] == '-';
  if (strip_before) ++j;
  j = skip_js_space(s, j);
  if (starts_with_at(s, j, "end")) j += 3;
  if (!starts_with_at(s, j, "generation")) return 0;
  j = skip_js_space(s, j + 10);
  strip_after = j < s.size() && s[j] == '-';
  if (strip_after) ++j;
  if (!starts_with_at(s, j, "%}")) return 0;
  return j + 2;
}

// transformers' {% generation %} markers (which mark assistant tokens for training masks) render as
// nothing; the whitespace around them goes too where the marker has a "-".
Mapped remove_generation_tags(const Mapped& in) {
  Mapped out;
  const std::string_view s = in.text;
  size_t copied = 0;  // everything before this is in `out` (or dropped)
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '{') continue;
    bool strip_before = false, strip_after = false;
    const size_t tag_end = match_generation_tag(s, i, strip_before, strip_after);
    if (!tag_end) continue;
    // The whitespace run right before the tag, not reaching back into what an earlier match consumed.
    size_t before = i;
    while (before > copied) {
      const size_t n = text::js_space_before(s, before);
      if (n == 0 || before - n < copied) break;
      before -= n;
    }
    const size_t after_end = skip_js_space(s, tag_end);
    out.push_range(in, copied, before);
    if (!strip_before) out.push_range(in, before, i);
    if (!strip_after) out.push_range(in, tag_end, after_end);
    copied = after_end;
    i = after_end - 1;
  }
  out.push_range(in, copied, s.size());
  return out;
}

Mapped preprocess(std::string_view source) {
  Mapped m;
  m.text.assign(source);
  m.origin.resize(source.size());
  for (size_t i = 0; i < source.size(); ++i) m.origin[i] = static_cast<uint32_t>(i);
  if (!m.text.empty() && m.text.back() == '\n') {
    m.text.pop_back();
    m.origin.pop_back();
  }
  return remove_generation_tags(trim_blocks(lstrip_blocks(m)));
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class Lexer {
 public:
  explicit Lexer(std::string_view source) : src_(preprocess(source)), s_(src_.text), source_size_(source.size()) {}

  std::vector<Token> run();

 private:
  uint32_t origin(size_t i) const {
    return i < src_.origin.size() ? src_.origin[i] : static_cast<uint32_t>(source_size_);
  }
  [[noreturn]] void fail(const std::string& what, size_t at) const { throw RenderError(what, origin(at)); }
  Tok last_type() const { return tokens_.empty() ? Tok::Text : tokens_.back().type; }
  void push(Tok t, std::string value, size_t at) { tokens_.push_back(Token{t, std::move(value), origin(at)}); }

  // {%- {{- {#-: trim the whitespace at the end of the preceding text (dropping it if nothing is left).
  void strip_trailing_whitespace() {
    if (tokens_.empty() || tokens_.back().type != Tok::Text) return;
    std::string& v = tokens_.back().value;
    v.resize(text::trim_end(v).size());
    if (v.empty()) tokens_.pop_back();
  }
  void skip_whitespace() { pos_ = skip_js_space(s_, pos_); }

  bool lex_text();
  void lex_comment();
  void lex_sign(char sign);
  void lex_string(char quote);
  void lex_number();
  std::string digits();

  Mapped src_;
  std::string_view s_;
  size_t source_size_;
  size_t pos_ = 0;
  int curly_depth_ = 0;
  std::vector<Token> tokens_;
};

struct Fixed {
  std::string_view text;
  Tok type;
};

// Longest operators first where one is a prefix of another.
constexpr Fixed kFixed[] = {
    {"{%", Tok::OpenStatement}, {"%}", Tok::CloseStatement}, {"{{", Tok::OpenExpression},
    {"}}", Tok::CloseExpression}, {"(", Tok::OpenParen},      {")", Tok::CloseParen},
    {"{", Tok::OpenCurly},        {"}", Tok::CloseCurly},      {"[", Tok::OpenSquare},
    {"]", Tok::CloseSquare},      {",", Tok::Comma},           {".", Tok::Dot},
    {":", Tok::Colon},            {"|", Tok::Pipe},            {"<=", Tok::Comparison},
    {">=", Tok::Comparison},      {"==", Tok::Comparison},     {"!=", Tok::Comparison},
    {"<", Tok::Comparison},       {">", Tok::Comparison},      {"+", Tok::Additive},
    {"-", Tok::Additive},         {"~", Tok::Additive},        {"**", Tok::Power},
    {"*", Tok::Multiplicative},   {"//", Tok::Multiplicative}, {"/", Tok::Multiplicative},
    {"%", Tok::Multiplicative},   {"=", Tok::Equals},
};

std::vector<Token> Lexer::run() {
  while (pos_ < s_.size()) {
    const Tok last = last_type();
    if (tokens_.empty() || last == Tok::CloseStatement || last == Tok::CloseExpression || last == Tok::Comment) {
      if (lex_text()) continue;
    }
    if (starts_with_at(s_, pos_, "{#")) {
      lex_comment();
      continue;
    }
    if (starts_with_at(s_, pos_, "{%-")) {
      strip_trailing_whitespace();
      push(Tok::OpenStatement, "{%", pos_);
      pos_ += 3;
      continue;
    }
    if (starts_with_at(s_, pos_, "{{-")) {
      strip_trailing_whitespace();
      push(Tok::OpenExpression, "{{", pos_);
      curly_depth_ = 0;
      pos_ += 3;
      continue;
    }
    const size_t ws_start = pos_;
    skip_whitespace();
    if (pos_ >= s_.size()) {
      if (pos_ > ws_start) fail("unexpected end of template inside a tag", pos_);
      break;
    }
    if (starts_with_at(s_, pos_, "-%}")) {
      push(Tok::CloseStatement, "%}", pos_);
      pos_ += 3;
      skip_whitespace();
      continue;
    }
    if (starts_with_at(s_, pos_, "-}}")) {
      push(Tok::CloseExpression, "}}", pos_);
      pos_ += 3;
      skip_whitespace();
      continue;
    }
    const char c = s_[pos_];
    if (c == '-' || c == '+') {
      if (tokens_.empty() || last_type() == Tok::Text) fail(fmt::format("unexpected character '{}'", c), pos_);
      switch (last_type()) {
        case Tok::Identifier:
        case Tok::Number:
        case Tok::String:
        case Tok::CloseParen:
        case Tok::CloseSquare: break;  // binary: a - 1, (1) - 1, a[1] - 1
        default:
          lex_sign(c);
          continue;
      }
    }
    bool matched = false;
    for (const Fixed& f : kFixed) {
      // Inside an object literal "}}" closes two objects, not the expression.
      if (f.type == Tok::CloseExpression && curly_depth_ > 0) continue;
      if (!starts_with_at(s_, pos_, f.text)) continue;
      push(f.type, std::string(f.text), pos_);
      if (f.type == Tok::OpenExpression) curly_depth_ = 0;
      if (f.type == Tok::OpenCurly) ++curly_depth_;
      if (f.type == Tok::CloseCurly) --curly_depth_;
      pos_ += f.text.size();
      matched = true;
      break;
    }
    if (matched) continue;
    if (c == '\'' || c == '"') {
      lex_string(c);
    } else if (text::is_ascii_digit(c)) {
      lex_number();
    } else if (text::is_word_char(c)) {
      const size_t start = pos_;
      while (pos_ < s_.size() && text::is_word_char(s_[pos_])) ++pos_;
      if (pos_ >= s_.size()) fail("unexpected end of template inside a tag", pos_);
      push(Tok::Identifier, std::string(s_.substr(start, pos_ - start)), start);
    } else {
      const text::Decoded d = text::decode(s_, pos_);
      fail(fmt::format("unexpected character '{}' inside a tag", s_.substr(pos_, d.len)), pos_);
    }
  }
  return std::move(tokens_);
}

// Text up to the next "{%", "{{" or "{#". Returns false when there is none here.
bool Lexer::lex_text() {
  const size_t start = pos_;
  while (pos_ < s_.size()) {
    if (s_[pos_] == '{' && pos_ + 1 < s_.size() && (s_[pos_ + 1] == '%' || s_[pos_ + 1] == '{' || s_[pos_ + 1] == '#')) {
      break;
    }
    ++pos_;
  }
  if (pos_ == start) return false;
  push(Tok::Text, std::string(s_.substr(start, pos_ - start)), start);
  return true;
}

void Lexer::lex_comment() {
  const size_t start = pos_;
  pos_ += 2;
  const bool strip_before = pos_ < s_.size() && s_[pos_] == '-';
  if (strip_before) ++pos_;
  const size_t body = pos_;
  while (!(pos_ + 1 < s_.size() && s_[pos_] == '#' && s_[pos_ + 1] == '}')) {
    if (pos_ + 2 >= s_.size()) fail("comment is not closed with '#}'", start);
    ++pos_;
  }
  std::string comment(s_.substr(body, pos_ - body));
  const bool strip_after = !comment.empty() && comment.back() == '-';
  if (strip_after) comment.pop_back();
  if (strip_before) strip_trailing_whitespace();
  push(Tok::Comment, std::move(comment), start);
  pos_ += 2;
  if (strip_after) skip_whitespace();
}

std::string Lexer::digits() {
  const size_t start = pos_;
  while (pos_ < s_.size() && text::is_ascii_digit(s_[pos_])) ++pos_;
  if (pos_ > start && pos_ >= s_.size()) fail("unexpected end of template inside a tag", pos_);
  return std::string(s_.substr(start, pos_ - start));
}

// A sign where a binary operator cannot be: part of a number literal (-1, -0.5) or a unary operator.
void Lexer::lex_sign(char sign) {
  const size_t start = pos_++;
  std::string num = digits();
  if (!num.empty() && pos_ + 1 < s_.size() && s_[pos_] == '.' && text::is_ascii_digit(s_[pos_ + 1])) {
    ++pos_;
    num += "." + digits();
  }
  push(num.empty() ? Tok::Unary : Tok::Number, std::string(1, sign) + num, start);
}

void Lexer::lex_number() {
  const size_t start = pos_;
  std::string num = digits();
  // After a dot (x.0.1) a number is an index, never a fraction.
  if (last_type() != Tok::Dot && pos_ + 1 < s_.size() && s_[pos_] == '.' && text::is_ascii_digit(s_[pos_ + 1])) {
    ++pos_;
    num += "." + digits();
  }
  push(Tok::Number, std::move(num), start);
}

void Lexer::lex_string(char quote) {
  const size_t start = pos_++;
  std::string out;
  uint32_t pending_high = 0;  // a \uD800-\uDBFF escape waiting for its low half
  auto flush_high = [&] {
    if (pending_high) text::append_utf8(out, 0xFFFD);
    pending_high = 0;
  };
  while (true) {
    if (pos_ >= s_.size()) fail("string literal is not closed", start);
    const char c = s_[pos_];
    if (c == quote) break;
    if (c != '\\') {
      flush_high();
      out += c;
      ++pos_;
      continue;
    }
    if (++pos_ >= s_.size()) fail("string literal is not closed", start);
    const char e = s_[pos_++];
    if (e == 'x' || e == 'u') {
      const size_t len = e == 'x' ? 2 : 4;
      uint32_t cp = 0;
      for (size_t k = 0; k < len; ++k) {
        const int h = pos_ + k < s_.size() ? hex_value(s_[pos_ + k]) : -1;
        if (h < 0) fail(fmt::format("invalid escape sequence \\{}{}", e, s_.substr(pos_, len)), pos_ - 2);
        cp = cp * 16 + static_cast<uint32_t>(h);
      }
      pos_ += len;
      if (cp >= 0xDC00 && cp <= 0xDFFF && pending_high) {
        text::append_utf8(out, 0x10000 + ((pending_high - 0xD800) << 10) + (cp - 0xDC00));
        pending_high = 0;
      } else {
        flush_high();
        if (cp >= 0xD800 && cp <= 0xDBFF) {
          pending_high = cp;
        } else {
          text::append_utf8(out, cp);
        }
      }
      continue;
    }
    flush_high();
    switch (e) {
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'v': out += '\v'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case '\\': out += '\\'; break;
      default: fail(fmt::format("unknown escape sequence '\\{}' in string literal", e), pos_ - 2);
    }
  }
  flush_high();
  ++pos_;
  push(Tok::String, std::move(out), start);
}

}  // namespace

std::vector<Token> tokenize(std::string_view source) {
  if (source.size() >= UINT32_MAX) throw RenderError("template is too large", 0);
  return Lexer(source).run();
}

}  // namespace zinc::chat::jinja
