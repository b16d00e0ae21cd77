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
#include "server/models.h"
#include "tokenizer/tokenizer.h"

namespace zinc::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                    // 0: any free port (bind() returns it)
  std::string api_key;                // when set, /v1/*, /tokenize, /detokenize and /metrics need "Bearer KEY"
  std::vector<std::string> cors_origins;  // browser origins allowed besides the server's own page ("*" for any)
  std::vector<std::string> allowed_hosts;  // Host names answered besides localhost, IP literals and `host` ("*": any)
  size_t max_body_bytes = 8u << 20;
  std::string model_id;               // the name clients ask for the model given to the constructor
  // Serving one model, a request naming another is served by it (the answer names the real one), as
  // clients configured for another server expect; strict: a 404. Serving several, an unknown name is a 404.
  bool strict_model_names = false;
  ModelPoolOptions models;            // the models loaded on demand (--models-dir, installed), aliases, keep-alive
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
  // A model loaded now and kept, named options.model_id (`file` and `tok` must outlive the server),
  // and those of options.models on demand.
  Server(const gguf::File& file, const tokenizer::Tokenizer& tok, chat::ChatTemplate tmpl, EngineOptions engine,
         ServerOptions options);
  // Only models loaded on demand (options.models names where they are).
  Server(EngineOptions engine, ServerOptions options);
  ~Server();

  // Where the model given to the constructor computes and what it holds on the device ("cpu" alone on
  // the CPU; "" without one).
  std::string memory_summary() const;
  // How models load on demand ("" when only the constructor's is served).
  std::string models_summary() const;
  // What drafts tokens for the -m model's speculative decoding ("" for nothing).
  std::string drafting() const;
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
