// Unicode facts and UTF-8 handling for the tokenizer.
//
// Pre-tokenizer patterns classify code points by general category (\p{L}, \p{Lu}, \p{N}, \p{M}, ...)
// and by the White_Space property (\s). The data comes from the generated unicode_tables.cpp
// (tools/gen_unicode_tables.py); the Basic Multilingual Plane is expanded once into a flat table so
// the hot path is one array read per code point.
//
// UTF-8 rules are the strict ones of RFC 3629: no overlong forms, no surrogates, nothing above
// U+10FFFF. sanitize_utf8() replaces each maximal ill-formed subpart with U+FFFD, as the WHATWG
// Encoding Standard (and so every browser and Node's TextDecoder) does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace zinc::tokenizer::unicode {

// General categories; the numbering is shared with the generator.
enum class Category : uint8_t {
  Cn, Lu, Ll, Lt, Lm, Lo, Mn, Mc, Me, Nd, Nl, No, Pc, Pd, Ps, Pe, Pi, Pf, Po, Sm, Sc, Sk, So, Zs, Zl, Zp,
  Cc, Cf, Cs, Co
};

// Character classes as bits, so a pattern's class test is one AND.
enum Flag : uint16_t {
  kLetter = 1 << 0,       // \p{L}
  kUpper = 1 << 1,        // \p{Lu}
  kLower = 1 << 2,        // \p{Ll}
  kTitle = 1 << 3,        // \p{Lt}
  kModifier = 1 << 4,     // \p{Lm}
  kOtherLetter = 1 << 5,  // \p{Lo}
  kMark = 1 << 6,         // \p{M}
  kNumber = 1 << 7,       // \p{N}
  kPunct = 1 << 8,        // \p{P}
  kSymbol = 1 << 9,       // \p{S}
  kSeparator = 1 << 10,   // \p{Z}
  kOther = 1 << 11,       // \p{C}
  kSpace = 1 << 12,       // \s: the White_Space property
  kNonspacingMark = 1 << 13,  // \p{Mn}
};

inline constexpr uint32_t kMaxCodePoint = 0x10FFFF;
inline constexpr uint32_t kReplacement = 0xFFFD;

Category category(uint32_t cp);
uint16_t flags(uint32_t cp);
inline bool is_space(uint32_t cp) { return flags(cp) & kSpace; }
uint32_t to_lower(uint32_t cp);  // simple (one-to-one) lowercase mapping
// NFD decomposition of cp without its nonspacing marks (BERT's strip_accents); writes up to 3 code
// points to out and returns how many (0 when cp itself is a nonspacing mark).
int strip_accents(uint32_t cp, uint32_t out[3]);
const char* version();  // Unicode version of the tables

// ---- UTF-8 ----

// Bytes in the sequence a lead byte starts (1 for bytes that cannot start one).
inline size_t utf8_length(uint8_t lead) {
  if (lead < 0xC0) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  return 4;
}

// Length of the well-formed sequence at s[pos], or 0 when the bytes there are ill-formed or cut off.
size_t utf8_valid_length(std::string_view s, size_t pos);
// Offset of the first byte that is not well-formed UTF-8, or npos.
size_t utf8_first_invalid(std::string_view s);
inline bool is_valid_utf8(std::string_view s) { return utf8_first_invalid(s) == std::string_view::npos; }
// Length of the maximal ill-formed subpart at s[pos] (WHATWG): the bytes one U+FFFD replaces.
size_t utf8_invalid_length(std::string_view s, size_t pos);
// A copy with every maximal ill-formed subpart replaced by U+FFFD.
std::string sanitize_utf8(std::string_view s);

// Decodes the well-formed sequence at s[pos] (caller has validated it) and advances pos.
inline uint32_t utf8_decode(std::string_view s, size_t& pos) {
  const auto b0 = static_cast<uint8_t>(s[pos]);
  if (b0 < 0x80) {
    ++pos;
    return b0;
  }
  const size_t n = utf8_length(b0);
  uint32_t cp = b0 & (0xFF >> (n + 1));
  for (size_t i = 1; i < n; ++i) cp = (cp << 6) | (static_cast<uint8_t>(s[pos + i]) & 0x3F);
  pos += n;
  return cp;
}

void append_utf8(std::string& out, uint32_t cp);
inline std::string to_utf8(uint32_t cp) {
  std::string s;
  append_utf8(s, cp);
  return s;
}

namespace tables {
struct LowerRun {
  uint32_t first, last;
  int32_t delta;
  uint32_t stride;
};
struct StripRun {
  uint32_t first, last;
  uint32_t cps[3];  // zero-padded
};
extern const char* const kVersion;
extern const uint32_t kCategoryRuns[];
extern const size_t kCategoryRunCount;
extern const LowerRun kLowerRuns[];
extern const size_t kLowerRunCount;
extern const StripRun kStripRuns[];
extern const size_t kStripRunCount;
}  // namespace tables

}  // namespace zinc::tokenizer::unicode
