#include "convert/convert.h"

#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "convert/convert_plan.h"
#include "convert/safetensors.h"
#include "core/error.h"
#include "core/json_bounded.h"
#include "gguf/writer.h"
#include "quant/fp16.h"
#include "quant/quant.h"
#include "tokenizer/hf_tokenizer.h"

namespace zinc::convert {

namespace detail {

float load_element(const StTensor& t, int64_t i) {
  const uint8_t* p = t.data.data();
  switch (t.dtype) {
    case StDType::F32: {
      float v;
      std::memcpy(&v, p + i * 4, 4);
      return v;
    }
    case StDType::F16: {
      uint16_t h;
      std::memcpy(&h, p + i * 2, 2);
      return quant::fp16_to_f32(h);
    }
    case StDType::BF16: {
      uint16_t h;
      std::memcpy(&h, p + i * 2, 2);
      return quant::bf16_to_f32(h);
    }
    case StDType::F64: {
      double v;
      std::memcpy(&v, p + i * 8, 8);
      return static_cast<float>(v);
    }
    default:
      throw Error(fmt::format("tensor '{}' has dtype {}, which is not a floating-point weight", t.name,
                              st_dtype_name(t.dtype)));
  }
}

void Job::set(const std::string& key_after_arch, gguf::Value v) const { meta.set(arch + "." + key_after_arch, std::move(v)); }

PlannedTensor& Job::need(const std::string& hf, const std::string& g, int permute) {
  const bool norm = g.ends_with("norm.weight");
  plan.push_back({g, &ckpt.get(hf), permute, norm ? norm_add : 0.0f});
  return plan.back();
}

void Job::maybe(const std::string& hf, const std::string& g) {
  if (const StTensor* t = ckpt.find(hf)) plan.push_back({g, t, 0});
}

void Job::attention(const std::string& hp, const std::string& gp, bool qk_norm, bool permute, bool v_optional) {
  need(hp + "self_attn.q_proj.weight", gp + "attn_q.weight", permute ? static_cast<int>(n_head) : 0);
  need(hp + "self_attn.k_proj.weight", gp + "attn_k.weight", permute ? static_cast<int>(n_head_kv) : 0);
  if (v_optional) maybe(hp + "self_attn.v_proj.weight", gp + "attn_v.weight");
  else need(hp + "self_attn.v_proj.weight", gp + "attn_v.weight");
  need(hp + "self_attn.o_proj.weight", gp + "attn_output.weight");
  maybe(hp + "self_attn.q_proj.bias", gp + "attn_q.bias");
  maybe(hp + "self_attn.k_proj.bias", gp + "attn_k.bias");
  maybe(hp + "self_attn.v_proj.bias", gp + "attn_v.bias");
  if (qk_norm) {
    need(hp + "self_attn.q_norm.weight", gp + "attn_q_norm.weight");
    need(hp + "self_attn.k_norm.weight", gp + "attn_k_norm.weight");
  }
}

PlannedTensor& Job::computed(const std::string& g, const StTensor& src, std::vector<uint64_t> ne,
                             std::function<void(int64_t, float*)> make_row) {
  PlannedTensor t{g, &src};
  t.ne = std::move(ne);
  t.make_row = std::move(make_row);
  plan.push_back(std::move(t));
  return plan.back();
}

// Experts of one layer: a fused gate/up tensor split in halves, or per-expert tensors stacked.
void plan_experts(Job& job, const std::string& hp, const std::string& gp, uint32_t n_expert, uint32_t n_ff_exp) {
  const uint32_t n_embd = job.n_embd;
  const uint64_t ne_ = n_expert, ff_ = n_ff_exp, d_ = n_embd;
  if (const StTensor* fused = job.ckpt.find(hp + "mlp.experts.gate_up_proj")) {
    // transformers 5: [experts, 2 * width, in], gate rows first in each expert.
    const auto rows_each = static_cast<int64_t>(ff_);
    job.plan.push_back({gp + "ffn_gate_exps.weight", fused, 0, 0.0f, -1, {}, rows_each, 0, {d_, ff_, ne_}});
    job.plan.push_back({gp + "ffn_up_exps.weight", fused, 0, 0.0f, -1, {}, rows_each, 1, {d_, ff_, ne_}});
    job.plan.push_back({gp + "ffn_down_exps.weight", &job.ckpt.get(hp + "mlp.experts.down_proj"), 0, 0.0f, -1, {}, 0, 0,
                    {ff_, d_, ne_}});
  } else {
    // One tensor per expert, stacked.
    for (const char* proj : {"gate", "up", "down"}) {
      std::vector<const StTensor*> parts;
      for (uint32_t e = 0; e < n_expert; ++e) {
        parts.push_back(&job.ckpt.get(fmt::format("{}mlp.experts.{}.{}_proj.weight", hp, e, proj)));
      }
      const bool down = std::string(proj) == "down";
      job.plan.push_back({fmt::format("{}ffn_{}_exps.weight", gp, proj), parts[0], 0, 0.0f, -1, parts, 0, 0,
                      down ? std::vector<uint64_t>{ff_, d_, ne_} : std::vector<uint64_t>{d_, ff_, ne_}});
    }
  }
}

}  // namespace detail

namespace {

using namespace detail;

using gguf::TensorType;
using gguf::Value;

struct ArchSpec {
  const char* hf;    // config.json "architectures" entry
  const char* gguf;  // general.architecture
  bool permute_qk;   // Llama: q/k rows reordered for the pairwise rotary form
  bool qk_norm;      // Qwen3, Gemma 3: per-head q/k norms
  bool gemma;        // Gemma 3: sandwich norms stored with their "+1", embeddings cut to the real vocabulary
  bool moe = false;  // Qwen3 MoE: router and stacked experts instead of one feed-forward network
  void (*plan)(Job&) = nullptr;  // other families: their metadata and every layer's tensors
};

const ArchSpec kArchs[] = {
    {"LlamaForCausalLM", "llama", true, false, false},
    {"MistralForCausalLM", "llama", true, false, false},
    {"Qwen2ForCausalLM", "qwen2", false, false, false},
    {"Qwen3ForCausalLM", "qwen3", false, true, false},
    {"Gemma3ForCausalLM", "gemma3", false, true, true},
    {"Qwen3MoeForCausalLM", "qwen3moe", false, true, false, true},
    {"Qwen3NextForCausalLM", "qwen3next", false, true, false, true, plan_qwen3next},
    {"Qwen3_5ForCausalLM", "qwen35", false, true, false, false, plan_qwen3next},
    {"Qwen3_5MoeForCausalLM", "qwen35moe", false, true, false, true, plan_qwen3next},
    {"Gemma4ForCausalLM", "gemma4", false, true, false, false, plan_gemma4},
    {"GptOssForCausalLM", "gpt-oss", false, false, false, false, plan_gpt_oss},
};

json read_json(const std::filesystem::path& p, bool required) {
  if (!std::filesystem::exists(p)) {
    if (required) throw Error(fmt::format("{}: file not found", p.string()));
    return nullptr;
  }
  std::ifstream in(p);
  try {
    return parse_json_bounded<json>(std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()));
  } catch (const JsonTooDeep& e) {
    throw Error(fmt::format("{}: {}", p.string(), e.what()));
  } catch (const json::exception& e) {
    throw Error(fmt::format("{}: not valid JSON: {}", p.string(), e.what()));
  }
}

// Rotary settings: top-level keys (older configs: rope_theta, rope_scaling) or transformers 5's
// rope_parameters, which some models nest per layer type (the full-attention entry applies).
struct RopeScaling {
  float theta = 10000.0f;
  std::string type = "default";
  float factor = 1.0f;
  std::optional<uint32_t> original_ctx;
  std::optional<float> beta_fast, beta_slow;
  float low_freq_factor = 1.0f, high_freq_factor = 4.0f;  // llama3
  bool truncate = true;  // yarn: round the correction range outwards (transformers' "truncate")
};

RopeScaling read_rope_scaling(const json& config, const std::filesystem::path& file) {
  RopeScaling r;
  json params = config.contains("rope_parameters") && config["rope_parameters"].is_object() ? config["rope_parameters"]
                                                                                             : json::object();
  if (params.contains("full_attention") && params["full_attention"].is_object()) params = params["full_attention"];
  if (config.contains("rope_scaling") && config["rope_scaling"].is_object()) params.update(config["rope_scaling"]);
  r.theta = cfg_opt<float>(config, "rope_theta").value_or(cfg_opt<float>(params, "rope_theta").value_or(10000.0f));
  r.type = cfg_opt<std::string>(params, "rope_type").value_or(cfg_opt<std::string>(params, "type").value_or("default"));
  r.factor = cfg_opt<float>(params, "factor").value_or(1.0f);
  r.original_ctx = cfg_opt<uint32_t>(params, "original_max_position_embeddings");
  r.beta_fast = cfg_opt<float>(params, "beta_fast");
  r.beta_slow = cfg_opt<float>(params, "beta_slow");
  r.low_freq_factor = cfg_opt<float>(params, "low_freq_factor").value_or(1.0f);
  r.high_freq_factor = cfg_opt<float>(params, "high_freq_factor").value_or(4.0f);
  r.truncate = cfg_opt<bool>(params, "truncate").value_or(true);
  // "proportional" (Gemma 4) is described by the family's planner.
  if (r.type != "default" && r.type != "linear" && r.type != "yarn" && r.type != "llama3" && r.type != "proportional") {
    throw Error(fmt::format("{}: rope scaling type '{}' is not supported (default, linear, yarn, llama3)", file.string(),
                            r.type));
  }
  if (!(r.theta > 0) || !(r.factor > 0) || (r.type == "llama3" && !(r.high_freq_factor > r.low_freq_factor))) {
    throw Error(fmt::format("{}: rope settings out of range (theta {}, factor {}, low/high frequency factors {}/{})",
                            file.string(), r.theta, r.factor, r.low_freq_factor, r.high_freq_factor));
  }
  return r;
}

// Llama 3.1's long-context frequency divisors, one per rotary pair, as the reference converter
// computes them (float32 arithmetic): wavelengths shorter than original_ctx / high_freq_factor keep their
// frequency, those longer than original_ctx / low_freq_factor are divided by the factor, with a smooth
// blend between.
std::vector<float> llama3_rope_factors(const RopeScaling& r, uint32_t head_dim) {
  const float old_ctx = static_cast<float>(r.original_ctx.value_or(8192));
  const float low_wavelen = old_ctx / r.low_freq_factor, high_wavelen = old_ctx / r.high_freq_factor;
  std::vector<float> out;
  for (uint32_t i = 0; i < head_dim; i += 2) {
    const float freq = 1.0f / std::pow(r.theta, static_cast<float>(i) / static_cast<float>(head_dim));
    const float wavelen = 2.0f * 3.14159265358979f / freq;
    if (wavelen < high_wavelen) out.push_back(1.0f);
    else if (wavelen > low_wavelen) out.push_back(r.factor);
    else {
      const float smooth = (old_ctx / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
      out.push_back(1.0f / ((1.0f - smooth) / r.factor + smooth));
    }
  }
  return out;
}

// The Llama-like families: attention with optional biases and q/k norms, then one SwiGLU (or GEGLU)
// network or a mixture of experts.
void plan_standard_layers(Job& job, const ArchSpec& spec_, uint32_t n_expert, uint32_t n_ff_exp) {
  const ArchSpec* spec = &spec_;
  for (uint32_t l = 0; l < job.n_layer; ++l) {
    const std::string hp = "model.layers." + std::to_string(l) + ".", gp = "blk." + std::to_string(l) + ".";
    job.need(hp + "input_layernorm.weight", gp + "attn_norm.weight");
    job.attention(hp, gp, spec->qk_norm, spec->permute_qk);
    if (spec->gemma) {
      job.need(hp + "post_attention_layernorm.weight", gp + "post_attention_norm.weight");
      job.need(hp + "pre_feedforward_layernorm.weight", gp + "ffn_norm.weight");
      job.need(hp + "post_feedforward_layernorm.weight", gp + "post_ffw_norm.weight");
    } else {
      job.need(hp + "post_attention_layernorm.weight", gp + "ffn_norm.weight");
    }
    if (spec->moe) {
      job.need(hp + "mlp.gate.weight", gp + "ffn_gate_inp.weight");
      plan_experts(job, hp, gp, n_expert, n_ff_exp);
    } else {
      job.need(hp + "mlp.gate_proj.weight", gp + "ffn_gate.weight");
      job.need(hp + "mlp.up_proj.weight", gp + "ffn_up.weight");
      job.need(hp + "mlp.down_proj.weight", gp + "ffn_down.weight");
    }
  }
}

}  // namespace

std::vector<std::string> convertible_architectures() {
  std::vector<std::string> out;
  for (const auto& a : kArchs) out.emplace_back(a.hf);
  return out;
}

ConvertReport convert_hf(const std::filesystem::path& dir, const std::filesystem::path& out, const ConvertOptions& opts) {
  const auto config_path = dir / "config.json";
  const json config = read_json(config_path, true);
  const json tok_json = read_json(dir / "tokenizer.json", true);
  const json tok_config = read_json(dir / "tokenizer_config.json", false);
  if (!config.contains("architectures") || !config["architectures"].is_array() || config["architectures"].empty()) {
    throw Error(fmt::format("{}: no 'architectures' list", config_path.string()));
  }
  const std::string hf_arch = config["architectures"][0].is_string() ? config["architectures"][0].get<std::string>() : "";
  const ArchSpec* spec = nullptr;
  for (const auto& a : kArchs) {
    if (hf_arch == a.hf) spec = &a;
  }
  if (!spec) {
    std::string names;
    for (const auto& n : convertible_architectures()) names += (names.empty() ? "" : ", ") + n;
    throw Error(fmt::format("{}: architecture '{}' cannot be converted (supported: {})", config_path.string(), hf_arch, names));
  }
  const Checkpoint ckpt = Checkpoint::open(dir);
  if (!spec->plan && read_rope_scaling(config, config_path).type == "proportional") {
    throw Error(fmt::format("{}: rope type 'proportional' is not supported for {}", config_path.string(), hf_arch));
  }

  const auto n_layer = cfg<uint32_t>(config, "num_hidden_layers", config_path);
  const auto n_embd = cfg<uint32_t>(config, "hidden_size", config_path);
  const auto n_head = cfg<uint32_t>(config, "num_attention_heads", config_path);
  const auto n_head_kv = cfg_opt<uint32_t>(config, "num_key_value_heads").value_or(n_head);
  const auto head_dim = cfg_opt<uint32_t>(config, "head_dim").value_or(n_embd / n_head);
  const std::string a = spec->gguf;

  gguf::Writer w;
  auto& m = w.metadata();
  m.set("general.architecture", Value::str(a));
  m.set("general.name", Value::str(opts.name.empty() ? dir.filename().string() : opts.name));
  m.set("general.file_type", Value::u32(0));  // set once the tensor types are known
  m.set(a + ".context_length", Value::u32(cfg_opt<uint32_t>(config, "max_position_embeddings").value_or(2048)));
  m.set(a + ".embedding_length", Value::u32(n_embd));
  m.set(a + ".block_count", Value::u32(n_layer));
  // Families with their own planner may have no dense feed-forward network.
  if (const auto ff = cfg_opt<uint32_t>(config, "intermediate_size"); ff || !spec->plan) {
    m.set(a + ".feed_forward_length", Value::u32(ff ? *ff : cfg<uint32_t>(config, "intermediate_size", config_path)));
  }
  uint32_t n_expert = 0, n_ff_exp = 0;
  if (spec->moe) {
    n_expert = cfg_opt<uint32_t>(config, "num_experts").value_or(cfg_opt<uint32_t>(config, "num_local_experts").value_or(0));
    n_ff_exp = cfg<uint32_t>(config, "moe_intermediate_size", config_path);
    const auto used = cfg<uint32_t>(config, "num_experts_per_tok", config_path);
    if (n_expert == 0 || used == 0 || used > n_expert) {
      throw Error(fmt::format("{}: {} experts with {} per token is not a mixture", config_path.string(), n_expert, used));
    }
    if (cfg_opt<bool>(config, "norm_topk_prob").value_or(true) == false) {
      throw Error(fmt::format("{}: norm_topk_prob false is not supported for {} (the GGUF form renormalises)",
                              config_path.string(), hf_arch));
    }
    m.set(a + ".expert_count", Value::u32(n_expert));
    m.set(a + ".expert_used_count", Value::u32(used));
    m.set(a + ".expert_feed_forward_length", Value::u32(n_ff_exp));
  }
  m.set(a + ".attention.head_count", Value::u32(n_head));
  m.set(a + ".attention.head_count_kv", Value::u32(n_head_kv));
  const RopeScaling rope = read_rope_scaling(config, config_path);
  m.set(a + ".rope.freq_base", Value::f32(rope.theta));
  if (rope.type == "linear" || rope.type == "yarn") {
    m.set(a + ".rope.scaling.type", Value::str(rope.type));
    m.set(a + ".rope.scaling.factor", Value::f32(rope.factor));
  }
  if (rope.type == "yarn") {
    if (rope.original_ctx) m.set(a + ".rope.scaling.original_context_length", Value::u32(*rope.original_ctx));
    if (rope.beta_fast) m.set(a + ".rope.scaling.yarn_beta_fast", Value::f32(*rope.beta_fast));
    if (rope.beta_slow) m.set(a + ".rope.scaling.yarn_beta_slow", Value::f32(*rope.beta_slow));
    // No GGUF reader but zinc knows this key: llama.cpp always rounds the range (see RopeParams).
    if (!rope.truncate) m.set(a + ".rope.scaling.yarn_truncate", Value::boolean(false));
  }
  m.set(a + ".attention.layer_norm_rms_epsilon", Value::f32(cfg_opt<float>(config, "rms_norm_eps").value_or(1e-6f)));
  if (config.contains("head_dim") && head_dim != n_embd / n_head) {
    m.set(a + ".attention.key_length", Value::u32(head_dim));
    m.set(a + ".attention.value_length", Value::u32(head_dim));
  }
  if (a == "llama") m.set(a + ".rope.dimension_count", Value::u32(head_dim));
  if (spec->gemma) {
    m.set(a + ".attention.key_length", Value::u32(head_dim));
    m.set(a + ".attention.value_length", Value::u32(head_dim));
    if (const auto window = cfg_opt<uint32_t>(config, "sliding_window")) {
      m.set(a + ".attention.sliding_window", Value::u32(*window));
    }
    if (const auto cap = cfg_opt<float>(config, "final_logit_softcapping")) {
      m.set(a + ".final_logit_softcapping", Value::f32(*cap));
    }
  }

  tokenizer::HfTokenizerOptions topts;
  // Gemma's embedding keeps only the rows of real tokens; others pad the token list to vocab_size.
  if (const auto vs = cfg_opt<uint32_t>(config, "vocab_size"); vs && !spec->gemma) topts.vocab_size = *vs;
  auto tok = tokenizer::convert_hf_tokenizer(tok_json, tok_config, config, topts, (dir / "tokenizer.json").string());
  for (const auto& [k, v] : tok.metadata.items()) m.set(k, v);
  ConvertReport report;
  report.architecture = a;
  report.notes = tok.notes;

  // Which tensors go where, in the order the file will hold them.
  Job job{config, config_path, ckpt, m, a, n_layer, n_embd, n_head, n_head_kv, head_dim, spec->gemma ? 1.0f : 0.0f, {}};
  job.need("model.embed_tokens.weight", "token_embd.weight");
  const auto n_tokens = static_cast<int64_t>(tok.metadata.find("tokenizer.ggml.tokens")->view().array().size());
  if (spec->gemma) job.plan.back().max_rows = n_tokens;
  if (spec->plan) spec->plan(job);
  else plan_standard_layers(job, *spec, n_expert, n_ff_exp);
  job.need("model.norm.weight", "output_norm.weight");
  if (!spec->gemma && !cfg_opt<bool>(config, "tie_word_embeddings").value_or(false)) {
    job.maybe("lm_head.weight", "output.weight");
  }
  const std::vector<PlannedTensor>& plan = job.plan;

  // Target type per tensor.
  std::string outtype = opts.outtype;
  for (auto& ch : outtype) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (outtype != "auto" && outtype != "f32" && outtype != "f16" && outtype != "bf16" && outtype != "q8_0") {
    throw Error(fmt::format("unknown --outtype '{}' (f32, f16, bf16, q8_0 or auto; use zinc quantize for other mixtures)",
                            opts.outtype));
  }
  uint32_t file_type = 0;
  if (outtype == "f16" || outtype == "auto") file_type = 1;
  if (outtype == "bf16") file_type = 32;
  if (outtype == "q8_0") file_type = 7;
  for (const auto& p : plan) {
    const StTensor& t = *p.src;
    if (t.shape.empty() || t.shape.size() > 4) {
      throw Error(fmt::format("{}: tensor '{}' has {} dimensions", dir.string(), t.name, t.shape.size()));
    }
    std::vector<uint64_t> ne(t.shape.rbegin(), t.shape.rend());  // GGUF lists the contiguous dimension first
    if (!p.ne.empty()) ne = p.ne;
    const auto cols = static_cast<int64_t>(ne[0]);
    int64_t rows = 1;
    for (size_t i = 1; i < ne.size(); ++i) rows *= static_cast<int64_t>(ne[i]);
    // The source must hold what the target shape reads.
    int64_t available = 0;
    for (const StTensor* part : p.stack.empty() ? std::vector<const StTensor*>{p.src} : p.stack) {
      available += part->n_elements();
    }
    if (p.half_rows > 0) available /= 2;
    if (available < rows * cols && p.max_rows < 0 && !p.make_row) {
      throw Error(fmt::format("{}: tensor '{}' has {} elements, '{}' needs {}", dir.string(), t.name, available, p.gguf_name,
                              rows * cols));
    }
    if (p.max_rows >= 0 && ne.size() == 2 && p.max_rows < rows) {
      rows = p.max_rows;
      ne[1] = static_cast<uint64_t>(rows);
    }
    TensorType type = TensorType::F32;
    // (A mixture's router stays F32 whatever the output type, as the reference converter and quantizer
    // keep it: its logits choose the experts, and quantized or halved they choose others at near ties.)
    if (ne.size() >= 2 && !p.keep_f32 && !p.gguf_name.ends_with("ffn_gate_inp.weight")) {
      if (outtype == "f32") type = TensorType::F32;
      else if (outtype == "bf16") type = TensorType::BF16;
      else if (outtype == "f16") type = TensorType::F16;
      else if (outtype == "q8_0") type = cols % 32 == 0 ? TensorType::Q8_0 : TensorType::F16;
      else type = t.dtype == StDType::BF16 ? TensorType::BF16 : TensorType::F16;
      if (outtype == "auto" && t.dtype == StDType::BF16) file_type = 32;
    }
    if (p.permute_heads > 0 && rows % (2 * p.permute_heads) != 0) {
      throw Error(fmt::format("{}: tensor '{}' has {} rows, not divisible into {} heads of pairs", dir.string(), t.name,
                              rows, p.permute_heads));
    }
    const StTensor* src = p.src;
    const int heads = p.permute_heads;
    const float add = p.add;
    const auto stack = p.stack;
    const int64_t half_rows = p.half_rows;
    const int fused_half = p.half;
    const auto make_row = p.make_row;
    w.add_tensor(p.gguf_name, type, ne, [src, stack, half_rows, fused_half, make_row, type, cols, rows, heads, add](const auto& emit) {
      const size_t rs = quant::row_size(type, cols);
      std::vector<float> row(static_cast<size_t>(cols));
      std::vector<uint8_t> packed(rs);
      const int64_t per_head = heads > 0 ? rows / heads : 0;
      for (int64_t r = 0; r < rows; ++r) {
        if (make_row) {
          make_row(r, row.data());
          quant::quantize_row(type, row.data(), packed.data(), cols);
          emit(std::span<const uint8_t>(packed));
          continue;
        }
        // Pairwise rotary layout: within each head, row 2i+j comes from row j*half + i.
        int64_t from = r;
        if (heads > 0) {
          const int64_t h = r / per_head, k = r % per_head, half = per_head / 2;
          from = h * per_head + (k % 2) * half + k / 2;
        }
        const StTensor* from_tensor = src;
        if (!stack.empty()) {  // rows of the stacked parts, one part after another
          const int64_t per = rows / static_cast<int64_t>(stack.size());
          from_tensor = stack[static_cast<size_t>(r / per)];
          from = r % per;
        } else if (half_rows > 0) {  // one half of each expert's fused rows
          from = (r / half_rows) * 2 * half_rows + fused_half * half_rows + r % half_rows;
        }
        for (int64_t c = 0; c < cols; ++c) row[static_cast<size_t>(c)] = load_element(*from_tensor, from * cols + c) + add;
        quant::quantize_row(type, row.data(), packed.data(), cols);
        emit(std::span<const uint8_t>(packed));
      }
    });
  }
  if (rope.type == "llama3") {
    const auto factors = std::make_shared<std::vector<float>>(llama3_rope_factors(rope, head_dim));
    const std::vector<uint64_t> ne{factors->size()};
    w.add_tensor("rope_freqs.weight", TensorType::F32, ne, [factors](const auto& emit) {
      emit(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(factors->data()), factors->size() * sizeof(float)));
    });
  }
  m.set("general.file_type", Value::u32(file_type));
  if (file_type == 7) m.set("general.quantization_version", Value::u32(2));
  report.tensor_count = plan.size();
  report.file_size = w.file_size();
  w.write_file(out, opts.progress);
  return report;
}

}  // namespace zinc::convert
