// A multi-turn chat over one session: the conversation as messages, rendered with the model's chat
// template each turn; the context keeps what it already holds, so a turn prefills only what the new
// rendering adds (normally the end of the last answer's turn and the new user message). Output is
// split into content and reasoning as it streams.
#pragma once

#include <nlohmann/json.hpp>

#include <atomic>
#include <functional>
#include <optional>
#include <string>

#include "chat/chat_template.h"
#include "chat/output_parser.h"
#include "runtime/generate.h"

namespace zinc::runtime {

struct ChatOptions {
  std::string system;                    // system prompt ("" for none)
  std::optional<bool> enable_thinking;  // passed to the template when set (--think / --no-think)
  // When the conversation no longer fits: false → a clear error (the user resets or raises the
  // context); true → the oldest turns are dropped until it fits.
  bool drop_oldest_turns = false;
  GenerateOptions generate;  // per answer: max_tokens, stop strings, cancel flag
};

struct ChatTurn {
  GenerateResult result;
  chat::ParsedOutput message;  // the answer split into content, reasoning and tool calls
  int dropped_messages = 0;    // messages dropped to make this turn fit
};

class ChatSession {
 public:
  // The session, tokenizer and sampler must outlive the chat.
  ChatSession(Session& session, const tokenizer::Tokenizer& tok, sample::Sampler& sampler, chat::ChatTemplate tmpl,
              ChatOptions options);

  // Sends a user message and generates the answer; on_delta receives each new piece of content or
  // reasoning as it becomes certain. The answer (even a cancelled one, as far as it got) joins the
  // conversation. Throws zinc::Error when the conversation cannot fit (nothing is changed then).
  using DeltaSink = std::function<void(const chat::ParsedOutput& delta)>;
  ChatTurn send(const std::string& user_text, const DeltaSink& on_delta);

  // Forgets the conversation (the system prompt stays) and the context.
  void reset();
  void set_system(std::string system);
  const std::string& system() const { return options_.system; }
  ChatOptions& options() { return options_; }

  // The conversation as OpenAI-style messages, system prompt first when set.
  nlohmann::ordered_json messages() const;
  // Replaces the conversation (a leading system message becomes the system prompt). Throws zinc::Error
  // for anything but an array of {role, content} objects with roles system, user or assistant.
  void load(const nlohmann::ordered_json& messages);

  // The prompt the next turn would start from, as text (for tests and --verbose).
  std::string render(bool add_generation_prompt) const;
  const Session& session() const { return session_; }

 private:
  Session& session_;
  const tokenizer::Tokenizer& tok_;
  sample::Sampler& sampler_;
  chat::ChatTemplate template_;
  chat::OutputFormat format_;
  ChatOptions options_;
  nlohmann::ordered_json turns_ = nlohmann::ordered_json::array();  // user and assistant messages
};

// A rendered chat prompt as tokens: special tokens the template wrote are parsed as such, and BOS is
// added when the vocabulary asks for it and the template did not write it already.
std::vector<int32_t> tokenize_prompt(const tokenizer::Tokenizer& tok, const std::string& text);

// A template from text (a --chat-template file, or the built-in ChatML), with the vocabulary's BOS and
// EOS texts as bos_token and eos_token.
chat::ChatTemplate chat_template_from_source(const tokenizer::Tokenizer& tok, std::string source, std::string name);

// ChatML, for models whose GGUF carries no chat template.
chat::ChatTemplate chatml_template(const tokenizer::Tokenizer& tok);

// The model's template, or ChatML when it has none.
chat::ChatTemplate chat_template_for(const gguf::File& file, const tokenizer::Tokenizer& tok);

}  // namespace zinc::runtime
