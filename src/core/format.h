// Small helpers to print sizes and counts the way people read them.
#pragma once

#include <cstdint>
#include <string>

namespace zinc {

std::string format_bytes(uint64_t bytes);    // "1.13 MiB"
std::string format_count(uint64_t count);    // "292.9K", "7.62B"

}  // namespace zinc
