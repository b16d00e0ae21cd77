// Helpers shared by commands: GGUF metadata values for people (one line) and for programs (JSON),
// JSON output, reading a text input file.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "gguf/value.h"

namespace zinc::cli {

// JSON for a value. Arrays keep at most `max_elements` elements (at every nesting level); `truncated`
// is set when any were left out.
nlohmann::json value_to_json(const gguf::ValueView& v, size_t max_elements, bool* truncated);

// One-line text: numbers as numbers, strings quoted and escaped (cut at `max_chars`), arrays as
// "[count × type] first, elements, …".
std::string value_to_text(const gguf::ValueView& v, size_t max_elements, size_t max_chars);

// JSON text that tolerates invalid UTF-8 from untrusted files (replaced with U+FFFD).
std::string dump_json(const nlohmann::json& j);

// A whole text file ("-": standard input). Throws zinc::Error "PATH: cannot read the WHAT file".
std::string read_text(const std::string& path, const char* what);

}  // namespace zinc::cli
