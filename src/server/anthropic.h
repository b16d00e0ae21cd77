// Anthropic's Messages API (POST /v1/messages, /v1/messages/count_tokens) over the same engine as the
// OpenAI API. A request's content blocks (text, tool_use, tool_result), system prompt, tools, stop
// sequences and thinking setting become a chat request in OpenAI's shape, so the chat template sees one
// conversation format; the answer goes back as a message of content blocks (thinking, text, tool_use),
// streamed as Anthropic's events, and errors in Anthropic's shape.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <utility>
#include <vector>

#include "chat/output_parser.h"
#include "server/openai.h"

namespace zinc::server {

struct MessagesRequest {
  CompletionRequest chat;  // what the engine runs (chat = true)
  bool stream = false;
  bool has_max_tokens = false;  // required by /v1/messages, not by count_tokens
};

// Parses a /v1/messages body (count_tokens: the same body, max_tokens not required). Throws ApiError
// (400) naming the field for anything malformed or not supported (images, documents, forcing a tool).
MessagesRequest parse_messages_request(const nlohmann::ordered_json& body, const sample::SamplerParams& defaults,
                                       bool count_only = false);

// "end_turn", "max_tokens", "stop_sequence" or "tool_use".
std::string anthropic_stop_reason(const runtime::GenerateResult& r, const chat::ParsedOutput& m);

// The whole answer as a message object.
ordered_json message_json(const CompletionResult& c, const std::vector<std::string>& stop);

// {"type": "error", "error": {"type": ..., "message": ...}} for an ApiError's status and message.
ordered_json anthropic_error_json(const ApiError& e);

// An answer streamed as Anthropic's events: message_start, then for each content block
// content_block_start, its deltas and content_block_stop, then message_delta (stop reason, usage) and
// message_stop. Each event is (name, data) for the SSE "event:" and "data:" lines.
class MessagesStream {
 public:
  using Event = std::pair<std::string, ordered_json>;
  MessagesStream(CompletionResult& result, chat::OutputParserOptions parser, int64_t input_tokens);
  std::vector<Event> start();
  std::vector<Event> push(std::string_view text);
  std::vector<Event> finish(runtime::GenerateResult gen, const std::vector<std::string>& stop);

 private:
  void deltas(const chat::ParsedOutput& d, std::vector<Event>& out);
  void open(const std::string& kind, ordered_json block, std::vector<Event>& out);
  void close(std::vector<Event>& out);
  CompletionResult& result_;
  chat::OutputParser parser_;
  int64_t input_tokens_;
  std::string open_;  // the open block's kind ("" when none)
  int index_ = -1;
  size_t tools_ = 0;
};

}  // namespace zinc::server
