// libFuzzer target: request bodies for Anthropic's /v1/messages, parsed as the server parses them
// (nesting bounded) and rendered through a chat template that walks every message, tool call and tool.
// Any bytes must give a rendered prompt, a 400 ApiError in Anthropic's error shape, or a refusal of
// deep nesting, never a crash or another exception.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "chat/chat_template.h"
#include "core/json_bounded.h"
#include "server/anthropic.h"

namespace {

const char* kTemplate =
    "{% for m in messages %}{{ m.role }}: {{ m.content }}{% if m.tool_calls %}{{ m.tool_calls | tojson }}{% endif %}"
    "{% if m.tool_call_id %}{{ m.tool_call_id }}{% endif %}\n{% endfor %}{% if tools %}{{ tools | tojson }}{% endif %}";

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
  for (bool count_only : {false, true}) {
    try {
      const auto r = zinc::server::parse_messages_request(body, defaults, count_only);
      for (const auto& m : r.chat.messages) {
        if (!m["role"].is_string() || !m["content"].is_string()) std::abort();
      }
      r.chat.sampling.validate();
      zinc::chat::ChatRequest cr;
      cr.messages = r.chat.messages;
      cr.tools = r.chat.tools;
      try {
        tmpl.render(cr);
      } catch (const zinc::Error&) {
      }
    } catch (const zinc::server::ApiError& e) {
      if (e.status() != 400) std::abort();
      const auto j = zinc::server::anthropic_error_json(e);
      if (j["error"]["type"] != "invalid_request_error") std::abort();
    }
  }
  return 0;
}
