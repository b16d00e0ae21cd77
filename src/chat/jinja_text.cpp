// String helpers for the Jinja interpreter: UTF-8 decoding, JavaScript whitespace, lengths, case.
#include "chat/jinja_text.h"

namespace zinc::chat::jinja::text {

Decoded decode(std::string_view s, size_t i) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  if (b0 < 0x80) return {b0, 1};
  auto cont = [&](size_t k) { return i + k < s.size() && (static_cast<uint8_t>(s[i + k]) & 0xC0) == 0x80; };
  auto bits = [&](size_t k) { return static_cast<uint32_t>(static_cast<uint8_t>(s[i + k]) & 0x3F); };
  if (b0 >= 0xC2 && b0 < 0xE0 && cont(1)) return {((b0 & 0x1Fu) << 6) | bits(1), 2};
  if (b0 >= 0xE0 && b0 < 0xF0 && cont(1) && cont(2)) {
    const uint32_t cp = ((b0 & 0x0Fu) << 12) | (bits(1) << 6) | bits(2);
    if (cp >= 0x800 && (cp < 0xD800 || cp > 0xDFFF)) return {cp, 3};
  }
  if (b0 >= 0xF0 && b0 < 0xF5 && cont(1) && cont(2) && cont(3)) {
    const uint32_t cp = ((b0 & 0x07u) << 18) | (bits(1) << 12) | (bits(2) << 6) | bits(3);
    if (cp >= 0x10000 && cp <= 0x10FFFF) return {cp, 4};
  }
  return {0xFFFD, 1};
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0xFFFD;  // a lone surrogate has no UTF-8 form
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

namespace {

bool is_js_space(uint32_t cp) {
  switch (cp) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x20: case 0xA0: case 0x1680:
    case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000: case 0xFEFF:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

}  // namespace

size_t js_space_at(std::string_view s, size_t i) {
  if (i >= s.size()) return 0;
  const Decoded d = decode(s, i);
  return is_js_space(d.cp) ? d.len : 0;
}

size_t js_space_before(std::string_view s, size_t end) {
  if (end == 0) return 0;
  // Step back to the lead byte of the last character (UTF-8 has at most 3 continuation bytes).
  size_t start = end - 1;
  while (start > 0 && end - start < 4 && (static_cast<uint8_t>(s[start]) & 0xC0) == 0x80) --start;
  const Decoded d = decode(s, start);
  return start + d.len == end && is_js_space(d.cp) ? d.len : 0;
}

std::string_view trim_start(std::string_view s) {
  size_t i = 0;
  while (size_t n = js_space_at(s, i)) i += n;
  return s.substr(i);
}

std::string_view trim_end(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    const size_t n = js_space_before(s, end);
    if (n == 0) break;
    end -= n;
  }
  return s.substr(0, end);
}

std::string_view trim(std::string_view s) { return trim_end(trim_start(s)); }

size_t utf16_length(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size();) {
    const Decoded d = decode(s, i);
    n += d.cp >= 0x10000 ? 2 : 1;
    i += d.len;
  }
  return n;
}

size_t code_points(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); i += decode(s, i).len) ++n;
  return n;
}

namespace {

// Ranges where upper and lower case alternate: the upper-case letter at even (or odd) code points.
struct PairRange {
  uint32_t first, last;
  bool upper_even;
};
constexpr PairRange kPairs[] = {
    {0x100, 0x12F, true},   {0x132, 0x137, true},   {0x139, 0x148, false},  {0x14A, 0x177, true},
    {0x179, 0x17E, false},  {0x1CD, 0x1DC, false},  {0x1DE, 0x1EF, true},   {0x1F4, 0x1F5, true},
    {0x1F8, 0x21F, true},   {0x222, 0x233, true},   {0x246, 0x24F, true},   {0x460, 0x481, true},
    {0x48A, 0x4BF, true},   {0x4C1, 0x4CE, false},  {0x4D0, 0x52F, true},   {0x1E00, 0x1E95, true},
    {0x1EA0, 0x1EFF, true}, {0xA640, 0xA66D, true}, {0xA680, 0xA69B, true}, {0xA722, 0xA72F, true},
    {0xA732, 0xA76F, true},
};

const PairRange* pair_range(uint32_t c) {
  for (const PairRange& r : kPairs) {
    if (c >= r.first && c <= r.last) return &r;
  }
  return nullptr;
}

// Simple (one-to-one) case mappings for the scripts chat templates meet in practice: Latin (ASCII,
// Latin-1, Extended-A/B and Additional), Greek, Cyrillic, Armenian and full-width Latin. Code points
// outside these ranges are left unchanged.
uint32_t upper_of(uint32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if (c < 0x80) return c;
  if ((c >= 0xE0 && c <= 0xFE && c != 0xF7)) return c - 32;
  if (c == 0xFF) return 0x178;
  if (c == 0xB5) return 0x39C;
  if (c == 0x131) return 'I';
  if (c == 0x17F) return 'S';
  if (c == 0x1C5 || c == 0x1C6 || c == 0x1C8 || c == 0x1C9 || c == 0x1CB || c == 0x1CC || c == 0x1F2 || c == 0x1F3) {
    return c == 0x1F2 || c == 0x1F3 ? 0x1F1 : c - ((c - 0x1C4) % 3);  // digraphs: Ǆ ǅ ǆ -> Ǆ
  }
  if (const PairRange* r = pair_range(c)) return ((c % 2 == 0) == r->upper_even) ? c : c - 1;
  if (c >= 0x3B1 && c <= 0x3C9) return c == 0x3C2 ? 0x3A3 : c - 32;
  if (c == 0x3AC) return 0x386;
  if (c >= 0x3AD && c <= 0x3AF) return c - 37;
  if (c == 0x3CC) return 0x38C;
  if (c == 0x3CD || c == 0x3CE) return c - 63;
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  if (c >= 0x561 && c <= 0x586) return c - 48;
  if (c >= 0xFF41 && c <= 0xFF5A) return c - 32;
  return c;
}

uint32_t lower_of(uint32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c < 0x80) return c;
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;
  if (c == 0x178) return 0xFF;
  if (c == 0x1C4 || c == 0x1C5 || c == 0x1C7 || c == 0x1C8 || c == 0x1CA || c == 0x1CB || c == 0x1F1 || c == 0x1F2) {
    return c == 0x1F1 || c == 0x1F2 ? 0x1F3 : c + (2 - (c - 0x1C4) % 3);  // digraphs: Ǆ ǅ ǆ -> ǆ
  }
  if (const PairRange* r = pair_range(c)) return ((c % 2 == 0) == r->upper_even) ? c + 1 : c;
  if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 32;
  if (c == 0x386) return 0x3AC;
  if (c >= 0x388 && c <= 0x38A) return c + 37;
  if (c == 0x38C) return 0x3CC;
  if (c == 0x38E || c == 0x38F) return c + 63;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  if (c >= 0x531 && c <= 0x556) return c + 48;
  if (c >= 0xFF21 && c <= 0xFF3A) return c + 32;
  return c;
}

bool is_cased_letter(uint32_t c) { return upper_of(c) != c || lower_of(c) != c; }

}  // namespace

std::string to_upper(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const Decoded d = decode(s, i);
    if (d.cp == 0xDF) {
      out += "SS";  // the one special case JavaScript applies that changes length in Latin text
    } else if (d.cp == 0xFFFD && d.len == 1) {
      out += s[i];  // keep invalid bytes as they are
    } else {
      append_utf8(out, upper_of(d.cp));
    }
    i += d.len;
  }
  return out;
}

std::string to_lower(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const Decoded d = decode(s, i);
    if (d.cp == 0x3A3) {
      // Final sigma: after a cased letter and not before one.
      bool after_letter = false, before_letter = false;
      if (i > 0) {
        size_t j = i - 1;
        while (j > 0 && (static_cast<uint8_t>(s[j]) & 0xC0) == 0x80) --j;
        after_letter = is_cased_letter(decode(s, j).cp);
      }
      if (i + d.len < s.size()) before_letter = is_cased_letter(decode(s, i + d.len).cp);
      append_utf8(out, after_letter && !before_letter ? 0x3C2 : 0x3C3);
    } else if (d.cp == 0x130) {
      out += "i\xCC\x87";  // İ -> i + combining dot above
    } else if (d.cp == 0xFFFD && d.len == 1) {
      out += s[i];
    } else {
      append_utf8(out, lower_of(d.cp));
    }
    i += d.len;
  }
  return out;
}

std::string capitalize_first(std::string_view s) {
  if (s.empty()) return std::string();
  const Decoded d = decode(s, 0);
  return to_upper(s.substr(0, d.len)) + std::string(s.substr(d.len));
}

std::string title_case(std::string_view s) {
  std::string out(s);
  bool prev_word = false;
  for (char& c : out) {
    const bool word = is_word_char(c);
    if (word && !prev_word && c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
    prev_word = word;
  }
  return out;
}

}  // namespace zinc::chat::jinja::text
