// Unicode lookups over the generated run tables, and strict UTF-8 validation/replacement.
#include "tokenizer/unicode.h"

#include <algorithm>
#include <array>
#include <memory>

namespace zinc::tokenizer::unicode {

namespace {

// The White_Space property (PropList.txt); unicodedata does not expose it, and the list has not
// changed since Unicode 6.3 dropped U+180E.
bool white_space(uint32_t cp) {
  if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
  switch (cp) {
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

uint16_t category_flags(Category c) {
  switch (c) {
    case Category::Lu: return kLetter | kUpper;
    case Category::Ll: return kLetter | kLower;
    case Category::Lt: return kLetter | kTitle;
    case Category::Lm: return kLetter | kModifier;
    case Category::Lo: return kLetter | kOtherLetter;
    case Category::Mn: return kMark | kNonspacingMark;
    case Category::Mc: case Category::Me: return kMark;
    case Category::Nd: case Category::Nl: case Category::No: return kNumber;
    case Category::Pc: case Category::Pd: case Category::Ps: case Category::Pe: case Category::Pi:
    case Category::Pf: case Category::Po: return kPunct;
    case Category::Sm: case Category::Sc: case Category::Sk: case Category::So: return kSymbol;
    case Category::Zs: case Category::Zl: case Category::Zp: return kSeparator;
    default: return kOther;
  }
}

Category category_from_runs(uint32_t cp) {
  const uint32_t* begin = tables::kCategoryRuns;
  const uint32_t* end = begin + tables::kCategoryRunCount;
  // Last run whose first code point is <= cp.
  const uint32_t* it = std::upper_bound(begin, end, cp, [](uint32_t v, uint32_t run) { return v < (run >> 5); });
  return static_cast<Category>(it[-1] & 31);
}

// Flags for every code point of the Basic Multilingual Plane, built on first use.
const uint16_t* bmp_flags() {
  static const std::unique_ptr<uint16_t[]> table = [] {
    auto t = std::make_unique<uint16_t[]>(0x10000);
    for (uint32_t r = 0; r < tables::kCategoryRunCount; ++r) {
      const uint32_t first = tables::kCategoryRuns[r] >> 5;
      if (first >= 0x10000) break;
      const uint32_t next = r + 1 < tables::kCategoryRunCount ? tables::kCategoryRuns[r + 1] >> 5 : 0x110000;
      const uint16_t f = category_flags(static_cast<Category>(tables::kCategoryRuns[r] & 31));
      for (uint32_t cp = first; cp < std::min<uint32_t>(next, 0x10000); ++cp) t[cp] = f;
    }
    for (uint32_t cp = 0; cp < 0x10000; ++cp) {
      if (white_space(cp)) t[cp] |= kSpace;
    }
    return t;
  }();
  return table.get();
}

}  // namespace

Category category(uint32_t cp) {
  if (cp > kMaxCodePoint) return Category::Cn;
  return category_from_runs(cp);
}

uint16_t flags(uint32_t cp) {
  if (cp < 0x10000) return bmp_flags()[cp];
  if (cp > kMaxCodePoint) return kOther;
  return category_flags(category_from_runs(cp));  // no White_Space code point lies above the BMP
}

uint32_t to_lower(uint32_t cp) {
  const tables::LowerRun* begin = tables::kLowerRuns;
  const tables::LowerRun* end = begin + tables::kLowerRunCount;
  const auto* it = std::upper_bound(begin, end, cp, [](uint32_t v, const tables::LowerRun& r) { return v < r.first; });
  if (it == begin) return cp;
  --it;
  if (cp > it->last || (cp - it->first) % it->stride != 0) return cp;
  return static_cast<uint32_t>(static_cast<int64_t>(cp) + it->delta);
}

int strip_accents(uint32_t cp, uint32_t out[3]) {
  const tables::StripRun* begin = tables::kStripRuns;
  const tables::StripRun* end = begin + tables::kStripRunCount;
  const auto* it = std::upper_bound(begin, end, cp, [](uint32_t v, const tables::StripRun& r) { return v < r.first; });
  if (it != begin && cp <= it[-1].last) {
    int n = 0;
    for (uint32_t c : it[-1].cps) {
      if (c) out[n++] = c;
    }
    return n;
  }
  if (flags(cp) & kNonspacingMark) return 0;
  out[0] = cp;
  return 1;
}

const char* version() { return tables::kVersion; }

// ---- UTF-8 ----

namespace {

// Allowed range of the second byte after a lead byte (RFC 3629 table 3-7); the rest are 80..BF.
bool second_byte_ok(uint8_t lead, uint8_t b) {
  switch (lead) {
    case 0xE0: return b >= 0xA0 && b <= 0xBF;
    case 0xED: return b >= 0x80 && b <= 0x9F;
    case 0xF0: return b >= 0x90 && b <= 0xBF;
    case 0xF4: return b >= 0x80 && b <= 0x8F;
    default: return b >= 0x80 && b <= 0xBF;
  }
}

size_t expected_length(uint8_t lead) {
  if (lead < 0x80) return 1;
  if (lead < 0xC2) return 0;  // continuation byte or overlong 2-byte lead
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  if (lead < 0xF5) return 4;
  return 0;
}

}  // namespace

size_t utf8_valid_length(std::string_view s, size_t pos) {
  const auto lead = static_cast<uint8_t>(s[pos]);
  const size_t n = expected_length(lead);
  if (n <= 1) return n;
  if (pos + n > s.size()) return 0;
  if (!second_byte_ok(lead, static_cast<uint8_t>(s[pos + 1]))) return 0;
  for (size_t i = 2; i < n; ++i) {
    if ((static_cast<uint8_t>(s[pos + i]) & 0xC0) != 0x80) return 0;
  }
  return n;
}

size_t utf8_first_invalid(std::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    if (static_cast<uint8_t>(s[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const size_t n = utf8_valid_length(s, pos);
    if (n == 0) return pos;
    pos += n;
  }
  return std::string_view::npos;
}

size_t utf8_invalid_length(std::string_view s, size_t pos) {
  const auto lead = static_cast<uint8_t>(s[pos]);
  const size_t n = expected_length(lead);
  if (n == 0) return 1;
  // A valid prefix of a sequence that is then cut off or interrupted counts as one subpart.
  size_t len = 1;
  if (pos + 1 < s.size() && second_byte_ok(lead, static_cast<uint8_t>(s[pos + 1]))) {
    len = 2;
    while (len < n && pos + len < s.size() && (static_cast<uint8_t>(s[pos + len]) & 0xC0) == 0x80) ++len;
  }
  return len;
}

std::string sanitize_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t n = static_cast<uint8_t>(s[pos]) < 0x80 ? 1 : utf8_valid_length(s, pos);
    if (n) {
      out.append(s.substr(pos, n));
      pos += n;
    } else {
      append_utf8(out, kReplacement);
      pos += utf8_invalid_length(s, pos);
    }
  }
  return out;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace zinc::tokenizer::unicode
