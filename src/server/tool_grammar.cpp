#include "server/tool_grammar.h"

#include <fmt/format.h>

#include "core/error.h"
#include "sample/grammar.h"
#include "sample/json_schema.h"
#include "server/openai.h"

namespace zinc::server {

namespace {

// The arguments of each tool the call may name, as (name, grammar rule) pairs; throws ApiError (400)
// for a schema the grammar cannot express.
std::vector<std::pair<std::string, std::string>> tool_arguments(sample::JsonGrammar& g, const nlohmann::ordered_json& tools,
                                                                const std::string& only) {
  std::vector<std::pair<std::string, std::string>> out;
  for (size_t i = 0; i < tools.size(); ++i) {
    const auto& fn = tools[i]["function"];
    const std::string name = fn["name"].get<std::string>();
    if (!only.empty() && name != only) continue;
    const nlohmann::ordered_json schema = fn.contains("parameters") && !fn["parameters"].empty()
                                              ? fn["parameters"]
                                              : nlohmann::ordered_json{{"type", "object"}, {"additionalProperties", true}};
    try {
      out.emplace_back(name, g.add(schema, fmt::format("tool-{}-args", i)));
    } catch (const Error& e) {
      throw ApiError(400, fmt::format("'tools[{}].function.parameters': {}", i, e.what()), "invalid_request_error",
                     fmt::format("tools[{}]", i));
    }
  }
  return out;
}

// Harmony (GPT-OSS): a message to functions.NAME whose body is the arguments, ended by <|call|> (one
// call per turn). The header's markers are control tokens, written as token elements. `lazy`: the
// grammar starts at the recipient ("to=functions.", the trigger), whose message may have opened with
// the channel before or after it; else it is the whole answer after at most one analysis message (its
// body is reasoning, outside the grammar: it resumes at the <|start|> after its <|end|>).
std::string harmony_call_grammar(const std::vector<std::pair<std::string, std::string>>& tools, bool lazy) {
  std::string calls;
  for (const auto& [name, args] : tools) {
    // The name ends at a space or a marker (as the output parser reads it): "json" only after one.
    calls += fmt::format("{}{} ( <|channel|> \"commentary\" )? ( \" \" <|constrain|>? \"json\"? | <|constrain|> \"json\"? )? "
                         "<|message|> {} <|call|>",
                         calls.empty() ? "" : " | ", sample::gbnf_literal(name), args);
  }
  const std::string recipient = "\"to=functions.\" ( " + calls + " )";
  if (lazy) return "root ::= " + recipient + "\n";
  // One analysis message at most: a second would reason again past a budget already spent.
  return "root ::= ( <|start|> \"assistant\" )? ( <|channel|> \"analysis\" <|message|> <|start|> \"assistant\" )? "
         "<|channel|> \"commentary \" " + recipient + "\n";
}

}  // namespace

std::string tool_call_grammar(chat::OutputFormat format, const nlohmann::ordered_json& tools, const std::string& only,
                              bool several, bool lazy) {
  if (format != chat::OutputFormat::Hermes && format != chat::OutputFormat::Llama3 && format != chat::OutputFormat::Harmony) {
    throw ApiError(400,
                   fmt::format("'tool_choice': forcing a tool call is not supported for this model's tool-call format ({}); "
                               "use auto",
                               chat::output_format_name(format)),
                   "invalid_request_error", "tool_choice");
  }
  sample::JsonGrammar g;
  const auto args = tool_arguments(g, tools, only);
  if (format == chat::OutputFormat::Harmony) return g.gbnf(harmony_call_grammar(args, lazy));
  const std::string ws = g.use("ws");
  const char* args_key = format == chat::OutputFormat::Hermes ? "arguments" : "parameters";
  std::string calls;
  for (const auto& [name, rule] : args) {
    calls += fmt::format("{}{} {} \",\" {} \"\\\"{}\\\"\" {} \":\" {} {} {}", calls.empty() ? "" : " | ",
                         sample::gbnf_literal(nlohmann::ordered_json(name).dump()), ws, ws, args_key, ws, ws, rule, ws);
  }
  const std::string call = fmt::format("\"{{\" {} \"\\\"name\\\"\" {} \":\" {} ( {} ) \"}}\"", ws, ws, ws, calls);
  std::string root;
  if (format == chat::OutputFormat::Hermes) {
    const std::string block = "\"<tool_call>\" \"\\n\"? call \"\\n\"? \"</tool_call>\"";
    root = several ? "root ::= " + block + " ( \"\\n\"? " + block + " )*\n" : "root ::= " + block + "\n";
  } else {
    // Llama 3: calls separated by ";" (as the output parser reads them).
    root = several ? "root ::= call ( " + ws + " \";\" " + ws + " call )*\n" : "root ::= call\n";
  }
  return g.gbnf(root + "call ::= " + call + "\n");
}

std::string with_reasoning_lead(chat::OutputFormat format, const std::string& gbnf) {
  std::string lead;
  switch (format) {
    case chat::OutputFormat::Hermes:
    case chat::OutputFormat::Llama3: lead = "( <think> [ \\t\\r\\n]* )?"; break;
    case chat::OutputFormat::Harmony:
      lead = "( <|channel|> \"analysis\" <|message|> <|start|> \"assistant\" )? ( <|channel|> \"final\" <|message|> )?";
      break;
    case chat::OutputFormat::Plain: return "";
  }
  return gbnf + "\n" + kAfterReasoning + " ::= " + lead + " root\n";
}

OutputConstraint output_constraint(chat::OutputFormat format, const CompletionRequest& r, const std::string& server_grammar) {
  OutputConstraint c;
  c.gbnf = r.grammar.empty() && r.tool_choice.empty() ? server_grammar : r.grammar;
  c.param = r.grammar.empty() ? "" : "grammar";
  if (!r.tool_choice.empty()) {
    if (!c.gbnf.empty()) {
      throw ApiError(400, "'tool_choice': a forced tool call and a response format cannot both constrain the output",
                     "invalid_request_error", "tool_choice");
    }
    const bool any = r.tool_choice == "required";
    c.gbnf = tool_call_grammar(format, r.tools, any ? "" : r.tool_choice, any && r.parallel_tool_calls);
    c.param = "tool_choice";
  } else if (c.gbnf.empty() && r.tools.is_array() && !r.tools.empty() && format != chat::OutputFormat::Plain) {
    // tool_choice auto: free text until a call opens (Hermes: its tag; Harmony: a message's recipient;
    // Llama 3: a JSON object opening the answer), then the call's grammar.
    try {
      c.gbnf = tool_call_grammar(format, r.tools, "", r.parallel_tool_calls, /*lazy=*/true);
      c.trigger = format == chat::OutputFormat::Hermes ? "<tool_call>" : format == chat::OutputFormat::Harmony ? "to=functions." : "{";
      c.trigger_at_start = format == chat::OutputFormat::Llama3;
      c.param = "tools";
    } catch (const ApiError&) {
      c.gbnf.clear();  // a schema the grammar cannot express: the calls stay free
    }
  }
  return c;
}

}  // namespace zinc::server
