// The OpenAI request parser and response writers, on hand-written requests: every field the server
// honours lands where it should, every malformed one is a 400 naming the parameter, and responses
// carry the fields (and nulls) the API defines.
#include <gtest/gtest.h>

#include "sample/json_schema.h"
#include "server/openai.h"

namespace zinc::server {
namespace {

using json = nlohmann::ordered_json;  // as the server parses bodies: keys in their order

CompletionRequest chat(const std::string& body) {
  return parse_chat_request(json::parse(body), sample::SamplerParams::chat());
}

void expect_400(const std::string& body, const std::string& param, bool is_chat = true) {
  try {
    if (is_chat) chat(body);
    else parse_completion_request(json::parse(body), sample::SamplerParams::chat());
    FAIL() << "accepted: " << body;
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400) << body;
    EXPECT_EQ(e.body()["error"]["param"], param.empty() ? ordered_json() : ordered_json(param)) << e.what();
    EXPECT_EQ(e.body()["error"]["type"], "invalid_request_error");
  }
}

TEST(OpenAiRequest, ReadsEveryHonouredField) {
  const auto r = chat(R"({"model": "m", "messages": [{"role": "developer", "content": "be brief"},
      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}],
      "max_completion_tokens": 7, "temperature": 0.5, "top_p": 0.9, "top_k": 5, "min_p": 0.1,
      "presence_penalty": 0.5, "frequency_penalty": -0.5, "repetition_penalty": 1.1, "seed": 42,
      "stop": "END", "stream": true, "stream_options": {"include_usage": true}, "logprobs": true, "top_logprobs": 2,
      "logit_bias": {"15": -100}, "chat_template_kwargs": {"enable_thinking": false, "x": 1},
      "reasoning_effort": "low", "unknown_field": {"ignored": true}})");
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.messages[0]["role"], "system");  // developer is the system role
  EXPECT_EQ(r.messages[1]["content"], "a\nb");
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 0.9f);
  EXPECT_EQ(r.sampling.top_k, 5);
  EXPECT_FLOAT_EQ(r.sampling.min_p, 0.1f);
  EXPECT_FLOAT_EQ(r.sampling.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(r.sampling.frequency_penalty, -0.5f);
  EXPECT_FLOAT_EQ(r.sampling.repeat_penalty, 1.1f);
  EXPECT_EQ(r.sampling.seed, 42u);
  EXPECT_EQ(r.stop, std::vector<std::string>{"END"});
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 2);
  ASSERT_EQ(r.sampling.logit_bias.size(), 1u);
  EXPECT_EQ(r.sampling.logit_bias[0].first, 15);
  EXPECT_EQ(r.enable_thinking, false);
  EXPECT_EQ(r.template_vars["x"], 1);
  EXPECT_EQ(r.template_vars["reasoning_effort"], "low");
}

TEST(OpenAiRequest, DefaultsComeFromTheServer) {
  auto defaults = sample::SamplerParams::chat();
  defaults.temperature = 0.3f;
  const auto r = parse_chat_request(json::parse(R"({"messages": [{"role": "user", "content": "hi"}]})"), defaults);
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.3f);
  EXPECT_EQ(r.max_tokens, -1);
  EXPECT_FALSE(r.stream);
  EXPECT_TRUE(r.tools.is_null());
  const auto c = parse_completion_request(json::parse(R"({"prompt": ["once"]})"), defaults);
  EXPECT_EQ(c.prompt, "once");
  EXPECT_EQ(c.max_tokens, 16);  // the completions API's default
}

TEST(OpenAiRequest, ToolsAndToolResults) {
  const auto r = chat(R"({"messages": [{"role": "user", "content": "weather?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
        "function": {"name": "get", "arguments": "{\"city\": \"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "sunny"}],
      "tools": [{"type": "function", "function": {"name": "get", "parameters": {"type": "object"}}}]})");
  EXPECT_EQ(r.tools.size(), 1u);
  // Templates read arguments as an object; the API sends a JSON string.
  EXPECT_EQ(r.messages[1]["tool_calls"][0]["function"]["arguments"]["city"], "Paris");
  EXPECT_EQ(r.messages[1]["content"], "");
  EXPECT_EQ(r.messages[2]["tool_call_id"], "c1");
  const auto none = chat(R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "none",
      "tools": [{"type": "function", "function": {"name": "get"}}]})");
  EXPECT_TRUE(none.tools.is_null());  // tool_choice none: the model is not told about them
}

TEST(OpenAiRequest, MalformedFieldsAre400sNamingTheParameter) {
  expect_400(R"([1, 2])", "");
  expect_400(R"({})", "messages");
  expect_400(R"({"messages": []})", "messages");
  expect_400(R"({"messages": [{"role": "user"}], "model": 5})", "model");
  expect_400(R"({"messages": [{"content": "x"}]})", "messages[0].role");
  expect_400(R"({"messages": [{"role": "wizard", "content": "x"}]})", "messages[0].role");
  expect_400(R"({"messages": [{"role": "user", "content": 7}]})", "messages[0].content");
  expect_400(R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", "messages[0].content[0]");
  const std::string m = R"("messages": [{"role": "user", "content": "x"}])";
  expect_400("{" + m + R"(, "temperature": 3})", "temperature");
  // Whole numbers beyond int64, as floats or unsigned integers (a fuzzer finding): out of range, not
  // converted.
  expect_400("{" + m + R"(, "max_tokens": 5.44444e53})", "max_tokens");
  expect_400("{" + m + R"(, "max_tokens": 18446744073709551615})", "max_tokens");
  expect_400("{" + m + R"(, "top_k": -9.3e18})", "top_k");
  expect_400("{" + m + R"(, "temperature": "hot"})", "temperature");
  expect_400("{" + m + R"(, "top_p": 1.5})", "top_p");
  expect_400("{" + m + R"(, "top_k": 2.5})", "top_k");
  expect_400("{" + m + R"(, "max_tokens": -3})", "max_tokens");
  expect_400("{" + m + R"(, "n": 2})", "n");
  // A tool whose type is not a string (a fuzzer finding: the check threw the JSON library's type error).
  expect_400("{" + m + R"(, "tools": [{"type": {"name": "f"}}]})", "tools[0]");
  expect_400("{" + m + R"(, "tools": [{"function": {"name": "f"}}]})", "tools[0]");
  expect_400("{" + m + R"(, "stop": [1]})", "stop");
  expect_400("{" + m + R"(, "stop": [""]})", "stop");
  expect_400("{" + m + R"(, "stream": "yes"})", "stream");
  expect_400("{" + m + R"(, "seed": "x"})", "seed");
  expect_400("{" + m + R"(, "top_logprobs": 21})", "top_logprobs");
  expect_400("{" + m + R"(, "logit_bias": {"abc": 1}})", "logit_bias");
  expect_400("{" + m + R"(, "tools": [{"type": "retrieval"}]})", "tools[0]");
  expect_400("{" + m + R"(, "tool_choice": "always"})", "tool_choice");
  // Constraints that cannot be enforced are refused, naming the field.
  expect_400("{" + m + R"(, "response_format": {"type": "json_schema"}})", "response_format.json_schema");
  expect_400("{" + m + R"(, "response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "string", "pattern": "a+"}}}})",
             "response_format.json_schema.schema");
  expect_400("{" + m + R"(, "response_format": {"type": "yaml"}})", "response_format");
  expect_400("{" + m + R"(, "grammar": "root ::= foo"})", "grammar");
  expect_400("{" + m + R"(, "grammar": 5})", "grammar");
  expect_400("{" + m + R"(, "json_schema": 5})", "json_schema");
  expect_400("{" + m + R"(, "grammar": "root ::= [a]", "json_schema": {}})", "grammar");
  expect_400("{" + m + R"(, "tool_choice": "required"})", "tool_choice");  // no tools
  expect_400("{" + m + R"(, "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": {"type": "function", "function": {"name": "g"}}})",
             "tool_choice");
  expect_400("{" + m + R"(, "tool_choice": {"type": "function"}})", "tool_choice");
  expect_400("{" + m + R"(, "chat_template_kwargs": {"enable_thinking": "no"}})", "chat_template_kwargs.enable_thinking");
  expect_400("{" + m + R"(, "reasoning_effort": "extreme"})", "reasoning_effort");
  expect_400("{" + m + R"(, "thinking_budget_tokens": -2})", "thinking_budget_tokens");
  expect_400("{" + m + R"(, "thinking_budget_tokens": 1.5})", "thinking_budget_tokens");
  expect_400("{" + m + R"(, "thinking_budget_tokens": 4294967296})", "thinking_budget_tokens");
  expect_400(R"({"prompt": 5})", "prompt", false);
  expect_400(R"({"prompt": ["a", "b"]})", "prompt", false);
  expect_400(R"({"max_tokens": 5})", "prompt", false);
}

TEST(OpenAiRequest, OutputConstraintsBecomeGrammars) {
  const auto grammar_of = [](const std::string& extra) {
    return chat(R"({"messages": [{"role": "user", "content": "x"}])" + extra + "}").grammar;
  };
  EXPECT_EQ(grammar_of(""), "");
  EXPECT_EQ(grammar_of(R"(, "response_format": {"type": "text"})"), "");
  EXPECT_EQ(grammar_of(R"(, "response_format": {"type": "json_object"})"), sample::json_value_gbnf(true));
  const std::string schema = R"({"type": "object", "properties": {"b": {"type": "string"}, "a": {"type": "integer"}}, "required": ["b", "a"]})";
  const std::string want = sample::json_schema_to_gbnf(nlohmann::ordered_json::parse(schema));
  EXPECT_EQ(grammar_of(R"(, "response_format": {"type": "json_schema", "json_schema": {"name": "x", "strict": true, "schema": )" + schema + "}}"), want);
  EXPECT_EQ(grammar_of(R"(, "json_schema": )" + schema), want);
  // The properties keep the request's order: b, then a.
  EXPECT_NE(want.find("root-rest-0-0 ::= root-b-kv"), std::string::npos) << want;
  EXPECT_EQ(grammar_of(R"(, "grammar": "root ::= [a-z]+")"), "root ::= [a-z]+");
  const auto forced = chat(R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f"}}],
                              "tool_choice": {"type": "function", "function": {"name": "f"}}})");
  EXPECT_EQ(forced.tool_choice, "f");
  const auto any = chat(R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f"}}],
                           "tool_choice": "required", "parallel_tool_calls": false})");
  EXPECT_EQ(any.tool_choice, "required");
  EXPECT_FALSE(any.parallel_tool_calls);
}

TEST(OpenAiRequest, ThinkingBudgetAndEffortMakeOnePlan) {
  const auto req = [](const std::string& extra) {
    return parse_chat_request(json::parse(R"({"messages": [{"role": "user", "content": "x"}])" + extra + "}"),
                              sample::SamplerParams::chat());
  };
  // Nothing asked: the server's defaults.
  auto p = plan_thinking(req(""), false, std::nullopt, -1);
  EXPECT_EQ(p.enable_thinking, std::nullopt);
  EXPECT_EQ(p.budget, -1);
  p = plan_thinking(req(""), false, true, 300);
  EXPECT_EQ(p.enable_thinking, true);
  EXPECT_EQ(p.budget, 300);
  // An explicit budget wins over the server's and over an effort.
  p = plan_thinking(req(R"(, "thinking_budget_tokens": 0, "reasoning_effort": "high")"), false, std::nullopt, 300);
  EXPECT_EQ(p.budget, 0);
  p = plan_thinking(req(R"(, "thinking_budget_tokens": -1)"), false, std::nullopt, 300);
  EXPECT_EQ(p.budget, -1);
  // Efforts, for a template that does not read reasoning_effort.
  EXPECT_EQ(plan_thinking(req(R"(, "reasoning_effort": "low")"), false, std::nullopt, -1).budget, 1024);
  EXPECT_EQ(plan_thinking(req(R"(, "reasoning_effort": "medium")"), false, std::nullopt, -1).budget, 8192);
  EXPECT_EQ(plan_thinking(req(R"(, "reasoning_effort": "high")"), false, std::nullopt, 500).budget, -1);
  p = plan_thinking(req(R"(, "reasoning_effort": "minimal")"), false, true, -1);
  EXPECT_EQ(p.enable_thinking, false);
  // ... unless the request says enable_thinking itself.
  p = plan_thinking(req(R"(, "reasoning_effort": "none", "chat_template_kwargs": {"enable_thinking": true})"), false,
                    std::nullopt, -1);
  EXPECT_EQ(p.enable_thinking, true);
  // A template that reads reasoning_effort (GPT-OSS's) gets it as a variable and no budget from it.
  const auto low = req(R"(, "reasoning_effort": "low")");
  EXPECT_EQ(low.template_vars["reasoning_effort"], "low");
  EXPECT_EQ(plan_thinking(low, true, std::nullopt, -1).budget, -1);
  EXPECT_EQ(plan_thinking(req(R"(, "reasoning_effort": "minimal")"), true, std::nullopt, -1).enable_thinking, std::nullopt);
}

TEST(OpenAiResponse, ChatCompletionFields) {
  CompletionResult c;
  c.id = "chatcmpl-abcdefgh12345678";
  c.model = "m";
  c.created = 1700000000;
  c.gen.prompt_tokens = 10;
  c.gen.cached_tokens = 4;
  c.gen.tokens = {1, 2, 3};
  c.gen.reason = runtime::StopReason::Length;
  c.message.content = "hi";
  c.message.reasoning = "thinking";
  auto j = chat_completion_json(c, false);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["choices"][0]["message"]["content"], "hi");
  EXPECT_EQ(j["choices"][0]["message"]["reasoning_content"], "thinking");
  EXPECT_TRUE(j["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(j["usage"]["prompt_tokens"], 10);
  EXPECT_EQ(j["usage"]["completion_tokens"], 3);
  EXPECT_EQ(j["usage"]["total_tokens"], 13);
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 4);
  // A tool call: content null when there is no text, finish_reason tool_calls, arguments as a string.
  c.message = {};
  c.message.tool_calls.push_back({"get", ordered_json{{"city", "Paris"}}});
  c.gen.reason = runtime::StopReason::EndOfGeneration;
  j = chat_completion_json(c, false);
  EXPECT_TRUE(j["choices"][0]["message"]["content"].is_null());
  EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls");
  const auto& call = j["choices"][0]["message"]["tool_calls"][0];
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["function"]["name"], "get");
  EXPECT_EQ(ordered_json::parse(call["function"]["arguments"].get<std::string>())["city"], "Paris");
  // Stream deltas: tool calls carry their index.
  const auto delta = chat_delta(c.message, 2, "call_x_");
  EXPECT_EQ(delta["tool_calls"][0]["index"], 2);
  EXPECT_EQ(delta["tool_calls"][0]["id"], "call_x_2");
  const auto chunk = chat_chunk(c, delta, std::nullopt);
  EXPECT_EQ(chunk["object"], "chat.completion.chunk");
  EXPECT_TRUE(chunk["choices"][0]["finish_reason"].is_null());
  const auto usage = usage_chunk(c, true);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 3);
}

TEST(OpenAiStream, ToolCallsStreamAsIndexedDeltasAndFinishWithToolCalls) {
  // A Hermes-format answer with reasoning, text and two tool calls, cut into small pieces.
  const std::string text =
      "<think>need weather</think>Let me check.<tool_call>\n{\"name\": \"get\", \"arguments\": {\"city\": "
      "\"Paris\"}}\n</tool_call><tool_call>{\"name\": \"get\", \"arguments\": {\"city\": \"Rome\"}}</tool_call>";
  CompletionResult c;
  c.id = "chatcmpl-0123456789abcdef";
  c.model = "m";
  chat::OutputParserOptions po;
  po.format = chat::OutputFormat::Hermes;
  StreamTranslator st(c, true, po);
  std::vector<ordered_json> chunks = st.start();
  for (size_t i = 0; i < text.size(); i += 3) {
    for (auto& ch : st.push(std::string_view(text).substr(i, 3))) chunks.push_back(ch);
  }
  runtime::GenerateResult gen;
  gen.reason = runtime::StopReason::EndOfGeneration;
  gen.tokens = {1, 2, 3};
  for (auto& ch : st.finish(gen, true)) chunks.push_back(ch);

  ASSERT_GE(chunks.size(), 5u);
  EXPECT_EQ(chunks[0]["choices"][0]["delta"]["role"], "assistant");
  std::string reasoning, content;
  std::vector<ordered_json> calls;
  int finishes = 0;
  for (const auto& ch : chunks) {
    if (ch["choices"].empty()) continue;
    const auto& d = ch["choices"][0]["delta"];
    if (d.contains("reasoning_content")) reasoning += d["reasoning_content"].get<std::string>();
    if (d.contains("content")) content += d["content"].get<std::string>();
    if (d.contains("tool_calls")) {
      for (const auto& call : d["tool_calls"]) calls.push_back(call);
    }
    if (!ch["choices"][0]["finish_reason"].is_null()) {
      ++finishes;
      EXPECT_EQ(ch["choices"][0]["finish_reason"], "tool_calls");
    }
  }
  EXPECT_EQ(reasoning, "need weather");
  EXPECT_EQ(content, "Let me check.");
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0]["index"], 0);
  EXPECT_EQ(calls[1]["index"], 1);
  EXPECT_NE(calls[0]["id"], calls[1]["id"]);
  EXPECT_EQ(calls[1]["function"]["name"], "get");
  EXPECT_EQ(ordered_json::parse(calls[1]["function"]["arguments"].get<std::string>())["city"], "Rome");
  EXPECT_EQ(finishes, 1);
  EXPECT_EQ(chunks.back()["usage"]["completion_tokens"], 3);  // the usage chunk comes last
  EXPECT_TRUE(chunks.back()["choices"].empty());
  // No tag ever leaks into the content deltas.
  for (const auto& ch : chunks) EXPECT_EQ(ch.dump().find("tool_call>"), std::string::npos) << ch.dump();
}

TEST(OpenAiResponse, StopReasonsMapToFinishReasons) {
  runtime::GenerateResult r;
  for (auto [reason, want] : std::vector<std::pair<runtime::StopReason, std::string>>{
           {runtime::StopReason::EndOfGeneration, "stop"}, {runtime::StopReason::StopString, "stop"},
           {runtime::StopReason::Length, "length"}, {runtime::StopReason::ContextFull, "length"}}) {
    r.reason = reason;
    EXPECT_EQ(finish_reason(r, {}), want);
  }
  EXPECT_EQ(random_id("cmpl-").rfind("cmpl-", 0), 0u);
  EXPECT_NE(random_id("x"), random_id("x"));
}


// POST /v1/embeddings: the input's forms, the encodings and zinc's and llama.cpp's extra fields.
TEST(EmbeddingRequest, ReadsEveryForm) {
  EmbeddingRequest r = parse_embedding_request(json::parse(R"({"model": "e", "input": "hello"})"));
  EXPECT_EQ(r.model, "e");
  EXPECT_EQ(r.texts, std::vector<std::string>{"hello"});
  EXPECT_TRUE(r.tokens.empty());
  EXPECT_FALSE(r.base64);
  EXPECT_TRUE(r.normalize);
  r = parse_embedding_request(json::parse(R"({"input": ["a", "b"], "encoding_format": "base64", "dimensions": 8,
                                               "pooling": "last", "normalize": false})"));
  EXPECT_EQ(r.texts, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(r.base64);
  EXPECT_EQ(r.dimensions, 8);
  EXPECT_EQ(r.pooling, "last");
  EXPECT_FALSE(r.normalize);
  r = parse_embedding_request(json::parse(R"({"input": [5, 6, 7]})"));
  EXPECT_EQ(r.tokens, (std::vector<std::vector<int32_t>>{{5, 6, 7}}));
  r = parse_embedding_request(json::parse(R"({"input": [[1], [2, 3]], "embd_normalize": -1})"));
  EXPECT_EQ(r.tokens, (std::vector<std::vector<int32_t>>{{1}, {2, 3}}));
  EXPECT_FALSE(r.normalize);
  EXPECT_EQ(r.size(), 2u);
}

TEST(EmbeddingRequest, MalformedFieldsAre400sNamingTheParameter) {
  const auto param = [](const std::string& body) {
    try {
      parse_embedding_request(json::parse(body));
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 400) << body;
      return e.body()["error"]["param"].is_null() ? std::string() : e.body()["error"]["param"].get<std::string>();
    }
    return std::string("(accepted)");
  };
  EXPECT_EQ(param(R"([1])"), "");
  EXPECT_EQ(param(R"({})"), "input");
  EXPECT_EQ(param(R"({"input": ""})"), "input");
  EXPECT_EQ(param(R"({"input": []})"), "input");
  EXPECT_EQ(param(R"({"input": 5})"), "input");
  EXPECT_EQ(param(R"({"input": ["a", ""]})"), "input[1]");
  EXPECT_EQ(param(R"({"input": ["a", [1]]})"), "input[1]");
  EXPECT_EQ(param(R"({"input": [[1], []]})"), "input[1]");
  EXPECT_EQ(param(R"({"input": [1, -2]})"), "input");
  EXPECT_EQ(param(R"({"input": [1, 2.5]})"), "input");
  EXPECT_EQ(param(R"({"input": [4294967296]})"), "input");
  EXPECT_EQ(param(R"({"input": "a", "model": {}})"), "model");
  EXPECT_EQ(param(R"({"input": "a", "encoding_format": "int8"})"), "encoding_format");
  EXPECT_EQ(param(R"({"input": "a", "encoding_format": 1})"), "encoding_format");
  EXPECT_EQ(param(R"({"input": "a", "dimensions": 0})"), "dimensions");
  EXPECT_EQ(param(R"({"input": "a", "dimensions": "8"})"), "dimensions");
  EXPECT_EQ(param(R"({"input": "a", "pooling": "max"})"), "pooling");
  EXPECT_EQ(param(R"({"input": "a", "normalize": 1})"), "normalize");
  EXPECT_EQ(param(R"({"input": "a", "embd_normalize": 1})"), "embd_normalize");
  std::string many = R"({"input": [)";
  for (int i = 0; i < 2049; ++i) many += std::string(i ? "," : "") + R"("x")";
  EXPECT_EQ(param(many + "]}"), "input");
}

TEST(EmbeddingRequest, Base64IsTheFloatsLittleEndian) {
  // 1.0f = 00 00 80 3f, -2.0f = 00 00 00 c0: "AACAPwAAAMA=".
  const auto j = embeddings_json({{1.0f, -2.0f}}, true, "m", 3);
  EXPECT_EQ(j["data"][0]["embedding"], "AACAPwAAAMA=");
  EXPECT_EQ(j["usage"]["prompt_tokens"], 3);
  const auto f = embeddings_json({{1.0f}, {0.5f}}, false, "m", 2);
  EXPECT_EQ(f["data"][1]["index"], 1);
  EXPECT_EQ(f["data"][1]["embedding"][0], 0.5);
  EXPECT_EQ(f["object"], "list");
}

}  // namespace
}  // namespace zinc::server
