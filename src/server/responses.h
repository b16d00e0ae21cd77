// OpenAI's Responses API (POST /v1/responses) over the same engine, stateless: a request's input items
// (messages, function calls and their outputs), instructions and function tools become a chat request in
// the Chat Completions shape; the answer goes back as a response object with output items (reasoning,
// message, function calls), or streamed as the Responses events. previous_response_id is refused: the
// server keeps no responses, the client sends the whole conversation.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <utility>
#include <vector>

#include "chat/output_parser.h"
#include "server/openai.h"

namespace zinc::server {

struct ResponsesRequest {
  CompletionRequest chat;
  bool stream = false;
};

// Throws ApiError (400) naming the field for anything malformed or not supported.
ResponsesRequest parse_responses_request(const nlohmann::ordered_json& body, const sample::SamplerParams& defaults);

// The finished response object.
ordered_json response_json(const CompletionResult& c, const CompletionRequest& r);

// The answer as Responses stream events (response.created ... response.completed), each (type, data)
// for the SSE "event:" and "data:" lines; data carries the type and a sequence number.
class ResponsesStream {
 public:
  using Event = std::pair<std::string, ordered_json>;
  ResponsesStream(CompletionResult& result, const CompletionRequest& request, chat::OutputParserOptions parser);
  std::vector<Event> start();
  std::vector<Event> push(std::string_view text);
  std::vector<Event> finish(runtime::GenerateResult gen);

 private:
  void add(const std::string& type, ordered_json data, std::vector<Event>& out);
  void deltas(const chat::ParsedOutput& d, std::vector<Event>& out);
  void open(const std::string& kind, std::vector<Event>& out);
  void close(std::vector<Event>& out);
  CompletionResult& result_;
  const CompletionRequest& request_;
  chat::OutputParser parser_;
  std::string open_;  // "reasoning", "message" or ""
  std::string text_;  // the open item's text so far
  int output_index_ = -1;
  int sequence_ = 0;
  size_t calls_ = 0;
};

}  // namespace zinc::server
