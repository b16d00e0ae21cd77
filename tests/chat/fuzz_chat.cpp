// libFuzzer target for the chat layer's parsers of untrusted text: the Jinja lexer, parser and interpreter
// (a template from the input, rendered on a small conversation with tools, under tight limits), and the
// streaming output parser (the input as model output, fed in two pieces). Any input must either work or
// fail with zinc::Error; crashes, sanitizer reports and hangs are bugs.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "chat/jinja.h"
#include "chat/output_parser.h"

namespace {

const nlohmann::ordered_json& context() {
  static const nlohmann::ordered_json ctx = nlohmann::ordered_json::parse(R"({
    "messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"},
                 {"role": "assistant", "content": "", "reasoning_content": "r",
                  "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"a": [1, 2.5, null]}}}]},
                 {"role": "tool", "tool_call_id": "c1", "content": "ok"}],
    "tools": [{"type": "function", "function": {"name": "f", "description": "d",
               "parameters": {"type": "object", "properties": {"a": {"type": "array"}}, "required": ["a"]}}}],
    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>", "enable_thinking": false})");
  return ctx;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  const uint8_t mode = data[0];
  if (mode < 128) {
    zinc::chat::jinja::RenderOptions options;
    options.limits.max_steps = 200'000;
    options.limits.max_output_bytes = 1 << 20;
    options.limits.max_items = 1 << 14;
    options.limits.max_heap_values = 1 << 16;
    options.limits.max_heap_objects = 1 << 14;
    try {
      const auto t = zinc::chat::Template::parse(std::string(text), "fuzz");
      (void)t.render(context(), options);
    } catch (const zinc::Error&) {
    }
    return 0;
  }
  using zinc::chat::OutputFormat;
  const OutputFormat formats[] = {OutputFormat::Plain, OutputFormat::Hermes, OutputFormat::Llama3, OutputFormat::Harmony};
  zinc::chat::OutputParser parser({formats[mode % 4], (mode & 4) != 0});
  const size_t cut = text.empty() ? 0 : (mode * 7919u) % text.size();
  (void)parser.push(text.substr(0, cut));
  (void)parser.push(text.substr(cut));
  (void)parser.finish();
  return 0;
}
