// Chat prompts from GGUF metadata: template lookup, special-token texts, and the template context.
#include "chat/chat_template.h"

#include <fmt/format.h>

#include "gguf/reader.h"

namespace zinc::chat {

using nlohmann::ordered_json;

ChatRequest ChatRequest::from_json(const ordered_json& j) {
  ChatRequest r;
  if (j.is_array()) {
    r.messages = j;
    return r;
  }
  if (!j.is_object()) throw zinc::Error("chat request: expected a JSON array of messages or an object with \"messages\"");
  for (const auto& [key, value] : j.items()) {
    if (key == "messages") {
      if (!value.is_array()) throw zinc::Error("chat request: \"messages\" must be an array");
      r.messages = value;
    } else if (key == "tools") {
      if (!value.is_array() && !value.is_null()) throw zinc::Error("chat request: \"tools\" must be an array");
      r.tools = value;
    } else if (key == "add_generation_prompt") {
      if (!value.is_boolean()) throw zinc::Error("chat request: \"add_generation_prompt\" must be true or false");
      r.add_generation_prompt = value.get<bool>();
    } else if (key == "enable_thinking") {
      if (!value.is_boolean()) throw zinc::Error("chat request: \"enable_thinking\" must be true or false");
      r.enable_thinking = value.get<bool>();
    } else {
      r.extra[key] = value;
    }
  }
  if (!j.contains("messages")) throw zinc::Error("chat request: missing \"messages\"");
  return r;
}

ChatTemplate::ChatTemplate(std::string source, std::string bos_token, std::string eos_token, std::string name)
    : template_(Template::parse(std::move(source), std::move(name))), bos_(std::move(bos_token)), eos_(std::move(eos_token)) {}

namespace {

std::string token_text(const gguf::File& f, std::string_view id_key) {
  const auto id = f.get_optional<int64_t>(id_key);
  const auto tokens = f.get_optional<gguf::ArrayView>("tokenizer.ggml.tokens");
  if (!id || !tokens || *id < 0 || static_cast<uint64_t>(*id) >= tokens->size() ||
      tokens->element_type() != gguf::ValueType::STRING) {
    return "";
  }
  return std::string(tokens->at(static_cast<uint64_t>(*id)).string());
}

}  // namespace

std::pair<std::string, std::string> gguf_bos_eos(const gguf::File& file) {
  return {token_text(file, "tokenizer.ggml.bos_token_id"), token_text(file, "tokenizer.ggml.eos_token_id")};
}

ChatTemplate ChatTemplate::from_gguf(const gguf::File& file) {
  const auto source = file.get_optional<std::string>("tokenizer.chat_template");
  if (!source) {
    throw zinc::Error(fmt::format("{}: no chat template (tokenizer.chat_template is missing); give one with --template FILE",
                                  file.name()));
  }
  auto [bos, eos] = gguf_bos_eos(file);
  return ChatTemplate(*source, std::move(bos), std::move(eos), file.name() + ": tokenizer.chat_template");
}

ordered_json ChatTemplate::context(const ChatRequest& request) const {
  ordered_json ctx = ordered_json::object();
  ctx["messages"] = request.messages;
  ctx["tools"] = request.tools;
  ctx["add_generation_prompt"] = request.add_generation_prompt;
  ctx["bos_token"] = bos_;
  ctx["eos_token"] = eos_;
  if (request.enable_thinking) ctx["enable_thinking"] = *request.enable_thinking;
  if (request.extra.is_object()) {
    for (const auto& [key, value] : request.extra.items()) ctx[key] = value;
  }
  return ctx;
}

std::string ChatTemplate::render(const ChatRequest& request, const jinja::RenderOptions& options) const {
  return template_.render(context(request), options);
}

bool prompt_opens_reasoning(std::string_view prompt) {
  const size_t open = prompt.rfind("<think>");
  if (open == std::string_view::npos) return false;
  return prompt.find("</think>", open) == std::string_view::npos;
}

}  // namespace zinc::chat
