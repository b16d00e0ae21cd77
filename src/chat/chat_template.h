// Chat prompts: a conversation (OpenAI-style messages, optional tools) rendered with a model's Jinja chat
// template into the text the model continues.
//
// The template comes from the GGUF (tokenizer.chat_template) or from a file that overrides it. The
// variables it sees follow transformers' apply_chat_template: messages, tools (null when there are none),
// add_generation_prompt, bos_token, eos_token, and enable_thinking only when the caller sets it, then any
// extra variables (reasoning_effort, date_string, ...).
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "chat/jinja.h"

namespace zinc::gguf {
class File;
}

namespace zinc::chat {

struct ChatRequest {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools;  // an array of tool definitions, or null
  bool add_generation_prompt = true;
  std::optional<bool> enable_thinking;
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();  // further template variables

  // Reads {"messages": [...], "tools": [...], ...} or a bare array of messages. Other keys of the object
  // (add_generation_prompt, enable_thinking, and anything else) become template variables.
  static ChatRequest from_json(const nlohmann::ordered_json& j);
};

class ChatTemplate {
 public:
  ChatTemplate(std::string source, std::string bos_token, std::string eos_token,
               std::string name = "chat template");

  // The template and the BOS/EOS token texts of a GGUF. Throws zinc::Error when it has no template.
  static ChatTemplate from_gguf(const gguf::File& file);

  nlohmann::ordered_json context(const ChatRequest& request) const;
  std::string render(const ChatRequest& request, const jinja::RenderOptions& options = {}) const;

  const std::string& source() const { return template_.source(); }
  const std::string& bos_token() const { return bos_; }
  const std::string& eos_token() const { return eos_; }

 private:
  Template template_;
  std::string bos_, eos_;
};

// The texts of a GGUF's BOS and EOS tokens ("" for one it does not define).
std::pair<std::string, std::string> gguf_bos_eos(const gguf::File& file);

// True when a rendered prompt ends inside an open <think> block (the template started the model's
// reasoning for it), so the model's output begins as reasoning.
bool prompt_opens_reasoning(std::string_view prompt);

}  // namespace zinc::chat
