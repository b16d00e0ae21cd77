// `zinc run -m MODEL -p TEXT`: one prompt, greedy continuation streamed to stdout, timings on stderr
// (or all of it as JSON). The sampler chain and chat templates arrive with the Generation work.
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "cli/cli.h"
#include "cli/json_util.h"
#include "core/error.h"
#include "core/log.h"
#include "runtime/session.h"
#include "sample/sampler.h"
#include "sample/stop_matcher.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace zinc::cli {

namespace {

struct RunArgs {
  std::string model, prompt;
  int n_predict = 128;
  int ctx = 2048;
  unsigned threads = 0;
  bool no_bos = false;
  std::string kv_type = "f16";
  // Sampling: greedy unless a temperature is given; the other knobs use llama.cpp's defaults.
  float temperature = 0.0f;
  int32_t top_k = 40;
  float top_p = 0.95f, min_p = 0.05f, repeat_penalty = 1.0f, presence_penalty = 0.0f, frequency_penalty = 0.0f;
  int32_t repeat_last_n = 64;
  float dry_multiplier = 0.0f, dry_base = 1.75f;
  int32_t dry_allowed_length = 2;
  uint64_t seed = sample::SamplerParams::kRandomSeed;
  std::vector<std::string> stop;
};

int run_generate(const RunArgs& a, const GlobalOptions& global) {
  using Clock = std::chrono::steady_clock;
  const auto t_load = Clock::now();
  const gguf::File file = gguf::File::open(a.model);
  const auto tok = tokenizer::Tokenizer::from_gguf(file);
  auto backend = backend::make_cpu_backend();
  backend::ExecOptions opts;
  opts.n_ctx = a.ctx;
  opts.max_tokens = 256;
  opts.threads = a.threads;
  opts.kv_type = a.kv_type == "f32" ? backend::KvType::F32 : a.kv_type == "q8_0" ? backend::KvType::Q8_0 : backend::KvType::F16;
  runtime::Session session(file, *backend, opts);
  const double load_s = std::chrono::duration<double>(Clock::now() - t_load).count();

  std::vector<int32_t> prompt = tok.encode(a.prompt, !a.no_bos, false);
  if (prompt.empty()) throw Error("the prompt is empty and the model adds no BOS token: nothing to continue");
  if (static_cast<int64_t>(prompt.size()) + a.n_predict > session.n_ctx()) {
    throw Error(fmt::format("the prompt ({} tokens) plus {} new tokens do not fit the context of {} (use --ctx)",
                            prompt.size(), a.n_predict, session.n_ctx()));
  }
  sample::SamplerParams sp;
  sp.temperature = a.temperature;
  sp.top_k = a.top_k;
  sp.top_p = a.top_p;
  sp.min_p = a.min_p;
  sp.repeat_penalty = a.repeat_penalty;
  sp.presence_penalty = a.presence_penalty;
  sp.frequency_penalty = a.frequency_penalty;
  sp.penalty_last_n = a.repeat_last_n;
  sp.dry_multiplier = a.dry_multiplier;
  sp.dry_base = a.dry_base;
  sp.dry_allowed_length = a.dry_allowed_length;
  sp.seed = a.seed;
  sp.n_ctx = session.n_ctx();
  sample::Sampler sampler(sp, &tok);
  for (int32_t t : prompt) sampler.accept(t);  // penalties see the prompt too
  sample::StopMatcher stops(a.stop);

  const auto t0 = Clock::now();
  auto logits = session.eval(prompt);
  const double prefill_s = std::chrono::duration<double>(Clock::now() - t0).count();

  // The stream continues the prompt already shown, so its first token keeps any leading space.
  tokenizer::DecodeOptions dopts;
  dopts.at_start = false;
  tokenizer::Detokenizer detok(tok, dopts);
  std::vector<int32_t> out;
  std::string text;
  if (!global.json) {
    fmt::print("{}", a.prompt);
    std::fflush(stdout);
  }
  const auto t1 = Clock::now();
  auto show = [&](const std::string& piece) {
    text += piece;
    if (!global.json && !piece.empty()) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    }
  };
  int32_t stop_hit = -1;
  for (int i = 0; i < a.n_predict; ++i) {
    const int32_t next = sampler.sample(logits);
    sampler.accept(next);
    if (tok.vocab().is_eog(next)) break;
    out.push_back(next);
    const auto shown = stops.push(detok.push(next));
    show(shown.text);
    if (shown.stopped) {
      stop_hit = shown.stop_index;
      break;
    }
    if (i + 1 < a.n_predict) logits = session.eval(std::span<const int32_t>(&out.back(), 1));
  }
  if (!stops.stopped()) {
    const auto last = stops.push(detok.flush());
    show(last.text);
    if (last.stopped) stop_hit = last.stop_index;
    else show(stops.flush());
  }
  const double decode_s = std::chrono::duration<double>(Clock::now() - t1).count();
  const double prefill_tps = static_cast<double>(prompt.size()) / prefill_s;
  const double decode_tps = out.empty() ? 0.0 : static_cast<double>(out.size()) / decode_s;
  if (global.json) {
    nlohmann::json j = {{"model", a.model},
                        {"seed", sampler.seed()},
                        {"stopped_by", stop_hit >= 0 ? nlohmann::json(a.stop[static_cast<size_t>(stop_hit)]) : nlohmann::json()},
                        {"prompt_tokens", prompt.size()},
                        {"tokens", out},
                        {"text", text},
                        {"timings",
                         {{"load_s", load_s},
                          {"prefill_s", prefill_s},
                          {"prefill_tokens_per_s", prefill_tps},
                          {"decode_s", decode_s},
                          {"decode_tokens_per_s", decode_tps}}}};
    fmt::print("{}\n", dump_json(j));
  } else {
    fmt::print("\n");
    std::fflush(stdout);
    fmt::print(stderr, "prompt {} tokens at {:.1f} tok/s · generated {} tokens at {:.1f} tok/s · load {:.2f} s\n",
               prompt.size(), prefill_tps, out.size(), decode_tps, load_s);
  }
  return 0;
}

void add_run_command(CLI::App& app, const GlobalOptions& global, Runner& run) {
  auto a = std::make_shared<RunArgs>();
  CLI::App* cmd = app.add_subcommand("run", "Continue a prompt with a model (greedy), streaming the text");
  cmd->add_option("-m,--model", a->model, "GGUF model file")->required();
  cmd->add_option("-p,--prompt", a->prompt, "Prompt text")->required();
  cmd->add_option("-n,--n-predict", a->n_predict, "Tokens to generate")->capture_default_str()->check(CLI::Range(0, 1 << 20));
  cmd->add_option("-c,--ctx", a->ctx, "Context size in tokens")->capture_default_str()->check(CLI::Range(1, 1 << 22));
  cmd->add_option("-t,--threads", a->threads, "CPU threads (default: physical cores)");
  cmd->add_flag("--no-bos", a->no_bos, "Do not add the model's beginning-of-sequence token");
  cmd->add_option("--temp", a->temperature, "Sampling temperature; 0 = greedy")->capture_default_str();
  cmd->add_option("--top-k", a->top_k, "Keep the k most likely tokens (0 = off)")->capture_default_str();
  cmd->add_option("--top-p", a->top_p, "Nucleus mass (1 = off)")->capture_default_str();
  cmd->add_option("--min-p", a->min_p, "Drop tokens below this fraction of the top probability")->capture_default_str();
  cmd->add_option("--repeat-penalty", a->repeat_penalty, "Penalty for tokens in the last window (1 = off)")
      ->capture_default_str();
  cmd->add_option("--repeat-last-n", a->repeat_last_n, "Window of the repetition penalties")->capture_default_str();
  cmd->add_option("--presence-penalty", a->presence_penalty, "Subtracted once from tokens in the window");
  cmd->add_option("--frequency-penalty", a->frequency_penalty, "Subtracted per occurrence in the window");
  cmd->add_option("--dry-multiplier", a->dry_multiplier, "DRY repetition penalty strength (0 = off)");
  cmd->add_option("--dry-base", a->dry_base, "DRY exponential base")->capture_default_str();
  cmd->add_option("--dry-allowed-length", a->dry_allowed_length, "DRY: repeats this long are free")->capture_default_str();
  cmd->add_option("--seed", a->seed, "Random seed (default: random, reported with --json)");
  cmd->add_option("--stop", a->stop, "Stop when this text appears (repeatable); it is not printed");
  cmd->add_option("--kv-type", a->kv_type, "KV cache storage: f16, f32 or q8_0")
      ->capture_default_str()
      ->check(CLI::IsMember({"f16", "f32", "q8_0"}));
  cmd->callback([a, &global, &run] { run = [a, &global] { return run_generate(*a, global); }; });
}

}  // namespace

ZINC_COMMAND(5, add_run_command);

}  // namespace zinc::cli
