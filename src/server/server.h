// `zinc serve`'s HTTP side: OpenAI-compatible endpoints (chat completions, completions, models),
// tokenize/detokenize, health, Prometheus metrics and the web chat page, over an Engine.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "gguf/reader.h"
#include "sample/sampler.h"
#include "server/engine.h"
#include "tokenizer/tokenizer.h"

namespace zinc::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                    // 0: any free port (bind() returns it)
  std::string api_key;                // when set, /v1/*, /tokenize, /detokenize and /metrics need "Bearer KEY"
  std::vector<std::string> cors_origins;  // browser origins allowed besides the server's own page ("*" for any)
  std::vector<std::string> allowed_hosts;  // Host names answered besides localhost, IP literals and `host` ("*": any)
  size_t max_body_bytes = 8u << 20;
  std::string model_id;               // the name clients ask for
  // Serving one model, a request naming another is served by it (the answer names the real one), as
  // clients configured for another server expect; strict: a 404.
  bool strict_model_names = false;
  sample::SamplerParams defaults = sample::SamplerParams::chat();
  std::optional<bool> enable_thinking;  // default for chat requests that do not say
  int32_t reasoning_budget = -1;        // reasoning tokens before the engine concludes it (< 0: no limit)
  std::string grammar;                  // GBNF for requests that constrain their output no other way
  std::string pooling;                  // embeddings' pooling when a request says none ("": the model's own)
  bool context_shift = false;           // a full context drops old tokens instead of ending the answer
  int32_t n_keep = 0;
  // A request that does not say max_tokens generates at most this many (zinc serve -n; < 0: the API's
  // own default: until the context is full for chat, 16 for completions).
  int32_t max_tokens = -1;
  int http_threads = 64;              // connections served at once (streams hold one each)
};

class Server {
 public:
  // `file` and `tok` must outlive the server.
  Server(const gguf::File& file, const tokenizer::Tokenizer& tok, chat::ChatTemplate tmpl, EngineOptions engine,
         ServerOptions options);
  ~Server();

  // Where the model computes and what it holds on the device: "vulkan: weights 4.7 GB once, 8
  // contexts 2.3 GB" ("cpu" alone on the CPU).
  std::string memory_summary() const;
  // Binds the listening socket; returns the port. Throws zinc::Error when the address is unusable.
  int bind();
  // Serves until stop() (from another thread or a signal handler's thread).
  void run();
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace zinc::server
