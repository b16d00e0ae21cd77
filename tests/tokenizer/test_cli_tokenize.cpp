// `zinc tokenize` / `zinc detokenize` as a user runs them: exit status, stdout and stderr kept apart.
// Expected ids come from the llama.cpp test vectors (ggml-vocab-*.gguf.out), not from zinc.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "gguf/writer.h"
#include "raw_gguf.h"
#include "vocab_cases.h"

namespace {

using nlohmann::json;

struct RunResult {
  int status = -1;
  std::string out, err;
};

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Runs zinc with `args`, feeding `input` on stdin.
RunResult zinc(const std::vector<std::string>& args, const std::string& input = "") {
  zinc::test::TempDir tmp;
  {
    std::ofstream in(tmp.file("in"), std::ios::binary);
    in << input;
  }
  std::string cmd = quote(ZINC_BINARY);
  for (const auto& a : args) cmd += " " + quote(a);
  cmd += " <" + quote(tmp.file("in").string()) + " >" + quote(tmp.file("out").string()) + " 2>" +
         quote(tmp.file("err").string());
  const int rc = std::system(cmd.c_str());
  RunResult r;
  r.status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  r.out = zinc::test::read_text(tmp.file("out"));
  r.err = zinc::test::read_text(tmp.file("err"));
  return r;
}

std::string vocab(const std::string& name) {
  return (zinc::test::testdata_dir() / "vocab" / ("ggml-vocab-" + name + ".gguf")).string();
}

// The reference ids of one test string of a vocabulary.
std::vector<int32_t> reference_ids(const std::string& name, const std::string& text) {
  const auto base = zinc::test::testdata_dir() / "vocab" / ("ggml-vocab-" + name + ".gguf");
  for (const auto& c : zinc::test::load_vocab_cases(base.string() + ".inp", base.string() + ".out")) {
    if (c.text == text) return c.ids;
  }
  ADD_FAILURE() << "no test string '" << text << "' for " << name;
  return {};
}

std::string join(const std::vector<int32_t>& ids, const std::string& sep = " ") {
  std::string s;
  for (int32_t id : ids) s += (s.empty() ? "" : sep) + std::to_string(id);
  return s;
}

TEST(CliTokenize, IdsMatchTheReference) {
  ZINC_REQUIRE_TESTDATA();
  for (const char* name : {"gpt-2", "llama-spm", "bert-bge"}) {
    const auto want = reference_ids(name, "Hello world");
    const RunResult r = zinc({"tokenize", "-m", vocab(name), "--ids", "--no-special", "Hello world"});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.err, "");
    EXPECT_EQ(r.out, join(want) + "\n") << name;
  }
}

TEST(CliTokenize, ReadsStdinAndPrintsJson) {
  ZINC_REQUIRE_TESTDATA();
  const std::string text = " Hello World!";
  const RunResult r = zinc({"tokenize", "-m", vocab("gpt-2"), "--json", "-"}, text);
  ASSERT_EQ(r.status, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["ids"].get<std::vector<int32_t>>(), reference_ids("gpt-2", text));
  EXPECT_EQ(j["count"], j["ids"].size());
  std::string joined;
  for (const auto& t : j["tokens"]) joined += t["piece"].get<std::string>();
  EXPECT_EQ(joined, text);
  // The global flag may come before the subcommand, too.
  const RunResult g = zinc({"--json", "tokenize", "-m", vocab("gpt-2"), text});
  ASSERT_EQ(g.status, 0) << g.err;
  EXPECT_EQ(json::parse(g.out)["ids"], j["ids"]);
}

TEST(CliTokenize, SpecialTokensAndBos) {
  ZINC_REQUIRE_TESTDATA();
  // GPT-2's end of text is id 50256; the SentencePiece vocabulary adds BOS (id 1) itself.
  RunResult r = zinc({"tokenize", "-m", vocab("gpt-2"), "--ids", "a<|endoftext|>"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("50256"), std::string::npos) << r.out;
  r = zinc({"tokenize", "-m", vocab("gpt-2"), "--ids", "--no-special", "a<|endoftext|>"});
  EXPECT_EQ(r.out.find("50256"), std::string::npos) << r.out;
  r = zinc({"tokenize", "-m", vocab("llama-spm"), "--ids", "Hello world"});
  EXPECT_EQ(r.out, "1 " + join(reference_ids("llama-spm", "Hello world")) + "\n");
  // Text output: one token per line, id then the quoted piece.
  r = zinc({"tokenize", "-m", vocab("llama-spm"), "Hi\n"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("\"<s>\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"\\n\""), std::string::npos) << r.out;
}

TEST(CliDetokenize, RoundTrip) {
  ZINC_REQUIRE_TESTDATA();
  const auto ids = reference_ids("gpt-2", " Hello World!");
  std::vector<std::string> args = {"detokenize", "-m", vocab("gpt-2")};
  for (int32_t id : ids) args.push_back(std::to_string(id));
  RunResult r = zinc(args);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, " Hello World!\n");
  r = zinc({"detokenize", "-m", vocab("gpt-2"), "--json", "-"}, join(ids));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["text"], " Hello World!");
  // SentencePiece: BOS rendered unless --no-special.
  r = zinc({"detokenize", "-m", vocab("llama-spm"), "1," + join(reference_ids("llama-spm", "Hello world"), ",")});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out.substr(0, 3), "<s>");
}

TEST(CliTokenize, ErrorsAreOneLineAndExitOne) {
  ZINC_REQUIRE_TESTDATA();
  auto expect_error = [](const RunResult& r, const std::string& what) {
    EXPECT_EQ(r.status, 1);
    EXPECT_EQ(r.out, "");
    EXPECT_NE(r.err.find(what), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  };
  expect_error(zinc({"detokenize", "-m", vocab("gpt-2"), "50257"}), "out of range");
  expect_error(zinc({"detokenize", "-m", vocab("gpt-2"), "12x"}), "not a token id");
  expect_error(zinc({"tokenize", "-m", vocab("gpt-2"), "-"}, "bad \xFF byte"), "not valid UTF-8");
  expect_error(zinc({"tokenize", "-m", "/nonexistent/model.gguf", "x"}), "/nonexistent/model.gguf");
  // A GGUF without tokenizer metadata.
  zinc::test::TempDir dir;
  zinc::gguf::Writer w;
  w.metadata().set("general.architecture", zinc::gguf::Value::str("llama"));
  w.write_file(dir.file("bare.gguf"));
  expect_error(zinc({"tokenize", "-m", dir.file("bare.gguf").string(), "x"}), "tokenizer.ggml.model");
}

}  // namespace
