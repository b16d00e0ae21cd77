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

OutputConstraint output_constraint(chat::OutputFormat format, const CompletionRequest& r, const std::string& server_grammar) {
  OutputConstraint c;
  c.gbnf = r.grammar.empty() && r.tool_choice.empty() ? server_grammar : r.grammar;
  if (!r.tool_choice.empty()) {
    if (!c.gbnf.empty()) {
      throw ApiError(400, "'tool_choice': a forced tool call and a response format cannot both constrain the output",
                     "invalid_request_error", "tool_choice");
    }
    const bool any = r.tool_choice == "required";
    c.gbnf = tool_call_grammar(format, r.tools, any ? "" : r.tool_choice, any && r.parallel_tool_calls);
  } else if (c.gbnf.empty() && r.tools.is_array() && !r.tools.empty() && format == chat::OutputFormat::Hermes) {
    try {
      c.gbnf = tool_call_grammar(format, r.tools, "", r.parallel_tool_calls);
      c.trigger = "<tool_call>";
    } catch (const ApiError&) {
      c.gbnf.clear();  // a schema the grammar cannot express: the calls stay free
    }
  }
  return c;
}

}  // namespace zinc::server
