// The models a server answers for. With one model (`zinc serve -m FILE`) it is loaded at start and kept.
// With a directory of GGUF files (--models-dir) or the installed models, each loads when a request first
// names it, stays while requests use it and for its keep-alive after the last one (Ollama's keep_alive:
// the server's --keep-alive, or the request's own), and is unloaded sooner, least recently used first,
// when another needs its room: at most --max-models loaded at once and their bytes within --models-mem.
// A model in use is never unloaded; a request that finds no room waits for some (a bounded time, then
// 503). Requests hold a lease (a shared_ptr to the loaded model) for as long as they use it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "chat/chat_template.h"
#include "chat/output_parser.h"
#include "gguf/reader.h"
#include "sample/grammar.h"
#include "server/engine.h"
#include "tokenizer/tokenizer.h"

namespace zinc::server {

// One loaded model and what requests need of it besides its engine: its template, the output format the
// template implies, and the grammars compiled for its vocabulary.
class LoadedModel {
 public:
  // A model whose file and tokenizer the caller keeps (they must outlive it).
  LoadedModel(std::string id, const gguf::File& file, const tokenizer::Tokenizer& tok, chat::ChatTemplate tmpl,
              const EngineOptions& options);
  // A model opened from its file: file, tokenizer and template (the file's own; ChatML when it has none).
  LoadedModel(std::string id, const std::filesystem::path& path, const EngineOptions& options);

  const std::string& id() const { return id_; }
  const gguf::File& file() const { return *file_; }
  const tokenizer::Tokenizer& tok() const { return *tok_; }
  const chat::ChatTemplate& tmpl() const { return *tmpl_; }
  chat::OutputFormat format() const { return format_; }
  Engine& engine() const { return *engine_; }
  // What the model holds: its file's bytes (mapped or copied into packed weights) or its weights on the
  // device, whichever is more, plus its contexts on the device.
  uint64_t bytes() const;

  // The vocabulary as grammars see it, built at the first constrained request.
  std::shared_ptr<const sample::GrammarVocab> grammar_vocab();
  // A grammar by its text (and the rule it starts from), with its mask cache: requests with the same
  // schema share the work (the most recent 16 are kept). Its <text> tokens are looked up in this model's
  // vocabulary; throws zinc::Error for one it lacks.
  std::pair<std::shared_ptr<const sample::Grammar>, std::shared_ptr<sample::GrammarMaskCache>> compiled_grammar(
      const std::string& gbnf, const std::string& root = "root");

 private:
  std::string id_;
  std::unique_ptr<gguf::File> own_file_;
  std::unique_ptr<tokenizer::Tokenizer> own_tok_;
  const gguf::File* file_;
  const tokenizer::Tokenizer* tok_;
  std::optional<chat::ChatTemplate> tmpl_;
  chat::OutputFormat format_;
  std::unique_ptr<Engine> engine_;
  struct CompiledGrammar {
    std::string text;  // the root rule's name, a NUL, the grammar
    std::shared_ptr<const sample::Grammar> grammar;
    std::shared_ptr<sample::GrammarMaskCache> cache;
  };
  std::mutex grammar_mutex_;
  std::shared_ptr<const sample::GrammarVocab> grammar_vocab_;
  std::list<CompiledGrammar> grammars_;
};

struct ModelPoolOptions {
  std::filesystem::path dir;  // every GGUF file under it (its path without .gguf names it), loaded on demand
  bool installed = false;     // the installed models ($ZINC_HOME/models), by their ids
  std::vector<std::pair<std::string, std::string>> aliases;  // another name → a model's id
  double keep_alive_s = 300;  // idle seconds before a model loaded on demand unloads (< 0: never; 0: at once)
  int max_loaded = 3;         // models loaded at once (0: no limit)
  uint64_t memory_bytes = 0;  // what loaded models may hold together (LoadedModel::bytes; 0: no limit)
  double wait_s = 120;        // how long a request waits for room before a 503
  // Serving one model only: a request naming another is a 404 (otherwise the one model answers it).
  bool strict_names = false;
};

// What GET /v1/models and `zinc ps` show of a model.
struct ModelState {
  std::string id;
  std::vector<std::string> aliases;
  std::string state;  // "loaded", "loading", "unloading" or "available"
  bool pinned = false;  // loaded at start and kept (-m)
  uint64_t bytes = 0;   // loaded: LoadedModel::bytes; otherwise the file's size
  std::optional<double> expires_in_s;  // loaded and idle with a keep-alive: seconds until it unloads
  int requests = 0;                    // requests using it now
  std::string backend, architecture;
  int32_t n_ctx = 0;
  int slots = 0, busy_slots = 0;
  int64_t loaded_at = 0;  // Unix seconds
  // Loaded on a GPU: its weights there (held once) and its context (every slot's sequence and the
  // prefix cache's blocks); 0 on the CPU.
  uint64_t weights_device_bytes = 0, contexts_device_bytes = 0;
  std::string drafting;  // what drafts for speculative decoding (Engine::drafting(); "" for nothing)
};

class ModelPool {
 public:
  using Loader = std::function<std::unique_ptr<LoadedModel>(const std::string& id, const std::filesystem::path& path)>;
  // `load` opens a model (throws zinc::Error when it cannot). Throws zinc::Error when the directory is
  // unreadable or an alias names no model.
  ModelPool(ModelPoolOptions options, Loader load, std::unique_ptr<LoadedModel> pinned = nullptr);
  ~ModelPool();

  // Whether requests may name models other than a pinned one.
  bool on_demand() const { return !options_.dir.empty() || options_.installed; }
  // The model `name` names (its id or an alias; "": the pinned model, or the only one, or the most
  // recently used), loaded when it is not; it stays loaded while the returned lease lives. `keep_alive_s`:
  // the request's own keep-alive (otherwise the server's). Throws ApiError: 404 for an unknown name, 400
  // when no model is named and several could be meant or when the model alone exceeds the memory budget,
  // 503 when no room came free in time, 500 when the file does not load.
  std::shared_ptr<LoadedModel> acquire(const std::string& name, std::optional<double> keep_alive_s = std::nullopt);
  // Loads `name` (as acquire does) and lets it go at once: it stays for its keep-alive.
  void load(const std::string& name, std::optional<double> keep_alive_s = std::nullopt);
  // Unloads `name` once no request uses it (now, when none does). Throws ApiError 404 for an unknown name,
  // 400 for the pinned model.
  void unload(const std::string& name);
  // Every model the server answers for, loaded ones first (the pinned one at the head).
  std::vector<ModelState> list();
  // The loaded models' engine counters, summed, and how many are loaded.
  EngineStats stats(int* loaded = nullptr);
  int64_t loads() const;
  int64_t unloads() const;
  // A description for the startup line: "3 models in DIR, loaded on demand: at most 3 at once, ...".
  std::string summary();

 private:
  enum class State { Available, Loading, Loaded, Unloading };
  struct Entry {
    std::string id;
    std::filesystem::path path;
    uint64_t file_bytes = 0;
    State state = State::Available;
    bool pinned = false;
    bool unload_requested = false;
    std::shared_ptr<LoadedModel> model;
    int leases = 0;
    double keep_alive_s = 0;
    std::chrono::steady_clock::time_point last_used;
    int64_t loaded_at = 0;
  };
  Entry* find(const std::string& name);  // with mutex_ held; rescans the directory for an unknown name
  // With mutex_ held: the models on disk again, unless they were read less than kRescanS ago (a listing
  // polled by the web page or `zinc ps` does not walk the directory each time); `force` reads them now.
  void rescan(bool force = false);
  static constexpr double kRescanS = 2.0;
  std::shared_ptr<LoadedModel> lease(Entry& e);
  void release(Entry& e);
  uint64_t held_bytes(const Entry& e) const;
  void reap();  // the keep-alive thread

  ModelPoolOptions options_;
  Loader load_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> aliases_;
  std::string pinned_id_;
  int64_t loads_ = 0, unloads_ = 0;
  std::optional<std::chrono::steady_clock::time_point> scanned_;  // the last rescan
  bool stop_ = false;
  std::thread reaper_;
};

// A keep-alive as requests give it (Ollama's keep_alive): a number of seconds, or a duration such as
// "30s", "5m", "1h30m" or "-1" (negative: stay loaded). Throws ApiError 400 naming `param` otherwise.
double parse_keep_alive(const nlohmann::ordered_json& value, const std::string& param = "keep_alive");
// "5m", "forever" or "0s" for the startup line and `zinc ps`.
std::string format_duration(double seconds);

}  // namespace zinc::server
