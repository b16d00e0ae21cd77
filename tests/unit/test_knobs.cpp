// The knob table: every environment variable the sources read or set is in it, and knob() refuses
// names that are not.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <stdexcept>
#include <string>

#include "core/knobs.h"

namespace zinc {
namespace {

TEST(Knobs, EveryVariableTheSourcesUseIsInTheTable) {
  std::set<std::string> table;
  for (const Knob& k : knobs()) {
    EXPECT_TRUE(table.insert(k.name).second) << k.name << " twice";
    EXPECT_TRUE(*k.values && *k.fallback && *k.meaning) << k.name;
  }
  // Reads and writes of the environment in C++ (getenv, setenv, knob), JavaScript (env objects,
  // process.env) and shell or CMake (NAME=value).
  const std::regex cpp(R"((?:getenv|setenv|unsetenv|knob|knob_u32)\(\s*"(ZINC_[A-Z0-9_]+)\")");
  const std::regex js(R"((?:process\.env\.|[{,]\s*)(ZINC_[A-Z0-9_]+)\s*[:=]?)");
  const std::regex sh(R"((?:^|[\s"'])(ZINC_[A-Z0-9_]+)=)");
  const std::filesystem::path root = ZINC_SOURCE_DIR;
  std::set<std::string> used;
  int files = 0;
  for (const char* dir : {"src", "tests", "scripts", "bench", ".ci"}) {
    if (!std::filesystem::exists(root / dir)) continue;
    for (auto it = std::filesystem::recursive_directory_iterator(root / dir); it != std::filesystem::recursive_directory_iterator(); ++it) {
      const auto& p = it->path();
      if (it->is_directory() && (p.filename() == "node_modules" || p.filename() == "fixtures")) {
        it.disable_recursion_pending();
        continue;
      }
      if (!it->is_regular_file()) continue;
      const std::string ext = p.extension().string();
      const bool is_cpp = ext == ".cpp" || ext == ".h", is_js = ext == ".mjs" || ext == ".js",
                 is_sh = ext == ".sh" || p.filename() == "run" || p.filename() == "CMakeLists.txt";
      if (!is_cpp && !is_js && !is_sh) continue;
      if (p.filename() == "test_knobs.cpp") continue;  // names a knob that is not one
      std::ifstream in(p);
      std::string text, line;
      while (std::getline(in, line)) {
        // CMake passes environment variables only through ENVIRONMENT properties and `cmake -E env`
        // (its compile definitions are not environment variables).
        if (p.filename() == "CMakeLists.txt" && line.find("ENVIRONMENT") == std::string::npos &&
            line.find("-E env") == std::string::npos) {
          continue;
        }
        text += line + "\n";
      }
      ++files;
      const std::regex& re = is_cpp ? cpp : is_js ? js : sh;
      for (std::sregex_iterator m(text.begin(), text.end(), re), end; m != end; ++m) {
        const std::string name = (*m)[1];
        used.insert(name);
        EXPECT_TRUE(table.count(name)) << name << " (" << p.lexically_relative(root).string() << ") is not in core/knobs.cpp";
      }
    }
  }
  EXPECT_GT(files, 100);
  for (const char* expected : {"ZINC_HOME", "ZINC_CPU_ISA", "ZINC_VULKAN_DEVICE", "ZINC_TEST_FUZZ_VOCABS"}) {
    EXPECT_TRUE(used.count(expected)) << expected << " was not found in the sources: the scan misses something";
  }
}

TEST(Knobs, ReadsThroughTheTableOnly) {
  EXPECT_THROW(knob("ZINC_NOT_A_KNOB"), std::logic_error);
  setenv("ZINC_VULKAN_MV_ROWS", "12", 1);
  EXPECT_EQ(knob_u32("ZINC_VULKAN_MV_ROWS", 2, 1, 8), 8u);  // clamped
  setenv("ZINC_VULKAN_MV_ROWS", "", 1);
  EXPECT_EQ(knob("ZINC_VULKAN_MV_ROWS"), nullptr);  // empty is unset
  EXPECT_EQ(knob_u32("ZINC_VULKAN_MV_ROWS", 2, 1, 8), 2u);
  unsetenv("ZINC_VULKAN_MV_ROWS");
  setenv("ZINC_HOME", "/tmp/zinc-home-test", 1);
  EXPECT_EQ(zinc_home(), "/tmp/zinc-home-test");
  unsetenv("ZINC_HOME");
}

}  // namespace
}  // namespace zinc
