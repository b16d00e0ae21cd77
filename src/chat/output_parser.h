// Model output to a chat message: content, reasoning and tool calls, parsed as the text streams in.
//
// Formats (pick with detect_output_format() from the model's chat template):
//   Hermes   <think>reasoning</think> and <tool_call>{"name": ..., "arguments": {...}}</tool_call>
//            (Qwen 2.5/3/3.5, QwQ, Hermes, DeepSeek-R1 distills); the body of a call may also be
//            Qwen3-Coder's <function=NAME><parameter=KEY>value</parameter></function>.
//   Llama3   <think> as above; a JSON object {"name": ..., "parameters": {...}} at the start of the
//            output (optionally after <|python_tag|>) is a tool call.
//   Harmony  GPT-OSS: <|channel|>analysis<|message|>...<|end|> is reasoning, the final (and plain
//            commentary) channel is content, and a message to=functions.NAME is a tool call.
//   Plain    everything is content.
//
// Streaming: push() takes text in arbitrary pieces (a tag may be split anywhere) and returns only what is
// certain; a piece of text that could still become a tag is held back, so no partial tag ever reaches the
// content. finish() releases what is left at the end of generation. Reasoning and content lose the
// whitespace at their ends (models put newlines around <think> blocks and tool calls); whitespace inside
// is kept. A tool call whose body is not valid JSON (or the Qwen3-Coder form) comes out as plain content,
// tags included, rather than being dropped.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace zinc::chat {

struct ToolCall {
  std::string name;
  nlohmann::ordered_json arguments;  // usually an object; a string when the model gave unparseable text

  bool operator==(const ToolCall& o) const { return name == o.name && arguments == o.arguments; }
};

struct ParsedOutput {
  std::string content;
  std::string reasoning;
  std::vector<ToolCall> tool_calls;

  ParsedOutput& operator+=(const ParsedOutput& o);
  bool empty() const { return content.empty() && reasoning.empty() && tool_calls.empty(); }
};

enum class OutputFormat { Plain, Hermes, Llama3, Harmony };

const char* output_format_name(OutputFormat f);

// The format a model's outputs follow, judged from the markers its chat template writes.
OutputFormat detect_output_format(std::string_view template_source);

struct OutputParserOptions {
  OutputFormat format = OutputFormat::Hermes;
  // The prompt already opened the reasoning block (a template that ends its generation prompt with
  // "<think>\n", or a Harmony prompt ending in the analysis channel's <|message|>).
  bool starts_in_reasoning = false;
};

class OutputParser {
 public:
  explicit OutputParser(OutputParserOptions options);

  ParsedOutput push(std::string_view text);
  ParsedOutput finish();

  // A whole output at once.
  static ParsedOutput parse(std::string_view text, OutputParserOptions options);

 private:
  enum class Mode { Content, Reasoning, HermesCall, JsonCall, HarmonyOutside, HarmonyHeader, HarmonyBody };

  void run(bool final);
  bool step_content(bool final);
  bool step_reasoning(bool final);
  bool step_hermes_call(bool final);
  bool step_json_call(bool final);
  bool step_harmony_outside(bool final);
  bool step_harmony_header(bool final);
  bool step_harmony_body(bool final);

  void emit_content(std::string_view t);
  void emit_reasoning(std::string_view t);
  void start_reasoning_block();
  void end_reasoning_block();
  void emit_tool_calls(std::vector<ToolCall> calls);

  OutputParserOptions options_;
  Mode mode_;
  std::string buf_;  // input not consumed yet
  ParsedOutput out_;

  bool content_skip_ws_ = true;    // drop whitespace until the content's next non-space character
  std::string content_ws_;         // whitespace held at the end of the content so far
  bool content_emitted_ = false;
  bool reasoning_skip_ws_ = true;
  std::string reasoning_ws_;
  bool reasoning_emitted_ = false;
  bool json_call_possible_;        // Llama3: a JSON tool call may still start here
  bool after_json_call_ = false;   // Llama3: calls may be separated by ";"

  // Harmony: the current message's header.
  std::string harmony_header_;
  std::string harmony_channel_, harmony_recipient_;
};

// The markers that open and close a format's reasoning block, and the conclusion the engine writes
// when reasoning runs out of its budget: the closing sentence the Qwen3 models were trained to end a
// cut-short reasoning with, then the end-of-reasoning marker (and for Harmony the start of the final
// channel). Empty for Plain, which has no reasoning block.
struct ReasoningMarkers {
  std::string open, close, conclusion;
};
ReasoningMarkers reasoning_markers(OutputFormat format);

// Tool calls from the text between <tool_call> and </tool_call>: a JSON object (or array of them) with
// "name" and "arguments"/"parameters", or the Qwen3-Coder <function=...> form. Empty when it is neither.
std::vector<ToolCall> parse_tool_call_body(std::string_view body);

}  // namespace zinc::chat
