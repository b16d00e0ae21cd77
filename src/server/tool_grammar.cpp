#include "server/tool_grammar.h"

#include <fmt/format.h>

#include "core/error.h"
#include "sample/grammar.h"
#include "sample/json_schema.h"
#include "server/openai.h"

namespace zinc::server {

std::string tool_call_grammar(chat::OutputFormat format, const nlohmann::ordered_json& tools, const std::string& only,
                              bool several) {
  if (format != chat::OutputFormat::Hermes && format != chat::OutputFormat::Llama3) {
    throw ApiError(400,
                   fmt::format("'tool_choice': forcing a tool call is not supported for this model's tool-call format ({}); "
                               "use auto",
                               chat::output_format_name(format)),
                   "invalid_request_error", "tool_choice");
  }
  sample::JsonGrammar g;
  const std::string ws = g.use("ws");
  const char* args_key = format == chat::OutputFormat::Hermes ? "arguments" : "parameters";
  std::string calls;
  for (size_t i = 0; i < tools.size(); ++i) {
    const auto& fn = tools[i]["function"];
    const std::string name = fn["name"].get<std::string>();
    if (!only.empty() && name != only) continue;
    const nlohmann::ordered_json schema = fn.contains("parameters") && !fn["parameters"].empty()
                                              ? fn["parameters"]
                                              : nlohmann::ordered_json{{"type", "object"}, {"additionalProperties", true}};
    std::string args;
    try {
      args = g.add(schema, fmt::format("tool-{}-args", i));
    } catch (const Error& e) {
      throw ApiError(400, fmt::format("'tools[{}].function.parameters': {}", i, e.what()), "invalid_request_error",
                     fmt::format("tools[{}]", i));
    }
    calls += fmt::format("{}{} {} \",\" {} \"\\\"{}\\\"\" {} \":\" {} {} {}", calls.empty() ? "" : " | ", sample::gbnf_literal(nlohmann::ordered_json(name).dump()), ws, ws,
                         args_key, ws, ws, args, ws);
  }
  const std::string call = fmt::format("\"{{\" {} \"\\\"name\\\"\" {} \":\" {} ( {} ) \"}}\"", ws, ws, ws, calls);
  std::string root;
  if (format == chat::OutputFormat::Hermes) {
    const std::string block = "\"<tool_call>\" \"\\n\"? call \"\\n\"? \"</tool_call>\"";
    root = several ? "root ::= " + block + " ( \"\\n\"? " + block + " )*\n" : "root ::= " + block + "\n";
  } else {
    root = "root ::= call\n";
  }
  return g.gbnf(root + "call ::= " + call + "\n");
}

}  // namespace zinc::server
