// Every environment variable zinc reads, in one table: its name, the values it takes, its default and
// what it changes. Code reads them only through knob() and knob_u32(), which refuse a name missing
// from the table (a test checks that the sources name no ZINC_ variable outside it); `zinc check -v`
// prints the table with the values set now. One prefix per concern: ZINC_HOME (the one root for
// models and caches), ZINC_CPU_* (the CPU backend), ZINC_VULKAN_* (the Vulkan backend), ZINC_TEST_*
// (the test suites).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace zinc {

struct Knob {
  const char* name;
  const char* values;    // what it takes
  const char* fallback;  // what applies when it is unset
  const char* meaning;
};

std::span<const Knob> knobs();

// The value of knob `name`, or nullptr where it is unset or empty. Throws std::logic_error for a name
// not in the table (a programming error).
const char* knob(std::string_view name);
// A numeric knob clamped to [lo, hi]; `fallback` where unset.
uint32_t knob_u32(std::string_view name, uint32_t fallback, uint32_t lo, uint32_t hi);

// The root of zinc's files: installed models (models/), the measured bandwidth, the Vulkan pipeline
// cache. $ZINC_HOME, else ~/.cache/zinc, else ./.zinc.
std::string zinc_home();

}  // namespace zinc
