// Gemma 4 (text): Gemma4ForCausalLM checkpoints to the "gemma4" GGUF layout that llama.cpp reads.
// Local and global layers differ in head size: key_length / value_length describe the global layers,
// key_length_swa / value_length_swa the local ones, and sliding_window_pattern says which is which.
// The global layers' "proportional" rope rotates the first partial_rotary_factor of each head's pairs
// with frequencies of the full head size and leaves the rest alone; GGUF describes it as a full-width
// rotation (rope.dimension_count = global head size) whose unrotated pairs have their frequency divided
// by 1e30 (rope_freqs.weight). Norm weights are stored as they are (no "+1" as in Gemma 3). MoE layers
// keep the dense MLP beside the experts; the experts' fused gate/up tensor is stored fused.
#include <cstdint>
#include <string>
#include <vector>

#include "convert/convert_plan.h"

namespace zinc::convert::detail {

namespace {

// A per-layer override ("per_layer_config": {"5": {"head_dim": 128}}) of the first global layer.
std::optional<uint32_t> global_override(const Job& job, const std::vector<std::string>& types, const char* key) {
  if (!job.config.contains("per_layer_config") || !job.config["per_layer_config"].is_object()) return std::nullopt;
  for (size_t l = 0; l < types.size(); ++l) {
    if (types[l] != "full_attention") continue;
    const auto& plc = job.config["per_layer_config"];
    const std::string idx = std::to_string(l);
    if (plc.contains(idx) && plc[idx].is_object()) {
      if (auto v = cfg_opt<uint32_t>(plc[idx], key)) return v;
    }
  }
  return std::nullopt;
}

}  // namespace

void plan_gemma4(Job& job) {
  const auto& file = job.config_path;
  const auto types = job.get<std::vector<std::string>>("layer_types");
  if (types.size() != job.n_layer) {
    throw Error(fmt::format("{}: layer_types has {} entries for {} layers", file.string(), types.size(), job.n_layer));
  }
  if (job.get_opt<uint32_t>("num_kv_shared_layers").value_or(0) != 0) {
    throw Error(fmt::format("{}: Gemma 4 with KV shared across layers is not supported yet", file.string()));
  }
  if (job.get_opt<uint32_t>("hidden_size_per_layer_input").value_or(0) != 0) {
    throw Error(fmt::format("{}: Gemma 4 with per-layer input embeddings is not supported yet", file.string()));
  }
  if (job.get_opt<std::string>("use_bidirectional_attention").value_or("") == "all") {
    throw Error(fmt::format("{}: bidirectional attention is not supported", file.string()));
  }
  if (job.get_opt<std::string>("hidden_activation").value_or("gelu_pytorch_tanh") != "gelu_pytorch_tanh") {
    throw Error(fmt::format("{}: only the gelu_pytorch_tanh activation is supported", file.string()));
  }
  const uint32_t hd_swa = job.head_dim;
  const uint32_t hd_full = job.get_opt<uint32_t>("global_head_dim").value_or(global_override(job, types, "head_dim").value_or(hd_swa));
  const uint32_t kv_swa = job.n_head_kv;
  const uint32_t kv_full =
      job.get_opt<uint32_t>("num_global_key_value_heads").value_or(global_override(job, types, "num_key_value_heads").value_or(kv_swa));
  if (kv_full != kv_swa) {
    std::vector<uint32_t> counts;
    for (const auto& t : types) counts.push_back(t == "sliding_attention" ? kv_swa : kv_full);
    job.set("attention.head_count_kv", gguf::Value::u32s(counts));
  }

  // Rotary settings per layer type (transformers 5's nested rope_parameters).
  const json rp = job.config.contains("rope_parameters") ? job.config["rope_parameters"] : json::object();
  const json full = rp.contains("full_attention") ? rp["full_attention"] : json::object();
  const json local = rp.contains("sliding_attention") ? rp["sliding_attention"] : json::object();
  const auto full_type = cfg_opt<std::string>(full, "rope_type").value_or("default");
  if (full_type != "proportional" && full_type != "default") {
    throw Error(fmt::format("{}: global-layer rope type '{}' is not supported (proportional, default)", file.string(),
                            full_type));
  }
  if (cfg_opt<std::string>(local, "rope_type").value_or("default") != "default" ||
      cfg_opt<float>(full, "factor").value_or(1.0f) != 1.0f) {
    throw Error(fmt::format("{}: scaled rope is not supported for Gemma 4", file.string()));
  }
  const float partial_full = full_type == "proportional" ? cfg_opt<float>(full, "partial_rotary_factor").value_or(1.0f) : 1.0f;
  const float partial_swa = cfg_opt<float>(local, "partial_rotary_factor").value_or(1.0f);
  job.set("rope.freq_base_swa", gguf::Value::f32(cfg_opt<float>(local, "rope_theta").value_or(10000.0f)));
  job.set("rope.dimension_count", gguf::Value::u32(hd_full));
  job.set("rope.dimension_count_swa", gguf::Value::u32(static_cast<uint32_t>(static_cast<float>(hd_swa) * partial_swa)));
  job.set("attention.key_length", gguf::Value::u32(hd_full));
  job.set("attention.value_length", gguf::Value::u32(hd_full));
  job.set("attention.key_length_swa", gguf::Value::u32(hd_swa));
  job.set("attention.value_length_swa", gguf::Value::u32(hd_swa));
  job.set("attention.sliding_window", gguf::Value::u32(job.get<uint32_t>("sliding_window")));
  std::vector<gguf::Value> pattern;
  for (const auto& t : types) pattern.push_back(gguf::Value::boolean(t == "sliding_attention"));
  job.set("attention.sliding_window_pattern", gguf::Value::array(gguf::ValueType::BOOL, pattern));
  job.set("attention.shared_kv_layers", gguf::Value::u32(0));
  job.set("embedding_length_per_layer_input", gguf::Value::u32(0));
  if (const auto cap = job.get_opt<float>("final_logit_softcapping")) job.set("final_logit_softcapping", gguf::Value::f32(*cap));

  const bool moe = job.get_opt<bool>("enable_moe_block").value_or(false);
  uint32_t n_expert = 0, n_ff_exp = 0;
  if (moe) {
    n_expert = job.get<uint32_t>("num_experts");
    n_ff_exp = job.get<uint32_t>("moe_intermediate_size");
    const auto used = job.get<uint32_t>("top_k_experts");
    if (n_expert == 0 || used == 0 || used > n_expert || n_ff_exp == 0) {
      throw Error(fmt::format("{}: {} experts with {} per token is not a mixture", file.string(), n_expert, used));
    }
    job.set("expert_count", gguf::Value::u32(n_expert));
    job.set("expert_used_count", gguf::Value::u32(used));
    job.set("expert_feed_forward_length", gguf::Value::u32(n_ff_exp));
  }

  // Proportional rope: pairs past the rotated ones keep their angle at ~0.
  if (full_type == "proportional") {
    const uint32_t pairs = hd_full / 2;
    const auto rotated = static_cast<uint32_t>(partial_full * static_cast<float>(hd_full) / 2.0f);
    job.computed("rope_freqs.weight", job.ckpt.get("model.embed_tokens.weight"), {pairs}, [rotated, pairs](int64_t, float* row) {
      for (uint32_t i = 0; i < pairs; ++i) row[i] = i < rotated ? 1.0f : 1e30f;
    }).keep_f32 = true;
  }

  for (uint32_t l = 0; l < job.n_layer; ++l) {
    const std::string hp = "model.layers." + std::to_string(l) + ".", gp = "blk." + std::to_string(l) + ".";
    job.need(hp + "input_layernorm.weight", gp + "attn_norm.weight");
    job.attention(hp, gp, true, false, true);  // no v_proj: the values are the keys
    job.need(hp + "post_attention_layernorm.weight", gp + "post_attention_norm.weight");
    job.need(hp + "pre_feedforward_layernorm.weight", gp + "ffn_norm.weight");
    job.need(hp + "mlp.gate_proj.weight", gp + "ffn_gate.weight");
    job.need(hp + "mlp.up_proj.weight", gp + "ffn_up.weight");
    job.need(hp + "mlp.down_proj.weight", gp + "ffn_down.weight");
    job.need(hp + "post_feedforward_layernorm.weight", gp + "post_ffw_norm.weight");
    if (moe) {
      job.need(hp + "router.proj.weight", gp + "ffn_gate_inp.weight");
      job.need(hp + "router.scale", gp + "ffn_gate_inp.scale");
      job.need(hp + "router.per_expert_scale", gp + "ffn_down_exps.scale");
      // [experts, 2 * width, in] and [experts, out, width]: GGUF's shapes are these reversed.
      job.need(hp + "experts.gate_up_proj", gp + "ffn_gate_up_exps.weight");
      job.need(hp + "experts.down_proj", gp + "ffn_down_exps.weight");
      job.need(hp + "pre_feedforward_layernorm_2.weight", gp + "pre_ffw_norm_2.weight");
      job.need(hp + "post_feedforward_layernorm_1.weight", gp + "post_ffw_norm_1.weight");
      job.need(hp + "post_feedforward_layernorm_2.weight", gp + "post_ffw_norm_2.weight");
    }
    job.maybe(hp + "layer_scalar", gp + "layer_output_scale.weight");
  }
}

}  // namespace zinc::convert::detail
