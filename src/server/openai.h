// The OpenAI API's request and response shapes: requests are parsed and checked into what the engine
// needs (a wrong type or a value out of range is an ApiError with status 400 and the parameter's
// name; unknown fields are ignored), and results are written back as completion objects, stream
// chunks and error bodies that the official clients accept.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "chat/output_parser.h"
#include "core/error.h"
#include "runtime/generate.h"
#include "sample/sampler.h"

namespace zinc::server {

using nlohmann::ordered_json;

// An error for the client: HTTP status and OpenAI's error object.
class ApiError : public Error {
 public:
  ApiError(int status, std::string message, std::string type = "invalid_request_error", std::string param = "",
           std::string code = "");
  int status() const { return status_; }
  // {"error": {"message", "type", "param", "code"}} (param and code null when empty).
  ordered_json body() const;

 private:
  int status_;
  std::string type_, param_, code_;
};

// Throws the 400 ApiError "'param': what" naming the field, as every request parser reports one.
[[noreturn]] void bad_field(const std::string& param, const std::string& what);
// A string member of a request object, or `fallback` when it is missing or not a string (a client's
// {"type": 5} must be a 400 through the caller's checks, never the JSON library's type error).
std::string string_field(const nlohmann::ordered_json& object, const char* key, const std::string& fallback = "");

// POST /v1/embeddings. `input`: a string, an array of strings, an array of token ids, or an array of
// arrays of token ids (at most 2048 inputs, none empty).
struct EmbeddingRequest {
  std::string model;
  std::vector<std::string> texts;            // the inputs given as text
  std::vector<std::vector<int32_t>> tokens;  // or given as token ids (one of the two is empty)
  bool base64 = false;                       // encoding_format "base64": each vector's float32 bytes
  std::optional<int64_t> dimensions;         // keep the first this many values (then normalise again)
  std::string pooling;                       // "mean", "cls" or "last" (zinc's; "": the server's default)
  bool normalize = true;                     // unit length (zinc's; llama.cpp's embd_normalize -1 is false)
  size_t size() const { return texts.empty() ? tokens.size() : texts.size(); }
};
EmbeddingRequest parse_embedding_request(const nlohmann::ordered_json& body);
// The response: {"object": "list", "data": [{"object": "embedding", "index", "embedding"}], "model", "usage"}.
ordered_json embeddings_json(const std::vector<std::vector<float>>& vectors, bool base64, const std::string& model,
                             int64_t prompt_tokens);

struct CompletionRequest {
  bool chat = true;  // /v1/chat/completions; false: /v1/completions
  std::string model;
  ordered_json messages = ordered_json::array();  // chat: content as strings (text parts joined)
  std::string prompt;                              // completions
  ordered_json tools;                              // null, or the function tools the template sees
  bool stream = false, include_usage = false;
  int32_t max_tokens = -1;  // -1: until the context is full
  sample::SamplerParams sampling;
  std::vector<std::string> stop;
  bool logprobs = false;
  int32_t top_logprobs = 0;
  std::optional<bool> enable_thinking;             // chat_template_kwargs.enable_thinking
  ordered_json template_vars = ordered_json::object();  // other chat_template_kwargs, reasoning_effort
  std::string reasoning_effort;                    // "" when not given
  std::optional<int32_t> reasoning_budget;         // thinking_budget_tokens (Anthropic: thinking.budget_tokens)
  std::string grammar;       // GBNF the output must follow (response_format, json_schema, grammar); "" for none
  std::string tool_choice;   // "" (auto), "required" (some tool), or the name of the tool that must be called
  bool parallel_tool_calls = true;  // required: one call or several
};

// How much a request may think: whether the template is asked to enable thinking, and the budget of
// reasoning tokens (< 0: none). An explicit budget wins; else a reasoning_effort that the template does
// not read itself becomes one (none/minimal: thinking off, low: 1024 tokens, medium: 8192, high and
// above: no limit); else the server's default.
struct ThinkingPlan {
  std::optional<bool> enable_thinking;
  int32_t budget = -1;
};
ThinkingPlan plan_thinking(const CompletionRequest& r, bool template_reads_effort, std::optional<bool> default_enable,
                           int32_t default_budget);

// Parses a request body. `defaults` are the server's sampling settings, which the request's fields
// override. Throws ApiError (400) for anything malformed or unsupported.
CompletionRequest parse_chat_request(const nlohmann::ordered_json& body, const sample::SamplerParams& defaults);
CompletionRequest parse_completion_request(const nlohmann::ordered_json& body, const sample::SamplerParams& defaults);

// Everything about one finished request that a response needs.
struct CompletionResult {
  std::string id, model;
  int64_t created = 0;
  runtime::GenerateResult gen;
  chat::ParsedOutput message;                           // chat: the parsed answer
  std::vector<std::string> token_texts;                 // logprobs: the text of each generated token
  std::vector<std::vector<std::string>> top_texts;      // and of each alternative
  ordered_json response_fields = ordered_json::object();  // Responses: fields the request sets (store, ...)
};

// "stop", "length" or "tool_calls".
std::string finish_reason(const runtime::GenerateResult& r, const chat::ParsedOutput& message);

ordered_json usage_json(const runtime::GenerateResult& r);
ordered_json chat_completion_json(const CompletionResult& c, bool logprobs);
ordered_json text_completion_json(const CompletionResult& c, bool logprobs);

// Stream chunks. A chat stream is: role chunk, delta chunks, finish chunk, optional usage chunk.
ordered_json chat_chunk(const CompletionResult& c, const ordered_json& delta, const std::optional<std::string>& finish);
ordered_json chat_delta(const chat::ParsedOutput& d, size_t first_tool_index, const std::string& id_prefix);
ordered_json text_chunk(const CompletionResult& c, const std::string& text, const std::optional<std::string>& finish);
ordered_json usage_chunk(const CompletionResult& c, bool chat);

// A streamed answer as API chunks: text pieces from the engine in, chunks out. Chat output goes through
// the model's output parser (content, reasoning_content and tool-call deltas); completions pass text
// through. The caller frames each chunk as an SSE event and ends with "data: [DONE]".
class StreamTranslator {
 public:
  StreamTranslator(CompletionResult& result, bool chat, chat::OutputParserOptions parser);
  std::vector<ordered_json> start();                   // chat: the role chunk
  std::vector<ordered_json> push(std::string_view text);
  // After the engine finished: what the parser still held, the finish chunk, and the usage chunk when
  // asked for. Fills result.gen and result.message.
  std::vector<ordered_json> finish(runtime::GenerateResult gen, bool include_usage);

 private:
  std::vector<ordered_json> deltas(const chat::ParsedOutput& d);
  CompletionResult& result_;
  bool chat_;
  chat::OutputParser parser_;
  size_t tool_index_ = 0;
};

// A random id with the given prefix ("chatcmpl-", "cmpl-", "call_").
std::string random_id(const std::string& prefix);

}  // namespace zinc::server
