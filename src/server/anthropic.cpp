#include "server/anthropic.h"

#include <fmt/format.h>

#include <climits>

#include "core/json_bounded.h"

namespace zinc::server {

using json = nlohmann::ordered_json;

namespace {

[[noreturn]] void bad(const std::string& field, const std::string& what) { bad_field(field, what); }

// The text of a tool_result's content: a string, or text blocks joined.
std::string result_text(const json& content, const std::string& p) {
  if (content.is_null()) return "";
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) bad(p, "must be a string or an array of text blocks");
  std::string text;
  for (const auto& b : content) {
    if (!b.is_object() || string_field(b, "type") != "text" || !b.contains("text") || !b["text"].is_string()) {
      bad(p, "only text blocks are supported in a tool result");
    }
    if (!text.empty()) text += "\n";
    text += b["text"].get<std::string>();
  }
  return text;
}

// One Anthropic message as OpenAI-shaped messages: a user turn's tool results become tool messages
// (before its text), an assistant turn's tool_use blocks its tool calls. Thinking blocks of earlier
// answers are dropped, as the chat templates drop earlier reasoning.
void convert_message(const json& m, size_t i, json& out) {
  const std::string p = fmt::format("messages[{}]", i);
  if (!m.is_object()) bad(p, "must be an object");
  if (!m.contains("role") || !m["role"].is_string()) bad(p + ".role", "must be a string");
  const std::string role = m["role"].get<std::string>();
  if (role != "user" && role != "assistant") bad(p + ".role", fmt::format("unknown role '{}' (user or assistant)", role));
  if (!m.contains("content")) bad(p + ".content", "is required");
  const json& content = m["content"];
  if (content.is_string()) {
    out.push_back({{"role", role}, {"content", content}});
    return;
  }
  if (!content.is_array()) bad(p + ".content", "must be a string or an array of content blocks");
  std::string text;
  json calls = json::array();
  for (size_t k = 0; k < content.size(); ++k) {
    const json& b = content[k];
    const std::string bp = fmt::format("{}.content[{}]", p, k);
    if (!b.is_object() || !b.contains("type") || !b["type"].is_string()) bad(bp, "must be a content block with a type");
    const std::string type = b["type"].get<std::string>();
    if (type == "text") {
      if (!b.contains("text") || !b["text"].is_string()) bad(bp + ".text", "must be a string");
      if (!text.empty()) text += "\n";
      text += b["text"].get<std::string>();
    } else if (type == "tool_use" && role == "assistant") {
      if (!b.contains("name") || !b["name"].is_string()) bad(bp + ".name", "must be a string");
      const json input = b.contains("input") ? b["input"] : json::object();
      if (!input.is_object()) bad(bp + ".input", "must be an object");
      calls.push_back({{"id", string_field(b, "id")}, {"type", "function"},
                       {"function", {{"name", b["name"]}, {"arguments", input.dump()}}}});
    } else if (type == "tool_result" && role == "user") {
      if (!b.contains("tool_use_id") || !b["tool_use_id"].is_string()) bad(bp + ".tool_use_id", "must be a string");
      std::string r = result_text(b.contains("content") ? b["content"] : json(), bp + ".content");
      if (b.contains("is_error") && b["is_error"].is_boolean() && b["is_error"].get<bool>()) r = "Error: " + r;
      out.push_back({{"role", "tool"}, {"tool_call_id", b["tool_use_id"]}, {"content", r}});
    } else if (type == "thinking" || type == "redacted_thinking") {
      if (role != "assistant") bad(bp, "thinking blocks belong to assistant messages");
    } else if (type == "image" || type == "document") {
      throw ApiError(400, fmt::format("'{}': {} blocks are not supported: this server runs text models", bp, type),
                     "invalid_request_error", bp);
    } else {
      bad(bp + ".type", fmt::format("'{}' is not a block a {} message can hold", type, role));
    }
  }
  if (role == "assistant") {
    json a = {{"role", "assistant"}, {"content", text}};
    if (!calls.empty()) a["tool_calls"] = calls;
    out.push_back(std::move(a));
  } else if (!text.empty() || content.empty()) {
    out.push_back({{"role", "user"}, {"content", text}});
  }
}

std::string random_suffix(const std::string& id) { return id.substr(id.find('_') + 1); }

}  // namespace

MessagesRequest parse_messages_request(const json& body, const sample::SamplerParams& defaults, bool count_only) {
  if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object");
  MessagesRequest r;
  json o = json::object();  // the request in OpenAI's shape
  if (body.contains("model")) o["model"] = body["model"];
  const json* mt = body.contains("max_tokens") ? &body["max_tokens"] : nullptr;
  if (!mt && !count_only) bad("max_tokens", "is required");
  if (mt) {
    if (!mt->is_number_integer() || mt->get<int64_t>() < 1) bad("max_tokens", "must be an integer of at least 1");
    o["max_tokens"] = *mt;
    r.has_max_tokens = true;
  }
  json messages = json::array();
  if (body.contains("system")) {
    const json& s = body["system"];
    std::string text;
    if (s.is_string()) {
      text = s.get<std::string>();
    } else if (s.is_array()) {
      text = result_text(s, "system");
    } else {
      bad("system", "must be a string or an array of text blocks");
    }
    if (!text.empty()) messages.push_back({{"role", "system"}, {"content", text}});
  }
  if (!body.contains("messages") || !body["messages"].is_array() || body["messages"].empty()) {
    bad("messages", "must be a non-empty array of messages");
  }
  for (size_t i = 0; i < body["messages"].size(); ++i) convert_message(body["messages"][i], i, messages);
  o["messages"] = std::move(messages);
  if (body.contains("tools")) {
    const json& tools = body["tools"];
    if (!tools.is_array()) bad("tools", "must be an array");
    json out = json::array();
    for (size_t i = 0; i < tools.size(); ++i) {
      const json& t = tools[i];
      const std::string p = fmt::format("tools[{}]", i);
      if (!t.is_object() || !t.contains("name") || !t["name"].is_string()) bad(p + ".name", "must be a string");
      if (t.contains("type") && t["type"] != "custom") {
        throw ApiError(400, fmt::format("'{}': server tools ({}) are not supported; give the tool's input_schema", p,
                                        t["type"].dump()),
                       "invalid_request_error", p);
      }
      const json schema = t.contains("input_schema") ? t["input_schema"] : json::object();
      if (!schema.is_object()) bad(p + ".input_schema", "must be an object");
      json fn = {{"name", t["name"]}, {"parameters", schema}};
      if (t.contains("description") && t["description"].is_string()) fn["description"] = t["description"];
      out.push_back({{"type", "function"}, {"function", fn}});
    }
    o["tools"] = std::move(out);
  }
  if (body.contains("tool_choice")) {
    const json& c = body["tool_choice"];
    if (!c.is_object() || !c.contains("type") || !c["type"].is_string()) bad("tool_choice", "must be an object with a type");
    const std::string type = c["type"].get<std::string>();
    if (type == "none") {
      o["tool_choice"] = "none";
    } else if (type == "any") {
      o["tool_choice"] = "required";
    } else if (type == "tool") {
      if (!c.contains("name") || !c["name"].is_string()) bad("tool_choice.name", "must be the name of a tool");
      o["tool_choice"] = {{"type", "function"}, {"function", {{"name", c["name"]}}}};
    } else if (type != "auto") {
      bad("tool_choice.type", "must be auto, any, tool or none");
    }
  }
  if (body.contains("stop_sequences")) {
    if (!body["stop_sequences"].is_array()) bad("stop_sequences", "must be an array of strings");
    for (const auto& s : body["stop_sequences"]) {
      if (!s.is_string()) bad("stop_sequences", "must be an array of strings");
    }
    o["stop"] = body["stop_sequences"];
  }
  for (const char* k : {"temperature", "top_p", "top_k"}) {
    if (body.contains(k)) o[k] = body[k];
  }
  if (body.contains("thinking")) {
    // {type: enabled, budget_tokens} or {type: disabled}. At the budget the engine concludes the
    // reasoning and the model goes on to the answer (runtime::ReasoningBudget).
    const json& t = body["thinking"];
    if (!t.is_object() || !t.contains("type") || !t["type"].is_string()) bad("thinking", "must be an object with a type");
    const std::string type = t["type"].get<std::string>();
    if (type != "enabled" && type != "disabled") bad("thinking.type", "must be enabled or disabled");
    if (type == "enabled" && t.contains("budget_tokens")) {
      if (!t["budget_tokens"].is_number_integer() || t["budget_tokens"].get<int64_t>() < 0 ||
          t["budget_tokens"].get<int64_t>() > INT32_MAX) {
        bad("thinking.budget_tokens", "must be an integer, at least 0");
      }
      o["thinking_budget_tokens"] = t["budget_tokens"];
    }
    o["chat_template_kwargs"] = {{"enable_thinking", type == "enabled"}};
  }
  if (body.contains("stream")) {
    if (!body["stream"].is_boolean()) bad("stream", "must be true or false");
    r.stream = body["stream"].get<bool>();
  }
  r.chat = parse_chat_request(o, defaults);
  return r;
}

std::string anthropic_stop_reason(const runtime::GenerateResult& r, const chat::ParsedOutput& m) {
  if (!m.tool_calls.empty()) return "tool_use";
  switch (r.reason) {
    case runtime::StopReason::Length:
    case runtime::StopReason::ContextFull: return "max_tokens";
    case runtime::StopReason::StopString: return "stop_sequence";
    default: return "end_turn";
  }
}

namespace {

ordered_json tool_use_block(const chat::ToolCall& call, const std::string& message_id, size_t n) {
  ordered_json input = call.arguments.is_object() ? call.arguments : ordered_json::object();
  return {{"type", "tool_use"}, {"id", fmt::format("toolu_{}_{}", random_suffix(message_id), n)}, {"name", call.name},
          {"input", input}};
}

ordered_json stop_sequence(const runtime::GenerateResult& r, const std::vector<std::string>& stop) {
  if (r.reason != runtime::StopReason::StopString || r.stop_index < 0 || r.stop_index >= static_cast<int32_t>(stop.size())) {
    return nullptr;
  }
  return stop[static_cast<size_t>(r.stop_index)];
}

ordered_json usage(int64_t input, int64_t output) { return {{"input_tokens", input}, {"output_tokens", output}}; }

}  // namespace

ordered_json message_json(const CompletionResult& c, const std::vector<std::string>& stop) {
  ordered_json content = ordered_json::array();
  if (!c.message.reasoning.empty()) content.push_back({{"type", "thinking"}, {"thinking", c.message.reasoning}, {"signature", ""}});
  if (!c.message.content.empty() || (c.message.tool_calls.empty() && content.empty())) content.push_back({{"type", "text"}, {"text", c.message.content}});
  for (size_t i = 0; i < c.message.tool_calls.size(); ++i) content.push_back(tool_use_block(c.message.tool_calls[i], c.id, i));
  return {{"id", c.id},
          {"type", "message"},
          {"role", "assistant"},
          {"model", c.model},
          {"content", content},
          {"stop_reason", anthropic_stop_reason(c.gen, c.message)},
          {"stop_sequence", stop_sequence(c.gen, stop)},
          {"usage", usage(c.gen.prompt_tokens, static_cast<int64_t>(c.gen.tokens.size()))}};
}

ordered_json anthropic_error_json(const ApiError& e) {
  const int s = e.status();
  const char* type = s == 401   ? "authentication_error"
                     : s == 403 ? "permission_error"
                     : s == 404 ? "not_found_error"
                     : s == 413 ? "request_too_large"
                     : s == 429 ? "rate_limit_error"
                     : s == 503 ? "overloaded_error"
                     : s >= 500 ? "api_error"
                                : "invalid_request_error";
  return {{"type", "error"}, {"error", {{"type", type}, {"message", e.what()}}}};
}

MessagesStream::MessagesStream(CompletionResult& result, chat::OutputParserOptions parser, int64_t input_tokens)
    : result_(result), parser_(parser), input_tokens_(input_tokens) {}

std::vector<MessagesStream::Event> MessagesStream::start() {
  ordered_json message = {{"id", result_.id},          {"type", "message"},  {"role", "assistant"},
                          {"model", result_.model},    {"content", ordered_json::array()},
                          {"stop_reason", nullptr},    {"stop_sequence", nullptr},
                          {"usage", usage(input_tokens_, 0)}};
  return {{"message_start", {{"type", "message_start"}, {"message", message}}}, {"ping", {{"type", "ping"}}}};
}

void MessagesStream::open(const std::string& kind, ordered_json block, std::vector<Event>& out) {
  close(out);
  open_ = kind;
  ++index_;
  out.push_back({"content_block_start", {{"type", "content_block_start"}, {"index", index_}, {"content_block", block}}});
}

void MessagesStream::close(std::vector<Event>& out) {
  if (open_.empty()) return;
  if (open_ == "thinking") {
    out.push_back({"content_block_delta", {{"type", "content_block_delta"}, {"index", index_},
                                           {"delta", {{"type", "signature_delta"}, {"signature", ""}}}}});
  }
  out.push_back({"content_block_stop", {{"type", "content_block_stop"}, {"index", index_}}});
  open_.clear();
}

void MessagesStream::deltas(const chat::ParsedOutput& d, std::vector<Event>& out) {
  result_.message += d;
  if (!d.reasoning.empty()) {
    if (open_ != "thinking") open("thinking", {{"type", "thinking"}, {"thinking", ""}}, out);
    out.push_back({"content_block_delta", {{"type", "content_block_delta"}, {"index", index_},
                                           {"delta", {{"type", "thinking_delta"}, {"thinking", d.reasoning}}}}});
  }
  if (!d.content.empty()) {
    if (open_ != "text") open("text", {{"type", "text"}, {"text", ""}}, out);
    out.push_back({"content_block_delta", {{"type", "content_block_delta"}, {"index", index_},
                                           {"delta", {{"type", "text_delta"}, {"text", d.content}}}}});
  }
  for (const auto& call : d.tool_calls) {
    ordered_json block = tool_use_block(call, result_.id, tools_++);
    const std::string input = block["input"].dump();
    block["input"] = ordered_json::object();
    open("tool_use", block, out);
    out.push_back({"content_block_delta", {{"type", "content_block_delta"}, {"index", index_},
                                           {"delta", {{"type", "input_json_delta"}, {"partial_json", input}}}}});
  }
}

std::vector<MessagesStream::Event> MessagesStream::push(std::string_view text) {
  std::vector<Event> out;
  deltas(parser_.push(text), out);
  return out;
}

std::vector<MessagesStream::Event> MessagesStream::finish(runtime::GenerateResult gen, const std::vector<std::string>& stop) {
  std::vector<Event> out;
  deltas(parser_.finish(), out);
  if (index_ < 0) open("text", {{"type", "text"}, {"text", ""}}, out);  // an empty answer is one empty text block
  close(out);
  result_.gen = std::move(gen);
  out.push_back({"message_delta",
                 {{"type", "message_delta"},
                  {"delta", {{"stop_reason", anthropic_stop_reason(result_.gen, result_.message)},
                             {"stop_sequence", stop_sequence(result_.gen, stop)}}},
                  {"usage", usage(input_tokens_, static_cast<int64_t>(result_.gen.tokens.size()))}}});
  out.push_back({"message_stop", {{"type", "message_stop"}}});
  return out;
}

}  // namespace zinc::server
