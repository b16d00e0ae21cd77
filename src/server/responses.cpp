#include "server/responses.h"

#include <fmt/format.h>

#include <chrono>

namespace zinc::server {

using json = nlohmann::ordered_json;

namespace {

[[noreturn]] void bad(const std::string& field, const std::string& what) { bad_field(field, what); }

// A message item's text: a string, or its text parts joined.
std::string item_text(const json& content, const std::string& p) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) bad(p, "must be a string or an array of content parts");
  std::string text;
  for (size_t k = 0; k < content.size(); ++k) {
    const json& part = content[k];
    const std::string t = part.is_object() ? string_field(part, "type") : "";
    if (t != "input_text" && t != "output_text" && t != "text") {
      throw ApiError(400, fmt::format("'{}[{}]': {} parts are not supported: this server runs text models", p, k,
                                      t.empty() ? "untyped" : t),
                     "invalid_request_error", p);
    }
    if (!part.contains("text") || !part["text"].is_string()) bad(fmt::format("{}[{}].text", p, k), "must be a string");
    if (!text.empty()) text += "\n";
    text += part["text"].get<std::string>();
  }
  return text;
}

std::string suffix(const std::string& id) { return id.substr(id.find('_') + 1); }

ordered_json function_call_item(const chat::ToolCall& call, const std::string& response_id, size_t n, const char* status) {
  const std::string args = call.arguments.is_string() ? call.arguments.get<std::string>() : call.arguments.dump();
  return {{"type", "function_call"}, {"id", fmt::format("fc_{}_{}", suffix(response_id), n)},
          {"call_id", fmt::format("call_{}_{}", suffix(response_id), n)}, {"name", call.name}, {"arguments", args},
          {"status", status}};
}

bool incomplete(const runtime::GenerateResult& g) {
  return g.reason == runtime::StopReason::Length || g.reason == runtime::StopReason::ContextFull;
}

// The response object's fields around its output.
ordered_json base(const CompletionResult& c, const CompletionRequest& r, const char* status) {
  ordered_json tools = ordered_json::array();
  if (r.tools.is_array()) {
    for (const auto& t : r.tools) {
      ordered_json f = {{"type", "function"}, {"name", t["function"]["name"]}};
      if (t["function"].contains("description")) f["description"] = t["function"]["description"];
      f["parameters"] = t["function"].value("parameters", ordered_json::object());
      f["strict"] = false;
      tools.push_back(std::move(f));
    }
  }
  return {{"id", c.id},
          {"object", "response"},
          {"created_at", c.created},
          {"status", status},
          {"error", nullptr},
          {"incomplete_details", nullptr},
          {"instructions", nullptr},
          {"max_output_tokens", r.max_tokens >= 0 ? ordered_json(r.max_tokens) : ordered_json()},
          {"model", c.model},
          {"output", ordered_json::array()},
          {"parallel_tool_calls", true},
          {"previous_response_id", nullptr},
          {"reasoning", {{"effort", nullptr}, {"summary", nullptr}}},
          {"store", false},
          {"temperature", r.sampling.temperature},
          {"text", {{"format", {{"type", "text"}}}}},
          {"tool_choice", "auto"},
          {"tools", tools},
          {"top_p", r.sampling.top_p},
          {"truncation", "disabled"},
          {"usage", nullptr},
          {"metadata", ordered_json::object()}};
}

ordered_json with_fields(ordered_json j, const ordered_json& fields) {
  for (const auto& [k, v] : fields.items()) j[k] = v;
  return j;
}

ordered_json usage_of(const runtime::GenerateResult& g) {
  const auto out = static_cast<int64_t>(g.tokens.size());
  return {{"input_tokens", g.prompt_tokens},
          {"input_tokens_details", {{"cached_tokens", g.cached_tokens}}},
          {"output_tokens", out},
          {"output_tokens_details", {{"reasoning_tokens", g.reasoning_tokens}}},
          {"total_tokens", g.prompt_tokens + out}};
}

void finish_fields(ordered_json& j, const runtime::GenerateResult& g) {
  if (incomplete(g)) {
    j["status"] = "incomplete";
    j["incomplete_details"] = {{"reason", "max_output_tokens"}};
  } else {
    j["status"] = "completed";
  }
  j["usage"] = usage_of(g);
}

}  // namespace

ResponsesRequest parse_responses_request(const json& body, const sample::SamplerParams& defaults) {
  if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object");
  ResponsesRequest r;
  if (body.contains("previous_response_id") && !body["previous_response_id"].is_null()) {
    if (!body["previous_response_id"].is_string() || body["previous_response_id"].get<std::string>().empty()) {
      bad("previous_response_id", "must be the id of a response");
    }
    r.previous_response_id = body["previous_response_id"].get<std::string>();
  }
  if (body.contains("store") && !body["store"].is_null()) {
    if (!body["store"].is_boolean()) bad("store", "must be true or false");
    r.store = body["store"].get<bool>();
  }
  json o = json::object();
  if (body.contains("model")) o["model"] = body["model"];
  json messages = json::array();
  if (body.contains("instructions") && !body["instructions"].is_null()) {
    if (!body["instructions"].is_string()) bad("instructions", "must be a string");
    messages.push_back({{"role", "system"}, {"content", body["instructions"]}});
    r.instructions = 1;
  }
  if (!body.contains("input")) bad("input", "is required");
  const json& input = body["input"];
  if (input.is_string()) {
    messages.push_back({{"role", "user"}, {"content", input}});
  } else if (input.is_array() && !input.empty()) {
    for (size_t i = 0; i < input.size(); ++i) {
      const json& it = input[i];
      const std::string p = fmt::format("input[{}]", i);
      if (!it.is_object()) bad(p, "must be an object");
      if (it.contains("type") && !it["type"].is_string()) bad(p + ".type", "must be a string");
      const std::string type = string_field(it, "type", it.contains("role") ? "message" : "");
      if (type == "message") {
        if (!it.contains("role") || !it["role"].is_string()) bad(p + ".role", "must be a string");
        std::string role = it["role"].get<std::string>();
        if (role == "developer") role = "system";
        if (role != "system" && role != "user" && role != "assistant") bad(p + ".role", fmt::format("unknown role '{}'", role));
        messages.push_back({{"role", role}, {"content", item_text(it.contains("content") ? it["content"] : json(), p + ".content")}});
      } else if (type == "function_call") {
        if (!it.contains("name") || !it["name"].is_string()) bad(p + ".name", "must be a string");
        if (!it.contains("arguments") || !it["arguments"].is_string()) bad(p + ".arguments", "must be a string");
        const json call = {{"id", string_field(it, "call_id")}, {"type", "function"},
                           {"function", {{"name", it["name"]}, {"arguments", it["arguments"]}}}};
        // Calls made in one answer belong to one assistant message.
        if (messages.empty() || messages.back()["role"] != "assistant") messages.push_back({{"role", "assistant"}, {"content", ""}});
        messages.back()["tool_calls"].push_back(call);
      } else if (type == "function_call_output") {
        if (!it.contains("call_id") || !it["call_id"].is_string()) bad(p + ".call_id", "must be a string");
        if (!it.contains("output") || !it["output"].is_string()) bad(p + ".output", "must be a string");
        messages.push_back({{"role", "tool"}, {"tool_call_id", it["call_id"]}, {"content", it["output"]}});
      } else if (type == "reasoning") {
        // earlier reasoning: the chat templates drop it
      } else {
        bad(p + ".type", fmt::format("'{}' items are not supported", type));
      }
    }
  } else {
    bad("input", "must be a string or a non-empty array of items");
  }
  o["messages"] = std::move(messages);
  if (body.contains("tools")) {
    if (!body["tools"].is_array()) bad("tools", "must be an array");
    json tools = json::array();
    for (size_t i = 0; i < body["tools"].size(); ++i) {
      const json& t = body["tools"][i];
      const std::string p = fmt::format("tools[{}]", i);
      if (!t.is_object() || string_field(t, "type") != "function") {
        throw ApiError(400, fmt::format("'{}': only function tools are supported", p), "invalid_request_error", p);
      }
      if (!t.contains("name") || !t["name"].is_string()) bad(p + ".name", "must be a string");
      json fn = {{"name", t["name"]}, {"parameters", t.contains("parameters") ? t["parameters"] : json::object()}};
      if (t.contains("description") && t["description"].is_string()) fn["description"] = t["description"];
      tools.push_back({{"type", "function"}, {"function", fn}});
    }
    o["tools"] = std::move(tools);
  }
  if (body.contains("tool_choice")) {
    const json& c = body["tool_choice"];
    o["tool_choice"] = c.is_object() && string_field(c, "type") == "function" ? json{{"type", "function"}, {"function", {{"name", string_field(c, "name")}}}} : c;
  }
  if (body.contains("max_output_tokens") && !body["max_output_tokens"].is_null()) o["max_tokens"] = body["max_output_tokens"];
  for (const char* k : {"temperature", "top_p"}) {
    if (body.contains(k) && !body[k].is_null()) o[k] = body[k];
  }
  if (body.contains("reasoning") && body["reasoning"].is_object() && body["reasoning"].contains("effort") &&
      !body["reasoning"]["effort"].is_null()) {
    o["reasoning_effort"] = body["reasoning"]["effort"];
  }
  if (body.contains("text") && body["text"].is_object() && body["text"].contains("format")) {
    // {type: json_schema, name, schema, strict} here; {type: json_schema, json_schema: {...}} in chat.
    const json& f = body["text"]["format"];
    if (f.is_object() && string_field(f, "type") == "json_schema" && !f.contains("json_schema")) {
      json js = f;
      js.erase("type");
      o["response_format"] = {{"type", "json_schema"}, {"json_schema", js}};
    } else {
      o["response_format"] = f;
    }
  }
  if (body.contains("stream")) {
    if (!body["stream"].is_boolean()) bad("stream", "must be true or false");
    r.stream = body["stream"].get<bool>();
  }
  r.chat = parse_chat_request(o, defaults);
  return r;
}

ordered_json response_json(const CompletionResult& c, const CompletionRequest& r) {
  ordered_json j = with_fields(base(c, r, "completed"), c.response_fields);
  const std::string s = suffix(c.id);
  if (!c.message.reasoning.empty()) {
    j["output"].push_back({{"type", "reasoning"}, {"id", "rs_" + s}, {"summary", ordered_json::array()},
                           {"content", {{{"type", "reasoning_text"}, {"text", c.message.reasoning}}}}});
  }
  const char* item_status = incomplete(c.gen) ? "incomplete" : "completed";
  if (!c.message.content.empty() || c.message.tool_calls.empty()) {
    j["output"].push_back({{"type", "message"}, {"id", "msg_" + s}, {"status", item_status}, {"role", "assistant"},
                           {"content", {{{"type", "output_text"}, {"text", c.message.content}, {"annotations", ordered_json::array()}}}}});
  }
  for (size_t i = 0; i < c.message.tool_calls.size(); ++i) {
    j["output"].push_back(function_call_item(c.message.tool_calls[i], c.id, i, "completed"));
  }
  finish_fields(j, c.gen);
  return j;
}

ResponsesStream::ResponsesStream(CompletionResult& result, const CompletionRequest& request, chat::OutputParserOptions parser)
    : result_(result), request_(request), parser_(parser) {}

void ResponsesStream::add(const std::string& type, ordered_json data, std::vector<Event>& out) {
  ordered_json e = {{"type", type}, {"sequence_number", sequence_++}};
  for (auto& [k, v] : data.items()) e[k] = std::move(v);
  out.push_back({type, std::move(e)});
}

std::vector<ResponsesStream::Event> ResponsesStream::start() {
  std::vector<Event> out;
  const ordered_json r = with_fields(base(result_, request_, "in_progress"), result_.response_fields);
  add("response.created", {{"response", r}}, out);
  add("response.in_progress", {{"response", r}}, out);
  return out;
}

void ResponsesStream::open(const std::string& kind, std::vector<Event>& out) {
  close(out);
  open_ = kind;
  text_.clear();
  ++output_index_;
  const std::string s = suffix(result_.id);
  if (kind == "reasoning") {
    add("response.output_item.added", {{"output_index", output_index_},
        {"item", {{"type", "reasoning"}, {"id", "rs_" + s}, {"summary", ordered_json::array()}, {"content", ordered_json::array()}}}}, out);
    add("response.content_part.added", {{"item_id", "rs_" + s}, {"output_index", output_index_}, {"content_index", 0},
                                        {"part", {{"type", "reasoning_text"}, {"text", ""}}}}, out);
  } else {
    add("response.output_item.added", {{"output_index", output_index_},
        {"item", {{"type", "message"}, {"id", "msg_" + s}, {"status", "in_progress"}, {"role", "assistant"},
                  {"content", ordered_json::array()}}}}, out);
    add("response.content_part.added", {{"item_id", "msg_" + s}, {"output_index", output_index_}, {"content_index", 0},
                                        {"part", {{"type", "output_text"}, {"text", ""}, {"annotations", ordered_json::array()}}}}, out);
  }
}

void ResponsesStream::close(std::vector<Event>& out) {
  if (open_.empty()) return;
  const std::string s = suffix(result_.id);
  if (open_ == "reasoning") {
    const ordered_json part = {{"type", "reasoning_text"}, {"text", text_}};
    add("response.reasoning_text.done", {{"item_id", "rs_" + s}, {"output_index", output_index_}, {"content_index", 0}, {"text", text_}}, out);
    add("response.content_part.done", {{"item_id", "rs_" + s}, {"output_index", output_index_}, {"content_index", 0}, {"part", part}}, out);
    add("response.output_item.done", {{"output_index", output_index_},
        {"item", {{"type", "reasoning"}, {"id", "rs_" + s}, {"summary", ordered_json::array()}, {"content", {part}}}}}, out);
  } else {
    const ordered_json part = {{"type", "output_text"}, {"text", text_}, {"annotations", ordered_json::array()}};
    add("response.output_text.done", {{"item_id", "msg_" + s}, {"output_index", output_index_}, {"content_index", 0}, {"text", text_}}, out);
    add("response.content_part.done", {{"item_id", "msg_" + s}, {"output_index", output_index_}, {"content_index", 0}, {"part", part}}, out);
    add("response.output_item.done", {{"output_index", output_index_},
        {"item", {{"type", "message"}, {"id", "msg_" + s}, {"status", "completed"}, {"role", "assistant"}, {"content", {part}}}}}, out);
  }
  open_.clear();
}

void ResponsesStream::deltas(const chat::ParsedOutput& d, std::vector<Event>& out) {
  result_.message += d;
  const std::string s = suffix(result_.id);
  if (!d.reasoning.empty()) {
    if (open_ != "reasoning") open("reasoning", out);
    text_ += d.reasoning;
    add("response.reasoning_text.delta", {{"item_id", "rs_" + s}, {"output_index", output_index_}, {"content_index", 0}, {"delta", d.reasoning}}, out);
  }
  if (!d.content.empty()) {
    if (open_ != "message") open("message", out);
    text_ += d.content;
    add("response.output_text.delta", {{"item_id", "msg_" + s}, {"output_index", output_index_}, {"content_index", 0},
                                       {"delta", d.content}, {"logprobs", ordered_json::array()}}, out);
  }
  for (const auto& call : d.tool_calls) {
    close(out);
    ++output_index_;
    ordered_json item = function_call_item(call, result_.id, calls_++, "in_progress");
    const std::string args = item["arguments"].get<std::string>();
    item["arguments"] = "";
    add("response.output_item.added", {{"output_index", output_index_}, {"item", item}}, out);
    add("response.function_call_arguments.delta", {{"item_id", item["id"]}, {"output_index", output_index_}, {"delta", args}}, out);
    add("response.function_call_arguments.done", {{"item_id", item["id"]}, {"output_index", output_index_}, {"arguments", args}}, out);
    item["arguments"] = args;
    item["status"] = "completed";
    add("response.output_item.done", {{"output_index", output_index_}, {"item", item}}, out);
  }
}

std::vector<ResponsesStream::Event> ResponsesStream::push(std::string_view text) {
  std::vector<Event> out;
  deltas(parser_.push(text), out);
  return out;
}

std::vector<ResponsesStream::Event> ResponsesStream::finish(runtime::GenerateResult gen) {
  std::vector<Event> out;
  deltas(parser_.finish(), out);
  if (output_index_ < 0) open("message", out);  // an empty answer is one empty message
  close(out);
  result_.gen = std::move(gen);
  add(incomplete(result_.gen) ? "response.incomplete" : "response.completed", {{"response", response_json(result_, request_)}}, out);
  return out;
}

ordered_json response_assistant_message(const CompletionResult& c) {
  ordered_json m = {{"role", "assistant"}, {"content", c.message.content}};
  if (!c.message.reasoning.empty()) m["reasoning_content"] = c.message.reasoning;
  if (!c.message.tool_calls.empty()) {
    ordered_json calls = ordered_json::array();
    for (size_t i = 0; i < c.message.tool_calls.size(); ++i) {
      const auto& call = c.message.tool_calls[i];
      // The call id the output item gave the client, which its function_call_output names.
      calls.push_back({{"id", function_call_item(call, c.id, i, "completed")["call_id"]},
                       {"type", "function"},
                       {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
    }
    m["tool_calls"] = std::move(calls);
  }
  return m;
}

void ResponseStore::put(const std::string& id, Stored stored) {
  const size_t bytes = stored.conversation.dump().size() + stored.response.dump().size();
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto it = index_.find(id); it != index_.end()) {
    bytes_ -= it->second->bytes;
    order_.erase(it->second);
    index_.erase(it);
  }
  order_.push_front({id, std::move(stored), bytes});
  index_[id] = order_.begin();
  bytes_ += bytes;
  while (!order_.empty() && (order_.size() > max_entries_ || bytes_ > max_bytes_)) {
    bytes_ -= order_.back().bytes;
    index_.erase(order_.back().id);
    order_.pop_back();
  }
}

std::optional<ResponseStore::Stored> ResponseStore::get(const std::string& id) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = index_.find(id);
  if (it == index_.end()) return std::nullopt;
  order_.splice(order_.begin(), order_, it->second);
  return it->second->stored;
}

bool ResponseStore::erase(const std::string& id) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = index_.find(id);
  if (it == index_.end()) return false;
  bytes_ -= it->second->bytes;
  order_.erase(it->second);
  index_.erase(it);
  return true;
}

}  // namespace zinc::server
