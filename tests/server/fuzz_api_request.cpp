// libFuzzer target: request bodies for every API the server answers (/v1/chat/completions,
// /v1/completions, /v1/messages, /v1/responses, /v1/embeddings; any one's keep_alive), parsed as the server parses them (nesting bounded) and
// rendered through a chat template that walks every message, tool call, tool and extra variable (the
// conversion into template values recurses once per level). Any bytes must give a rendered prompt, a
// 400 ApiError (for /v1/messages in Anthropic's error shape), or a refusal of deep nesting, never a crash
// or another exception.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "chat/chat_template.h"
#include "core/json_bounded.h"
#include "server/anthropic.h"
#include "server/models.h"
#include "server/openai.h"
#include "server/responses.h"

namespace {

// Prints every value it is given, at any depth the values have (tojson walks them all).
const char* kTemplate =
    "{% for m in messages %}{{ m.role }}: {{ m.content }}{% if m.tool_calls %}{{ m.tool_calls | tojson }}{% endif %}"
    "{% if m.tool_call_id %}{{ m.tool_call_id }}{% endif %}\n{% endfor %}{% if tools %}{{ tools | tojson }}{% endif %}"
    "{% if extra_var %}{{ extra_var | tojson }}{% endif %}";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using nlohmann::json;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  json body;
  try {
    body = zinc::parse_json_bounded<json>(text);
  } catch (const zinc::JsonTooDeep&) {
    return 0;
  } catch (const json::exception&) {
    return 0;
  }
  static const zinc::chat::ChatTemplate tmpl(kTemplate, "<s>", "</s>", "fuzz");
  const auto defaults = zinc::sample::SamplerParams::chat();
  const auto render = [](const zinc::server::CompletionRequest& r) {
    for (const auto& m : r.messages) {
      if (!m["role"].is_string() || !m["content"].is_string()) std::abort();
    }
    r.sampling.validate();
    if (!r.chat) return;
    zinc::chat::ChatRequest cr;
    cr.messages = r.messages;
    cr.tools = r.tools;
    cr.extra = r.template_vars;
    try {
      tmpl.render(cr);
    } catch (const zinc::Error&) {
      // a template error is the server's 400
    }
  };
  for (bool chat : {true, false}) {
    try {
      render(chat ? zinc::server::parse_chat_request(body, defaults) : zinc::server::parse_completion_request(body, defaults));
    } catch (const zinc::server::ApiError& e) {
      if (e.status() != 400) std::abort();
    }
  }
  for (bool count_only : {false, true}) {
    try {
      render(zinc::server::parse_messages_request(body, defaults, count_only).chat);
    } catch (const zinc::server::ApiError& e) {
      if (e.status() != 400) std::abort();
      const auto j = zinc::server::anthropic_error_json(e);
      if (j["error"]["type"] != "invalid_request_error") std::abort();
    }
  }
  try {
    render(zinc::server::parse_responses_request(body, defaults).chat);
  } catch (const zinc::server::ApiError& e) {
    if (e.status() != 400) std::abort();
  }
  try {
    // Inputs are all text or all token ids, none empty; the response of vectors that long encodes.
    const auto e = zinc::server::parse_embedding_request(body);
    if (e.size() == 0 || (!e.texts.empty() && !e.tokens.empty())) std::abort();
    for (const auto& t : e.texts) {
      if (t.empty()) std::abort();
    }
    for (const auto& t : e.tokens) {
      if (t.empty()) std::abort();
    }
    const std::vector<std::vector<float>> vectors(e.size(), std::vector<float>(e.size() % 7, 0.5f));
    (void)zinc::server::embeddings_json(vectors, e.base64, e.model, 0).dump();
  } catch (const zinc::server::ApiError& e) {
    if (e.status() != 400) std::abort();
  }
  if (body.is_object() && body.contains("keep_alive")) {
    try {
      // Seconds, or -1 for "stay loaded".
      const double s = zinc::server::parse_keep_alive(nlohmann::ordered_json(body["keep_alive"]));
      if (!(s == -1 || (s >= 0 && std::isfinite(s)))) std::abort();
    } catch (const zinc::server::ApiError& e) {
      if (e.status() != 400) std::abort();
    }
  }
  return 0;
}
