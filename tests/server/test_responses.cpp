// The Responses layer on hand-written requests and answers: input items become the conversation the chat
// template sees; what it does not support is a 400 naming the field; an answer with reasoning, text and
// function calls becomes the output items the API defines, whole or as its events in order.
#include <gtest/gtest.h>

#include "server/responses.h"

namespace zinc::server {
namespace {

using nlohmann::json;

ResponsesRequest parse(const std::string& body) {
  return parse_responses_request(json::parse(body), sample::SamplerParams::chat());
}

void expect_400(const std::string& body, const std::string& param) {
  try {
    parse(body);
    FAIL() << "accepted: " << body;
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400) << body;
    EXPECT_EQ(e.body()["error"]["param"], ordered_json(param)) << e.what();
  }
}

TEST(ResponsesRequest, ItemsBecomeTheConversation) {
  const auto r = parse(R"({"model": "m", "instructions": "Be brief.", "max_output_tokens": 9, "temperature": 0.5,
      "reasoning": {"effort": "low"}, "stream": true,
      "tools": [{"type": "function", "name": "weather", "description": "W", "parameters": {"type": "object"}}],
      "input": [{"role": "developer", "content": "rules"},
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]},
                {"type": "reasoning", "id": "rs_1", "summary": []},
                {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": "{\"city\": \"Oslo\"}"},
                {"type": "function_call", "call_id": "c2", "name": "weather", "arguments": "{\"city\": \"Rome\"}"},
                {"type": "function_call_output", "call_id": "c1", "output": "cold"},
                {"role": "assistant", "content": [{"type": "output_text", "text": "Done."}]}]})");
  EXPECT_TRUE(r.stream);
  const auto& c = r.chat;
  EXPECT_EQ(c.max_tokens, 9);
  EXPECT_EQ(c.template_vars["reasoning_effort"], "low");
  ASSERT_EQ(c.messages.size(), 6u) << c.messages.dump();
  EXPECT_EQ(c.messages[0], ordered_json({{"role", "system"}, {"content", "Be brief."}}));
  EXPECT_EQ(c.messages[1]["role"], "system");
  EXPECT_EQ(c.messages[2]["content"], "a\nb");
  EXPECT_EQ(c.messages[3]["tool_calls"].size(), 2u);  // two calls of one answer: one assistant message
  EXPECT_EQ(c.messages[3]["tool_calls"][1]["function"]["arguments"], ordered_json({{"city", "Rome"}}));
  EXPECT_EQ(c.messages[4], ordered_json({{"role", "tool"}, {"content", "cold"}, {"tool_call_id", "c1"}}));
  EXPECT_EQ(c.messages[5]["content"], "Done.");
  EXPECT_EQ(c.tools[0]["function"]["name"], "weather");
  EXPECT_EQ(parse(R"({"input": "hi"})").chat.messages, ordered_json::array({{{"role", "user"}, {"content", "hi"}}}));
}

TEST(ResponsesRequest, PreviousResponseAndStore) {
  const auto r = parse(R"({"input": "x", "previous_response_id": "resp_1", "instructions": "Be brief."})");
  EXPECT_EQ(r.previous_response_id, "resp_1");
  EXPECT_TRUE(r.store);  // the API's default
  EXPECT_EQ(r.instructions, 1u);
  EXPECT_EQ(r.chat.messages[0]["role"], "system");
  const auto s = parse(R"({"input": "x", "store": false})");
  EXPECT_FALSE(s.store);
  EXPECT_EQ(s.previous_response_id, "");
  EXPECT_EQ(s.instructions, 0u);
}

TEST(ResponseStore, KeepsTheMostRecentlyUsedWithinItsBounds) {
  ResponseStore store(3, 1 << 20);
  for (int i = 0; i < 4; ++i) store.put("r" + std::to_string(i), {ordered_json::array({i}), ordered_json::object()});
  EXPECT_FALSE(store.get("r0"));  // the oldest went
  ASSERT_TRUE(store.get("r1"));   // now the most recently used
  store.put("r4", {ordered_json::array(), ordered_json::object()});
  EXPECT_TRUE(store.get("r1"));
  EXPECT_FALSE(store.get("r2"));
  EXPECT_EQ(store.get("r3")->conversation, ordered_json::array({3}));
  EXPECT_TRUE(store.erase("r3"));
  EXPECT_FALSE(store.erase("r3"));
  EXPECT_FALSE(store.get("r3"));
  // Bytes: one large response pushes the others out, and one larger than the bound is not kept.
  ResponseStore small(100, 1000);
  small.put("a", {ordered_json::array({std::string(300, 'a')}), ordered_json::object()});
  small.put("b", {ordered_json::array({std::string(300, 'b')}), ordered_json::object()});
  small.put("c", {ordered_json::array({std::string(600, 'c')}), ordered_json::object()});
  EXPECT_FALSE(small.get("a"));
  EXPECT_TRUE(small.get("c"));
  small.put("d", {ordered_json::array({std::string(2000, 'd')}), ordered_json::object()});
  EXPECT_FALSE(small.get("d"));
}

TEST(ResponsesRequest, UnsupportedIsA400NamingTheField) {
  expect_400(R"({"model": "m"})", "input");
  expect_400(R"({"input": []})", "input");
  expect_400(R"({"input": [{"type": 5, "role": "user", "content": "x"}]})", "input[0].type");
  expect_400(R"({"input": "x", "previous_response_id": 5})", "previous_response_id");
  expect_400(R"({"input": "x", "previous_response_id": ""})", "previous_response_id");
  expect_400(R"({"input": "x", "store": "yes"})", "store");
  expect_400(R"({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "u"}]}]})", "input[0].content");
  expect_400(R"({"input": [{"type": "web_search_call"}]})", "input[0].type");
  expect_400(R"({"input": [{"type": "function_call", "name": "f", "arguments": {}}]})", "input[0].arguments");
  expect_400(R"({"input": "x", "tools": [{"type": "file_search"}]})", "tools[0]");
  expect_400(R"({"input": "x", "tool_choice": "required"})", "tool_choice");
  expect_400(R"({"input": "x", "text": {"format": {"type": "json_schema", "name": "s", "schema": {"pattern": "a"}}}})",
             "response_format.json_schema.schema");
}

CompletionResult answer() {
  CompletionResult c;
  c.id = "resp_abc";
  c.model = "m";
  c.created = 7;
  c.gen.prompt_tokens = 11;
  c.gen.tokens = {1, 2, 3};
  c.gen.reason = runtime::StopReason::EndOfGeneration;
  return c;
}

TEST(ResponsesResponse, OutputItemsAndStatus) {
  CompletionResult c = answer();
  c.message.reasoning = "think";
  c.message.content = "hi";
  c.message.tool_calls.push_back({"weather", ordered_json({{"city", "Oslo"}})});
  CompletionRequest req;
  const auto j = response_json(c, req);
  EXPECT_EQ(j["object"], "response");
  EXPECT_EQ(j["status"], "completed");
  EXPECT_EQ(j["output"][0]["type"], "reasoning");
  EXPECT_EQ(j["output"][0]["content"][0]["text"], "think");
  EXPECT_EQ(j["output"][1]["content"][0], ordered_json({{"type", "output_text"}, {"text", "hi"}, {"annotations", ordered_json::array()}}));
  EXPECT_EQ(j["output"][2]["type"], "function_call");
  EXPECT_EQ(j["output"][2]["call_id"], "call_abc_0");
  EXPECT_EQ(j["output"][2]["arguments"], "{\"city\":\"Oslo\"}");
  EXPECT_EQ(j["usage"]["total_tokens"], 14);
  c.gen.reason = runtime::StopReason::Length;
  const auto inc = response_json(c, req);
  EXPECT_EQ(inc["status"], "incomplete");
  EXPECT_EQ(inc["incomplete_details"]["reason"], "max_output_tokens");
}

TEST(ResponsesStream, EventsInOrder) {
  CompletionResult c = answer();
  CompletionRequest req;
  chat::OutputParserOptions p;
  p.format = chat::OutputFormat::Hermes;
  ResponsesStream s(c, req, p);
  auto ev = s.start();
  for (const char* piece : {"<think>hm</think>", "Hi", "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call>"}) {
    for (auto& e : s.push(piece)) ev.push_back(std::move(e));
  }
  for (auto& e : s.finish(c.gen)) ev.push_back(std::move(e));
  std::string names;
  for (size_t i = 0; i < ev.size(); ++i) {
    names += ev[i].first.substr(9) + " ";  // without "response."
    EXPECT_EQ(ev[i].second["sequence_number"], static_cast<int>(i));
  }
  EXPECT_EQ(names,
            "created in_progress output_item.added content_part.added reasoning_text.delta reasoning_text.done "
            "content_part.done output_item.done output_item.added content_part.added output_text.delta output_text.done "
            "content_part.done output_item.done output_item.added function_call_arguments.delta "
            "function_call_arguments.done output_item.done completed ")
      << names;
  EXPECT_EQ(ev.back().second["response"]["output"].size(), 3u);
  EXPECT_EQ(ev[15].second["delta"], "{\"x\":1}");
}

}  // namespace
}  // namespace zinc::server
