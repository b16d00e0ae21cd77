// Output parsing: content, reasoning and tool calls out of model text. The expectations are written by
// hand from the formats' specifications (Qwen/Hermes tags, Llama 3 JSON calls, OpenAI's harmony format).
// Every input is also fed in every possible two-piece split and byte by byte: the streamed result must
// equal the whole-text result, which also proves no partial tag ever leaked into the content.
#include <gtest/gtest.h>

#include "chat/output_parser.h"

namespace {

using nlohmann::ordered_json;
using zinc::chat::OutputFormat;
using zinc::chat::OutputParser;
using zinc::chat::OutputParserOptions;
using zinc::chat::ParsedOutput;
using zinc::chat::ToolCall;

std::string describe(const ParsedOutput& p) {
  std::string s = "content=" + ordered_json(p.content).dump() + " reasoning=" + ordered_json(p.reasoning).dump() + " calls=[";
  for (const auto& c : p.tool_calls) s += c.name + c.arguments.dump() + ";";
  return s + "]";
}

bool same(const ParsedOutput& a, const ParsedOutput& b) {
  return a.content == b.content && a.reasoning == b.reasoning && a.tool_calls == b.tool_calls;
}

ParsedOutput feed(OutputParserOptions o, const std::vector<std::string_view>& pieces) {
  OutputParser p(o);
  ParsedOutput out;
  for (auto piece : pieces) out += p.push(piece);
  out += p.finish();
  return out;
}

// Checks the whole text, every split into two pieces, every split into three (for short inputs) and
// one byte at a time.
void expect_parse(OutputParserOptions o, std::string_view text, const ParsedOutput& want) {
  const ParsedOutput whole = OutputParser::parse(text, o);
  EXPECT_TRUE(same(whole, want)) << "input: " << text << "\n  got:  " << describe(whole) << "\n  want: " << describe(want);
  for (size_t i = 0; i <= text.size(); ++i) {
    const ParsedOutput got = feed(o, {text.substr(0, i), text.substr(i)});
    ASSERT_TRUE(same(got, want)) << "split at " << i << " of: " << text << "\n  got:  " << describe(got);
  }
  if (text.size() <= 160) {
    for (size_t i = 0; i <= text.size(); ++i) {
      for (size_t j = i; j <= text.size(); ++j) {
        const ParsedOutput got = feed(o, {text.substr(0, i), text.substr(i, j - i), text.substr(j)});
        ASSERT_TRUE(same(got, want)) << "splits at " << i << "," << j << " of: " << text << "\n  got:  " << describe(got);
      }
    }
  }
  std::vector<std::string_view> bytes;
  for (size_t i = 0; i < text.size(); ++i) bytes.push_back(text.substr(i, 1));
  const ParsedOutput got = feed(o, bytes);
  EXPECT_TRUE(same(got, want)) << "byte by byte: " << text << "\n  got:  " << describe(got);
}

ParsedOutput out(std::string content, std::string reasoning = "", std::vector<ToolCall> calls = {}) {
  return ParsedOutput{std::move(content), std::move(reasoning), std::move(calls)};
}

ToolCall call(std::string name, ordered_json args) { return ToolCall{std::move(name), std::move(args)}; }

const OutputParserOptions kHermes{OutputFormat::Hermes, false};
const OutputParserOptions kHermesInThink{OutputFormat::Hermes, true};
const OutputParserOptions kLlama3{OutputFormat::Llama3, false};
const OutputParserOptions kHarmony{OutputFormat::Harmony, false};
const OutputParserOptions kHarmonyInAnalysis{OutputFormat::Harmony, true};

// What the engine writes when reasoning runs out of budget ends the reasoning in the parser of the same
// format: the reasoning so far and the closing sentence are reasoning, what follows is content.
TEST(OutputParser, AReasoningConclusionEndsTheReasoningBlock) {
  const std::string sentence =
      "Considering the limited time by the user, I have to give the solution based on the thinking directly now.";
  for (OutputFormat f : {OutputFormat::Hermes, OutputFormat::Llama3, OutputFormat::Harmony}) {
    const auto m = zinc::chat::reasoning_markers(f);
    ASSERT_FALSE(m.open.empty() || m.close.empty()) << zinc::chat::output_format_name(f);
    EXPECT_NE(m.conclusion.find(sentence), std::string::npos);
    EXPECT_NE(m.conclusion.find(m.close), std::string::npos);
    const std::string text = m.open + "Let me see, the first" + m.conclusion + "The answer is 4.";
    expect_parse({f, false}, text, out("The answer is 4.", "Let me see, the first" + std::string(f == OutputFormat::Harmony ? " " : "\n\n") + sentence));
    // Reasoning the prompt opened.
    expect_parse({f, true}, "Let me see" + m.conclusion + "4.", out("4.", "Let me see" + std::string(f == OutputFormat::Harmony ? " " : "\n\n") + sentence));
  }
  const auto plain = zinc::chat::reasoning_markers(OutputFormat::Plain);
  EXPECT_TRUE(plain.open.empty() && plain.close.empty() && plain.conclusion.empty());
}

TEST(OutputParser, PlainTextIsContent) {
  expect_parse(kHermes, "Hello world", out("Hello world"));
  expect_parse(kHermes, "a < b and <thin> x >", out("a < b and <thin> x >"));
}

TEST(OutputParser, PlainFormatKeepsTags) {
  expect_parse({OutputFormat::Plain, false}, "<think>x</think> <tool_call>{}</tool_call>",
               out("<think>x</think> <tool_call>{}</tool_call>"));
}

TEST(OutputParser, ThinkBlockSplitsReasoningFromContent) {
  expect_parse(kHermes, "<think>\nLet me think.\n</think>\n\nThe answer is 4.", out("The answer is 4.", "Let me think."));
  expect_parse(kHermes, "<think>a\n\nb</think>c\n\nd", out("c\n\nd", "a\n\nb"));
  expect_parse(kHermes, "<think>\n\n</think>\n\nNo reasoning.", out("No reasoning."));
}

TEST(OutputParser, PromptOpenedThink) {
  expect_parse(kHermesInThink, "Let me think.\n</think>\n\nAnswer.", out("Answer.", "Let me think."));
  expect_parse(kHermesInThink, "Still thinking when it stopped", out("", "Still thinking when it stopped"));
}

TEST(OutputParser, UnfinishedMarkersAtTheEnd) {
  expect_parse(kHermes, "<think>still thinking", out("", "still thinking"));
  expect_parse(kHermes, "answer <thi", out("answer <thi"));
  expect_parse(kHermes, "answer <tool_ca", out("answer <tool_ca"));
  expect_parse(kHermesInThink, "thought </thi", out("", "thought </thi"));
}

TEST(OutputParser, StrayClosingThinkIsDropped) { expect_parse(kHermes, "</think>\n\nHi", out("Hi")); }

TEST(OutputParser, HermesToolCall) {
  expect_parse(kHermes,
               "I'll check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}\n</tool_call>",
               out("I'll check.", "", {call("get_weather", {{"location", "Paris"}})}));
}

TEST(OutputParser, HermesParallelToolCalls) {
  expect_parse(kHermes,
               "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": 1}}\n</tool_call>\n"
               "<tool_call>\n{\"name\": \"b\", \"arguments\": {}}\n</tool_call>",
               out("", "", {call("a", {{"x", 1}}), call("b", ordered_json::object())}));
}

TEST(OutputParser, ReasoningThenToolCall) {
  expect_parse(kHermes,
               "<think>\nNeed the weather.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
               "{\"location\": \"Paris\", \"days\": [1, 2]}}\n</tool_call>",
               out("", "Need the weather.", {call("get_weather", {{"location", "Paris"}, {"days", {1, 2}}})}));
}

TEST(OutputParser, ToolCallArgumentsAsJsonString) {
  expect_parse(kHermes, "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}</tool_call>",
               out("", "", {call("f", {{"a", 1}})}));
}

TEST(OutputParser, ToolCallWithParametersKeyAndFunctionWrapper) {
  expect_parse(kHermes, "<tool_call>{\"name\": \"f\", \"parameters\": {\"q\": \"x\"}}</tool_call>",
               out("", "", {call("f", {{"q", "x"}})}));
  expect_parse(kHermes, "<tool_call>{\"type\": \"function\", \"function\": {\"name\": \"g\", \"arguments\": {}}}</tool_call>",
               out("", "", {call("g", ordered_json::object())}));
}

TEST(OutputParser, MalformedToolCallIsContent) {
  expect_parse(kHermes, "<tool_call>\n{\"name\": \"x\", \"arguments\": {bad}\n</tool_call>",
               out("<tool_call>\n{\"name\": \"x\", \"arguments\": {bad}\n</tool_call>"));
  expect_parse(kHermes, "Text <tool_call>not json</tool_call> more", out("Text <tool_call>not json</tool_call> more"));
  expect_parse(kHermes, "<tool_call>{\"arguments\": {}}</tool_call>", out("<tool_call>{\"arguments\": {}}</tool_call>"));
}

TEST(OutputParser, MalformedCallsAreRepairedWhereOnlyOneReadingExists) {
  const auto f = [](ordered_json args) { return out("", "", {call("f", std::move(args))}); };
  // Commas before a closing bracket; Python literals outside strings (not inside them).
  expect_parse(kHermes, "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": [1, 2,], \"b\": 3,},}</tool_call>",
               f({{"a", {1, 2}}, {"b", 3}}));
  expect_parse(kHermes, "<tool_call>{\"name\": \"f\", \"arguments\": {\"on\": True, \"x\": None, \"s\": \"True\"}}</tool_call>",
               f({{"on", true}, {"x", nullptr}, {"s", "True"}}));
  // A closing brace missing (the model stopped early) or one too many.
  expect_parse(kHermes, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"q\": \"cats\"}\n</tool_call>", f({{"q", "cats"}}));
  expect_parse(kHermes, "<tool_call>{\"name\": \"f\", \"arguments\": {\"q\": 1}}}</tool_call>", f({{"q", 1}}));
  // A markdown fence around the call.
  expect_parse(kHermes, "<tool_call>\n```json\n{\"name\": \"f\", \"arguments\": {}}\n```\n</tool_call>",
               f(ordered_json::object()));
  // More than one reading, or none: shown as written, never guessed.
  for (const char* bad : {"<tool_call>{\"name\": \"f\", \"arguments\": {\"q\": \"unclosed}}</tool_call>",
                          "<tool_call>{\"name\": \"f\", \"arguments\": {\"q\": }}</tool_call>",
                          "<tool_call>{\"name\": \"f\", \"arguments\": {\"q\": 1]}</tool_call>",
                          "<tool_call>{\"name\": \"f\"} trailing words</tool_call>",
                          "<tool_call>{'name': 'f'}</tool_call>"}) {
    expect_parse(kHermes, bad, out(bad));
  }
}

TEST(OutputParser, UnterminatedToolCall) {
  expect_parse(kHermes, "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}", out("", "", {call("f", ordered_json::object())}));
  expect_parse(kHermes, "<tool_call>\n{\"name\"", out("<tool_call>\n{\"name\""));
}

TEST(OutputParser, QwenCoderXmlToolCall) {
  expect_parse(kHermes,
               "<tool_call>\n<function=get_weather>\n<parameter=location>\nParis, France\n</parameter>\n"
               "<parameter=days>\n3\n</parameter>\n<parameter=opts>\n{\"metric\": true}\n</parameter>\n"
               "<parameter=note>\ntwo\nlines\n</parameter>\n</function>\n</tool_call>",
               out("", "",
                   {call("get_weather",
                         {{"location", "Paris, France"}, {"days", 3}, {"opts", {{"metric", true}}}, {"note", "two\nlines"}})}));
  expect_parse(kHermes, "<tool_call>\n<function=f>\n<parameter=x>\n1\n</function>\n</tool_call>",
               out("<tool_call>\n<function=f>\n<parameter=x>\n1\n</function>\n</tool_call>"));
}

TEST(OutputParser, ToolCallInsideThinkIsReasoning) {
  expect_parse(kHermes, "<think>maybe <tool_call>{\"name\": \"f\"}</tool_call></think>ok",
               out("ok", "maybe <tool_call>{\"name\": \"f\"}</tool_call>"));
}

TEST(OutputParser, MultiByteText) {
  expect_parse(kHermes, "<think>é😀 中</think>\n中文 ✓", out("中文 ✓", "é😀 中"));
}

TEST(OutputParser, Llama3JsonToolCall) {
  expect_parse(kLlama3, "{\"name\": \"get_weather\", \"parameters\": {\"location\": \"Paris\"}}",
               out("", "", {call("get_weather", {{"location", "Paris"}})}));
  expect_parse(kLlama3, "<|python_tag|>{\"name\": \"f\", \"parameters\": {}}", out("", "", {call("f", ordered_json::object())}));
  expect_parse(kLlama3, "  {\"type\": \"function\", \"name\": \"f\", \"parameters\": {\"s\": \"}\"}}",
               out("", "", {call("f", {{"s", "}"}})}));
}

TEST(OutputParser, Llama3SeveralJsonToolCalls) {
  expect_parse(kLlama3, "{\"name\": \"f\", \"parameters\": {\"a\": 1}}; {\"name\": \"g\", \"parameters\": {}}",
               out("", "", {call("f", {{"a", 1}}), call("g", ordered_json::object())}));
}

TEST(OutputParser, Llama3TextIsContent) {
  expect_parse(kLlama3, "The weather is {hot}.", out("The weather is {hot}."));
  expect_parse(kLlama3, "{\"not\": \"a call\"}", out("{\"not\": \"a call\"}"));
  expect_parse(kLlama3, "Sure! {\"name\": \"f\", \"parameters\": {}}", out("Sure! {\"name\": \"f\", \"parameters\": {}}"));
  expect_parse(kLlama3, "{\"name\": \"f\", \"parameters\": {broken", out("{\"name\": \"f\", \"parameters\": {broken"));
  expect_parse(kLlama3, "<|python_tag|>brave_search.call(query=\"x\")", out("<|python_tag|>brave_search.call(query=\"x\")"));
  expect_parse(kLlama3, "<b>bold</b>", out("<b>bold</b>"));
}

TEST(OutputParser, Llama3CallAfterThinking) {
  expect_parse(kLlama3, "<think>hmm</think>\n{\"name\": \"f\", \"parameters\": {}}", out("", "hmm", {call("f", ordered_json::object())}));
}

TEST(OutputParser, HarmonyReasoningAndFinal) {
  expect_parse(kHarmony,
               "<|channel|>analysis<|message|>User wants weather.<|end|><|start|>assistant<|channel|>final<|message|>"
               "It is sunny.<|return|>",
               out("It is sunny.", "User wants weather."));
}

TEST(OutputParser, HarmonyToolCall) {
  expect_parse(kHarmony,
               "<|channel|>analysis<|message|>Need to call.<|end|><|start|>assistant<|channel|>commentary "
               "to=functions.get_weather <|constrain|>json<|message|>{\"location\":\"Paris\"}<|call|>",
               out("", "Need to call.", {call("get_weather", {{"location", "Paris"}})}));
  expect_parse(kHarmony,
               "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{\"location\": \"Tokyo\"}<|call|>",
               out("", "", {call("get_weather", {{"location", "Tokyo"}})}));
}

TEST(OutputParser, HarmonyMalformedArgumentsAreContent) {
  expect_parse(kHarmony, "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{oops<|call|>", out("{oops"));
}

TEST(OutputParser, HarmonyPromptOpenedAnalysis) {
  expect_parse(kHarmonyInAnalysis, "thinking...<|end|><|start|>assistant<|channel|>final<|message|>done",
               out("done", "thinking..."));
}

TEST(OutputParser, HarmonyTextWithoutChannelIsContent) {
  expect_parse(kHarmony, "Hello <b>there</b>", out("Hello <b>there</b>"));
  expect_parse(kHarmony, "Hello <|chan", out("Hello <|chan"));
}

TEST(OutputParser, HarmonySeveralMessagesAreJoined) {
  expect_parse(kHarmony,
               "<|channel|>commentary<|message|>Checking.<|end|><|start|>assistant<|channel|>final<|message|>Done.<|return|>",
               out("Checking.\n\nDone."));
  expect_parse(kHarmony,
               "<|channel|>analysis<|message|>A<|end|><|start|>assistant<|channel|>analysis<|message|>B<|end|>",
               out("", "A\n\nB"));
}

TEST(OutputParser, HarmonyUnterminatedHeaderIsDropped) {
  expect_parse(kHarmony, "<|channel|>analysis<|message|>x<|end|><|start|>assistant<|channel|>fin", out("", "x"));
}

TEST(OutputParser, ParseToolCallBody) {
  EXPECT_TRUE(zinc::chat::parse_tool_call_body("").empty());
  EXPECT_TRUE(zinc::chat::parse_tool_call_body("[]").empty());
  EXPECT_TRUE(zinc::chat::parse_tool_call_body("[{\"name\": \"a\"}, 3]").empty());
  const auto calls = zinc::chat::parse_tool_call_body("[{\"name\": \"a\", \"arguments\": {}}, {\"name\": \"b\"}]");
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].name, "a");
  EXPECT_EQ(calls[1].name, "b");
  EXPECT_EQ(calls[1].arguments, ordered_json::object());
}

TEST(OutputParser, HostileInputsDoNotCrash) {
  // Deep nesting, huge unclosed calls and marker soup: the parser must only ever produce text.
  std::string deep = "<tool_call>" + std::string(20000, '[') + "</tool_call>";
  EXPECT_FALSE(OutputParser::parse(deep, kHermes).content.empty());
  std::string deep_llama = std::string(20000, '{');
  EXPECT_EQ(OutputParser::parse(deep_llama, kLlama3).content, deep_llama);
  std::string soup;
  for (int i = 0; i < 200; ++i) soup += "<|start|><|channel|><|message|><|end|><think></think><tool_call>";
  for (auto f : {OutputFormat::Hermes, OutputFormat::Llama3, OutputFormat::Harmony}) {
    (void)OutputParser::parse(soup, {f, false});
    (void)OutputParser::parse(soup, {f, true});
  }
}

TEST(OutputFormatDetection, FromTemplateMarkers) {
  using zinc::chat::detect_output_format;
  EXPECT_EQ(detect_output_format("{{ '<|start|>assistant<|channel|>final<|message|>' }}"), OutputFormat::Harmony);
  EXPECT_EQ(detect_output_format("<tool_call>\\n{{ tool_call | tojson }}\\n</tool_call>"), OutputFormat::Hermes);
  EXPECT_EQ(detect_output_format("{{- '<|python_tag|>' + tool_call.name }}"), OutputFormat::Llama3);
  EXPECT_EQ(detect_output_format("{% set c = c.split('</think>')[-1] %}"), OutputFormat::Hermes);
  EXPECT_EQ(detect_output_format("<start_of_turn>user"), OutputFormat::Plain);
}

}  // namespace
