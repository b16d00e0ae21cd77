#include "server/openai.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>

#include "core/json_bounded.h"
#include "sample/grammar.h"
#include "sample/json_schema.h"

namespace zinc::server {

using json = nlohmann::ordered_json;

ApiError::ApiError(int status, std::string message, std::string type, std::string param, std::string code)
    : Error(std::move(message)), status_(status), type_(std::move(type)), param_(std::move(param)), code_(std::move(code)) {}

void bad_field(const std::string& param, const std::string& what) {
  throw ApiError(400, fmt::format("'{}': {}", param, what), "invalid_request_error", param);
}

std::string string_field(const json& object, const char* key, const std::string& fallback) {
  if (!object.is_object()) return fallback;
  const auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : fallback;
}

ordered_json ApiError::body() const {
  return {{"error",
           {{"message", what()},
            {"type", type_},
            {"param", param_.empty() ? ordered_json() : ordered_json(param_)},
            {"code", code_.empty() ? ordered_json() : ordered_json(code_)}}}};
}

namespace {

[[noreturn]] void bad(const std::string& param, const std::string& what) { bad_field(param, what); }

// The field when present and not null.
const json* field(const json& body, const char* key) {
  const auto it = body.find(key);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

double number(const json& body, const char* key, double lo, double hi, double fallback) {
  const json* v = field(body, key);
  if (!v) return fallback;
  if (!v->is_number()) bad(key, "must be a number");
  const double x = v->get<double>();
  if (!(x >= lo && x <= hi)) bad(key, fmt::format("must be between {} and {}, got {}", lo, hi, x));
  return x;
}

int64_t integer(const json& body, const char* key, int64_t lo, int64_t hi, int64_t fallback) {
  const json* v = field(body, key);
  if (!v) return fallback;
  if (!v->is_number_integer() && !(v->is_number_float() && std::floor(v->get<double>()) == v->get<double>())) {
    bad(key, "must be an integer");
  }
  // Range-checked before any conversion: a float or an unsigned value beyond int64 has no int64 value.
  if (v->is_number_float() || v->is_number_unsigned()) {
    const double d = v->get<double>();
    if (!(d >= static_cast<double>(lo) && d <= static_cast<double>(hi) && d < 9223372036854775808.0)) {
      bad(key, fmt::format("must be between {} and {}, got {}", lo, hi, v->dump()));
    }
  }
  const auto x = v->is_number_float() ? static_cast<int64_t>(v->get<double>()) : v->get<int64_t>();
  if (x < lo || x > hi) bad(key, fmt::format("must be between {} and {}, got {}", lo, hi, x));
  return x;
}

bool boolean(const json& body, const char* key, bool fallback) {
  const json* v = field(body, key);
  if (!v) return fallback;
  if (!v->is_boolean()) bad(key, "must be true or false");
  return v->get<bool>();
}

// Content: a string, or an array of parts of which only text is supported.
std::string content_text(const json& content, const std::string& param) {
  if (content.is_null()) return "";
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) bad(param, "must be a string or an array of content parts");
  std::string out;
  for (size_t i = 0; i < content.size(); ++i) {
    const json& part = content[i];
    const std::string p = fmt::format("{}[{}]", param, i);
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) bad(p, "must be an object with a 'type'");
    const auto type = part["type"].get<std::string>();
    if (type != "text") {
      throw ApiError(400, fmt::format("'{}': content parts of type '{}' are not supported (text only)", p, type),
                     "invalid_request_error", p);
    }
    if (!part.contains("text") || !part["text"].is_string()) bad(p + ".text", "must be a string");
    if (!out.empty()) out += "\n";
    out += part["text"].get<std::string>();
  }
  return out;
}

// A grammar's text, checked now so that a bad one is a 400 naming its field.
std::string checked_grammar(std::string gbnf, const std::string& param) {
  try {
    sample::Grammar::parse(gbnf, "root", sample::any_token);  // <text> tokens: looked up in the model's vocabulary later
  } catch (const Error& e) {
    throw ApiError(400, fmt::format("'{}': {}", param, e.what()), "invalid_request_error", param);
  }
  return gbnf;
}

std::string schema_grammar(const json& schema, const std::string& param) {
  if (!schema.is_object() && !schema.is_boolean()) bad(param, "must be a JSON schema (an object)");
  try {
    return checked_grammar(sample::json_schema_to_gbnf(schema), param);
  } catch (const Error& e) {
    throw ApiError(400, fmt::format("'{}': {}", param, e.what()), "invalid_request_error", param);
  }
}

// What the output is constrained to: response_format (json_object, json_schema), or llama.cpp's
// json_schema and grammar fields. At most one of them.
void parse_constraint(const json& body, CompletionRequest& r) {
  int given = 0;
  if (const json* rf = field(body, "response_format")) {
    if (!rf->is_object() || !rf->contains("type") || !(*rf)["type"].is_string()) bad("response_format", "must be an object with a 'type'");
    const auto type = (*rf)["type"].get<std::string>();
    if (type == "json_object") {
      r.grammar = sample::json_value_gbnf(true);
      // llama.cpp accepts a schema here too.
      if (rf->contains("schema")) r.grammar = schema_grammar((*rf)["schema"], "response_format.schema");
      ++given;
    } else if (type == "json_schema") {
      const json* js = rf->contains("json_schema") ? &(*rf)["json_schema"] : nullptr;
      if (!js || !js->is_object() || !js->contains("schema")) bad("response_format.json_schema", "must be an object with a 'schema'");
      r.grammar = schema_grammar((*js)["schema"], "response_format.json_schema.schema");
      ++given;
    } else if (type != "text") {
      bad("response_format", fmt::format("unknown type '{}'", type));
    }
  }
  if (const json* js = field(body, "json_schema")) {
    r.grammar = schema_grammar(*js, "json_schema");
    ++given;
  }
  if (const json* g = field(body, "grammar")) {
    if (!g->is_string()) bad("grammar", "must be a string of GBNF");
    if (!g->get<std::string>().empty()) {
      r.grammar = checked_grammar(g->get<std::string>(), "grammar");
      ++given;
    }
  }
  if (given > 1) bad("grammar", "give one of response_format, json_schema and grammar");
}

void parse_common(const json& body, const sample::SamplerParams& defaults, CompletionRequest& r) {
  if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object");
  if (const json* m = field(body, "model")) {
    if (!m->is_string()) bad("model", "must be a string");
    r.model = m->get<std::string>();
  }
  r.stream = boolean(body, "stream", false);
  if (const json* so = field(body, "stream_options")) {
    if (!so->is_object()) bad("stream_options", "must be an object");
    r.include_usage = boolean(*so, "include_usage", false);
  }
  if (integer(body, "n", 1, 128, 1) != 1) bad("n", "only n = 1 is supported");
  r.max_tokens = static_cast<int32_t>(integer(body, "max_tokens", 0, 1 << 24, -1));
  r.max_tokens = static_cast<int32_t>(integer(body, "max_completion_tokens", 0, 1 << 24, r.max_tokens));
  auto& s = r.sampling;
  s = defaults;
  s.temperature = static_cast<float>(number(body, "temperature", 0, 2, s.temperature));
  s.top_p = static_cast<float>(number(body, "top_p", 0, 1, s.top_p));
  if (s.top_p == 0.0f) s.top_p = 1e-6f;  // 0 means "the top token only" to the API; the chain needs > 0
  s.top_k = static_cast<int32_t>(integer(body, "top_k", 0, 1 << 20, s.top_k));
  s.min_p = static_cast<float>(number(body, "min_p", 0, 1, s.min_p));
  s.typical_p = static_cast<float>(number(body, "typical_p", 1e-6, 1, s.typical_p));
  s.presence_penalty = static_cast<float>(number(body, "presence_penalty", -2, 2, s.presence_penalty));
  s.frequency_penalty = static_cast<float>(number(body, "frequency_penalty", -2, 2, s.frequency_penalty));
  s.repeat_penalty = static_cast<float>(number(body, "repetition_penalty", 1e-3, 10, s.repeat_penalty));
  s.repeat_penalty = static_cast<float>(number(body, "repeat_penalty", 1e-3, 10, s.repeat_penalty));
  if (const json* seed = field(body, "seed")) {
    if (!seed->is_number_integer()) bad("seed", "must be an integer");
    s.seed = seed->is_number_unsigned() ? seed->get<uint64_t>() : static_cast<uint64_t>(seed->get<int64_t>());
  }
  if (const json* stop = field(body, "stop")) {
    if (stop->is_string()) {
      r.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      for (const auto& x : *stop) {
        if (!x.is_string()) bad("stop", "must be a string or an array of strings");
        r.stop.push_back(x.get<std::string>());
      }
    } else {
      bad("stop", "must be a string or an array of strings");
    }
    if (r.stop.size() > 16) bad("stop", "at most 16 stop sequences");
    for (const auto& x : r.stop) {
      if (x.empty()) bad("stop", "stop sequences must not be empty");
    }
  }
  if (const json* bias = field(body, "logit_bias")) {
    if (!bias->is_object()) bad("logit_bias", "must be an object of token id to bias");
    for (const auto& [k, v] : bias->items()) {
      char* end = nullptr;
      errno = 0;
      const long long id = std::strtoll(k.c_str(), &end, 10);
      if (k.empty() || *end != '\0' || id < 0 || !v.is_number()) bad("logit_bias", "keys are token ids, values numbers");
      if (errno == ERANGE || id > INT32_MAX) bad("logit_bias", fmt::format("{} is not a token id", k));
      s.logit_bias.emplace_back(static_cast<int32_t>(id), v.get<float>());
    }
  }
  try {
    s.validate();
  } catch (const Error& e) {
    throw ApiError(400, e.what());
  }
}

}  // namespace

CompletionRequest parse_chat_request(const json& body, const sample::SamplerParams& defaults) {
  CompletionRequest r;
  r.chat = true;
  parse_common(body, defaults, r);
  parse_constraint(body, r);
  const json* msgs = field(body, "messages");
  if (!msgs || !msgs->is_array() || msgs->empty()) bad("messages", "must be a non-empty array of messages");
  for (size_t i = 0; i < msgs->size(); ++i) {
    const json& m = (*msgs)[i];
    const std::string p = fmt::format("messages[{}]", i);
    if (!m.is_object()) bad(p, "must be an object");
    if (!m.contains("role") || !m["role"].is_string()) bad(p + ".role", "must be a string");
    std::string role = m["role"].get<std::string>();
    if (role == "developer") role = "system";
    if (role != "system" && role != "user" && role != "assistant" && role != "tool") {
      bad(p + ".role", fmt::format("unknown role '{}' (system, developer, user, assistant or tool)", role));
    }
    ordered_json out = {{"role", role}, {"content", content_text(m.contains("content") ? m["content"] : json(), p + ".content")}};
    if (role == "assistant" && m.contains("tool_calls") && !m["tool_calls"].is_null()) {
      if (!m["tool_calls"].is_array()) bad(p + ".tool_calls", "must be an array");
      ordered_json calls = ordered_json::array();
      for (const auto& c : m["tool_calls"]) {
        if (!c.is_object() || !c.contains("function") || !c["function"].is_object() || !c["function"].contains("name")) {
          bad(p + ".tool_calls", "each call needs a function with a name");
        }
        // Templates expect the arguments as an object; the API carries them as a JSON string.
        ordered_json args = c["function"].value("arguments", ordered_json("{}"));
        if (args.is_string()) {
          try {
            args = parse_json_bounded<ordered_json>(args.get<std::string>());
          } catch (const JsonTooDeep& e) {
            bad(p + ".tool_calls", fmt::format("a call's arguments are refused: {}", e.what()));
          } catch (const json::exception&) {
          }
        }
        calls.push_back({{"id", c.contains("id") && c["id"].is_string() ? c["id"].get<std::string>() : std::string()},
                         {"type", "function"},
                         {"function", {{"name", c["function"]["name"]}, {"arguments", args}}}});
      }
      out["tool_calls"] = calls;
    }
    if (role == "tool") {
      if (m.contains("tool_call_id") && m["tool_call_id"].is_string()) out["tool_call_id"] = m["tool_call_id"];
      if (m.contains("name") && m["name"].is_string()) out["name"] = m["name"];
    }
    r.messages.push_back(std::move(out));
  }
  if (const json* tools = field(body, "tools")) {
    if (!tools->is_array()) bad("tools", "must be an array");
    for (size_t i = 0; i < tools->size(); ++i) {
      const json& t = (*tools)[i];
      if (!t.is_object() || !t.contains("type") || t["type"] != "function" || !t.contains("function") || !t["function"].is_object() ||
          !t["function"].contains("name") || !t["function"]["name"].is_string()) {
        bad(fmt::format("tools[{}]", i), "must be {\"type\": \"function\", \"function\": {\"name\": ..., ...}}");
      }
    }
    if (!tools->empty()) r.tools = *tools;
  }
  if (const json* choice = field(body, "tool_choice")) {
    if (choice->is_string()) {
      const auto c = choice->get<std::string>();
      if (c != "none" && c != "auto" && c != "required") bad("tool_choice", "must be none, auto, required or a function");
      if (c == "none") r.tools = nullptr;  // the model is not told about the tools
      if (c == "required") {
        if (!r.tools.is_array()) bad("tool_choice", "required needs tools");
        r.tool_choice = "required";
      }
    } else if (choice->is_object()) {
      const json* fn = choice->contains("function") ? &(*choice)["function"] : nullptr;
      if (string_field(*choice, "type") != "function" || !fn || !fn->is_object() || !fn->contains("name") || !(*fn)["name"].is_string()) {
        bad("tool_choice", "must be {\"type\": \"function\", \"function\": {\"name\": ...}}");
      }
      r.tool_choice = (*fn)["name"].get<std::string>();
      bool found = false;
      for (const auto& t : r.tools.is_array() ? r.tools : json::array()) found = found || t["function"]["name"] == r.tool_choice;
      if (!found) bad("tool_choice", fmt::format("names '{}', which is not among the tools", r.tool_choice));
    } else {
      bad("tool_choice", "must be none, auto, required or a function");
    }
  }
  r.parallel_tool_calls = boolean(body, "parallel_tool_calls", true);
  r.logprobs = boolean(body, "logprobs", false);
  r.top_logprobs = static_cast<int32_t>(integer(body, "top_logprobs", 0, 20, 0));
  if (const json* kw = field(body, "chat_template_kwargs")) {
    if (!kw->is_object()) bad("chat_template_kwargs", "must be an object");
    for (const auto& [k, v] : kw->items()) {
      if (k == "enable_thinking") {
        if (!v.is_boolean()) bad("chat_template_kwargs.enable_thinking", "must be true or false");
        r.enable_thinking = v.get<bool>();
      } else {
        r.template_vars[k] = v;
      }
    }
  }
  if (const json* effort = field(body, "reasoning_effort")) {
    if (!effort->is_string()) bad("reasoning_effort", "must be a string");
    r.reasoning_effort = effort->get<std::string>();
    static const char* const kEfforts[] = {"none", "minimal", "low", "medium", "high", "xhigh"};
    if (std::find(std::begin(kEfforts), std::end(kEfforts), r.reasoning_effort) == std::end(kEfforts)) {
      bad("reasoning_effort", "must be none, minimal, low, medium, high or xhigh");
    }
    r.template_vars["reasoning_effort"] = *effort;
  }
  if (const json* budget = field(body, "thinking_budget_tokens")) {
    if (!budget->is_number_integer() || budget->get<int64_t>() < -1 || budget->get<int64_t>() > INT32_MAX) {
      bad("thinking_budget_tokens", "must be an integer, at least 0 (or -1 for no limit)");
    }
    r.reasoning_budget = budget->get<int32_t>();
  }
  return r;
}

ThinkingPlan plan_thinking(const CompletionRequest& r, bool template_reads_effort, std::optional<bool> default_enable,
                           int32_t default_budget) {
  ThinkingPlan p;
  p.enable_thinking = r.enable_thinking ? r.enable_thinking : default_enable;
  p.budget = default_budget;
  if (!r.reasoning_effort.empty() && !template_reads_effort) {
    const std::string& e = r.reasoning_effort;
    if (e == "none" || e == "minimal") {
      if (!r.enable_thinking) p.enable_thinking = false;
    } else if (e == "low") {
      p.budget = 1024;
    } else if (e == "medium") {
      p.budget = 8192;
    } else {
      p.budget = -1;
    }
  }
  if (r.reasoning_budget) p.budget = *r.reasoning_budget;
  return p;
}

CompletionRequest parse_completion_request(const json& body, const sample::SamplerParams& defaults) {
  CompletionRequest r;
  r.chat = false;
  parse_common(body, defaults, r);
  parse_constraint(body, r);
  const json* prompt = field(body, "prompt");
  if (!prompt) bad("prompt", "is required");
  if (prompt->is_string()) {
    r.prompt = prompt->get<std::string>();
  } else if (prompt->is_array() && prompt->size() == 1 && (*prompt)[0].is_string()) {
    r.prompt = (*prompt)[0].get<std::string>();
  } else {
    bad("prompt", "must be a string (one prompt per request)");
  }
  if (const json* lp = field(body, "logprobs")) {
    if (lp->is_boolean()) {
      r.logprobs = lp->get<bool>();
    } else {
      r.logprobs = true;
      r.top_logprobs = static_cast<int32_t>(integer(body, "logprobs", 0, 20, 0));
    }
  }
  if (r.max_tokens < 0 && !field(body, "max_tokens")) r.max_tokens = 16;  // the completions API's default
  return r;
}

std::string finish_reason(const runtime::GenerateResult& r, const chat::ParsedOutput& message) {
  if (!message.tool_calls.empty()) return "tool_calls";
  switch (r.reason) {
    case runtime::StopReason::Length:
    case runtime::StopReason::ContextFull: return "length";
    default: return "stop";
  }
}

ordered_json usage_json(const runtime::GenerateResult& r) {
  const auto completion = static_cast<int64_t>(r.tokens.size());
  return {{"prompt_tokens", r.prompt_tokens},
          {"completion_tokens", completion},
          {"total_tokens", r.prompt_tokens + completion},
          {"prompt_tokens_details", {{"cached_tokens", r.cached_tokens}}},
          {"completion_tokens_details", {{"reasoning_tokens", r.reasoning_tokens}}}};
}

namespace {

ordered_json timings_json(const runtime::GenerateResult& r) {
  return {{"prompt_n", r.prompt_tokens - r.cached_tokens},
          {"prompt_ms", r.prefill_s * 1e3},
          {"prompt_per_second", r.prefill_tokens_per_s()},
          {"first_token_ms", r.first_token_s * 1e3},
          {"predicted_n", r.tokens.size()},
          {"predicted_ms", r.decode_s * 1e3},
          {"predicted_per_second", r.decode_tokens_per_s()}};
}

ordered_json bytes_of(const std::string& s) {
  ordered_json b = ordered_json::array();
  for (unsigned char c : s) b.push_back(c);
  return b;
}

ordered_json chat_logprobs(const CompletionResult& c) {
  ordered_json content = ordered_json::array();
  for (size_t i = 0; i < c.gen.logprobs.size() && i < c.token_texts.size(); ++i) {
    const auto& lp = c.gen.logprobs[i];
    ordered_json top = ordered_json::array();
    for (size_t k = 0; k < lp.top.size(); ++k) {
      const std::string& t = c.top_texts[i][k];
      top.push_back({{"token", t}, {"logprob", lp.top[k].logprob}, {"bytes", bytes_of(t)}});
    }
    content.push_back({{"token", c.token_texts[i]},
                       {"logprob", lp.chosen.logprob},
                       {"bytes", bytes_of(c.token_texts[i])},
                       {"top_logprobs", top}});
  }
  return {{"content", content}};
}

// Tool-call ids of a completion: "call_" + the end of its id + "_" + the call's index.
std::string tool_call_prefix(const std::string& completion_id) {
  return "call_" + completion_id.substr(completion_id.size() - std::min<size_t>(8, completion_id.size())) + "_";
}

ordered_json tool_calls_json(const std::vector<chat::ToolCall>& calls, size_t first_index, const std::string& id_prefix,
                             bool with_index) {
  ordered_json out = ordered_json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    const auto& call = calls[i];
    ordered_json j;
    if (with_index) j["index"] = first_index + i;
    j["id"] = fmt::format("{}{}", id_prefix, first_index + i);
    j["type"] = "function";
    j["function"] = {{"name", call.name},
                     {"arguments", call.arguments.is_string() ? call.arguments.get<std::string>() : call.arguments.dump()}};
    out.push_back(std::move(j));
  }
  return out;
}

}  // namespace

ordered_json chat_completion_json(const CompletionResult& c, bool logprobs) {
  ordered_json message = {{"role", "assistant"}};
  const bool calls = !c.message.tool_calls.empty();
  message["content"] = calls && c.message.content.empty() ? ordered_json() : ordered_json(c.message.content);
  if (!c.message.reasoning.empty()) message["reasoning_content"] = c.message.reasoning;
  if (calls) message["tool_calls"] = tool_calls_json(c.message.tool_calls, 0, tool_call_prefix(c.id), false);
  return {{"id", c.id},
          {"object", "chat.completion"},
          {"created", c.created},
          {"model", c.model},
          {"choices",
           ordered_json::array({{{"index", 0},
                                 {"message", message},
                                 {"logprobs", logprobs ? chat_logprobs(c) : ordered_json()},
                                 {"finish_reason", finish_reason(c.gen, c.message)}}})},
          {"usage", usage_json(c.gen)},
          {"timings", timings_json(c.gen)}};
}

ordered_json text_completion_json(const CompletionResult& c, bool logprobs) {
  ordered_json lp;
  if (logprobs) {
    ordered_json tokens = ordered_json::array(), token_lp = ordered_json::array(), top = ordered_json::array(),
                 offsets = ordered_json::array();
    size_t offset = 0;
    for (size_t i = 0; i < c.gen.logprobs.size() && i < c.token_texts.size(); ++i) {
      tokens.push_back(c.token_texts[i]);
      token_lp.push_back(c.gen.logprobs[i].chosen.logprob);
      ordered_json alt = ordered_json::object();
      for (size_t k = 0; k < c.gen.logprobs[i].top.size(); ++k) alt[c.top_texts[i][k]] = c.gen.logprobs[i].top[k].logprob;
      top.push_back(alt);
      offsets.push_back(offset);
      offset += c.token_texts[i].size();
    }
    lp = {{"tokens", tokens}, {"token_logprobs", token_lp}, {"top_logprobs", top}, {"text_offset", offsets}};
  }
  return {{"id", c.id},
          {"object", "text_completion"},
          {"created", c.created},
          {"model", c.model},
          {"choices", ordered_json::array({{{"text", c.gen.text},
                                             {"index", 0},
                                             {"logprobs", lp},
                                             {"finish_reason", finish_reason(c.gen, {})}}})},
          {"usage", usage_json(c.gen)},
          {"timings", timings_json(c.gen)}};
}

ordered_json chat_chunk(const CompletionResult& c, const ordered_json& delta, const std::optional<std::string>& finish) {
  return {{"id", c.id},
          {"object", "chat.completion.chunk"},
          {"created", c.created},
          {"model", c.model},
          {"choices", ordered_json::array({{{"index", 0},
                                             {"delta", delta},
                                             {"logprobs", ordered_json()},
                                             {"finish_reason", finish ? ordered_json(*finish) : ordered_json()}}})}};
}

ordered_json chat_delta(const chat::ParsedOutput& d, size_t first_tool_index, const std::string& id_prefix) {
  ordered_json delta = ordered_json::object();
  if (!d.reasoning.empty()) delta["reasoning_content"] = d.reasoning;
  if (!d.content.empty()) delta["content"] = d.content;
  if (!d.tool_calls.empty()) delta["tool_calls"] = tool_calls_json(d.tool_calls, first_tool_index, id_prefix, true);
  return delta;
}

ordered_json text_chunk(const CompletionResult& c, const std::string& text, const std::optional<std::string>& finish) {
  return {{"id", c.id},
          {"object", "text_completion"},
          {"created", c.created},
          {"model", c.model},
          {"choices", ordered_json::array({{{"text", text},
                                             {"index", 0},
                                             {"logprobs", ordered_json()},
                                             {"finish_reason", finish ? ordered_json(*finish) : ordered_json()}}})}};
}

ordered_json usage_chunk(const CompletionResult& c, bool chat) {
  return {{"id", c.id},
          {"object", chat ? "chat.completion.chunk" : "text_completion"},
          {"created", c.created},
          {"model", c.model},
          {"choices", ordered_json::array()},
          {"usage", usage_json(c.gen)},
          {"timings", timings_json(c.gen)}};
}

StreamTranslator::StreamTranslator(CompletionResult& result, bool chat, chat::OutputParserOptions parser)
    : result_(result), chat_(chat), parser_(parser) {}

std::vector<ordered_json> StreamTranslator::start() {
  if (!chat_) return {};
  return {chat_chunk(result_, {{"role", "assistant"}, {"content", ""}}, std::nullopt)};
}

std::vector<ordered_json> StreamTranslator::deltas(const chat::ParsedOutput& d) {
  if (d.empty()) return {};
  result_.message += d;
  if (!chat_) return {text_chunk(result_, d.content, std::nullopt)};
  ordered_json delta = chat_delta(d, tool_index_, tool_call_prefix(result_.id));
  tool_index_ += d.tool_calls.size();
  return {chat_chunk(result_, delta, std::nullopt)};
}

std::vector<ordered_json> StreamTranslator::push(std::string_view text) { return deltas(parser_.push(text)); }

std::vector<ordered_json> StreamTranslator::finish(runtime::GenerateResult gen, bool include_usage) {
  auto out = deltas(parser_.finish());
  result_.gen = std::move(gen);
  const std::string reason = finish_reason(result_.gen, result_.message);
  out.push_back(chat_ ? chat_chunk(result_, ordered_json::object(), reason) : text_chunk(result_, "", reason));
  if (include_usage) out.push_back(usage_chunk(result_, chat_));
  return out;
}

EmbeddingRequest parse_embedding_request(const nlohmann::ordered_json& body) {
  if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object");
  EmbeddingRequest r;
  if (body.contains("model") && !body["model"].is_string()) bad_field("model", "must be a string");
  r.model = string_field(body, "model");
  if (!body.contains("input")) bad_field("input", "is required: a string, an array of strings or of token ids");
  const auto& in = body["input"];
  constexpr size_t kMaxInputs = 2048;
  const auto ids = [](const nlohmann::ordered_json& a, const std::string& where) {
    std::vector<int32_t> out;
    for (const auto& t : a) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX) {
        bad_field(where, fmt::format("{} is not a token id", t.dump()));
      }
      out.push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
    if (out.empty()) bad_field(where, "an input must not be empty");
    return out;
  };
  if (in.is_string()) {
    r.texts.push_back(in.get<std::string>());
  } else if (in.is_array() && !in.empty() && in[0].is_number()) {
    r.tokens.push_back(ids(in, "input"));
  } else if (in.is_array() && !in.empty()) {
    if (in.size() > kMaxInputs) bad_field("input", fmt::format("{} inputs; at most {} per request", in.size(), kMaxInputs));
    for (size_t i = 0; i < in.size(); ++i) {
      const std::string where = fmt::format("input[{}]", i);
      if (in[i].is_string() && in[0].is_string()) {
        r.texts.push_back(in[i].get<std::string>());
      } else if (in[i].is_array() && in[0].is_array()) {
        r.tokens.push_back(ids(in[i], where));
      } else {
        bad_field(where, "inputs must all be strings or all be arrays of token ids");
      }
    }
  } else {
    bad_field("input", "must be a string, or a non-empty array of strings or of token ids");
  }
  for (size_t i = 0; i < r.texts.size(); ++i) {
    if (r.texts[i].empty()) bad_field(r.texts.size() == 1 && in.is_string() ? "input" : fmt::format("input[{}]", i), "an input must not be empty");
  }
  if (body.contains("encoding_format")) {
    const std::string f = string_field(body, "encoding_format", "?");
    if (f != "float" && f != "base64") bad_field("encoding_format", "must be \"float\" or \"base64\"");
    r.base64 = f == "base64";
  }
  if (body.contains("dimensions") && !body["dimensions"].is_null()) {
    if (!body["dimensions"].is_number_integer() || body["dimensions"].get<int64_t>() < 1) {
      bad_field("dimensions", "must be a positive integer");
    }
    r.dimensions = body["dimensions"].get<int64_t>();
  }
  if (body.contains("pooling")) {
    r.pooling = string_field(body, "pooling", "?");
    if (r.pooling != "mean" && r.pooling != "cls" && r.pooling != "last") bad_field("pooling", "must be mean, cls or last");
  }
  if (body.contains("normalize")) {
    if (!body["normalize"].is_boolean()) bad_field("normalize", "must be true or false");
    r.normalize = body["normalize"].get<bool>();
  }
  if (body.contains("embd_normalize")) {  // llama.cpp's: -1 none, 2 Euclidean (the default)
    if (!body["embd_normalize"].is_number_integer() || (body["embd_normalize"] != -1 && body["embd_normalize"] != 2)) {
      bad_field("embd_normalize", "zinc supports -1 (none) and 2 (unit length)");
    }
    r.normalize = body["embd_normalize"] == 2;
  }
  return r;
}

namespace {
std::string base64_floats(const std::vector<float>& v) {
  static constexpr char kDigits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::vector<uint8_t> bytes(v.size() * 4);
  std::memcpy(bytes.data(), v.data(), bytes.size());  // little-endian float32, as clients decode it
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const uint32_t n = static_cast<uint32_t>(bytes[i]) << 16 | (i + 1 < bytes.size() ? bytes[i + 1] << 8 : 0) |
                       (i + 2 < bytes.size() ? bytes[i + 2] : 0);
    out += kDigits[n >> 18 & 63];
    out += kDigits[n >> 12 & 63];
    out += i + 1 < bytes.size() ? kDigits[n >> 6 & 63] : '=';
    out += i + 2 < bytes.size() ? kDigits[n & 63] : '=';
  }
  return out;
}
}  // namespace

ordered_json embeddings_json(const std::vector<std::vector<float>>& vectors, bool base64, const std::string& model,
                             int64_t prompt_tokens) {
  ordered_json data = ordered_json::array();
  for (size_t i = 0; i < vectors.size(); ++i) {
    ordered_json e = {{"object", "embedding"}, {"index", i}};
    if (base64) e["embedding"] = base64_floats(vectors[i]);
    else e["embedding"] = vectors[i];
    data.push_back(std::move(e));
  }
  return {{"object", "list"},
          {"data", std::move(data)},
          {"model", model},
          {"usage", {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}}}};
}

std::string random_id(const std::string& prefix) {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  static const char kChars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string id = prefix;
  for (int i = 0; i < 24; ++i) id += kChars[rng() % (sizeof kChars - 1)];
  return id;
}

}  // namespace zinc::server
