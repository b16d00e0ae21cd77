#include "cli/generation_options.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <fstream>
#include <iterator>
#include <optional>
#include <stdexcept>

#include "cli/cli.h"
#include "cli/json_util.h"
#include "cli/terminal.h"
#include "hub/store.h"
#include "core/error.h"
#include "sample/json_schema.h"
#include "backend/exec_common.h"
#include "core/system_info.h"
#include "model/model.h"
#include "runtime/chat_session.h"

namespace zinc::cli {

std::optional<bool> GenerationArgs::enable_thinking() const {
  if (think) return true;
  if (no_think) return false;
  return std::nullopt;
}

backend::KvType kv_type_from_name(const std::string& name) {
  if (name == "f32") return backend::KvType::F32;
  if (name == "q8_0") return backend::KvType::Q8_0;
  if (name == "f16") return backend::KvType::F16;
  throw Error(fmt::format("unknown KV cache type '{}' (f16, f32 or q8_0)", name));
}

backend::ExecOptions GenerationArgs::exec_options() const {
  backend::ExecOptions opts;
  opts.n_ctx = ctx;
  opts.max_tokens = 256;
  opts.kv_type = kv_type_from_name(kv_type);
  return opts;
}

sample::SamplerParams GenerationArgs::sampler_params(int32_t n_ctx) const {
  sample::SamplerParams sp = sampling;
  sp.n_ctx = n_ctx;
  if (!samplers.empty()) {
    sp.order.clear();
    std::string name;
    for (char c : samplers + ";") {
      if (c == ';' || c == ',') {
        if (!name.empty()) sp.order.push_back(name);
        name.clear();
      } else if (c != ' ') {
        name += c;
      }
    }
  }
  for (const auto& b : logit_bias) {
    // TOKEN+BIAS or TOKEN-BIAS; the bias may be "inf" (-inf bans the token).
    const size_t sign = b.find_first_of("+-", 1);
    try {
      if (sign == std::string::npos) throw std::invalid_argument(b);
      size_t used = 0;
      const long id = std::stol(b.substr(0, sign), &used);
      if (used != sign || id < 0 || id > INT32_MAX) throw std::invalid_argument(b);
      const float bias = std::stof(b.substr(sign));
      sp.logit_bias.emplace_back(static_cast<int32_t>(id), bias);
    } catch (const std::exception&) {
      throw Error(fmt::format("--logit-bias '{}': expected TOKEN_ID+BIAS or TOKEN_ID-BIAS (e.g. 15043+1, 2-inf)", b));
    }
  }
  sp.validate();
  return sp;
}

std::string GenerationArgs::grammar_gbnf() const {
  const auto slurp = [](const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error(fmt::format("cannot read {}", path));
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string schema = !json_schema_file.empty() ? slurp(json_schema_file) : json_schema;
  if (schema.empty()) return !grammar_file.empty() ? slurp(grammar_file) : grammar;
  nlohmann::ordered_json j;
  try {
    j = nlohmann::ordered_json::parse(schema);
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("--json-schema: not JSON ({})", e.what()));
  }
  return sample::json_schema_to_gbnf(j);
}

runtime::GenerateOptions GenerationArgs::generate_options(const std::string& backend_name, const tokenizer::Tokenizer* tok) const {
  runtime::GenerateOptions g;
  g.max_tokens = n_predict;
  g.stop = stop;
  g.context_shift = context_shift;
  g.n_keep = n_keep;
  g.reasoning.tokens = reasoning_budget;  // the chat's template supplies the markers
  const std::string gbnf = grammar_gbnf();
  if (!gbnf.empty()) {
    g.grammar = std::make_shared<const sample::Grammar>(
        sample::Grammar::parse(gbnf, "root", tok ? sample::grammar_token_lookup(*tok) : sample::Grammar::TokenLookup()));
  }
  g.grammar_overlap = backend_name != "cpu";
  return g;
}

void add_generation_options(CLI::App* cmd, GenerationArgs& a, bool chat_options) {
  cmd->add_option("model,-m,--model", a.model, "GGUF model file, or an installed model id (zinc list)")->required();
  cmd->add_option("-n,--n-predict", a.n_predict, "Tokens to generate per answer (-1 = until the context is full)")
      ->capture_default_str()
      ->check(CLI::Range(-1, 1 << 24));
  cmd->add_option("-c,--ctx,--ctx-size", a.ctx, "Context size in tokens (per slot for serve)")->capture_default_str()->check(CLI::Range(1, 1 << 22));
  cmd->add_option("-t,--threads", a.threads, "CPU threads (default: physical cores)")->check(threads_range());
  cmd->add_option("--backend", a.backend, "Compute backend: auto, cpu, vulkan, cuda or zinc_rt")->capture_default_str();
  // llama.cpp's -ngl / --n-gpu-layers: zinc runs a model wholly on one backend, so 0 means the CPU and
  // any other count the GPU (main() turns -ngl into --n-gpu-layers).
  cmd->add_option_function<int>(
         "--n-gpu-layers,--gpu-layers",
         [&a](int n) { a.backend = n == 0 ? "cpu" : a.backend == "cpu" ? "auto" : a.backend; },
         "llama.cpp's -ngl: 0 runs on the CPU, any other count on the GPU (zinc offloads a model whole, not by layer)")
      ->check(CLI::Range(-1, 1 << 20));
  cmd->add_option("--device", a.device, "GPU index for the Vulkan backend (zinc check lists them)");
  cmd->add_option("--kv-type", a.kv_type, "KV cache storage: f16, f32 or q8_0")
      ->capture_default_str()
      ->check(CLI::IsMember({"f16", "f32", "q8_0"}));
  cmd->add_flag("--context-shift", a.context_shift,
                "When the context fills, drop the older half (after --keep tokens) and go on instead of stopping");
  cmd->add_option("--keep", a.n_keep, "Tokens at the start that a context shift keeps")->capture_default_str()->check(
      CLI::NonNegativeNumber);
  cmd->add_option("--draft,--model-draft", a.draft_model,
                  "A draft model (GGUF file or installed id) of the same vocabulary: speculative decoding, the same "
                  "output in fewer steps of the model");
  cmd->add_option("--draft-max", a.draft_max,
                  "Tokens drafted per step (default: 6 from a draft model, 3 from the model's own prediction head)")
      ->check(CLI::Range(1, 32));
  cmd->add_option("--spec", a.spec,
                  "Speculative decoding with --draft, or with the model's own multi-token-prediction head where it "
                  "has one: on, off, or auto (while the acceptance pays)")
      ->capture_default_str()
      ->check(CLI::IsMember({"on", "off", "auto"}));
  auto& sp = a.sampling;
  cmd->add_option("--temp,--temperature", sp.temperature, "Sampling temperature; 0 = greedy")->capture_default_str();
  cmd->add_option("--top-k", sp.top_k, "Keep the k most likely tokens (0 = off)")->capture_default_str();
  cmd->add_option("--top-p", sp.top_p, "Nucleus mass (1 = off)")->capture_default_str();
  cmd->add_option("--min-p", sp.min_p, "Drop tokens below this fraction of the top probability (0 = off)")
      ->capture_default_str();
  cmd->add_option("--typical-p", sp.typical_p, "Locally typical mass (1 = off)")->capture_default_str();
  cmd->add_option("--xtc-probability", sp.xtc_probability, "Chance that XTC removes the top choices in a step (0 = off)");
  cmd->add_option("--xtc-threshold", sp.xtc_threshold, "XTC: tokens above this probability count as top choices")
      ->capture_default_str();
  cmd->add_option("--min-keep", sp.min_keep, "Tokens the truncating samplers always keep")->capture_default_str();
  cmd->add_option("--repeat-penalty", sp.repeat_penalty, "Penalty for tokens in the last window (1 = off)")
      ->capture_default_str();
  cmd->add_option("--repeat-last-n", sp.penalty_last_n, "Window of the repetition penalties (-1 = context)")
      ->capture_default_str();
  cmd->add_option("--presence-penalty", sp.presence_penalty, "Subtracted once from tokens in the window");
  cmd->add_option("--frequency-penalty", sp.frequency_penalty, "Subtracted per occurrence in the window");
  cmd->add_option("--dry-multiplier", sp.dry_multiplier, "DRY repetition penalty strength (0 = off)");
  cmd->add_option("--dry-base", sp.dry_base, "DRY exponential base")->capture_default_str();
  cmd->add_option("--dry-allowed-length", sp.dry_allowed_length, "DRY: repeats this long are free")->capture_default_str();
  cmd->add_option("--dry-penalty-last-n", sp.dry_penalty_last_n, "DRY window (-1 = context)")->capture_default_str();
  cmd->add_option("--dry-sequence-breaker", sp.dry_sequence_breakers,
                  "DRY: text that ends a repeated sequence (repeatable; replaces the defaults)");
  cmd->add_option("--logit-bias", a.logit_bias, "Add to a token's logit: TOKEN_ID+BIAS or TOKEN_ID-BIAS (repeatable)");
  cmd->add_option("--samplers", a.samplers,
                  "Stage order, e.g. \"penalties;dry;top_k;typical_p;top_p;min_p;xtc;temperature\"");
  cmd->add_option("--seed", sp.seed, "Random seed (default: random, reported with --json)");
  cmd->add_option("--stop", a.stop, "Stop when this text appears (repeatable); it is not printed");
  auto* gr = cmd->add_option("--grammar", a.grammar, "Constrain the output to a GBNF grammar (its 'root' rule)");
  auto* grf = cmd->add_option("--grammar-file", a.grammar_file, "Constrain the output to the GBNF grammar in FILE");
  auto* js = cmd->add_option("-j,--json-schema", a.json_schema, "Constrain the output to JSON that this JSON schema accepts");
  auto* jsf = cmd->add_option("--json-schema-file", a.json_schema_file, "Constrain the output to the JSON schema in FILE");
  for (auto* o : {gr, grf, js, jsf}) {
    for (auto* p : {gr, grf, js, jsf}) {
      if (o != p) o->excludes(p);
    }
  }
  if (chat_options) {
    cmd->add_option("--system", a.system, "System prompt");
    auto* think = cmd->add_flag("--think", a.think, "Ask the chat template to enable the model's reasoning");
    cmd->add_flag("--no-think", a.no_think, "Ask the chat template to disable the model's reasoning")->excludes(think);
    cmd->add_option("--reasoning-budget", a.reasoning_budget,
                    "Reasoning tokens before the model is told to conclude and answer (-1 = no limit)")
        ->capture_default_str()
        ->check(CLI::Range(-1, 1 << 30));
    cmd->add_option("--chat-template", a.chat_template_file, "Jinja chat template file to use instead of the model's");
    cmd->add_flag("--drop-old-turns", a.drop_old_turns,
                  "When the conversation outgrows the context, drop the oldest turns instead of stopping");
    a.prefix_cache = true;
    cmd->add_option("--cache-mem", a.cache_mem_gb,
                    "GB for the prefix cache: KV blocks of earlier prompts (serve: shared by the slots, on the model's "
                    "device) and recurrent-state checkpoints (host memory), from which a hybrid model resumes a "
                    "conversation whose history changed; 0: off")
        ->capture_default_str()
        ->check(CLI::NonNegativeNumber);
    cmd->add_option("--cache-ram", a.cache_ram_gb,
                    "GB of host memory the prefix cache may keep blocks evicted from --cache-mem in, written back "
                    "when a prompt matches them (faster than evaluating them again); 0: evicted blocks are dropped")
        ->capture_default_str()
        ->check(CLI::NonNegativeNumber);
  }
}

std::unique_ptr<LoadedModel> load_model(const GenerationArgs& a) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  auto file = gguf::File::open(hub::resolve_model_path(a.model));
  auto tok = tokenizer::Tokenizer::from_gguf(file);
  // "auto" passes over a GPU backend that cannot run one of the model's ops or weight types.
  const graph::Graph g = model::load(file).graph;
  auto backend = backend::make_backend_for(a.backend, g, a.device, a.threads);
  auto m = std::unique_ptr<LoadedModel>(new LoadedModel{std::move(file), std::move(tok), std::move(backend), nullptr, 0});
  // On a terminal, a progress line while the weights are read (and uploaded to a GPU); elsewhere none,
  // so that scripts' output stays the model's.
  std::optional<Progress> bar;
  backend::LoadProgress progress;
  if (is_terminal(stderr)) {
    progress = [&](uint64_t done, uint64_t total) {
      if (!bar) bar.emplace(fmt::format("loading ({})", m->backend->name()), stderr, true);
      bar->update(done, total);
    };
  }
  // A model with recurrent state cannot rewind: a conversation whose history changed (an edit, a
  // template that drops the last reasoning) resumes from the prefix cache's checkpoints. One with only
  // attention rewinds in its own context and needs none.
  const bool recurrent = std::any_of(g.nodes.begin(), g.nodes.end(), [&](const graph::Node& n) { return graph::state_size(g, n) > 0; });
  const bool cached = recurrent && a.prefix_cache && a.cache_mem_gb > 0;
  const runtime::SpecMode spec = runtime::parse_spec_mode(a.spec);
  // A draft model, else the model's own multi-token-prediction head.
  const bool drafting = (!a.draft_model.empty() || g.mtp) && spec != runtime::SpecMode::Off;
  const auto open_session = [&] {
    backend::ExecOptions opts = a.exec_options();
    if (cached) opts.cache_blocks = backend::kv_blocks(opts.n_ctx);
    if (drafting) opts.kept_states = a.draft_tokens() + 1;  // a hybrid goes back to any token of a verifying step
    m->session = std::make_unique<runtime::Session>(m->file, *m->backend, opts, progress);
    if (cached) m->session->use_prefix_cache(static_cast<uint64_t>(a.cache_mem_gb * 1e9), static_cast<uint64_t>(a.cache_ram_gb * 1e9));
    if (bar) bar->finish();
    bar.reset();
  };
  try {
    open_session();
  } catch (const Error& e) {
    bar.reset();
    // "auto" chose a GPU that cannot hold this model (memory): the CPU can.
    if (a.backend != "auto" || m->backend->name() == "cpu") throw;
    spdlog::warn("{} cannot run this model ({}); running it on the CPU", m->backend->name(), e.what());
    m->backend = backend::make_cpu_backend(a.threads);
    open_session();
  }
  if (drafting && !a.draft_model.empty()) load_draft(*m, a.draft_model, a.draft_tokens(), spec);
  else if (drafting) m->drafter = std::make_unique<runtime::MtpDrafter>(*m->session, a.draft_tokens(), spec);
  m->load_s = std::chrono::duration<double>(Clock::now() - t0).count();
  // A context past what the model was trained on runs, but its answers degrade there.
  const std::string arch = m->file.get_or<std::string>("general.architecture", "");
  if (const auto trained = m->file.get_or<uint32_t>(arch + ".context_length", 0); trained > 0 && a.ctx > static_cast<int>(trained)) {
    spdlog::warn("-c {} is beyond the {} tokens this model was trained on: answers past that point may degrade", a.ctx,
                 trained);
  }
  return m;
}

void load_draft(LoadedModel& m, const std::string& path, int32_t max_draft, runtime::SpecMode mode) {
  m.draft_file = std::make_unique<gguf::File>(gguf::File::open(hub::resolve_model_path(path)));
  runtime::check_draft_vocab(m.tok, tokenizer::Tokenizer::from_gguf(*m.draft_file), path);
  backend::ExecOptions opts;
  opts.n_ctx = m.session->n_ctx();
  opts.max_tokens = m.session->executable().options().max_tokens;
  opts.kv_type = m.session->executable().options().kv_type;
  m.draft_session = std::make_unique<runtime::Session>(*m.draft_file, *m.backend, opts);
  auto drafter = std::make_unique<runtime::ModelDrafter>(*m.draft_session, max_draft, mode);
  drafter->check_target(*m.session);
  m.drafter = std::move(drafter);
}

chat::ChatTemplate chat_template(const GenerationArgs& a, const gguf::File& file, const tokenizer::Tokenizer& tok) {
  if (a.chat_template_file.empty()) {
    if (!file.find("tokenizer.chat_template")) {
      spdlog::warn("the model has no chat template: ChatML is assumed (--chat-template FILE to give the right one)");
    }
    return runtime::chat_template_for(file, tok);
  }
  return runtime::chat_template_from_source(tok, read_text(a.chat_template_file, "chat template"), a.chat_template_file);
}

CLI::Validator threads_range() {
  const unsigned cpus = std::max(1u, cpu_info().logical_cores);
  return CLI::Validator(
      [cpus](std::string& v) -> std::string {
        unsigned long n = 0;
        try {
          n = std::stoul(v);
        } catch (const std::exception&) {
          return "must be a number of threads";
        }
        if (n < 1 || n > cpus) return fmt::format("{} threads: this machine has {} logical CPUs (use 1 to {})", v, cpus, cpus);
        return "";
      },
      fmt::format("1..{}", cpus));
}

}  // namespace zinc::cli
