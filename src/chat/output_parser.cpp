// Streaming parser of model output into content, reasoning and tool calls. A small state machine per
// format; each step consumes what it can decide from the buffered text and holds back any suffix that
// could be the start of a marker, so arbitrary chunking gives the same result as the whole text.
#include "chat/output_parser.h"

#include <algorithm>
#include <cctype>
#include <optional>
#include <span>
#include <utility>

#include "core/json_bounded.h"

namespace zinc::chat {

using nlohmann::ordered_json;

namespace {

constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";
constexpr std::string_view kToolCallOpen = "<tool_call>";
constexpr std::string_view kToolCallClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";

constexpr std::string_view kStart = "<|start|>";
constexpr std::string_view kEnd = "<|end|>";
constexpr std::string_view kMessage = "<|message|>";
constexpr std::string_view kChannel = "<|channel|>";
constexpr std::string_view kConstrain = "<|constrain|>";
constexpr std::string_view kReturn = "<|return|>";
constexpr std::string_view kCall = "<|call|>";
using Tags = std::span<const std::string_view>;
constexpr std::string_view kHarmonyMarkers[] = {kStart, kEnd, kMessage, kChannel, kConstrain, kReturn, kCall};
constexpr std::string_view kHarmonyBodyEnds[] = {kEnd, kReturn, kCall, kStart, kChannel};
constexpr std::string_view kHermesTags[] = {kThinkOpen, kThinkClose, kToolCallOpen};
constexpr std::string_view kThinkTags[] = {kThinkOpen, kThinkClose};
constexpr std::string_view kThinkCloseTag[] = {kThinkClose};

template <class... Parts>
std::string fmt_concat(const Parts&... parts) {
  std::string out;
  ((out += parts), ...);
  return out;
}

// A call that never closes is given up (and shown as content) once it is this long.
constexpr size_t kMaxCallBytes = size_t{4} << 20;

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

// Length of the longest suffix of `s` that is a proper prefix of one of `tags`.
size_t partial_suffix(std::string_view s, Tags tags) {
  size_t best = 0;
  for (std::string_view tag : tags) {
    for (size_t len = std::min(s.size(), tag.size() - 1); len > best; --len) {
      if (s.substr(s.size() - len) == tag.substr(0, len)) {
        best = len;
        break;
      }
    }
  }
  return best;
}

struct Found {
  size_t pos = std::string_view::npos;
  std::string_view tag;
};

Found find_first(std::string_view s, Tags tags) {
  Found f;
  for (std::string_view tag : tags) {
    const size_t p = s.find(tag);
    if (p < f.pos) f = {p, tag};
  }
  return f;
}

// End (one past the closing brace) of the JSON object starting at s[start] == '{', or npos if the text
// ends first.
size_t json_object_end(std::string_view s, size_t start) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = start; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return std::string_view::npos;
}

// Model output is untrusted (a prompt can steer it): nesting past the limit is not a tool call.
std::optional<ordered_json> parse_json(std::string_view text) {
  try {
    return parse_json_bounded<ordered_json>(text);
  } catch (const JsonTooDeep&) {
    return std::nullopt;
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

// A call's JSON as models get it wrong, mended where only one reading exists: a markdown code fence
// around it, commas before a closing bracket, Python's True/False/None outside strings, closing
// brackets missing at the end (the text stopping after a complete value) or one too many there. Returns
// nothing when the text ends inside a string or the mended text is still not JSON.
std::optional<ordered_json> repair_json(std::string_view text) {
  text = trim(text);
  if (text.starts_with("```")) {
    const size_t line = text.find('\n');
    if (line == std::string_view::npos || !text.ends_with("```") || text.size() < line + 4) return std::nullopt;
    text = trim(text.substr(line + 1, text.size() - 3 - (line + 1)));
  }
  std::string out;
  std::vector<char> open;  // the closers the brackets still open need
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      out += c;
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      open.push_back(c == '{' ? '}' : ']');
    } else if (c == '}' || c == ']') {
      if (open.empty()) {  // more closers than openers: only as the text's last characters
        if (trim(text.substr(i)).find_first_not_of("}] \t\r\n") != std::string_view::npos) return std::nullopt;
        break;
      }
      if (open.back() != c) return std::nullopt;
      open.pop_back();
      // A comma before it: dropped.
      size_t k = out.size();
      while (k > 0 && is_space(out[k - 1])) --k;
      if (k > 0 && out[k - 1] == ',') out.erase(k - 1, 1);
    } else if (std::isalpha(static_cast<unsigned char>(c))) {
      size_t j = i;
      while (j < text.size() && std::isalnum(static_cast<unsigned char>(text[j]))) ++j;
      const std::string_view word = text.substr(i, j - i);
      out += word == "True" ? "true" : word == "False" ? "false" : word == "None" ? "null" : std::string(word);
      i = j - 1;
      continue;
    }
    out += c;
  }
  if (in_string) return std::nullopt;
  size_t k = out.size();
  while (k > 0 && is_space(out[k - 1])) --k;
  if (!open.empty() && k > 0 && out[k - 1] == ',') out.erase(k - 1, 1);
  while (!open.empty()) {
    out += open.back();
    open.pop_back();
  }
  return parse_json(out);
}

// {"name": ..., "arguments": {...}} (or "parameters"; or wrapped as {"function": {...}}).
std::optional<ToolCall> call_from_json(const ordered_json& j) {
  if (!j.is_object()) return std::nullopt;
  const ordered_json* o = &j;
  if (j.contains("function") && j["function"].is_object() && j["function"].contains("name")) o = &j["function"];
  const auto name = o->find("name");
  if (name == o->end() || !name->is_string() || name->get<std::string>().empty()) return std::nullopt;
  ToolCall call{name->get<std::string>(), ordered_json::object()};
  for (const char* key : {"arguments", "parameters"}) {
    const auto a = o->find(key);
    if (a == o->end()) continue;
    call.arguments = *a;
    // Some models send the arguments as a JSON string, as the OpenAI API does.
    if (a->is_string()) {
      if (auto inner = parse_json(a->get<std::string>())) call.arguments = std::move(*inner);
    }
    break;
  }
  return call;
}

// Qwen3-Coder: <function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n...</function>
std::optional<ToolCall> call_from_xml(std::string_view body) {
  constexpr std::string_view kFunction = "<function=", kFunctionEnd = "</function>";
  constexpr std::string_view kParam = "<parameter=", kParamEnd = "</parameter>";
  body = trim(body);
  if (!body.starts_with(kFunction)) return std::nullopt;
  size_t i = kFunction.size();
  const size_t name_end = body.find('>', i);
  if (name_end == std::string_view::npos) return std::nullopt;
  ToolCall call{std::string(trim(body.substr(i, name_end - i))), ordered_json::object()};
  if (call.name.empty()) return std::nullopt;
  i = name_end + 1;
  while (true) {
    while (i < body.size() && is_space(body[i])) ++i;
    if (body.substr(i).starts_with(kFunctionEnd)) {
      if (!trim(body.substr(i + kFunctionEnd.size())).empty()) return std::nullopt;
      return call;
    }
    if (!body.substr(i).starts_with(kParam)) return std::nullopt;
    i += kParam.size();
    const size_t key_end = body.find('>', i);
    if (key_end == std::string_view::npos) return std::nullopt;
    const std::string key(trim(body.substr(i, key_end - i)));
    const size_t value_end = body.find(kParamEnd, key_end + 1);
    if (key.empty() || value_end == std::string_view::npos) return std::nullopt;
    std::string_view value = body.substr(key_end + 1, value_end - key_end - 1);
    if (value.starts_with('\n')) value.remove_prefix(1);
    if (value.ends_with('\n')) value.remove_suffix(1);
    // Numbers, booleans, null, arrays and objects were written as JSON; anything else is a string.
    auto parsed = parse_json(value);
    call.arguments[key] = parsed && !parsed->is_string() ? std::move(*parsed) : ordered_json(std::string(value));
    i = value_end + kParamEnd.size();
  }
}

}  // namespace

std::vector<ToolCall> parse_tool_call_body(std::string_view body) {
  body = trim(body);
  auto j = parse_json(body);
  if (!j && (body.starts_with('{') || body.starts_with('[') || body.starts_with("```"))) j = repair_json(body);
  if (j) {
    std::vector<ToolCall> calls;
    if (j->is_array()) {
      for (const auto& item : *j) {
        auto call = call_from_json(item);
        if (!call) return {};
        calls.push_back(std::move(*call));
      }
    } else if (auto call = call_from_json(*j)) {
      calls.push_back(std::move(*call));
    }
    return calls;
  }
  if (auto call = call_from_xml(body)) return {std::move(*call)};
  return {};
}

ParsedOutput& ParsedOutput::operator+=(const ParsedOutput& o) {
  content += o.content;
  reasoning += o.reasoning;
  tool_calls.insert(tool_calls.end(), o.tool_calls.begin(), o.tool_calls.end());
  return *this;
}

const char* output_format_name(OutputFormat f) {
  switch (f) {
    case OutputFormat::Plain: return "plain";
    case OutputFormat::Hermes: return "hermes";
    case OutputFormat::Llama3: return "llama3";
    case OutputFormat::Harmony: return "harmony";
  }
  return "?";
}

ReasoningMarkers reasoning_markers(OutputFormat format) {
  constexpr std::string_view kSentence =
      "Considering the limited time by the user, I have to give the solution based on the thinking directly now.";
  switch (format) {
    case OutputFormat::Hermes:
    case OutputFormat::Llama3:
      return {std::string(kThinkOpen), std::string(kThinkClose), fmt_concat("\n\n", kSentence, "\n", kThinkClose, "\n\n")};
    case OutputFormat::Harmony:
      return {fmt_concat(kChannel, "analysis", kMessage), std::string(kEnd),
              fmt_concat(" ", kSentence, kEnd, kStart, "assistant", kChannel, "final", kMessage)};
    case OutputFormat::Plain: break;
  }
  return {};
}

OutputFormat detect_output_format(std::string_view source) {
  const auto has = [&](std::string_view s) { return source.find(s) != std::string_view::npos; };
  if (has(kChannel) && has(kMessage)) return OutputFormat::Harmony;
  if (has(kToolCallOpen)) return OutputFormat::Hermes;
  if (has(kPythonTag)) return OutputFormat::Llama3;
  if (has(kThinkOpen) || has(kThinkClose)) return OutputFormat::Hermes;
  return OutputFormat::Plain;
}

OutputParser::OutputParser(OutputParserOptions options)
    : options_(options), json_call_possible_(options.format == OutputFormat::Llama3) {
  switch (options.format) {
    case OutputFormat::Harmony:
      mode_ = Mode::HarmonyOutside;
      if (options.starts_in_reasoning) {
        mode_ = Mode::HarmonyBody;
        harmony_channel_ = "analysis";
        start_reasoning_block();
      }
      break;
    case OutputFormat::Plain: mode_ = Mode::Content; break;
    default:
      mode_ = Mode::Content;
      if (options.starts_in_reasoning) {
        mode_ = Mode::Reasoning;
        start_reasoning_block();
      }
  }
}

ParsedOutput OutputParser::push(std::string_view text) {
  buf_.append(text);
  run(false);
  return std::exchange(out_, {});
}

ParsedOutput OutputParser::finish() {
  run(true);
  content_ws_.clear();
  reasoning_ws_.clear();
  return std::exchange(out_, {});
}

ParsedOutput OutputParser::parse(std::string_view text, OutputParserOptions options) {
  OutputParser p(options);
  ParsedOutput out = p.push(text);
  out += p.finish();
  return out;
}

void OutputParser::run(bool final) {
  while (true) {
    bool progressed = false;
    switch (mode_) {
      case Mode::Content: progressed = step_content(final); break;
      case Mode::Reasoning: progressed = step_reasoning(final); break;
      case Mode::HermesCall: progressed = step_hermes_call(final); break;
      case Mode::JsonCall: progressed = step_json_call(final); break;
      case Mode::HarmonyOutside: progressed = step_harmony_outside(final); break;
      case Mode::HarmonyHeader: progressed = step_harmony_header(final); break;
      case Mode::HarmonyBody: progressed = step_harmony_body(final); break;
    }
    if (!progressed) return;
  }
}

// ---- emission: whitespace at the ends of content and reasoning is dropped ----

namespace {

void emit_trimmed(std::string& out, std::string_view t, bool& skip_ws, std::string& held_ws, bool& emitted) {
  for (char c : t) {
    if (is_space(c)) {
      if (!skip_ws) held_ws += c;
      continue;
    }
    out += held_ws;
    held_ws.clear();
    out += c;
    skip_ws = false;
    emitted = true;
  }
}

}  // namespace

void OutputParser::emit_content(std::string_view t) {
  emit_trimmed(out_.content, t, content_skip_ws_, content_ws_, content_emitted_);
}

void OutputParser::emit_reasoning(std::string_view t) {
  emit_trimmed(out_.reasoning, t, reasoning_skip_ws_, reasoning_ws_, reasoning_emitted_);
}

void OutputParser::start_reasoning_block() {
  reasoning_skip_ws_ = true;
  // A second reasoning block is set apart from the first, if it has any text.
  reasoning_ws_ = reasoning_emitted_ ? "\n\n" : "";
}

void OutputParser::end_reasoning_block() { reasoning_ws_.clear(); }

void OutputParser::emit_tool_calls(std::vector<ToolCall> calls) {
  content_ws_.clear();
  content_skip_ws_ = true;
  for (auto& c : calls) out_.tool_calls.push_back(std::move(c));
}

// ---- <think> and <tool_call> (Hermes, Llama3, Plain) ----

bool OutputParser::step_content(bool final) {
  if (options_.format == OutputFormat::Plain) {
    emit_content(buf_);
    buf_.clear();
    return false;
  }
  if (options_.format == OutputFormat::Llama3 && json_call_possible_) {
    // A JSON tool call can only open the output (or follow </think> or another call).
    size_t i = 0;
    while (i < buf_.size() && (is_space(buf_[i]) || (buf_[i] == ';' && after_json_call_))) ++i;
    const std::string_view rest = std::string_view(buf_).substr(i);
    if (rest.empty()) {
      buf_.clear();  // only whitespace so far: the content would drop it anyway
      return false;
    }
    if (rest.front() == '{' || rest.starts_with(kPythonTag)) {
      buf_.erase(0, i);
      mode_ = Mode::JsonCall;
      return true;
    }
    if (kPythonTag.starts_with(rest) && !final) return false;
    json_call_possible_ = false;
  }
  const Tags tags = options_.format == OutputFormat::Hermes ? Tags(kHermesTags) : Tags(kThinkTags);
  const Found f = find_first(buf_, tags);
  if (f.pos == std::string_view::npos) {
    const size_t hold = final ? 0 : partial_suffix(buf_, tags);
    emit_content(std::string_view(buf_).substr(0, buf_.size() - hold));
    buf_.erase(0, buf_.size() - hold);
    return false;
  }
  emit_content(std::string_view(buf_).substr(0, f.pos));
  buf_.erase(0, f.pos + f.tag.size());
  if (f.tag == kThinkOpen) {
    mode_ = Mode::Reasoning;
    start_reasoning_block();
  } else if (f.tag == kThinkClose) {
    content_skip_ws_ = true;  // a stray </think>: the tag is never content
  } else {
    mode_ = Mode::HermesCall;
  }
  return true;
}

bool OutputParser::step_reasoning(bool final) {
  const size_t p = buf_.find(kThinkClose);
  if (p == std::string::npos) {
    const size_t hold = final ? 0 : partial_suffix(buf_, kThinkCloseTag);
    emit_reasoning(std::string_view(buf_).substr(0, buf_.size() - hold));
    buf_.erase(0, buf_.size() - hold);
    return false;
  }
  emit_reasoning(std::string_view(buf_).substr(0, p));
  buf_.erase(0, p + kThinkClose.size());
  end_reasoning_block();
  mode_ = Mode::Content;
  content_skip_ws_ = true;
  if (options_.format == OutputFormat::Llama3 && !content_emitted_) json_call_possible_ = true;
  return true;
}

bool OutputParser::step_hermes_call(bool final) {
  const size_t p = buf_.find(kToolCallClose);
  if (p == std::string::npos && !final && buf_.size() <= kMaxCallBytes) return false;
  const bool closed = p != std::string::npos;
  const std::string_view body = std::string_view(buf_).substr(0, closed ? p : buf_.size());
  auto calls = parse_tool_call_body(body);
  if (!calls.empty()) {
    emit_tool_calls(std::move(calls));
  } else {
    // Not a call we understand: show it as it was written.
    std::string raw = std::string(kToolCallOpen) + std::string(body) + (closed ? std::string(kToolCallClose) : "");
    emit_content(raw);
  }
  buf_.erase(0, closed ? p + kToolCallClose.size() : buf_.size());
  mode_ = Mode::Content;
  return true;
}

bool OutputParser::step_json_call(bool final) {
  size_t start = buf_.starts_with(kPythonTag) ? kPythonTag.size() : 0;
  while (start < buf_.size() && is_space(buf_[start])) ++start;
  auto give_up = [&] {
    json_call_possible_ = false;
    mode_ = Mode::Content;
    emit_content(buf_);
    buf_.clear();
    return true;
  };
  if (start >= buf_.size()) return final ? give_up() : false;
  if (buf_[start] != '{') return give_up();
  const size_t end = json_object_end(buf_, start);
  if (end == std::string::npos) return final || buf_.size() > kMaxCallBytes ? give_up() : false;
  const auto j = parse_json(std::string_view(buf_).substr(start, end - start));
  std::optional<ToolCall> call;
  if (j && (j->contains("parameters") || j->contains("arguments") || j->value("type", "") == "function")) {
    call = call_from_json(*j);
  }
  if (!call) return give_up();
  emit_tool_calls({std::move(*call)});
  buf_.erase(0, end);
  after_json_call_ = true;
  mode_ = Mode::Content;  // another call may follow, after ";" or whitespace
  return true;
}

// ---- Harmony (GPT-OSS) ----

bool OutputParser::step_harmony_outside(bool final) {
  const Found f = find_first(buf_, kHarmonyMarkers);
  if (f.pos == std::string_view::npos) {
    const size_t hold = final ? 0 : partial_suffix(buf_, kHarmonyMarkers);
    emit_content(std::string_view(buf_).substr(0, buf_.size() - hold));
    buf_.erase(0, buf_.size() - hold);
    return false;
  }
  emit_content(std::string_view(buf_).substr(0, f.pos));
  buf_.erase(0, f.pos + f.tag.size());
  if (f.tag == kStart || f.tag == kChannel) {
    harmony_header_ = f.tag == kChannel ? std::string(kChannel) : std::string();
    mode_ = Mode::HarmonyHeader;
  }
  return true;  // other markers outside a message are dropped
}

bool OutputParser::step_harmony_header(bool final) {
  const size_t p = buf_.find(kMessage);
  if (p == std::string::npos) {
    // The header is protocol, never text: an unfinished one at the end is dropped.
    if (final || buf_.size() > kMaxCallBytes) {
      buf_.clear();
      mode_ = Mode::HarmonyOutside;
    }
    return false;
  }
  const std::string header = harmony_header_ + buf_.substr(0, p);
  buf_.erase(0, p + kMessage.size());
  auto word_after = [&](std::string_view key) -> std::string {
    const size_t k = header.find(key);
    if (k == std::string::npos) return "";
    size_t i = k + key.size(), j = i;
    while (j < header.size() && !is_space(header[j]) && header[j] != '<') ++j;
    return header.substr(i, j - i);
  };
  harmony_channel_ = word_after(kChannel);
  harmony_recipient_ = word_after("to=");
  mode_ = Mode::HarmonyBody;
  if (harmony_recipient_.empty()) {
    if (harmony_channel_ == "analysis") {
      start_reasoning_block();
    } else {
      content_skip_ws_ = true;
      if (content_emitted_) content_ws_ = "\n\n";  // e.g. a commentary preamble, then the final answer
    }
  }
  return true;
}

bool OutputParser::step_harmony_body(bool final) {
  const Found f = find_first(buf_, kHarmonyBodyEnds);
  const bool found = f.pos != std::string_view::npos;
  if (!harmony_recipient_.empty()) {
    // A message to a tool: hold it whole, then parse its JSON arguments.
    if (!found && !final && buf_.size() <= kMaxCallBytes) return false;
    const std::string body = buf_.substr(0, found ? f.pos : buf_.size());
    std::string name = harmony_recipient_;
    if (name.starts_with("functions.")) name.erase(0, 10);
    auto args = parse_json(trim(body));
    if (args && !name.empty()) {
      emit_tool_calls({ToolCall{name, std::move(*args)}});
    } else {
      emit_content(body);
    }
  } else {
    const size_t hold = found || final ? 0 : partial_suffix(buf_, kHarmonyMarkers);
    const std::string_view text = std::string_view(buf_).substr(0, found ? f.pos : buf_.size() - hold);
    if (harmony_channel_ == "analysis") {
      emit_reasoning(text);
    } else {
      emit_content(text);
    }
    if (!found) {
      buf_.erase(0, text.size());
      return false;
    }
    if (harmony_channel_ == "analysis") end_reasoning_block();
  }
  // The end markers close the message; <|start|> or <|channel|> without one starts the next message.
  const bool end_marker = found && (f.tag == kEnd || f.tag == kReturn || f.tag == kCall);
  buf_.erase(0, found ? f.pos + (end_marker ? f.tag.size() : 0) : buf_.size());
  harmony_recipient_.clear();
  mode_ = Mode::HarmonyOutside;
  return found;
}

}  // namespace zinc::chat
