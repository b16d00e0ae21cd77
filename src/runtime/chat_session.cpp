#include "runtime/chat_session.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"

namespace zinc::runtime {

using nlohmann::ordered_json;

namespace {

const char* const kChatMl =
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}";

}  // namespace

chat::ChatTemplate chat_template_from_source(const tokenizer::Tokenizer& tok, std::string source, std::string name) {
  const auto& v = tok.vocab();
  std::string bos = v.bos() >= 0 ? std::string(v.text(v.bos())) : "";
  std::string eos = v.eos() >= 0 ? std::string(v.text(v.eos())) : "";
  return chat::ChatTemplate(std::move(source), std::move(bos), std::move(eos), std::move(name));
}

chat::ChatTemplate chatml_template(const tokenizer::Tokenizer& tok) {
  return chat_template_from_source(tok, kChatMl, "ChatML (built in)");
}

chat::ChatTemplate chat_template_for(const gguf::File& file, const tokenizer::Tokenizer& tok) {
  if (!file.find("tokenizer.chat_template")) return chatml_template(tok);
  return chat::ChatTemplate::from_gguf(file);
}

ChatSession::ChatSession(Session& session, const tokenizer::Tokenizer& tok, sample::Sampler& sampler,
                         chat::ChatTemplate tmpl, ChatOptions options)
    : session_(session),
      tok_(tok),
      sampler_(sampler),
      template_(std::move(tmpl)),
      format_(chat::detect_output_format(template_.source())),
      options_(std::move(options)) {
  // A template's turn-end marker that the vocabulary does not know as one token (ChatML on a model
  // that was not trained with it) can only end the answer as a stop string.
  for (const char* marker : {"<|im_end|>", "<|im_start|>"}) {
    if (template_.source().find(marker) != std::string::npos && tok_.encode(marker, false, true).size() != 1 &&
        std::find(options_.generate.stop.begin(), options_.generate.stop.end(), marker) == options_.generate.stop.end()) {
      options_.generate.stop.emplace_back(marker);
    }
  }
}

ordered_json ChatSession::messages() const {
  ordered_json out = ordered_json::array();
  if (!options_.system.empty()) out.push_back({{"role", "system"}, {"content", options_.system}});
  for (const auto& m : turns_) out.push_back(m);
  return out;
}

std::string ChatSession::render(bool add_generation_prompt) const {
  chat::ChatRequest req;
  req.messages = messages();
  req.add_generation_prompt = add_generation_prompt;
  req.enable_thinking = options_.enable_thinking;
  return template_.render(req);
}

std::vector<int32_t> tokenize_prompt(const tokenizer::Tokenizer& tok, const std::string& text) {
  std::vector<int32_t> ids = tok.encode(text, false, true);
  const auto& v = tok.vocab();
  if (v.add_bos() && v.bos() >= 0 && (ids.empty() || ids.front() != v.bos())) ids.insert(ids.begin(), v.bos());
  return ids;
}

ChatTurn ChatSession::send(const std::string& user_text, const DeltaSink& on_delta) {
  const ordered_json saved = turns_;
  turns_.push_back({{"role", "user"}, {"content", user_text}});
  ChatTurn turn;
  std::vector<int32_t> prompt;
  std::string prompt_text;
  try {
    // Room the answer needs: its token limit, at most a quarter of the context.
    const int64_t n_ctx = session_.n_ctx();
    const int64_t room = std::min<int64_t>(n_ctx / 4, options_.generate.max_tokens >= 0 ? options_.generate.max_tokens : 256);
    for (;;) {
      prompt_text = render(true);
      prompt = tokenize_prompt(tok_, prompt_text);
      if (static_cast<int64_t>(prompt.size()) + std::max<int64_t>(1, room) <= n_ctx) break;
      if (!options_.drop_oldest_turns) {
        throw Error(fmt::format("the conversation needs {} tokens plus room for an answer, the context holds {}: "
                                "/reset, a larger --ctx, or --drop-old-turns",
                                prompt.size(), n_ctx));
      }
      if (turns_.size() <= 1) {
        throw Error(fmt::format("the message alone needs {} tokens plus room for an answer, the context holds {}",
                                prompt.size(), n_ctx));
      }
      // Drop the oldest exchange: the first user message and the answers up to the next user message.
      do {
        turns_.erase(turns_.begin());
        ++turn.dropped_messages;
      } while (turns_.size() > 1 && turns_.front()["role"] != "user");
    }
  } catch (...) {
    turns_ = saved;
    throw;
  }

  chat::OutputParserOptions popts;
  popts.format = format_;
  popts.starts_in_reasoning = chat::prompt_opens_reasoning(prompt_text);
  chat::OutputParser parser(popts);
  auto forward = [&](const chat::ParsedOutput& delta) {
    if (delta.empty()) return;
    turn.message += delta;
    if (on_delta) on_delta(delta);
  };
  GenerateOptions gopts = options_.generate;
  const chat::ReasoningMarkers markers = chat::reasoning_markers(format_);
  gopts.reasoning.open = markers.open;
  gopts.reasoning.close = markers.close;
  gopts.reasoning.conclusion = markers.conclusion;
  gopts.reasoning.starts_inside = popts.starts_in_reasoning;
  try {
    turn.result = generate(session_, tok_, sampler_, prompt, gopts,
                           [&](std::string_view text) { forward(parser.push(text)); });
  } catch (...) {
    turns_ = saved;
    throw;
  }
  forward(parser.finish());
  turns_.push_back({{"role", "assistant"}, {"content", turn.message.content}});
  return turn;
}

void ChatSession::reset() {
  turns_ = ordered_json::array();
  session_.reset();
  sampler_.reset();
}

void ChatSession::set_system(std::string system) { options_.system = std::move(system); }

void ChatSession::load(const ordered_json& messages) {
  if (!messages.is_array()) throw Error("a conversation is a JSON array of messages");
  std::string system;
  ordered_json turns = ordered_json::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") ||
        !m["content"].is_string()) {
      throw Error(fmt::format("message {}: needs a string 'role' and a string 'content'", i + 1));
    }
    const auto role = m["role"].get<std::string>();
    if (role == "system" && i == 0) {
      system = m["content"].get<std::string>();
    } else if (role == "user" || role == "assistant") {
      turns.push_back({{"role", role}, {"content", m["content"]}});
    } else {
      throw Error(fmt::format("message {}: role '{}' (expected user or assistant{})", i + 1, role,
                              i == 0 ? ", or system first" : ""));
    }
  }
  options_.system = std::move(system);
  turns_ = std::move(turns);
}

}  // namespace zinc::runtime
