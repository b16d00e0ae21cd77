// `zinc serve -m MODEL`: the OpenAI-compatible HTTP server with the web chat page. Ctrl-C (or SIGTERM)
// stops it cleanly.
#include <fmt/format.h>

#include <csignal>
#include <filesystem>
#include <thread>

#include "cli/cli.h"
#include "cli/generation_options.h"
#include "core/error.h"
#include "hub/store.h"
#include "sample/grammar.h"
#include "server/models.h"
#include "server/openai.h"
#include "server/server.h"

namespace zinc::cli {

namespace {

struct ServeArgs {
  GenerationArgs gen;
  server::ServerOptions server;
  // A step's tokens: 1024 takes a burst of sixteen 64-token prompts in one step (measured on an H200,
  // qwen3-8b, 16 requests at once: 2500-2650 -> 3014-3021 tok/s, their gaps' p99 13.8 -> 4.7 ms).
  int parallel = 1, queue = 32, batch_tokens = 1024;
  double decode_latency = 3;
  int prompt_lane = -1;  // (auto: server::kAutoPromptLane where contexts step side by side)
  std::vector<std::string> aliases;  // NAME (the -m model's name) or NAME=MODEL
  std::string models_dir, keep_alive = "5m";
  int max_models = 3;
  double models_mem_gb = 0;
};

std::atomic<server::Server*> g_server{nullptr};

extern "C" void on_stop_signal(int) {
  // stop() stores a flag and writes one byte to a pipe: both async-signal-safe.
  if (auto* s = g_server.load()) s->stop();
}

int run_serve(ServeArgs& a) {
  server::EngineOptions eo;
  eo.n_slots = a.parallel;
  eo.queue_limit = a.queue;
  eo.exec = a.gen.exec_options();
  eo.exec.max_tokens = a.batch_tokens;
  eo.decode_latency = a.decode_latency;
  eo.prompt_lane = a.prompt_lane;
  eo.backend = a.gen.backend;
  eo.device = a.gen.device;
  eo.threads = a.gen.threads;
  eo.cache_bytes = static_cast<uint64_t>(a.gen.cache_mem_gb * 1e9);
  eo.cache_host_bytes = static_cast<uint64_t>(a.gen.cache_ram_gb * 1e9);
  if (!a.gen.draft_model.empty()) eo.draft_model = hub::resolve_model_path(a.gen.draft_model);
  eo.draft_max = a.gen.draft_tokens();
  eo.spec = runtime::parse_spec_mode(a.gen.spec);
  auto& so = a.server;
  std::string alias;
  for (const auto& n : a.aliases) {
    const auto eq = n.find('=');
    if (eq == std::string::npos) {
      alias = n;
    } else if (eq == 0 || eq + 1 == n.size()) {
      throw Error(fmt::format("--alias {}: give NAME=MODEL, or NAME for the model -m names", n));
    } else {
      so.models.aliases.emplace_back(n.substr(0, eq), n.substr(eq + 1));
    }
  }
  if (!alias.empty() && a.gen.model.empty()) throw Error(fmt::format("--alias {}: there is no -m model to name", alias));
  // Models on demand: those under --models-dir, or the installed ones when no model is given at all.
  so.models.dir = a.models_dir;
  so.models.installed = a.gen.model.empty() && a.models_dir.empty();
  so.models.keep_alive_s = server::parse_keep_alive(nlohmann::ordered_json(a.keep_alive), "--keep-alive");
  so.models.max_loaded = a.max_models;
  so.models.memory_bytes = static_cast<uint64_t>(a.models_mem_gb * 1e9);
  if (so.models.installed && hub::installed_models().empty()) {
    throw Error("zinc serve needs a model: -m FILE.gguf (or an installed id), --models-dir DIR, or installed models "
                "(zinc pull ID)");
  }
  so.defaults = a.gen.sampler_params(a.gen.ctx);
  so.enable_thinking = a.gen.enable_thinking();
  so.reasoning_budget = a.gen.reasoning_budget;
  so.grammar = a.gen.grammar_gbnf();
  // A bad one stops here, not at the first request (its <text> tokens are looked up in each model).
  if (!so.grammar.empty()) sample::Grammar::parse(so.grammar, "root", sample::any_token);
  so.context_shift = a.gen.context_shift;
  so.n_keep = a.gen.n_keep;
  so.max_tokens = a.gen.n_predict;  // -n: the limit of a request that sets none
  std::optional<gguf::File> file;
  std::optional<tokenizer::Tokenizer> tok;
  std::unique_ptr<server::Server> server;
  if (!a.gen.model.empty()) {
    const std::string path = hub::resolve_model_path(a.gen.model);
    file.emplace(gguf::File::open(path));
    tok.emplace(tokenizer::Tokenizer::from_gguf(*file));
    // Clients name the model by its alias, its installed id, or the file's name without .gguf.
    so.model_id = !alias.empty()         ? alias
                  : path != a.gen.model ? a.gen.model
                                        : std::filesystem::path(a.gen.model).stem().string();
    server = std::make_unique<server::Server>(*file, *tok, chat_template(a.gen, *file, *tok), eo, so);
  } else {
    if (!a.gen.chat_template_file.empty()) throw Error("--chat-template applies to the -m model: give one");
    server = std::make_unique<server::Server>(eo, so);
  }
  server::Server& srv = *server;
  const int port = srv.bind();
  g_server.store(&srv);
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
  // One write: a reader that waits for the address gets the whole startup message.
  std::string line = so.model_id.empty()
      ? fmt::format("zinc serve: models on http://{}:{}/ ({} slot{} of {} tokens each; OpenAI and Anthropic APIs at /v1)\n",
                    so.host, port, a.parallel, a.parallel == 1 ? "" : "s", a.gen.ctx)
      : fmt::format("zinc serve: {} on http://{}:{}/ ({} slot{} of {} tokens on {}; OpenAI and Anthropic APIs at /v1)\n",
                    so.model_id, so.host, port, a.parallel, a.parallel == 1 ? "" : "s", a.gen.ctx, srv.memory_summary());
  if (const std::string on_demand = srv.models_summary(); !on_demand.empty()) line += "zinc serve: " + on_demand + "\n";
  line += eo.cache_bytes > 0
              ? fmt::format("zinc serve: prefix cache: {:.2f} GB per model for KV blocks and state checkpoints (--cache-mem){}\n",
                            a.gen.cache_mem_gb,
                            eo.cache_host_bytes > 0
                                ? fmt::format(", {:.2f} GB of host memory for those it evicts (--cache-ram)", a.gen.cache_ram_gb)
                                : std::string())
              : "zinc serve: prefix cache off (--cache-mem 0): each slot reuses only its own last prompt\n";
  if (const std::string drafting = srv.drafting(); !drafting.empty()) {
    line += fmt::format("zinc serve: speculative decoding: {} drafts up to {} tokens per step ({})\n", drafting,
                        eo.draft_max, a.gen.spec == "on" ? "always" : "while it pays");
  } else if (!eo.draft_model.empty()) {
    line += "zinc serve: speculative decoding off (--spec off)\n";
  }
  fmt::print(stderr, "{}", line);
  srv.run();
  g_server.store(nullptr);
  fmt::print(stderr, "zinc serve: stopped\n");
  return 0;
}

void add_serve_command(CLI::App& app, const GlobalOptions&, Runner& run) {
  auto a = std::make_shared<ServeArgs>();
  a->gen.sampling = sample::SamplerParams::chat();
  CLI::App* cmd = app.add_subcommand("serve", "Serve a model over an OpenAI-compatible HTTP API, with a web chat page");
  add_generation_options(cmd, a->gen, true);
  // Without a model, the server loads models on demand (--models-dir, or the installed ones).
  cmd->get_option("--model")->required(false)->description(
      "GGUF model file, or an installed model id (zinc list): loaded at start and kept. Without one (and without "
      "--models-dir) the installed models are served on demand");
  cmd->add_option("--host", a->server.host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", a->server.port, "Port (0 = any free one)")->capture_default_str()->check(CLI::Range(0, 65535));
  cmd->add_option("--api-key", a->server.api_key, "Require Authorization: Bearer KEY on the API");
  cmd->add_option("--cors-origin", a->server.cors_origins,
                  "Web page origin allowed to call the API besides the server's own page (repeatable; * for any)");
  cmd->add_option("--allowed-hosts", a->server.allowed_hosts,
                  "Host names the server answers besides localhost, IP addresses and --host (repeatable; * for any)");
  cmd->add_option("--max-body", a->server.max_body_bytes, "Largest request body in bytes")->capture_default_str();
  cmd->add_option("--parallel", a->parallel,
                  "Requests generated at once: the sequences a step carries (each its own context of --ctx tokens)")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  cmd->add_option("--batch-tokens", a->batch_tokens,
                  "Tokens one step evaluates at most: every decoding sequence's next token, then chunks of waiting "
                  "prompts")
      ->capture_default_str()
      ->check(CLI::Range(1, 8192));
  cmd->add_option("--decode-latency", a->decode_latency,
                  "While requests decode, waiting prompts join a step only with as many tokens as keep it within this "
                  "many times a step of the decoding requests alone (measured as it runs): a long prompt raises their "
                  "gaps between tokens at most this much; 0 (or 1 and below): prompts take all of --batch-tokens")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1000.0));
  cmd->add_option("--prompt-lane", a->prompt_lane,
                  "A prompt of more than this many tokens arriving while requests decode is read on a context of its "
                  "own beside their steps (where the GPU runs both at once: CUDA, the prompt on 8 in 11 of the "
                  "multiprocessors and their steps on the rest), then joins its slot; 0: never (it goes in chunks "
                  "within their steps); -1: 512 where the backend runs both at once and --parallel is above 1, "
                  "else never")
      ->capture_default_str()
      ->check(CLI::Range(-1, 1 << 20));
  cmd->add_option("--queue", a->queue, "Requests that may wait for a slot before the server answers 503")
      ->capture_default_str()
      ->check(CLI::Range(0, 100000));
  cmd->add_option("--pooling", a->server.pooling,
                  "Pooling of /v1/embeddings requests that name none: mean, cls or last (default: the model's own; "
                  "models that declare none then need it in the request)")
      ->check(CLI::IsMember({"mean", "cls", "last"}));
  cmd->add_option("--alias", a->aliases,
                  "NAME: the name clients use for the -m model (default: the file name without .gguf); NAME=MODEL: "
                  "another name for a model (repeatable)");
  cmd->add_option("--models-dir", a->models_dir,
                  "Serve every GGUF file under DIR (named by its path without .gguf), each loaded when a request "
                  "names it")
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--keep-alive", a->keep_alive,
                  "How long a model loaded on demand stays after its last request (30s, 5m, 1h; -1: until room is "
                  "needed; a request's keep_alive overrides it)")
      ->capture_default_str();
  cmd->add_option("--max-models", a->max_models,
                  "Models loaded at once (the least recently used idle one is unloaded for another; 0: no limit)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000));
  cmd->add_option("--models-mem", a->models_mem_gb,
                  "GB the loaded models may hold together (files or device weights, plus device contexts; 0: no limit)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--strict-model-names", a->server.strict_model_names,
                "Answer a request naming another model with 404 (default: the served model answers it)");
  cmd->callback([a, &run] { run = [a] { return run_serve(*a); }; });
}

}  // namespace

ZINC_COMMAND(7, add_serve_command);

}  // namespace zinc::cli
