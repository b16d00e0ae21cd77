// String helpers for the Jinja interpreter. Templates are rendered byte-for-byte like the reference
// renderer (@huggingface/jinja, a JavaScript program), so "whitespace", "length" and case mapping follow
// JavaScript's definitions while the strings themselves stay UTF-8.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace zinc::chat::jinja::text {

// Decodes the code point at s[i] and its length in bytes. Invalid bytes decode as U+FFFD, length 1,
// so every loop over a string advances.
struct Decoded {
  uint32_t cp;
  size_t len;
};
Decoded decode(std::string_view s, size_t i);
void append_utf8(std::string& out, uint32_t cp);

// Bytes taken by a JavaScript whitespace character (\s: ASCII space, \t\n\v\f\r, U+00A0, U+1680,
// U+2000..U+200A, U+2028, U+2029, U+202F, U+205F, U+3000, U+FEFF) at s[i], or 0.
size_t js_space_at(std::string_view s, size_t i);
// Bytes of the JavaScript whitespace character that ends at s[end) (end > 0), or 0.
size_t js_space_before(std::string_view s, size_t end);

std::string_view trim_start(std::string_view s);  // String.prototype.trimStart
std::string_view trim_end(std::string_view s);    // String.prototype.trimEnd
std::string_view trim(std::string_view s);        // String.prototype.trim

// Number of UTF-16 code units (JavaScript's String.length).
size_t utf16_length(std::string_view s);
// Number of code points.
size_t code_points(std::string_view s);

// JavaScript's toUpperCase/toLowerCase for Latin, Greek, Cyrillic, Armenian and full-width letters
// (including ß -> SS and the final sigma); other characters are left alone.
std::string to_upper(std::string_view s);
std::string to_lower(std::string_view s);
// The first character upper-cased, the rest unchanged (the reference's capitalize).
std::string capitalize_first(std::string_view s);
// Upper-cases every word character that follows a non-word character (the pattern /\b\w/g).
std::string title_case(std::string_view s);

inline bool is_ascii_digit(char c) { return c >= '0' && c <= '9'; }
inline bool is_word_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || is_ascii_digit(c) || c == '_';
}

}  // namespace zinc::chat::jinja::text
