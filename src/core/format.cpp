#include "core/format.h"

#include <fmt/format.h>

namespace zinc {

std::string format_bytes(uint64_t bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return fmt::format("{} B", bytes);
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 5) {
    v /= 1024.0;
    ++u;
  }
  return fmt::format("{:.2f} {}", v, units[u]);
}

std::string format_count(uint64_t count) {
  if (count < 1000) return fmt::format("{}", count);
  static const char* units[] = {"K", "M", "B", "T"};
  double v = static_cast<double>(count);
  int u = -1;
  while (v >= 1000.0 && u < 3) {
    v /= 1000.0;
    ++u;
  }
  return fmt::format("{:.2f}{}", v, units[u]);
}

std::string terminal_safe(std::string_view text, bool keep_newlines) {
  std::string out;
  out.reserve(text.size());
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  for (size_t i = 0; i < n;) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      if ((c < 0x20 && !(keep_newlines && (c == '\n' || c == '\t'))) || c == 0x7f) {
        out += fmt::format("\\x{:02x}", c);
      } else {
        out += static_cast<char>(c);
      }
      ++i;
      continue;
    }
    // A well-formed UTF-8 sequence (no overlongs, no surrogates, at most U+10FFFF) passes, except C1.
    size_t len = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
    uint32_t cp = len == 2 ? c & 0x1f : len == 3 ? c & 0x0f : c & 0x07;
    for (size_t k = 1; k < len; ++k) {
      if (i + k >= n || (p[i + k] & 0xc0) != 0x80) {
        len = 0;
        break;
      }
      cp = (cp << 6) | (p[i + k] & 0x3f);
    }
    if (len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) len = 0;
    if (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) len = 0;
    if (len == 0) {
      out += fmt::format("\\x{:02x}", c);
      ++i;
    } else if (cp >= 0x80 && cp <= 0x9f) {
      out += fmt::format("\\u{:04x}", cp);
      i += len;
    } else {
      out.append(text.substr(i, len));
      i += len;
    }
  }
  return out;
}

}  // namespace zinc
