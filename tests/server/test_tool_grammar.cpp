// Forced tool calls: the grammar written for each tool-call format accepts a call as the model's
// template writes one, and the output parser reads that text back as the same tool call; arguments
// outside the tool's schema, another tool's name or trailing text are refused.
#include <gtest/gtest.h>

#include <algorithm>

#include "sample/grammar_matcher.h"
#include "server/openai.h"
#include "server/tool_grammar.h"

namespace zinc::server {
namespace {

using nlohmann::ordered_json;

const ordered_json kTools = ordered_json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
     "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}},
  {"type": "function", "function": {"name": "now"}}])");

bool accepts(const std::string& gbnf, const std::string& text) {
  auto g = std::make_shared<const sample::Grammar>(sample::Grammar::parse(gbnf));
  sample::GrammarMatcher m(g, std::make_shared<const sample::GrammarVocab>(std::vector<std::string>{"</s>"}, std::vector<bool>{true}));
  return m.accept_text(text) && m.complete();
}

TEST(ToolGrammar, HermesCallsParseBackAsTheSameCall) {
  const std::string any = tool_call_grammar(chat::OutputFormat::Hermes, kTools, "", true);
  const std::string call = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 2}}\n</tool_call>";
  ASSERT_TRUE(accepts(any, call));
  EXPECT_TRUE(accepts(any, call + "\n<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"));
  const auto parsed = chat::OutputParser::parse(call, {chat::OutputFormat::Hermes, false});
  ASSERT_EQ(parsed.tool_calls.size(), 1u);
  EXPECT_EQ(parsed.tool_calls[0].name, "get_weather");
  EXPECT_EQ(parsed.tool_calls[0].arguments, ordered_json::parse(R"({"city": "Paris", "days": 2})"));
  EXPECT_EQ(parsed.content, "");
  EXPECT_FALSE(accepts(any, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"days\": 2}}\n</tool_call>"));  // city required
  EXPECT_FALSE(accepts(any, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": 3}}\n</tool_call>"));
  EXPECT_FALSE(accepts(any, "<tool_call>\n{\"name\": \"other\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_FALSE(accepts(any, "Sure! " + call));
  // One named tool, one call.
  const std::string named = tool_call_grammar(chat::OutputFormat::Hermes, kTools, "now", false);
  EXPECT_TRUE(accepts(named, "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_FALSE(accepts(named, call));
  EXPECT_FALSE(accepts(named, "<tool_call>{\"name\": \"now\", \"arguments\": {}}</tool_call><tool_call>{\"name\": \"now\", \"arguments\": {}}</tool_call>"));
}

TEST(ToolGrammar, Llama3CallsParseBackAsTheSameCall) {
  const std::string g = tool_call_grammar(chat::OutputFormat::Llama3, kTools, "get_weather", false);
  const std::string call = "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}";
  ASSERT_TRUE(accepts(g, call));
  const auto parsed = chat::OutputParser::parse(call, {chat::OutputFormat::Llama3, false});
  ASSERT_EQ(parsed.tool_calls.size(), 1u);
  EXPECT_EQ(parsed.tool_calls[0].name, "get_weather");
  EXPECT_EQ(parsed.tool_calls[0].arguments, ordered_json::parse(R"({"city": "Oslo"})"));
}

// Harmony's control tokens (no text), as GPT-OSS's vocabulary has them; <|return|> and <|call|> end
// generation.
const std::vector<std::string> kHarmonyTokens = {"<|return|>", "<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|call|>"};

// Whether the grammar takes the output: control tokens by id, other pieces as text; then complete.
bool harmony_accepts(const std::string& gbnf, const std::vector<std::string>& output, const std::string& root = "root") {
  const auto id = [](std::string_view text) -> int32_t {
    const auto it = std::find(kHarmonyTokens.begin(), kHarmonyTokens.end(), text);
    return it == kHarmonyTokens.end() ? -1 : static_cast<int32_t>(it - kHarmonyTokens.begin());
  };
  std::vector<bool> eog(kHarmonyTokens.size(), false);
  eog[0] = eog[6] = true;
  sample::GrammarMatcher m(std::make_shared<const sample::Grammar>(sample::Grammar::parse(gbnf, root, id)),
                           std::make_shared<const sample::GrammarVocab>(std::vector<std::string>(kHarmonyTokens.size()), eog));
  for (const std::string& piece : output) {
    if (id(piece) >= 0) {
      if (!m.allows(id(piece))) return false;
      m.accept(id(piece));
    } else if (!m.accept_text(piece)) {
      return false;
    }
  }
  return m.complete();
}

std::string joined(const std::vector<std::string>& pieces) {
  std::string s;
  for (const auto& p : pieces) s += p;
  return s;
}

TEST(ToolGrammar, HarmonyCallsParseBackAsTheSameCall) {
  const std::string any = tool_call_grammar(chat::OutputFormat::Harmony, kTools, "", true);
  // What GPT-OSS writes after "<|start|>assistant": analysis (reasoning: the grammar resumes after its
  // <|end|>), then the call; the call's end <|call|> ends generation, so the text stops before it.
  const std::vector<std::string> call = {"<|channel|>", "commentary to=functions.get_weather", " ", "<|constrain|>", "json",
                                         "<|message|>", "{\"city\": \"Paris\", \"days\": 2}"};
  std::vector<std::string> whole = call;
  whole.push_back("<|call|>");
  EXPECT_TRUE(harmony_accepts(any, whole));
  EXPECT_FALSE(harmony_accepts(any, call));  // <|call|> must end it
  std::vector<std::string> thought = {"<|channel|>", "analysis", "<|message|>", "<|start|>", "assistant"};
  thought.insert(thought.end(), whole.begin(), whole.end());
  EXPECT_TRUE(harmony_accepts(any, thought));
  std::vector<std::string> twice = {"<|channel|>", "analysis", "<|message|>", "<|start|>", "assistant"};
  twice.insert(twice.end(), thought.begin(), thought.end());
  EXPECT_FALSE(harmony_accepts(any, twice));  // reasoning again after its budget was spent
  const std::string reasoning = "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant";
  const auto parsed = chat::OutputParser::parse(reasoning + joined(call), {chat::OutputFormat::Harmony, false});
  ASSERT_EQ(parsed.tool_calls.size(), 1u) << joined(call);
  EXPECT_EQ(parsed.tool_calls[0].name, "get_weather");
  EXPECT_EQ(parsed.tool_calls[0].arguments, ordered_json::parse(R"({"city": "Paris", "days": 2})"));
  EXPECT_EQ(parsed.reasoning, "Need weather.");
  EXPECT_EQ(parsed.content, "");
  // The header as text is not the header: the markers are tokens.
  EXPECT_FALSE(harmony_accepts(any, {"<|channel|>commentary to=functions.now<|message|>{}", "<|call|>"}));
  EXPECT_FALSE(harmony_accepts(any, {"<|channel|>", "commentary to=functions.get_weather", "<|message|>", "{\"days\": 2}", "<|call|>"}));
  EXPECT_FALSE(harmony_accepts(any, {"<|channel|>", "final", "<|message|>", "Hi", "<|return|>"}));
  EXPECT_TRUE(harmony_accepts(tool_call_grammar(chat::OutputFormat::Harmony, kTools, "now", false),
                              {"<|channel|>", "commentary to=functions.now", "<|message|>", "{}", "<|call|>"}));
  EXPECT_FALSE(harmony_accepts(tool_call_grammar(chat::OutputFormat::Harmony, kTools, "now", false), whole));

  // Lazy (tool_choice auto): from the recipient on, whichever side of the channel it is written.
  const std::string lazy = tool_call_grammar(chat::OutputFormat::Harmony, kTools, "", true, true);
  const std::vector<std::string> after = {"to=functions.get_weather", "<|channel|>", "commentary json", "<|message|>", "{\"city\": \"Oslo\"}", "<|call|>"};
  EXPECT_TRUE(harmony_accepts(lazy, after));
  EXPECT_FALSE(harmony_accepts(lazy, {"to=functions.now <|constrain|>json", "<|message|>", "{}", "<|call|>"}));
  EXPECT_TRUE(harmony_accepts(lazy, {"to=functions.now ", "<|constrain|>", "json", "<|message|>", "{}", "<|call|>"}));
  EXPECT_FALSE(harmony_accepts(lazy, {"to=functions.get_weather", "<|message|>", "{\"town\": \"Oslo\"}", "<|call|>"}));
  // Every header the grammar takes names the tool as the output parser reads it (the name ends at a
  // space or a marker: "get_weatherjson" would be another tool).
  EXPECT_FALSE(harmony_accepts(lazy, {"to=functions.get_weather", "json", "<|message|>", "{\"city\": \"Oslo\"}", "<|call|>"}));
  for (const std::vector<std::string>& header : std::vector<std::vector<std::string>>{
           {"to=functions.get_weather", "<|message|>"},
           {"to=functions.get_weather ", "<|message|>"},
           {"to=functions.get_weather json", "<|message|>"},
           {"to=functions.get_weather ", "<|constrain|>", "json", "<|message|>"},
           {"to=functions.get_weather", "<|constrain|>", "json", "<|message|>"},
           {"to=functions.get_weather", "<|constrain|>", "<|message|>"},
           {"to=functions.get_weather", "<|channel|>", "commentary", "<|message|>"},
           {"to=functions.get_weather", "<|channel|>", "commentary json", "<|message|>"},
           {"to=functions.get_weather", "<|channel|>", "commentary ", "<|constrain|>", "json", "<|message|>"}}) {
    std::vector<std::string> output = header;
    output.push_back("{\"city\": \"Oslo\"}");
    output.push_back("<|call|>");
    EXPECT_TRUE(harmony_accepts(lazy, output)) << joined(header);
    const auto p = chat::OutputParser::parse("<|start|>assistant " + joined({output.begin(), output.end() - 1}), {chat::OutputFormat::Harmony, false});
    ASSERT_EQ(p.tool_calls.size(), 1u) << joined(header);
    EXPECT_EQ(p.tool_calls[0].name, "get_weather") << joined(header);
  }
  const auto recipient_first =
      chat::OutputParser::parse("<|start|>assistant " + joined({after.begin(), after.end() - 1}), {chat::OutputFormat::Harmony, false});
  ASSERT_EQ(recipient_first.tool_calls.size(), 1u);
  EXPECT_EQ(recipient_first.tool_calls[0].name, "get_weather");
  EXPECT_EQ(recipient_first.tool_calls[0].arguments, ordered_json::parse(R"({"city": "Oslo"})"));
}

TEST(ToolGrammar, AThinkingModelMayOpenItsReasoningBeforeTheAnswer) {
  const std::string object = R"(root ::= "{" [a-z]* "}")";
  // Harmony: an analysis message (its body outside the grammar), then the final channel's header, each
  // optional; the answer itself stays constrained.
  const std::string h = with_reasoning_lead(chat::OutputFormat::Harmony, object);
  for (const std::vector<std::string>& ok : std::vector<std::vector<std::string>>{
           {"<|channel|>", "analysis", "<|message|>", "<|start|>", "assistant", "<|channel|>", "final", "<|message|>", "{ab}"},
           {"<|channel|>", "final", "<|message|>", "{ab}"},
           {"{ab}"}}) {
    EXPECT_TRUE(harmony_accepts(h, ok, kAfterReasoning)) << joined(ok);
  }
  EXPECT_FALSE(harmony_accepts(h, {"<|channel|>", "final", "<|message|>", "{a1}"}, kAfterReasoning));
  EXPECT_FALSE(harmony_accepts(h, {"<|channel|>", "commentary", "<|message|>", "{ab}"}, kAfterReasoning));
  // Hermes and Llama 3: <think> (a token), whitespace after the block, then the answer.
  const std::string t = with_reasoning_lead(chat::OutputFormat::Hermes, object);
  EXPECT_EQ(with_reasoning_lead(chat::OutputFormat::Llama3, object), t);
  std::vector<bool> eog = {true, false, false, false};
  const std::vector<std::string> pieces = {"</s>", "<think>", "{ab}", "\n\n"};
  const auto think = [](std::string_view text) -> int32_t { return text == "<think>" ? 1 : -1; };
  for (const std::vector<int32_t>& ok : std::vector<std::vector<int32_t>>{{1, 3, 2}, {1, 2}, {2}}) {
    sample::GrammarMatcher m(std::make_shared<const sample::Grammar>(sample::Grammar::parse(t, kAfterReasoning, think)),
                             std::make_shared<const sample::GrammarVocab>(pieces, eog));
    for (int32_t id : ok) {
      ASSERT_TRUE(m.allows(id)) << id;
      m.accept(id);
    }
    EXPECT_TRUE(m.complete());
  }
  sample::GrammarMatcher m(std::make_shared<const sample::Grammar>(sample::Grammar::parse(t, kAfterReasoning, think)),
                           std::make_shared<const sample::GrammarVocab>(pieces, eog));
  EXPECT_FALSE(m.allows(3));  // whitespace only after the block
  EXPECT_EQ(with_reasoning_lead(chat::OutputFormat::Plain, object), "");
}

TEST(ToolGrammar, FormatsWithoutConstrainableCallsAre400s) {
  for (auto f : {chat::OutputFormat::Plain}) {
    try {
      tool_call_grammar(f, kTools, "", true);
      ADD_FAILURE() << "accepted " << chat::output_format_name(f);
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 400);
    }
  }
  const ordered_json bad = ordered_json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "string", "pattern": "x"}}}])");
  EXPECT_THROW(tool_call_grammar(chat::OutputFormat::Hermes, bad, "", true), ApiError);
}

}  // namespace
}  // namespace zinc::server

namespace zinc::server {
namespace {

CompletionRequest chat_request(const std::string& body) {
  return parse_chat_request(ordered_json::parse(body), sample::SamplerParams::chat());
}

TEST(OutputConstraint, AutoToolChoiceConstrainsHermesCallsFromTheirTag) {
  const std::string tools = R"("tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])";
  const auto c = output_constraint(chat::OutputFormat::Hermes,
                                   chat_request(R"({"messages": [{"role": "user", "content": "Hi"}], )" + tools + "}"), "");
  EXPECT_EQ(c.trigger, "<tool_call>");
  const std::string call = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>";
  EXPECT_TRUE(accepts(c.gbnf, call));
  EXPECT_TRUE(accepts(c.gbnf, call + "\n" + call));  // parallel_tool_calls defaults to true
  EXPECT_FALSE(accepts(c.gbnf, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"town\": \"Oslo\"}}\n</tool_call>"));
  // parallel_tool_calls false: one call, then the output ends.
  const auto one = output_constraint(chat::OutputFormat::Hermes,
                                     chat_request(R"({"messages": [{"role": "user", "content": "Hi"}], "parallel_tool_calls": false, )" +
                                                  tools + "}"), "");
  EXPECT_TRUE(accepts(one.gbnf, call));
  EXPECT_FALSE(accepts(one.gbnf, call + "\n" + call));

  EXPECT_FALSE(c.trigger_at_start);
  EXPECT_EQ(c.param, "tools");

  // Llama 3: a call is a JSON object that opens the answer, one or more separated by ";".
  const auto llama = output_constraint(chat::OutputFormat::Llama3,
                                       chat_request(R"({"messages": [{"role": "user", "content": "Hi"}], )" + tools + "}"), "");
  EXPECT_EQ(llama.trigger, "{");
  EXPECT_TRUE(llama.trigger_at_start);
  const std::string json_call = "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}";
  EXPECT_TRUE(accepts(llama.gbnf, json_call));
  EXPECT_TRUE(accepts(llama.gbnf, json_call + "; " + json_call));
  EXPECT_FALSE(accepts(llama.gbnf, "{\"name\": \"get_weather\", \"parameters\": {\"city\": 1}}"));
  const auto parsed = chat::OutputParser::parse(json_call + "; " + json_call, {chat::OutputFormat::Llama3, false});
  EXPECT_EQ(parsed.tool_calls.size(), 2u);
  // Harmony: from a message's recipient.
  const auto harmony = output_constraint(chat::OutputFormat::Harmony,
                                         chat_request(R"({"messages": [{"role": "user", "content": "Hi"}], )" + tools + "}"), "");
  EXPECT_EQ(harmony.trigger, "to=functions.");
  EXPECT_FALSE(harmony.trigger_at_start);
  EXPECT_TRUE(harmony_accepts(harmony.gbnf, {"to=functions.get_weather", "<|message|>", "{\"city\": \"Oslo\"}", "<|call|>"}));

  // No lazy grammar: tool_choice none (the model is not told of the tools), a format with no tool
  // calls, a request's own response format (it constrains everything), a schema the grammar cannot
  // express (the call stays free rather than failing the request).
  for (const auto& [format, body] : std::vector<std::pair<chat::OutputFormat, std::string>>{
           {chat::OutputFormat::Hermes, R"({"messages": [{"role": "user", "content": "Hi"}], "tool_choice": "none", )" + tools + "}"},
           {chat::OutputFormat::Plain, R"({"messages": [{"role": "user", "content": "Hi"}], )" + tools + "}"},
           {chat::OutputFormat::Hermes, R"({"messages": [{"role": "user", "content": "Hi"}], "tools": [{"type": "function",
               "function": {"name": "f", "parameters": {"type": "object", "properties": {"x": {"$ref": "#/nowhere"}}}}}]})"}}) {
    const auto none = output_constraint(format, chat_request(body), "");
    EXPECT_EQ(none.gbnf, "") << body;
    EXPECT_EQ(none.trigger, "") << body;
  }
  const auto format = output_constraint(chat::OutputFormat::Hermes,
      chat_request(R"({"messages": [{"role": "user", "content": "Hi"}], "response_format": {"type": "json_object"}, )" + tools + "}"), "");
  EXPECT_TRUE(accepts(format.gbnf, R"({"a": 1})"));
  EXPECT_EQ(format.trigger, "");
}

TEST(OutputConstraint, ForcedCallsAndServerGrammarsConstrainTheWholeOutput) {
  const std::string tools = R"("tools": [{"type": "function", "function": {"name": "now"}}])";
  const auto forced = output_constraint(chat::OutputFormat::Hermes,
      chat_request(R"({"messages": [{"role": "user", "content": "Hi"}], "tool_choice": "required", )" + tools + "}"), "");
  EXPECT_EQ(forced.trigger, "");
  EXPECT_EQ(forced.param, "tool_choice");
  EXPECT_TRUE(accepts(forced.gbnf, "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"));
  try {
    output_constraint(chat::OutputFormat::Hermes,
                      chat_request(R"({"messages": [{"role": "user", "content": "Hi"}], "tool_choice": "required",
                                       "response_format": {"type": "json_object"}, )" + tools + "}"), "");
    ADD_FAILURE() << "a forced call with a response format was accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
  }
  // The server's grammar applies to requests that give none, tools or not.
  const auto server = output_constraint(chat::OutputFormat::Hermes,
      chat_request(R"({"messages": [{"role": "user", "content": "Hi"}], )" + tools + "}"), "root ::= \"x\"");
  EXPECT_EQ(server.gbnf, "root ::= \"x\"");
  EXPECT_EQ(server.trigger, "");
}

}  // namespace
}  // namespace zinc::server
