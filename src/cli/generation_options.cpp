#include "cli/generation_options.h"

#include <chrono>

#include "core/error.h"

namespace zinc::cli {

std::optional<bool> GenerationArgs::enable_thinking() const {
  if (think) return true;
  if (no_think) return false;
  return std::nullopt;
}

sample::SamplerParams GenerationArgs::sampler_params(int32_t n_ctx) const {
  sample::SamplerParams sp;
  sp.temperature = temperature;
  sp.top_k = top_k;
  sp.top_p = top_p;
  sp.min_p = min_p;
  sp.repeat_penalty = repeat_penalty;
  sp.presence_penalty = presence_penalty;
  sp.frequency_penalty = frequency_penalty;
  sp.penalty_last_n = repeat_last_n;
  sp.dry_multiplier = dry_multiplier;
  sp.dry_base = dry_base;
  sp.dry_allowed_length = dry_allowed_length;
  sp.seed = seed;
  sp.n_ctx = n_ctx;
  return sp;
}

runtime::GenerateOptions GenerationArgs::generate_options() const {
  runtime::GenerateOptions g;
  g.max_tokens = n_predict;
  g.stop = stop;
  g.context_shift = context_shift;
  g.n_keep = n_keep;
  return g;
}

void add_generation_options(CLI::App* cmd, GenerationArgs& a, bool chat_options) {
  cmd->add_option("-m,--model", a.model, "GGUF model file")->required();
  cmd->add_option("-n,--n-predict", a.n_predict, "Tokens to generate per answer (-1 = until the context is full)")
      ->capture_default_str()
      ->check(CLI::Range(-1, 1 << 24));
  cmd->add_option("-c,--ctx", a.ctx, "Context size in tokens")->capture_default_str()->check(CLI::Range(1, 1 << 22));
  cmd->add_option("-t,--threads", a.threads, "CPU threads (default: physical cores)");
  cmd->add_option("--kv-type", a.kv_type, "KV cache storage: f16, f32 or q8_0")
      ->capture_default_str()
      ->check(CLI::IsMember({"f16", "f32", "q8_0"}));
  cmd->add_flag("--context-shift", a.context_shift,
                "When the context fills, drop the older half (after --keep tokens) and go on instead of stopping");
  cmd->add_option("--keep", a.n_keep, "Tokens at the start that a context shift keeps")->capture_default_str()->check(
      CLI::NonNegativeNumber);
  cmd->add_option("--temp", a.temperature, "Sampling temperature; 0 = greedy")->capture_default_str();
  cmd->add_option("--top-k", a.top_k, "Keep the k most likely tokens (0 = off)")->capture_default_str();
  cmd->add_option("--top-p", a.top_p, "Nucleus mass (1 = off)")->capture_default_str();
  cmd->add_option("--min-p", a.min_p, "Drop tokens below this fraction of the top probability")->capture_default_str();
  cmd->add_option("--repeat-penalty", a.repeat_penalty, "Penalty for tokens in the last window (1 = off)")
      ->capture_default_str();
  cmd->add_option("--repeat-last-n", a.repeat_last_n, "Window of the repetition penalties")->capture_default_str();
  cmd->add_option("--presence-penalty", a.presence_penalty, "Subtracted once from tokens in the window");
  cmd->add_option("--frequency-penalty", a.frequency_penalty, "Subtracted per occurrence in the window");
  cmd->add_option("--dry-multiplier", a.dry_multiplier, "DRY repetition penalty strength (0 = off)");
  cmd->add_option("--dry-base", a.dry_base, "DRY exponential base")->capture_default_str();
  cmd->add_option("--dry-allowed-length", a.dry_allowed_length, "DRY: repeats this long are free")->capture_default_str();
  cmd->add_option("--seed", a.seed, "Random seed (default: random, reported with --json)");
  cmd->add_option("--stop", a.stop, "Stop when this text appears (repeatable); it is not printed");
  if (chat_options) {
    cmd->add_option("--system", a.system, "System prompt");
    auto* think = cmd->add_flag("--think", a.think, "Ask the chat template to enable the model's reasoning");
    cmd->add_flag("--no-think", a.no_think, "Ask the chat template to disable the model's reasoning")->excludes(think);
    cmd->add_flag("--drop-old-turns", a.drop_old_turns,
                  "When the conversation outgrows the context, drop the oldest turns instead of stopping");
  }
}

std::unique_ptr<LoadedModel> load_model(const GenerationArgs& a) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  auto file = gguf::File::open(a.model);
  auto tok = tokenizer::Tokenizer::from_gguf(file);
  auto m = std::unique_ptr<LoadedModel>(new LoadedModel{std::move(file), std::move(tok), backend::make_cpu_backend(), nullptr, 0});
  backend::ExecOptions opts;
  opts.n_ctx = a.ctx;
  opts.max_tokens = 256;
  opts.threads = a.threads;
  opts.kv_type = a.kv_type == "f32" ? backend::KvType::F32 : a.kv_type == "q8_0" ? backend::KvType::Q8_0 : backend::KvType::F16;
  m->session = std::make_unique<runtime::Session>(m->file, *m->backend, opts);
  m->load_s = std::chrono::duration<double>(Clock::now() - t0).count();
  return m;
}

}  // namespace zinc::cli
