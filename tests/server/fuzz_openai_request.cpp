// libFuzzer target: request bodies for the OpenAI endpoints. Any bytes must give a parsed request or a
// 400 ApiError, never a crash or another exception; a parsed chat request has messages with string
// roles and contents.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "server/openai.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using nlohmann::json;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  json body;
  try {
    body = json::parse(text);
  } catch (const json::exception&) {
    return 0;  // the server answers 400 before the parser sees it
  }
  const auto defaults = zinc::sample::SamplerParams::chat();
  for (bool chat : {true, false}) {
    try {
      const auto r = chat ? zinc::server::parse_chat_request(body, defaults)
                          : zinc::server::parse_completion_request(body, defaults);
      for (const auto& m : r.messages) {
        if (!m["role"].is_string() || !m["content"].is_string()) std::abort();
      }
      r.sampling.validate();
    } catch (const zinc::server::ApiError& e) {
      if (e.status() != 400) std::abort();
    }
  }
  return 0;
}
