// Chat prompts from GGUF metadata: the template and BOS/EOS texts come from the file (written here by the
// independent test encoder in raw_gguf.h), the context follows transformers' apply_chat_template, and the
// request JSON is read as an OpenAI-style conversation. Expected prompts are written by hand.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "chat/chat_template.h"
#include "gguf/reader.h"
#include "raw_gguf.h"

namespace {

using nlohmann::ordered_json;
using zinc::chat::ChatRequest;
using zinc::chat::ChatTemplate;
using namespace zinc::test;

constexpr const char* kChatml =
    "{{ bos_token }}{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if tools %}TOOLS={{ tools|length }}\n{% endif %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% if enable_thinking is defined and not enable_thinking %}"
    "<think>\n\n</think>\n\n{% else %}<think>\n{% endif %}{% endif %}";

// A vocabulary-only GGUF: five tokens, BOS = 1, EOS = 2, and optionally a chat template.
std::vector<uint8_t> tiny_gguf(const char* chat_template) {
  RawGguf g;
  g.header(0, chat_template ? 5 : 4);
  g.key("general.architecture", STR).str("llama");
  g.key("tokenizer.ggml.tokens", ARR).u32(STR).u64(5).str("<unk>").str("<|bos|>").str("<|eos|>").str("a").str("b");
  g.key("tokenizer.ggml.bos_token_id", U32).u32(1);
  g.key("tokenizer.ggml.eos_token_id", U32).u32(2);
  if (chat_template) g.key("tokenizer.chat_template", STR).str(chat_template);
  return g.b;
}

ordered_json messages() {
  return ordered_json::array({{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hi"}}});
}

TEST(ChatTemplate, FromGgufUsesItsTemplateAndTokens) {
  TempDir dir;
  write_bytes(dir.file("m.gguf"), tiny_gguf(kChatml));
  const auto file = zinc::gguf::File::open(dir.file("m.gguf"));
  const ChatTemplate t = ChatTemplate::from_gguf(file);
  EXPECT_EQ(t.bos_token(), "<|bos|>");
  EXPECT_EQ(t.eos_token(), "<|eos|>");
  ChatRequest r;
  r.messages = messages();
  EXPECT_EQ(t.render(r),
            "<|bos|><|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n");
  r.enable_thinking = false;
  r.tools = ordered_json::array({{{"type", "function"}, {"function", {{"name", "f"}}}}});
  EXPECT_EQ(t.render(r),
            "<|bos|><|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\nTOOLS=1\n"
            "<|im_start|>assistant\n<think>\n\n</think>\n\n");
  r.add_generation_prompt = false;
  EXPECT_EQ(t.render(r), "<|bos|><|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\nTOOLS=1\n");
}

TEST(ChatTemplate, MissingTemplateSaysWhatToDo) {
  TempDir dir;
  write_bytes(dir.file("m.gguf"), tiny_gguf(nullptr));
  const auto file = zinc::gguf::File::open(dir.file("m.gguf"));
  try {
    (void)ChatTemplate::from_gguf(file);
    FAIL() << "expected an error";
  } catch (const zinc::Error& e) {
    EXPECT_NE(std::string(e.what()).find("no chat template (tokenizer.chat_template is missing); give one with --template FILE"),
              std::string::npos)
        << e.what();
  }
  const auto [bos, eos] = zinc::chat::gguf_bos_eos(file);
  EXPECT_EQ(bos, "<|bos|>");
  EXPECT_EQ(eos, "<|eos|>");
}

TEST(ChatTemplate, ContextFollowsTransformers) {
  const ChatTemplate t("x", "<s>", "</s>");
  ChatRequest r;
  r.messages = messages();
  r.extra["reasoning_effort"] = "high";
  const ordered_json ctx = t.context(r);
  EXPECT_EQ(ctx.dump(), ordered_json({{"messages", messages()},
                                      {"tools", nullptr},
                                      {"add_generation_prompt", true},
                                      {"bos_token", "<s>"},
                                      {"eos_token", "</s>"},
                                      {"reasoning_effort", "high"}})
                            .dump());
  r.enable_thinking = true;
  EXPECT_EQ(t.context(r)["enable_thinking"], true);
}

TEST(ChatTemplate, TemplateErrorsNameTheTemplate) {
  try {
    ChatTemplate t("{% if %}", "", "", "my.jinja");
    FAIL() << "expected an error";
  } catch (const zinc::Error& e) {
    EXPECT_EQ(std::string(e.what()), "my.jinja:1:7: unexpected '%}': expected an expression");
  }
}

TEST(ChatRequest, FromJson) {
  const ChatRequest bare = ChatRequest::from_json(messages());
  EXPECT_EQ(bare.messages, messages());
  EXPECT_TRUE(bare.tools.is_null());
  const ChatRequest full = ChatRequest::from_json(ordered_json::parse(
      R"({"messages": [{"role": "user", "content": "x"}], "tools": [], "add_generation_prompt": false,
          "enable_thinking": false, "reasoning_effort": "low"})"));
  EXPECT_EQ(full.messages.size(), 1u);
  EXPECT_TRUE(full.tools.is_array());
  EXPECT_FALSE(full.add_generation_prompt);
  EXPECT_EQ(full.enable_thinking, std::optional<bool>(false));
  EXPECT_EQ(full.extra, ordered_json({{"reasoning_effort", "low"}}));
  for (const char* bad : {R"("text")", R"({"tools": []})", R"({"messages": {}})", R"({"messages": [], "tools": 3})",
                          R"({"messages": [], "enable_thinking": "no"})"}) {
    EXPECT_THROW(ChatRequest::from_json(ordered_json::parse(bad)), zinc::Error) << bad;
  }
}

TEST(ChatTemplate, PromptOpensReasoning) {
  using zinc::chat::prompt_opens_reasoning;
  EXPECT_TRUE(prompt_opens_reasoning("<|im_start|>assistant\n<think>\n"));
  EXPECT_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_FALSE(prompt_opens_reasoning("<think>a</think> then <|im_start|>assistant\n"));
  EXPECT_FALSE(prompt_opens_reasoning("no tags"));
}

// The shared templates of the target families, parsed from their files and rendered on a conversation
// with tools; the exact bytes are the oracle test's business, here it is that they load and render.
TEST(ChatTemplate, TargetTemplatesRender) {
  ZINC_REQUIRE_TESTDATA();
  const std::pair<const char*, bool> templates[] = {  // (name, renders tool definitions)
      {"Qwen-Qwen3-0.6B", true},       {"Qwen3.5-4B", true},          {"Qwen3-Coder", true},
      {"Qwen-QwQ-32B", true},          {"Qwen-Qwen2.5-7B-Instruct", true}, {"google-gemma-4-31B-it", true},
      {"openai-gpt-oss-120b", true},   {"meta-llama-Llama-3.1-8B-Instruct", true},
      {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", false}};
  for (const auto& [name, with_tools] : templates) {
    std::ifstream in(testdata_dir() / "templates" / (std::string(name) + ".jinja"));
    std::stringstream ss;
    ss << in.rdbuf();
    const ChatTemplate t(ss.str(), "<s>", "</s>", name);
    ChatRequest r;
    r.messages = ordered_json::array({{{"role", "user"}, {"content", "What's the weather?"}}});
    r.tools = ordered_json::parse(R"([{"type": "function", "function": {"name": "get_weather", "description": "Weather.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City"}}, "required": ["city"]}}}])");
    const std::string prompt = t.render(r);
    EXPECT_NE(prompt.find("What's the weather?"), std::string::npos) << name;
    EXPECT_EQ(prompt.find("get_weather") != std::string::npos, with_tools) << name;
  }
}

}  // namespace
