#include "model/model.h"

#include <fmt/format.h>

#include <cmath>

#include "core/error.h"

namespace zinc::model {

namespace {

struct ArchEntry {
  const char* name;
  graph::Graph (*build)(const gguf::File&, HParams&);
};

const ArchEntry kArchitectures[] = {
    {"llama", build_llama},
    {"qwen2", build_qwen2},
    {"qwen3", build_qwen3},
    {"qwen3moe", build_qwen3moe},
    {"gemma3", build_gemma3},
    {"qwen3next", build_qwen3next},
    {"qwen35", build_qwen35},
    {"qwen35moe", build_qwen35moe},
    {"gemma4", build_gemma4},
    {"gpt-oss", build_gpt_oss},
};

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += fmt::format("{}{}", i ? ", " : "", s[i]);
  return out + "]";
}

}  // namespace

std::vector<std::string> supported_architectures() {
  std::vector<std::string> out;
  for (const auto& a : kArchitectures) out.emplace_back(a.name);
  return out;
}

graph::RopeParams read_rope_params(const gguf::File& f, const std::string& arch, int64_t n_ctx_train) {
  const std::string p = arch + ".rope.";
  graph::RopeParams r;
  r.base = f.get_or<float>(p + "freq_base", 10000.0f);
  // As llama.cpp reads them: the factor (or the older scale_linear key) sets the frequency scale for any
  // scaling type; the type defaults to linear; YaRN adds the extrapolation blend.
  float factor = f.get_or<float>(p + "scaling.factor", 0.0f);
  if (factor == 0.0f) factor = f.get_or<float>(p + "scale_linear", 0.0f);
  if (factor < 0.0f || !std::isfinite(factor) || !(r.base > 0.0f)) {
    throw Error(fmt::format("{}: rope base {} / scaling factor {} are not usable", f.name(), r.base, factor));
  }
  const auto type = f.get_or<std::string>(p + "scaling.type", "linear");
  r.freq_scale = factor == 0.0f || type == "none" ? 1.0f : 1.0f / factor;
  r.attn_factor = f.get_or<float>(p + "scaling.attn_factor", 1.0f);
  if (type == "yarn") {
    r.n_ctx_orig = static_cast<int>(f.get_or<uint32_t>(p + "scaling.original_context_length", 0));
    if (r.n_ctx_orig <= 0) r.n_ctx_orig = static_cast<int>(n_ctx_train);
    // YaRN's magnitude correction of the rotated vectors (attention temperature).
    if (factor > 1.0f) r.attn_factor *= 1.0f + 0.1f * std::log(factor);
    r.beta_fast = f.get_or<float>(p + "scaling.yarn_beta_fast", 32.0f);
    r.beta_slow = f.get_or<float>(p + "scaling.yarn_beta_slow", 1.0f);
    r.ext_factor = f.get_or<float>(p + "scaling.yarn_ext_factor", 1.0f);
    // Written by zinc convert for configs that ask for an unrounded correction range (GPT-OSS); files
    // without it round outwards, as llama.cpp does.
    r.yarn_truncate = f.get_or<bool>(p + "scaling.yarn_truncate", true);
  } else if (type != "none" && type != "linear") {
    throw Error(fmt::format("{}: rope scaling type '{}' is not supported (none, linear, yarn)", f.name(), type));
  }
  return r;
}

HParams read_common_hparams(const gguf::File& f, const std::string& arch) {
  HParams hp;
  hp.arch = arch;
  const std::string p = arch + ".";
  hp.n_layer = static_cast<int>(f.get<uint32_t>(p + "block_count"));
  hp.n_embd = f.get<uint32_t>(p + "embedding_length");
  hp.n_ff = f.get_or<uint32_t>(p + "feed_forward_length", 0);
  hp.n_head = static_cast<int>(f.get<uint32_t>(p + "attention.head_count"));
  const auto* kv = f.find(p + "attention.head_count_kv");
  if (kv && kv->value.type() == gguf::ValueType::ARRAY) {
    // One count per layer (models whose global layers have more KV heads than their local ones).
    const auto counts = f.get<std::vector<uint32_t>>(p + "attention.head_count_kv");
    if (counts.size() != static_cast<size_t>(std::max(hp.n_layer, 0))) {
      throw Error(fmt::format("{}: attention.head_count_kv lists {} layers, the model has {}", f.name(), counts.size(),
                              hp.n_layer));
    }
    for (uint32_t c : counts) hp.n_head_kv_layer.push_back(static_cast<int>(c));
    hp.n_head_kv = hp.n_head_kv_layer.empty() ? 0 : hp.n_head_kv_layer[0];
  } else {
    hp.n_head_kv = static_cast<int>(f.get_or<uint32_t>(p + "attention.head_count_kv", static_cast<uint32_t>(hp.n_head)));
  }
  bool heads_ok = hp.n_head > 0 && hp.n_head_kv > 0 && hp.n_head % hp.n_head_kv == 0;
  for (int c : hp.n_head_kv_layer) heads_ok = heads_ok && c > 0 && hp.n_head % c == 0;
  if (hp.n_layer <= 0 || hp.n_embd <= 0 || !heads_ok) {
    throw Error(fmt::format("{}: inconsistent hyper-parameters: {} layers, width {}, {} heads, {} KV heads", f.name(),
                            hp.n_layer, hp.n_embd, hp.n_head, hp.n_head_kv));
  }
  hp.head_dim = static_cast<int>(f.get_or<uint32_t>(p + "attention.key_length", static_cast<uint32_t>(hp.n_embd / hp.n_head)));
  hp.n_rot = static_cast<int>(f.get_or<uint32_t>(p + "rope.dimension_count", static_cast<uint32_t>(hp.head_dim)));
  hp.n_ctx_train = f.get_or<uint32_t>(p + "context_length", 2048);
  hp.rms_eps = f.get_or<float>(p + "attention.layer_norm_rms_epsilon", 1e-5f);
  hp.rope = read_rope_params(f, arch, hp.n_ctx_train);
  const auto tokens = f.get<gguf::ArrayView>("tokenizer.ggml.tokens");
  hp.n_vocab = static_cast<int64_t>(tokens.size());
  return hp;
}

graph::TensorId optional_weight(graph::Builder& b, const gguf::File& f, const std::string& name,
                                std::vector<int64_t> shape, int layer) {
  const gguf::TensorInfo* t = f.find_tensor(name);
  if (!t) return -1;
  std::vector<int64_t> have;
  for (uint32_t d = 0; d < t->n_dims; ++d) have.push_back(static_cast<int64_t>(t->ne[d]));
  while (have.size() > 1 && have.back() == 1) have.pop_back();
  if (have != shape) {
    throw Error(fmt::format("{}: tensor '{}' has shape {}, the architecture needs {}", f.name(), name,
                            shape_str(have), shape_str(shape)));
  }
  std::array<int64_t, 4> ne{1, 1, 1, 1};
  for (size_t d = 0; d < shape.size() && d < 4; ++d) ne[d] = shape[d];
  return b.weight(name, t->type, ne, layer);
}

graph::TensorId require_weight(graph::Builder& b, const gguf::File& f, const std::string& name,
                               std::vector<int64_t> shape, int layer) {
  const graph::TensorId id = optional_weight(b, f, name, std::move(shape), layer);
  if (id < 0) throw Error(fmt::format("{}: required tensor '{}' is missing", f.name(), name));
  return id;
}

void build_output(graph::Builder& b, graph::Graph& g, const gguf::File& f, const HParams& hp, graph::TensorId x,
                  graph::TensorId tok, float softcap) {
  x = b.select_last(x, "result_last");
  x = b.rms_norm(x, require_weight(b, f, "output_norm.weight", {hp.n_embd}), hp.rms_eps, 0.0f, "result_norm", -1);
  auto out_w = optional_weight(b, f, "output.weight", {hp.n_embd, hp.n_vocab});
  if (out_w < 0) out_w = tok;
  g.logits = b.matmul(out_w, x, "result_output", -1);
  if (softcap > 0) g.logits = b.softcap(g.logits, softcap, "result_softcap", -1);
}

graph::Graph embedding_graph(graph::Graph g) {
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (g.tensor(g.nodes[i].out).name != "result_norm") continue;
    g.logits = g.nodes[i].out;
    g.nodes.resize(i + 1);  // the output projection (and any soft-cap) after it
    g.hidden = -1;
    g.mtp = nullptr;
    return g;
  }
  throw Error("this model's graph has no final norm to take hidden states from");
}

Model load(const gguf::File& f) {
  const auto arch = f.get<std::string>("general.architecture");
  for (const auto& a : kArchitectures) {
    if (arch == a.name) {
      Model m;
      m.graph = a.build(f, m.hp);
      return m;
    }
  }
  std::string names;
  for (const auto& n : supported_architectures()) names += (names.empty() ? "" : ", ") + n;
  throw Error(fmt::format("{}: architecture '{}' is not supported (supported: {})", f.name(), arch, names));
}

}  // namespace zinc::model
