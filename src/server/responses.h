// OpenAI's Responses API (POST /v1/responses) over the same engine: a request's input items (messages,
// function calls and their outputs), instructions and function tools become a chat request in the Chat
// Completions shape; the answer goes back as a response object with output items (reasoning, message,
// function calls), or streamed as the Responses events. Responses are kept in memory (store, the default)
// so a request can continue one by its previous_response_id: the conversation it ended comes before the
// request's input (its instructions do not carry over, as the API says), and the engine's slots reuse the
// cached tokens of that conversation's prefix.
#pragma once

#include <nlohmann/json.hpp>

#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "chat/output_parser.h"
#include "server/openai.h"

namespace zinc::server {

struct ResponsesRequest {
  CompletionRequest chat;
  bool stream = false;
  bool store = true;                 // keep the response for previous_response_id and GET
  std::string previous_response_id;  // "" for none
  size_t instructions = 0;           // leading messages of chat.messages that are the instructions (0 or 1)
};

// Throws ApiError (400) naming the field for anything malformed or not supported.
ResponsesRequest parse_responses_request(const nlohmann::ordered_json& body, const sample::SamplerParams& defaults);

// The answer as the assistant message of a chat request (content, reasoning, tool calls with the call ids
// the response's output items gave): what the conversation holds for the next turn.
ordered_json response_assistant_message(const CompletionResult& c);

// Responses kept for previous_response_id and GET/DELETE /v1/responses/{id}: the conversation each ended
// (chat-request messages, without its instructions) and the response object. The most recently used
// `max_entries`, within `max_bytes` of JSON, are kept.
class ResponseStore {
 public:
  struct Stored {
    ordered_json conversation;  // messages
    ordered_json response;      // the response object
  };
  explicit ResponseStore(size_t max_entries = 1000, size_t max_bytes = size_t{64} << 20)
      : max_entries_(max_entries), max_bytes_(max_bytes) {}
  void put(const std::string& id, Stored stored);
  std::optional<Stored> get(const std::string& id);
  bool erase(const std::string& id);

 private:
  struct Entry {
    std::string id;
    Stored stored;
    size_t bytes;
  };
  size_t max_entries_, max_bytes_, bytes_ = 0;
  std::mutex mutex_;
  std::list<Entry> order_;  // most recently used first
  std::map<std::string, std::list<Entry>::iterator> index_;
};

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
