// `zinc template` as a user runs it: the real binary, with stdout (the prompt), stderr and the exit status
// asserted. The model file is written by the independent test encoder (raw_gguf.h); expected prompts are
// written by hand from the small template it carries.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

#include "raw_gguf.h"

namespace {

using nlohmann::json;
using namespace zinc::test;

struct RunResult {
  int status = -1;
  std::string out, err;
};

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_text(const std::filesystem::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  out << text;
}

RunResult zinc(const std::vector<std::string>& args, const std::string& stdin_text = "") {
  TempDir tmp;
  write_text(tmp.file("in"), stdin_text);
  std::string cmd = quote(ZINC_BINARY);
  for (const auto& a : args) cmd += " " + quote(a);
  cmd += " >" + quote(tmp.file("out").string()) + " 2>" + quote(tmp.file("err").string()) + " <" + quote(tmp.file("in").string());
  const int rc = std::system(cmd.c_str());
  RunResult r;
  r.status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  r.out = slurp(tmp.file("out"));
  r.err = slurp(tmp.file("err"));
  return r;
}

constexpr const char* kTemplate =
    "{{ bos_token }}{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% if enable_thinking is defined and not enable_thinking %}"
    "<think>\n\n</think>\n\n{% else %}<think>\n{% endif %}{% endif %}";

std::vector<uint8_t> model_gguf(const char* chat_template) {
  RawGguf g;
  g.header(0, chat_template ? 5 : 4);
  g.key("general.architecture", STR).str("llama");
  g.key("tokenizer.ggml.tokens", ARR).u32(STR).u64(3).str("<unk>").str("<|bos|>").str("<|eos|>");
  g.key("tokenizer.ggml.bos_token_id", U32).u32(1);
  g.key("tokenizer.ggml.eos_token_id", U32).u32(2);
  if (chat_template) g.key("tokenizer.chat_template", STR).str(chat_template);
  return g.b;
}

class CliTemplate : public ::testing::Test {
 protected:
  void SetUp() override {
    write_bytes(model(), model_gguf(kTemplate));
    write_text(messages(), R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}])");
  }
  std::string model() const { return dir.file("m.gguf").string(); }
  std::string messages() const { return dir.file("messages.json").string(); }
  TempDir dir;
};

TEST_F(CliTemplate, RendersTheModelsTemplate) {
  const RunResult r = zinc({"template", "-m", model(), "--messages", messages(), "--add-generation-prompt"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(r.out, "<|bos|><|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n");
}

TEST_F(CliTemplate, WithoutGenerationPromptOrThinking) {
  RunResult r = zinc({"template", "-m", model(), "--messages", messages()});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "<|bos|><|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
  r = zinc({"template", "-m", model(), "--messages", messages(), "--add-generation-prompt", "--no-think"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "<|bos|><|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                   "<|im_start|>assistant\n<think>\n\n</think>\n\n");
}

TEST_F(CliTemplate, MessagesFromStdinAsARequestObject) {
  const RunResult r = zinc({"template", "-m", model(), "--messages", "-"},
                           R"({"messages": [{"role": "user", "content": "Q"}], "add_generation_prompt": true})");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "<|bos|><|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n<think>\n");
}

TEST_F(CliTemplate, SampleConversationByDefault) {
  const RunResult r = zinc({"template", "-m", model()});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "<|bos|><|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHello!<|im_end|>\n");
}

TEST_F(CliTemplate, TemplateFileOverridesTheModels) {
  write_text(dir.file("t.jinja"), "[{{ bos_token }}]{% for m in messages %}{{ m.role|upper }}: {{ m.content }};{% endfor %}");
  RunResult r = zinc({"template", "-m", model(), "--template", dir.file("t.jinja").string(), "--messages", messages()});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "[<|bos|>]SYSTEM: Be brief.;USER: Hi;");
  // Without a model there are no BOS/EOS texts.
  r = zinc({"template", "--template", dir.file("t.jinja").string(), "--messages", messages()});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "[]SYSTEM: Be brief.;USER: Hi;");
}

TEST_F(CliTemplate, JsonOutput) {
  const RunResult r = zinc({"template", "-m", model(), "--messages", messages(), "--add-generation-prompt", "--json"});
  ASSERT_EQ(r.status, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["prompt"], "<|bos|><|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n");
  EXPECT_EQ(j["template"], "gguf");
  EXPECT_EQ(j["bos_token"], "<|bos|>");
  EXPECT_EQ(j["eos_token"], "<|eos|>");
  EXPECT_EQ(j["add_generation_prompt"], true);
  EXPECT_TRUE(j["enable_thinking"].is_null());
  EXPECT_EQ(j["output_format"], "hermes");
  EXPECT_EQ(j["opens_reasoning"], true);
}

TEST_F(CliTemplate, Errors) {
  write_bytes(dir.file("none.gguf"), model_gguf(nullptr));
  RunResult r = zinc({"template", "-m", dir.file("none.gguf").string()});
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("no chat template (tokenizer.chat_template is missing); give one with --template FILE"), std::string::npos)
      << r.err;

  write_text(dir.file("bad.jinja"), "{% for m in messages %}\n{{ m | nofilter }}{% endfor %}");
  r = zinc({"template", "--template", dir.file("bad.jinja").string(), "--messages", messages()});
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, "error: " + dir.file("bad.jinja").string() + ":2:6: unknown filter 'nofilter' for an object\n");
  EXPECT_EQ(r.out, "");

  write_text(dir.file("raise.jinja"), "{{ raise_exception('Only user and assistant roles are supported') }}");
  r = zinc({"template", "--template", dir.file("raise.jinja").string()});
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("the template raised an error: Only user and assistant roles are supported"), std::string::npos) << r.err;

  r = zinc({"template", "-m", model(), "--messages", "-"}, "{not json");
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, "error: stdin: not valid JSON (expected an array of messages or an object with \"messages\")\n");

  // 100,000 levels of nesting crashed the conversion into template values; now a clear error.
  const std::string deep = R"({"messages": [{"role": "user", "content": "Q"}], "x": )" + std::string(100000, '[') +
                           std::string(100000, ']') + "}";
  r = zinc({"template", "-m", model(), "--messages", "-"}, deep);
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, "error: stdin: the JSON nests arrays and objects more than 128 levels deep\n");

  r = zinc({"template"});
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("needs a model (-m MODEL.gguf) or a template file (--template FILE)"), std::string::npos) << r.err;
}

}  // namespace
