// Hand-written matchers for the pre-tokenizer regular expressions of each supported model family.
//
// Every matcher answers one question: how many code points does the pattern match at `pos` (0 for
// none), looking no further than `end`, the end of the piece being split. The answer reproduces the
// pattern's leftmost-first, greedy-with-backtracking semantics (Oniguruma, as Hugging Face tokenizers
// runs it; ECMAScript, as llama.cpp runs it): alternatives are tried in order and a lookahead such as
// (?!\S) sees the end of the piece as "nothing". The patterns are quoted above each matcher.
#include "tokenizer/pretokenize.h"

#include <algorithm>
#include <array>
#include <iterator>
#include <limits>

#include "tokenizer/unicode.h"

namespace zinc::tokenizer {

namespace {

using namespace unicode;

struct Text {
  std::vector<uint32_t> cp;
  std::vector<uint16_t> fl;
  std::vector<uint32_t> off;  // byte offset of each code point, then the end
};

struct Piece {
  size_t b, e;  // code point indices
};

using Matcher = size_t (*)(const Text& t, size_t pos, size_t end);

constexpr size_t kNo = std::numeric_limits<size_t>::max();

inline size_t run_of(const Text& t, size_t i, size_t end, uint16_t mask) {
  while (i < end && (t.fl[i] & mask)) ++i;
  return i;
}
inline size_t run_not(const Text& t, size_t i, size_t end, uint16_t mask) {
  while (i < end && !(t.fl[i] & mask)) ++i;
  return i;
}
inline bool is(const Text& t, size_t i, size_t end, uint16_t mask) { return i < end && (t.fl[i] & mask); }
inline bool is_nl(uint32_t c) { return c == '\r' || c == '\n'; }
inline bool is_digit(uint32_t c) { return c >= '0' && c <= '9'; }

// 's|'t|'re|'ve|'m|'ll|'d, optionally case-insensitive (ASCII letters; Oniguruma also folds U+017F
// LATIN SMALL LETTER LONG S to s and U+212A KELVIN SIGN to k, which never completes a contraction).
size_t contraction(const Text& t, size_t pos, size_t end, bool icase) {
  if (pos + 1 >= end || t.cp[pos] != '\'') return 0;
  auto at = [&](size_t i) {
    uint32_t c = t.cp[i];
    if (icase) {
      if (c >= 'A' && c <= 'Z') c += 32;
      else if (c == 0x17F) c = 's';
    }
    return c;
  };
  const uint32_t a = at(pos + 1);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (pos + 2 < end) {
    const uint32_t b = at(pos + 2);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  }
  return 0;
}

// \s+(?!\S)|\s+ for the whitespace run [pos, e): leave the last space to the next word when one follows.
inline size_t spaces_before_word(size_t pos, size_t e, size_t end) {
  const size_t n = e - pos;
  return (e < end && n > 1) ? n - 1 : n;
}

// \s*[\r\n]+|\s+(?!\S)|\s+
size_t newline_or_spaces(const Text& t, size_t pos, size_t end) {
  const size_t e = run_of(t, pos, end, kSpace);
  if (e == pos) return 0;
  size_t last_nl = 0;
  for (size_t i = pos; i < e; ++i) {
    if (is_nl(t.cp[i])) last_nl = i + 1;
  }
  if (last_nl) return last_nl - pos;
  return spaces_before_word(pos, e, end);
}

// GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
size_t match_gpt2(const Text& t, size_t pos, size_t end) {
  if (const size_t n = contraction(t, pos, end, false)) return n;
  const size_t q = pos + (t.cp[pos] == ' ' ? 1 : 0);
  if (q < end) {
    const uint16_t f = t.fl[q];
    if (f & kLetter) return run_of(t, q, end, kLetter) - pos;
    if (f & kNumber) return run_of(t, q, end, kNumber) - pos;
    if (!(f & (kSpace | kLetter | kNumber))) return run_not(t, q, end, kSpace | kLetter | kNumber) - pos;
  }
  const size_t e = run_of(t, pos, end, kSpace);
  return e == pos ? 0 : spaces_before_word(pos, e, end);
}

// Llama 3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
//          \s*[\r\n]+|\s+(?!\S)|\s+
// Qwen 2: the same with \p{N} for \p{N}{1,3}.
// Qwen 3.5: [\p{L}\p{M}]+ for the word class and [^\s\p{L}\p{M}\p{N}] for the symbol class.
template <uint16_t kWord, uint16_t kNotSymbol, size_t kDigits>
size_t match_llama3(const Text& t, size_t pos, size_t end) {
  if (const size_t n = contraction(t, pos, end, true)) return n;
  const uint32_t c = t.cp[pos];
  const uint16_t f = t.fl[pos];
  const bool prefix = !is_nl(c) && !(f & (kLetter | kNumber));
  if (prefix && is(t, pos + 1, end, kWord)) return run_of(t, pos + 1, end, kWord) - pos;
  if (f & kWord) return run_of(t, pos, end, kWord) - pos;
  if (f & kNumber) return std::min(run_of(t, pos, end, kNumber) - pos, kDigits);
  const size_t q = pos + (c == ' ' ? 1 : 0);
  if (q < end && !(t.fl[q] & kNotSymbol)) {
    size_t e = run_not(t, q, end, kNotSymbol);
    while (e < end && is_nl(t.cp[e])) ++e;
    return e - pos;
  }
  return newline_or_spaces(t, pos, end);
}

// o200k (GPT-4o, GPT-OSS, Llama 4):
//   [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|
//   [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|
//   \p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
// Tekken (Mistral): the same without the contraction suffixes and with \p{N}.
// The "upper" and "lower" classes share Lm, Lo and M, so the first alternative needs the backtracking
// spelled out: the upper run gives back characters until a lower-class one can start the lower run.
constexpr uint16_t kUpperClass = kUpper | kTitle | kModifier | kOtherLetter | kMark;
constexpr uint16_t kLowerClass = kLower | kModifier | kOtherLetter | kMark;

size_t upper_star_lower_plus(const Text& t, size_t p, size_t end) {
  const size_t a = run_of(t, p, end, kUpperClass);
  if (is(t, a, end, kLowerClass)) return run_of(t, a, end, kLowerClass);
  for (size_t j = a; j > p; --j) {
    if (t.fl[j - 1] & kLowerClass) return run_of(t, j - 1, end, kLowerClass);
  }
  return kNo;
}

size_t upper_plus_lower_star(const Text& t, size_t p, size_t end) {
  const size_t a = run_of(t, p, end, kUpperClass);
  return a == p ? kNo : run_of(t, a, end, kLowerClass);
}

template <bool kContractions, size_t kDigits>
size_t match_o200k(const Text& t, size_t pos, size_t end) {
  const uint32_t c = t.cp[pos];
  const uint16_t f = t.fl[pos];
  const bool prefix = !is_nl(c) && !(f & (kLetter | kNumber));
  auto word = [&](size_t e) {
    if (kContractions) e += contraction(t, e, end, true);
    return e - pos;
  };
  for (auto alternative : {upper_star_lower_plus, upper_plus_lower_star}) {
    if (prefix) {
      const size_t e = alternative(t, pos + 1, end);
      if (e != kNo) return word(e);
    }
    const size_t e = alternative(t, pos, end);
    if (e != kNo) return word(e);
  }
  if (f & kNumber) return std::min(run_of(t, pos, end, kNumber) - pos, kDigits);
  const size_t q = pos + (c == ' ' ? 1 : 0);
  if (q < end && !(t.fl[q] & (kSpace | kLetter | kNumber))) {
    size_t e = run_not(t, q, end, kSpace | kLetter | kNumber);
    while (e < end && (is_nl(t.cp[e]) || t.cp[e] == '/')) ++e;
    return e - pos;
  }
  return newline_or_spaces(t, pos, end);
}

// [\r\n]
size_t match_newline(const Text& t, size_t pos, size_t) { return is_nl(t.cp[pos]) ? 1 : 0; }

// \p{N}
size_t match_digit(const Text& t, size_t pos, size_t) { return (t.fl[pos] & kNumber) ? 1 : 0; }

// \p{N}+
size_t match_digits(const Text& t, size_t pos, size_t end) { return run_of(t, pos, end, kNumber) - pos; }

// [0-9][0-9][0-9]
size_t match_three_digits(const Text& t, size_t pos, size_t end) {
  return pos + 3 <= end && is_digit(t.cp[pos]) && is_digit(t.cp[pos + 1]) && is_digit(t.cp[pos + 2]) ? 3 : 0;
}

// \s?X+ for a class X given by flags.
template <uint16_t kClass>
size_t match_space_then(const Text& t, size_t pos, size_t end) {
  if ((t.fl[pos] & kSpace) && is(t, pos + 1, end, kClass)) return run_of(t, pos + 1, end, kClass) - pos;
  return run_of(t, pos, end, kClass) - pos;
}

// Falcon: [\p{P}\$\+<=>\^~\|`]+   default: [\p{P}\$\+<=>\^~\|]+
template <bool kBacktick>
bool punct_or_symbol(const Text& t, size_t i) {
  if (t.fl[i] & kPunct) return true;
  switch (t.cp[i]) {
    case '$': case '+': case '<': case '=': case '>': case '^': case '~': case '|': return true;
    case '`': return kBacktick;
    default: return false;
  }
}
template <bool kBacktick>
size_t match_punct_run(const Text& t, size_t pos, size_t end) {
  size_t e = pos;
  while (e < end && punct_or_symbol<kBacktick>(t, e)) ++e;
  return e - pos;
}

// DeepSeek: [一-龥ࠀ-一가-퟿]+
bool deepseek_cjk(uint32_t c) { return (c >= 0x0800 && c <= 0x9FA5) || (c >= 0xAC00 && c <= 0xD7FF); }
size_t match_deepseek_cjk(const Text& t, size_t pos, size_t end) {
  size_t e = pos;
  while (e < end && deepseek_cjk(t.cp[e])) ++e;
  return e - pos;
}

// DeepSeek LLM's letter class (cased letters of selected scripts), as listed in its tokenizer.json:
// [A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώ
//  ᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ
//  𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]
constexpr std::pair<uint32_t, uint32_t> kDeepseekLetters[] = {
    {0x0041, 0x005A}, {0x0061, 0x007A}, {0x00B5, 0x00B5}, {0x00C0, 0x00D6}, {0x00D8, 0x00F6}, {0x00F8, 0x01BA},
    {0x01BC, 0x01BF}, {0x01C4, 0x0293}, {0x0295, 0x02AF}, {0x0370, 0x0373}, {0x0376, 0x0377}, {0x037B, 0x037D},
    {0x037F, 0x037F}, {0x0386, 0x0386}, {0x0388, 0x038A}, {0x038C, 0x038C}, {0x038E, 0x03A1}, {0x03A3, 0x03F5},
    {0x03F7, 0x0481}, {0x048A, 0x052F}, {0x0531, 0x0556}, {0x10A0, 0x10C5}, {0x13A0, 0x13F5}, {0x13F8, 0x13FD},
    {0x1C90, 0x1CBA}, {0x1CBD, 0x1CBF}, {0x1D00, 0x1D2B}, {0x1D6B, 0x1D77}, {0x1D79, 0x1D9A}, {0x1E00, 0x1F15},
    {0x1F18, 0x1F1D}, {0x1F20, 0x1F45}, {0x1F48, 0x1F4D}, {0x1F50, 0x1F57}, {0x1F59, 0x1F59}, {0x1F5B, 0x1F5B},
    {0x1F5D, 0x1F5D}, {0x1F5F, 0x1F7D}, {0x1F80, 0x1FB4}, {0x1FB6, 0x1FBC}, {0x1FBE, 0x1FBE}, {0x1FC2, 0x1FC4},
    {0x1FC6, 0x1FCC}, {0x1FD0, 0x1FD3}, {0x1FD6, 0x1FDB}, {0x1FE0, 0x1FEC}, {0x1FF2, 0x1FF4}, {0x1FF6, 0x1FFC},
    {0x2102, 0x2102}, {0x2107, 0x2107}, {0x210A, 0x2113}, {0x2115, 0x2115}, {0x2119, 0x211D}, {0x2124, 0x2124},
    {0x2126, 0x2126}, {0x2128, 0x2128}, {0x212A, 0x212D}, {0x212F, 0x2134}, {0x2139, 0x2139}, {0x213C, 0x213F},
    {0x2145, 0x2149}, {0x214E, 0x214E}, {0x2183, 0x2184}, {0x2C00, 0x2C7B}, {0x2C7E, 0x2CE4}, {0x2CEB, 0x2CEE},
    {0x2CF2, 0x2CF3}, {0xA640, 0xA66D}, {0xA680, 0xA69B}, {0xA722, 0xA76F}, {0xA771, 0xA787}, {0xA78B, 0xA78E},
    {0xAB70, 0xABBF}, {0xFB00, 0xFB06}, {0xFB13, 0xFB17}, {0xFF21, 0xFF3A}, {0xFF41, 0xFF5A}, {0x10400, 0x1044F},
    {0x104B0, 0x104D3}, {0x104D8, 0x104FB}, {0x10C80, 0x10CB2}, {0x10CC0, 0x10CF2}, {0x118A0, 0x118DF},
    {0x1E900, 0x1E943},
};

bool deepseek_letter(uint32_t c) {
  const auto it = std::upper_bound(std::begin(kDeepseekLetters), std::end(kDeepseekLetters), c,
                                   [](uint32_t v, const std::pair<uint32_t, uint32_t>& r) { return v < r.first; });
  return it != std::begin(kDeepseekLetters) && c <= it[-1].second;
}

// DeepSeek LLM's punctuation class: [!-/:-~！-／：-～‘-‟　-。]
bool deepseek_punct(uint32_t c) {
  return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x7E) || (c >= 0xFF01 && c <= 0xFF0F) ||
         (c >= 0xFF1A && c <= 0xFF5E) || (c >= 0x2018 && c <= 0x201F) || (c >= 0x3000 && c <= 0x3002);
}

// \s?[class]+ for a class given by a predicate on code points.
template <bool (*kIn)(uint32_t)>
size_t match_space_then_set(const Text& t, size_t pos, size_t end) {
  size_t start = pos;
  if ((t.fl[pos] & kSpace) && pos + 1 < end && kIn(t.cp[pos + 1])) start = pos + 1;
  size_t e = start;
  while (e < end && kIn(t.cp[e])) ++e;
  return e == start ? 0 : e - pos;
}

// \s+$
size_t match_trailing_spaces(const Text& t, size_t pos, size_t end) {
  const size_t e = run_of(t, pos, end, kSpace);
  return e > pos && e == end ? e - pos : 0;
}

// Gemma 4: [^\n]+|[\n]+
size_t match_lines(const Text& t, size_t pos, size_t end) {
  size_t e = pos;
  const bool nl = t.cp[pos] == '\n';
  while (e < end && (t.cp[e] == '\n') == nl) ++e;
  return e - pos;
}

void run_stage(Matcher m, const Text& t, const std::vector<Piece>& in, std::vector<Piece>& out) {
  out.clear();
  for (const Piece& p : in) {
    size_t gap = p.b, pos = p.b;
    while (pos < p.e) {
      const size_t n = m(t, pos, p.e);
      if (n == 0) {
        ++pos;
        continue;
      }
      if (pos > gap) out.push_back({gap, pos});
      out.push_back({pos, pos + n});
      pos += n;
      gap = pos;
    }
    if (gap < p.e) out.push_back({gap, p.e});
  }
}

struct Stages {
  std::array<Matcher, 6> m{};
  size_t n = 0;
};

Stages stages_for(PreType type) {
  constexpr uint16_t kL = kLetter, kLM = kLetter | kMark;
  switch (type) {
    case PreType::Gpt2: return {{match_gpt2}, 1};
    case PreType::Llama3: return {{match_llama3<kL, kSpace | kL | kNumber, 3>}, 1};
    case PreType::Qwen2: return {{match_llama3<kL, kSpace | kL | kNumber, 1>}, 1};
    case PreType::Qwen35: return {{match_llama3<kLM, kSpace | kLM | kNumber, 1>}, 1};
    case PreType::Gpt4o: return {{match_o200k<true, 3>}, 1};
    case PreType::Tekken: return {{match_o200k<false, 1>}, 1};
    case PreType::DeepseekLlm:
      return {{match_newline, match_space_then_set<deepseek_letter>, match_space_then_set<deepseek_punct>,
               match_trailing_spaces, match_deepseek_cjk, match_digits},
              6};
    case PreType::DeepseekCoder:
      return {{match_newline, match_space_then<kLetter>, match_space_then<kPunct>, match_deepseek_cjk, match_digit}, 5};
    case PreType::Falcon: return {{match_punct_run<true>, match_gpt2, match_three_digits}, 3};
    case PreType::Starcoder: return {{match_digit, match_gpt2}, 2};
    case PreType::Gemma4: return {{match_lines}, 1};
    case PreType::Default: return {{match_punct_run<false>, match_gpt2, match_digits, match_three_digits}, 4};
  }
  return {{match_gpt2}, 1};
}

}  // namespace

void pretokenize(PreType type, std::string_view text, std::vector<Span>& words) {
  if (text.empty()) return;
  Text t;
  t.cp.reserve(text.size());
  t.off.reserve(text.size() + 1);
  for (size_t pos = 0; pos < text.size();) {
    t.off.push_back(static_cast<uint32_t>(pos));
    t.cp.push_back(utf8_decode(text, pos));
  }
  t.off.push_back(static_cast<uint32_t>(text.size()));
  t.fl.resize(t.cp.size());
  for (size_t i = 0; i < t.cp.size(); ++i) t.fl[i] = flags(t.cp[i]);

  const Stages stages = stages_for(type);
  std::vector<Piece> a{{0, t.cp.size()}}, b;
  for (size_t s = 0; s < stages.n; ++s) {
    run_stage(stages.m[s], t, a, b);
    std::swap(a, b);
  }
  for (const Piece& p : a) words.push_back({t.off[p.b], t.off[p.e]});
}

}  // namespace zinc::tokenizer
