// `zinc validate`: runs one prompt on a backend and on the CPU reference and compares every named
// activation (blk.N.*), so a kernel that is wrong shows up as the first tensor where the two part.
#include <fmt/format.h>

#include <cmath>
#include <optional>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "cli/cli.h"
#include "cli/generation_options.h"
#include "cli/json_util.h"
#include "core/error.h"
#include "hub/store.h"
#include "runtime/session.h"
#include "tokenizer/tokenizer.h"

namespace zinc::cli {

namespace {

using nlohmann::json;

struct ValidateArgs {
  std::string model;
  std::string backend = "vulkan";
  int device = -1;
  std::string prompt = "The capital of France is Paris. The capital of Germany is";
  std::string kv_type = "f32";
  std::optional<double> tolerance;  // (unset: by the weights' types, default_tolerance)
  int batch = 0;             // tokens per step (0: the whole prompt in one step)
  int reference_batch = -1;  // the CPU reference's (-1: as batch)
  std::vector<int32_t> tokens;  // token ids instead of a prompt
};

struct TensorGap {
  std::string name;
  int layer = -1;
  double max_abs = 0, rel = 0;  // rel: max |a - b| over max |reference|
};

// The tolerance where none is given. Every matrix F32, F16 or BF16: 1e-4, since both sides multiply
// float activations by the same weights and part only by the order of float sums (the fixtures of
// eight architectures through lavapipe: at most 1.0e-5), while activations rounded to f16 in a
// prompt's products part by ~1e-3, which it must catch. Quantized weights: 2%. There the CPU multiplies
// by its activations' 8-bit codes, as decode on a GPU does (the Q8_0 fixtures in steps of one token: at
// most 1.0e-6, but 8e-3 where one code rounds the other way), while a GPU's prompt products may take the
// float activations: the same fixtures' prompts part by 2-5e-2, and by up to 0.85 past a mixture
// whose routing then chose another expert for a token.
struct Tolerance {
  double value;
  const char* basis;
  bool quantized = false;  // chosen for quantized weights
};
Tolerance default_tolerance(const gguf::File& file) {
  for (const gguf::TensorInfo& t : file.tensors()) {
    if (t.n_dims < 2) continue;  // (norms, biases: float in every file)
    if (t.type != gguf::TensorType::F32 && t.type != gguf::TensorType::F16 && t.type != gguf::TensorType::BF16) return {0.02, "quantized weights", true};
  }
  return {1e-4, "float weights"};
}

int run_validate(const ValidateArgs& a, const GlobalOptions& global) {
  const auto file = gguf::File::open(hub::resolve_model_path(a.model));
  const Tolerance chosen = a.tolerance ? Tolerance{*a.tolerance, "given"} : default_tolerance(file);
  const double tolerance = chosen.value;
  const auto tok = tokenizer::Tokenizer::from_gguf(file);
  const auto tokens = a.tokens.empty() ? tok.encode(a.prompt) : a.tokens;
  if (tokens.empty()) throw Error("the prompt encodes to no tokens");
  backend::ExecOptions opts;
  opts.n_ctx = static_cast<int32_t>(tokens.size()) + 8;
  const auto steps_of = [&](int batch) {  // tokens per step: batch, at most the prompt (0: the whole prompt)
    return batch > 0 ? std::min(batch, static_cast<int>(tokens.size())) : static_cast<int32_t>(tokens.size());
  };
  opts.max_tokens = steps_of(a.batch);
  opts.kv_type = kv_type_from_name(a.kv_type);
  opts.keep_activations = true;
  auto cpu = backend::make_cpu_backend();
  auto other = backend::make_backend(a.backend, a.device);
  // The reference's steps: as many tokens as the test's unless --reference-batch says otherwise.
  auto ref_opts = opts;
  ref_opts.max_tokens = steps_of(a.reference_batch >= 0 ? a.reference_batch : a.batch);
  runtime::Session ref(file, *cpu, ref_opts), test(file, *other, opts);
  ref.eval(tokens, true);
  test.eval(tokens, true);

  const graph::Graph& g = ref.graph();
  std::vector<TensorGap> gaps;
  for (const graph::Node& n : g.nodes) {
    auto want = ref.executable().activation(n.out);
    auto got = test.executable().activation(n.out);
    // Last steps of different lengths (or a backend running a step token by token, zinc_rt, which
    // keeps its last token's rows): the rows of the tokens both hold (each side's last rows).
    {
      const size_t both = std::min(want.size(), got.size());
      want.erase(want.begin(), want.end() - static_cast<std::ptrdiff_t>(both));
      got.erase(got.begin(), got.end() - static_cast<std::ptrdiff_t>(both));
    }
    if (want.size() != got.size()) {
      throw Error(fmt::format("{}: {} values on the CPU, {} on {}", g.tensor(n.out).name, want.size(), got.size(), a.backend));
    }
    TensorGap t{g.tensor(n.out).name, g.tensor(n.out).layer};
    double scale = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      const double d = std::fabs(static_cast<double>(got[i]) - want[i]);
      t.max_abs = std::isnan(d) ? INFINITY : std::max(t.max_abs, d);
      scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
    }
    t.rel = t.max_abs / std::max(scale, 1e-20);
    gaps.push_back(t);
  }
  const TensorGap* first_bad = nullptr;
  for (const auto& t : gaps) {
    if (t.rel > tolerance) {
      first_bad = &t;
      break;
    }
  }
  const bool same_top = ref.last_argmax() == test.last_argmax();
  const bool ok = !first_bad && same_top;

  // Per layer: the tensor that differs most.
  std::map<int, const TensorGap*> worst;
  for (const auto& t : gaps) {
    auto& w = worst[t.layer];
    if (!w || t.rel > w->rel) w = &t;
  }
  if (global.json) {
    json layers = json::array(), tensors = json::array();
    for (const auto& [layer, t] : worst) layers.push_back({{"layer", layer}, {"tensor", t->name}, {"max_abs_err", t->max_abs}, {"rel_err", t->rel}});
    for (const auto& t : gaps) tensors.push_back({{"tensor", t.name}, {"layer", t.layer}, {"max_abs_err", t.max_abs}, {"rel_err", t.rel}});
    fmt::print("{}\n", dump_json(json{{"model", a.model},
                                      {"backend", other->name()},
                                      {"device", other->device_name()},
                                      {"tokens", tokens.size()},
                                      {"batch", opts.max_tokens},
                                      {"reference_batch", ref_opts.max_tokens},
                                      {"tolerance", tolerance},
                                      {"tolerance_basis", chosen.basis},
                                      {"same_next_token", same_top},
                                      {"first_divergence", first_bad ? json(first_bad->name) : json(nullptr)},
                                      {"layers", layers},
                                      {"tensors", tensors},
                                      {"ok", ok}}));
  } else {
    fmt::print("zinc validate · {} vs cpu · {} · {} prompt tokens · steps of {} (cpu {}) · tolerance {:g}, {} (max |diff| / max |cpu|)\n\n",
               other->name(), other->device_name(), tokens.size(), opts.max_tokens, ref_opts.max_tokens, tolerance, chosen.basis);
    fmt::print("| layer | worst tensor | max abs err | rel err |\n|---|---|---|---|\n");
    for (const auto& [layer, t] : worst) {
      fmt::print("| {} | {} | {:.3g} | {:.3g} |\n", layer < 0 ? std::string("-") : std::to_string(layer), t->name, t->max_abs, t->rel);
    }
    fmt::print("\nnext token: cpu {} · {} {}{}\n", ref.last_argmax(), other->name(), test.last_argmax(), same_top ? " (same)" : " (DIFFERENT)");
    if (first_bad) {
      fmt::print("first divergence: {} (layer {}), rel err {:.3g} > {:g}\n", first_bad->name, first_bad->layer, first_bad->rel, tolerance);
      if (chosen.quantized && opts.max_tokens > 1) {
        fmt::print("(a prompt's products of quantized weights may take float activations where the CPU takes 8-bit codes; "
                   "--batch 1 compares decode's arithmetic, the CPU's)\n");
      }
    } else {
      fmt::print("every tensor within tolerance\n");
    }
  }
  return ok ? 0 : 1;
}

void add_validate_command(CLI::App& app, const GlobalOptions& global, Runner& run) {
  auto a = std::make_shared<ValidateArgs>();
  CLI::App* cmd = app.add_subcommand("validate", "Compare a backend with the CPU reference, tensor by tensor, on one prompt");
  cmd->add_option("model,-m,--model", a->model, "GGUF model file, or an installed model id")->required();
  cmd->add_option("--backend", a->backend, "Backend to check: vulkan, cuda, zinc_rt, cpu or auto")->capture_default_str();
  cmd->add_option("--device", a->device, "GPU index for the Vulkan or CUDA backend (zinc check lists them)");
  cmd->add_option("-p,--prompt", a->prompt, "Prompt to run")->capture_default_str();
  cmd->add_option("--kv-type", a->kv_type, "KV cache storage on both sides: f32, f16 or q8_0")
      ->capture_default_str()
      ->check(CLI::IsMember({"f16", "f32", "q8_0"}));
  cmd->add_option("--tolerance", a->tolerance,
                  "Largest relative error a tensor may have (default: 1e-4 where every matrix is F32, F16 or BF16, else 0.02)");
  cmd->add_option("--tokens", a->tokens, "Token ids to run instead of a prompt (comma-separated)")->delimiter(',');
  cmd->add_option("--batch", a->batch, "Tokens per step (the last step's tensors are compared; default: the whole prompt)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--reference-batch", a->reference_batch,
                  "The CPU reference's tokens per step, 0 the whole prompt (default: as --batch); with another length than "
                  "the backend's last step, the rows of the tokens both last steps hold are compared (a prompt step "
                  "against single steps: --batch 1 --reference-batch 0)")
      ->check(CLI::NonNegativeNumber);
  cmd->callback([a, &global, &run] { run = [a, &global] { return run_validate(*a, global); }; });
}

}  // namespace

ZINC_COMMAND(75, add_validate_command);

}  // namespace zinc::cli
