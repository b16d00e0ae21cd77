// The Anthropic Messages layer on hand-written requests and answers: content blocks, tools and tool
// results become the conversation the chat template sees; malformed or unsupported requests are a 400
// naming the field, in Anthropic's error shape; an answer with reasoning, text and tool calls becomes
// the content blocks Anthropic defines, whole or as its stream of events in order.
#include <gtest/gtest.h>

#include "server/anthropic.h"

namespace zinc::server {
namespace {

using nlohmann::json;

MessagesRequest parse(const std::string& body, bool count_only = false) {
  return parse_messages_request(json::parse(body), sample::SamplerParams::chat(), count_only);
}

void expect_400(const std::string& body, const std::string& field) {
  try {
    parse(body);
    FAIL() << "accepted: " << body;
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400) << body;
    EXPECT_NE(std::string(e.what()).find("'" + field), std::string::npos) << e.what();
    const auto j = anthropic_error_json(e);
    EXPECT_EQ(j["type"], "error");
    EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  }
}

TEST(AnthropicRequest, BlocksToolsAndSettingsBecomeTheConversation) {
  const auto r = parse(R"({"model": "m", "max_tokens": 9, "system": [{"type": "text", "text": "Be brief."}],
      "temperature": 0.5, "top_p": 0.9, "top_k": 7, "stop_sequences": ["END"], "stream": true,
      "thinking": {"type": "enabled", "budget_tokens": 2048},
      "tools": [{"name": "weather", "description": "Weather", "input_schema": {"type": "object"}}],
      "messages": [
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": "x"},
                                          {"type": "text", "text": "Looking."},
                                          {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Oslo"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "cold"}]},
                                     {"type": "tool_result", "tool_use_id": "toolu_2", "content": "bad", "is_error": true},
                                     {"type": "text", "text": "and?"}]}]})");
  EXPECT_TRUE(r.stream);
  const auto& c = r.chat;
  EXPECT_EQ(c.max_tokens, 9);
  EXPECT_EQ(c.stop, std::vector<std::string>{"END"});
  EXPECT_FLOAT_EQ(c.sampling.temperature, 0.5f);
  EXPECT_EQ(c.sampling.top_k, 7);
  EXPECT_EQ(c.enable_thinking, std::optional<bool>(true));
  ASSERT_EQ(c.messages.size(), 6u) << c.messages.dump();
  EXPECT_EQ(c.messages[0], ordered_json({{"role", "system"}, {"content", "Be brief."}}));
  EXPECT_EQ(c.messages[1]["content"], "a\nb");
  EXPECT_EQ(c.messages[2]["content"], "Looking.");  // the earlier thinking is dropped
  EXPECT_EQ(c.messages[2]["tool_calls"][0]["id"], "toolu_1");
  EXPECT_EQ(c.messages[2]["tool_calls"][0]["function"]["arguments"], ordered_json({{"city", "Oslo"}}));
  EXPECT_EQ(c.messages[3], ordered_json({{"role", "tool"}, {"content", "cold"}, {"tool_call_id", "toolu_1"}}));
  EXPECT_EQ(c.messages[4]["content"], "Error: bad");
  EXPECT_EQ(c.messages[5], ordered_json({{"role", "user"}, {"content", "and?"}}));
  EXPECT_EQ(c.tools[0]["function"]["name"], "weather");
  EXPECT_EQ(c.tools[0]["function"]["parameters"], ordered_json({{"type", "object"}}));
  EXPECT_EQ(parse(R"({"max_tokens": 1, "thinking": {"type": "disabled"}, "messages": [{"role": "user", "content": "x"}]})")
                .chat.enable_thinking,
            std::optional<bool>(false));
  // tool_choice none hides the tools; count_tokens needs no max_tokens.
  const auto none = parse(R"({"max_tokens": 1, "tool_choice": {"type": "none"}, "tools": [{"name": "f", "input_schema": {}}],
                             "messages": [{"role": "user", "content": "x"}]})");
  EXPECT_TRUE(none.chat.tools.is_null());
  EXPECT_FALSE(parse(R"({"messages": [{"role": "user", "content": "x"}]})", true).has_max_tokens);
}

TEST(AnthropicRequest, MalformedOrUnsupportedIsA400NamingTheField) {
  const std::string msg = R"("messages": [{"role": "user", "content": "x"}])";
  expect_400("{" + msg + "}", "max_tokens");
  expect_400(R"({"max_tokens": 0, )" + msg + "}", "max_tokens");
  expect_400(R"({"max_tokens": 1, "messages": []})", "messages");
  expect_400(R"({"max_tokens": 1, "messages": [{"role": "system", "content": "x"}]})", "messages[0].role");
  expect_400(R"({"max_tokens": 1, "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]})",
             "messages[0].content[0]");
  expect_400(R"({"max_tokens": 1, "messages": [{"role": "user", "content": [{"type": "tool_use", "name": "f"}]}]})",
             "messages[0].content[0].type");
  expect_400(R"({"max_tokens": 1, "messages": [{"role": "assistant", "content": [{"type": "tool_use", "name": "f", "input": 3}]}]})",
             "messages[0].content[0].input");
  expect_400(R"({"max_tokens": 1, "tool_choice": {"type": "any"}, )" + msg + "}", "tool_choice");
  expect_400(R"({"max_tokens": 1, "tools": [{"type": "web_search_20250305", "name": "web_search"}], )" + msg + "}", "tools[0]");
  expect_400(R"({"max_tokens": 1, "thinking": {"type": "maybe"}, )" + msg + "}", "thinking.type");
  expect_400(R"({"max_tokens": 1, "stop_sequences": "END", )" + msg + "}", "stop_sequences");
  expect_400(R"({"max_tokens": 1, "stream": "yes", )" + msg + "}", "stream");
  expect_400(R"({"max_tokens": 1, "system": 5, )" + msg + "}", "system");
  // A block whose type is not a string (a fuzzer finding: the JSON library's type error escaped).
  expect_400(R"({"max_tokens": 1, "system": [{"type": {"type": "object"}}], )" + msg + "}", "system");
  expect_400(R"({"max_tokens": 1, "messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t",
             "content": [{"type": 7, "text": "x"}]}]}]})", "messages[0].content[0].content");
}

CompletionResult answer() {
  CompletionResult c;
  c.id = "msg_abc";
  c.model = "m";
  c.gen.prompt_tokens = 11;
  c.gen.tokens = {1, 2, 3};
  c.gen.reason = runtime::StopReason::EndOfGeneration;
  return c;
}

TEST(AnthropicResponse, ContentBlocksStopReasonsAndErrors) {
  CompletionResult c = answer();
  c.message.reasoning = "think";
  c.message.content = "hi";
  c.message.tool_calls.push_back({"weather", ordered_json({{"city", "Oslo"}})});
  const auto m = message_json(c, {});
  EXPECT_EQ(m["type"], "message");
  EXPECT_EQ(m["content"][0], ordered_json({{"type", "thinking"}, {"thinking", "think"}, {"signature", ""}}));
  EXPECT_EQ(m["content"][1], ordered_json({{"type", "text"}, {"text", "hi"}}));
  EXPECT_EQ(m["content"][2]["type"], "tool_use");
  EXPECT_EQ(m["content"][2]["id"], "toolu_abc_0");
  EXPECT_EQ(m["content"][2]["input"], ordered_json({{"city", "Oslo"}}));
  EXPECT_EQ(m["stop_reason"], "tool_use");
  EXPECT_EQ(m["usage"], ordered_json({{"input_tokens", 11}, {"output_tokens", 3}}));
  CompletionResult s = answer();
  s.gen.reason = runtime::StopReason::StopString;
  s.gen.stop_index = 1;
  const auto stopped = message_json(s, {"a", "END"});
  EXPECT_EQ(stopped["stop_reason"], "stop_sequence");
  EXPECT_EQ(stopped["stop_sequence"], "END");
  EXPECT_EQ(stopped["content"], ordered_json::array({{{"type", "text"}, {"text", ""}}}));  // an empty answer: one empty text
  s.gen.reason = runtime::StopReason::Length;
  EXPECT_EQ(message_json(s, {})["stop_reason"], "max_tokens");
  EXPECT_EQ(anthropic_error_json(ApiError(401, "no"))["error"]["type"], "authentication_error");
  EXPECT_EQ(anthropic_error_json(ApiError(503, "busy"))["error"]["type"], "overloaded_error");
  EXPECT_EQ(anthropic_error_json(ApiError(500, "oops"))["error"]["type"], "api_error");
}

TEST(AnthropicStream, EventsInOrderWithBlockIndices) {
  // Hermes-format output: reasoning, then text, then a tool call.
  CompletionResult c = answer();
  chat::OutputParserOptions p;
  p.format = chat::OutputFormat::Hermes;
  MessagesStream s(c, p, 11);
  std::vector<MessagesStream::Event> ev = s.start();
  for (const char* piece : {"<think>hm", "m</think>", "Hel", "lo", "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call>"}) {
    for (auto& e : s.push(piece)) ev.push_back(std::move(e));
  }
  for (auto& e : s.finish(c.gen, {})) ev.push_back(std::move(e));
  std::string names;
  for (const auto& [name, data] : ev) {
    names += name + (data.contains("index") ? std::to_string(data["index"].get<int>()) : "") + " ";
    EXPECT_EQ(data["type"], name);
  }
  EXPECT_EQ(names,
            "message_start ping content_block_start0 content_block_delta0 content_block_delta0 content_block_delta0 "
            "content_block_stop0 content_block_start1 content_block_delta1 content_block_delta1 content_block_stop1 "
            "content_block_start2 content_block_delta2 content_block_stop2 message_delta message_stop ")
      << names;
  EXPECT_EQ(ev[2].second["content_block"]["type"], "thinking");
  EXPECT_EQ(ev[5].second["delta"]["type"], "signature_delta");
  EXPECT_EQ(ev[8].second["delta"], ordered_json({{"type", "text_delta"}, {"text", "Hel"}}));
  EXPECT_EQ(ev[11].second["content_block"]["type"], "tool_use");
  EXPECT_EQ(ev[11].second["content_block"]["input"], ordered_json::object());
  EXPECT_EQ(ev[12].second["delta"], ordered_json({{"type", "input_json_delta"}, {"partial_json", "{\"x\":1}"}}));
  EXPECT_EQ(ev[14].second["delta"]["stop_reason"], "tool_use");
  EXPECT_EQ(ev[14].second["usage"]["output_tokens"], 3);
  EXPECT_EQ(c.message.content, "Hello");
}

}  // namespace
}  // namespace zinc::server
