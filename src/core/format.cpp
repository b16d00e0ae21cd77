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

}  // namespace zinc
