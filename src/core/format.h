// Small helpers to print sizes and counts the way people read them, and untrusted text safely.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace zinc {

std::string format_bytes(uint64_t bytes);    // "1.13 MiB"
std::string format_count(uint64_t count);    // "292.9K", "7.62B"

// Text from a model file, a server or a model's output, made safe to print on a terminal: control
// characters (C0, DEL, and the C1 range U+0080..U+009F, which some terminals obey as CSI/OSC) and bytes
// that are not UTF-8 are shown as escapes (\x1b, \u009b), so a file cannot move the cursor, retitle
// the window or hide text. A backslash stays as it is. `keep_newlines` lets \n and \t through (for
// generated text); otherwise they are escaped too (one-line fields such as names and keys).
std::string terminal_safe(std::string_view text, bool keep_newlines = false);

}  // namespace zinc
