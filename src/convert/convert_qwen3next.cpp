// Qwen3-Next and Qwen3.5 (dense and MoE): hybrid stacks of gated-DeltaNet linear-attention layers and
// gated full-attention layers, written in the GGUF layout of the released files.
//  - Norm weights are zero-centred in the checkpoint (the model multiplies by 1 + w) and stored as
//    1 + w, except the linear-attention output norm, which multiplies by w itself.
//  - Linear attention: the projection into the convolution (q | k | v, every key head's q, then k, then
//    v) becomes attn_qkv, the output gate z attn_gate; A_log is stored as A = -exp(A_log).
//  - Qwen3-Next fuses q, k, v and z per key head in one projection (and b, a per key head in another,
//    kept as it is); its value heads stay grouped by key head (v head h reads key head h / r).
//  - Qwen3.5 projects them separately; its value heads are stored tiled (v head n reads key head
//    n % Hk): head n of the file is head (n % Hk) * r + n / Hk of the checkpoint, for every tensor
//    indexed by value head.
#include <cmath>

#include "convert/convert_plan.h"

namespace zinc::convert::detail {

namespace {

struct Dims {
  int64_t hk = 0, hv = 0, dk = 0, dv = 0, r = 1, kc = 0;
  int64_t key_dim() const { return hk * dk; }
  int64_t value_dim() const { return hv * dv; }
  int64_t conv_dim() const { return 2 * key_dim() + value_dim(); }
};

// Checkpoint head of file head n (Qwen3.5's tiled order); the identity when tiled is false.
int64_t source_head(const Dims& d, int64_t n, bool tiled) { return tiled ? (n % d.hk) * d.r + n / d.hk : n; }

// Row `row` (of `cols` elements) of a checkpoint tensor into out.
void copy_row(const StTensor& t, int64_t row, int64_t cols, float* out, float scale = 1.0f) {
  for (int64_t c = 0; c < cols; ++c) out[c] = load_element(t, row * cols + c) * scale;
}

void plan_linear_attention(Job& job, const std::string& hp, const std::string& gp, const Dims& d, bool qwen35) {
  const int64_t E = job.n_embd, kd = d.key_dim(), vd = d.value_dim();
  const uint64_t ue = static_cast<uint64_t>(E);
  const std::string la = hp + "linear_attn.";
  if (!qwen35) {
    // in_proj_qkvz rows, per key head: q (dk), k (dk), v (r dv), z (r dv).
    const StTensor& qkvz = job.ckpt.get(la + "in_proj_qkvz.weight");
    const int64_t group = 2 * d.dk + 2 * d.r * d.dv;
    job.computed(gp + "attn_qkv.weight", qkvz, {ue, static_cast<uint64_t>(d.conv_dim())}, [&qkvz, d, E, group, kd](int64_t r, float* row) {
      int64_t src;
      if (r < 2 * kd) {  // q heads then k heads
        const int64_t part = r / kd, i = r % kd;
        src = (i / d.dk) * group + part * d.dk + i % d.dk;
      } else {
        const int64_t i = r - 2 * kd, width = d.r * d.dv;
        src = (i / width) * group + 2 * d.dk + i % width;
      }
      copy_row(qkvz, src, E, row);
    });
    job.computed(gp + "attn_gate.weight", qkvz, {ue, static_cast<uint64_t>(vd)}, [&qkvz, d, E, group](int64_t r, float* row) {
      const int64_t width = d.r * d.dv;
      copy_row(qkvz, (r / width) * group + 2 * d.dk + width + r % width, E, row);
    });
    job.need(la + "in_proj_ba.weight", gp + "ssm_ba.weight");
  } else {
    const bool tiled = d.hk != d.hv;
    const StTensor& qkv = job.ckpt.get(la + "in_proj_qkv.weight");
    job.computed(gp + "attn_qkv.weight", qkv, {ue, static_cast<uint64_t>(d.conv_dim())}, [&qkv, d, E, kd, tiled](int64_t r, float* row) {
      const int64_t v = r - 2 * kd;
      copy_row(qkv, v < 0 ? r : 2 * kd + source_head(d, v / d.dv, tiled) * d.dv + v % d.dv, E, row);
    });
    const StTensor& z = job.ckpt.get(la + "in_proj_z.weight");
    job.computed(gp + "attn_gate.weight", z, {ue, static_cast<uint64_t>(vd)}, [&z, d, E, tiled](int64_t r, float* row) {
      copy_row(z, source_head(d, r / d.dv, tiled) * d.dv + r % d.dv, E, row);
    });
    for (const auto& [hf, g] : {std::pair{"in_proj_b", "ssm_beta"}, std::pair{"in_proj_a", "ssm_alpha"}}) {
      const StTensor& t = job.ckpt.get(la + hf + ".weight");
      job.computed(gp + g + ".weight", t, {ue, static_cast<uint64_t>(d.hv)}, [&t, d, E, tiled](int64_t r, float* row) {
        copy_row(t, source_head(d, r, tiled), E, row);
      });
    }
  }
  const bool tiled = qwen35 && d.hk != d.hv;
  // Convolution taps {kernel, channel}: channels q | k | v, the v channels in the file's head order.
  const StTensor& conv = job.ckpt.get(la + "conv1d.weight");
  job.computed(gp + "ssm_conv1d.weight", conv, {static_cast<uint64_t>(d.kc), static_cast<uint64_t>(d.conv_dim())},
               [&conv, d, kd, tiled](int64_t r, float* row) {
                 const int64_t v = r - 2 * kd;
                 copy_row(conv, v < 0 ? r : 2 * kd + source_head(d, v / d.dv, tiled) * d.dv + v % d.dv, d.kc, row);
               }).keep_f32 = true;
  const StTensor& dt = job.ckpt.get(la + "dt_bias");
  job.computed(gp + "ssm_dt.bias", dt, {static_cast<uint64_t>(d.hv)}, [&dt, d, tiled](int64_t, float* row) {
    for (int64_t h = 0; h < d.hv; ++h) row[h] = load_element(dt, source_head(d, h, tiled));
  });
  const StTensor& a_log = job.ckpt.get(la + "A_log");
  job.computed(gp + "ssm_a", a_log, {static_cast<uint64_t>(d.hv)}, [&a_log, d, tiled](int64_t, float* row) {
    for (int64_t h = 0; h < d.hv; ++h) row[h] = -std::exp(load_element(a_log, source_head(d, h, tiled)));
  });
  job.need(la + "norm.weight", gp + "ssm_norm.weight").add = 0.0f;  // multiplies by w itself
  const StTensor& out = job.ckpt.get(la + "out_proj.weight");
  job.computed(gp + "ssm_out.weight", out, {static_cast<uint64_t>(vd), ue}, [&out, d, vd, tiled](int64_t r, float* row) {
    for (int64_t c = 0; c < vd; ++c) {
      row[c] = load_element(out, r * vd + source_head(d, c / d.dv, tiled) * d.dv + c % d.dv);
    }
  });
}

}  // namespace

void plan_qwen3next(Job& job) {
  const bool qwen35 = job.arch != "qwen3next";
  const bool moe = job.arch != "qwen35";
  Dims d;
  d.hk = job.get<int64_t>("linear_num_key_heads");
  d.hv = job.get<int64_t>("linear_num_value_heads");
  d.dk = job.get<int64_t>("linear_key_head_dim");
  d.dv = job.get<int64_t>("linear_value_head_dim");
  d.kc = job.get<int64_t>("linear_conv_kernel_dim");
  if (d.hk <= 0 || d.hv % d.hk != 0 || d.dk <= 0 || d.dv != d.dk || d.kc < 1) {
    throw Error(fmt::format("{}: linear attention with {} key heads of {} and {} value heads of {} is not supported "
                            "(value heads a multiple of key heads, equal head widths)",
                            job.config_path.string(), d.hk, d.dk, d.hv, d.dv));
  }
  d.r = d.hv / d.hk;
  job.norm_add = 1.0f;  // zero-centred norms (not the linear-attention output norm, see above)
  // Which layers attend fully: layer_types, else every full_attention_interval-th layer.
  std::vector<bool> recurrent(job.n_layer);
  const auto interval = job.get_opt<uint32_t>("full_attention_interval").value_or(4);
  if (job.config.contains("layer_types") && job.config["layer_types"].is_array()) {
    const auto& types = job.config["layer_types"];
    if (types.size() != job.n_layer) {
      throw Error(fmt::format("{}: layer_types lists {} layers, the model has {}", job.config_path.string(), types.size(),
                              job.n_layer));
    }
    for (uint32_t l = 0; l < job.n_layer; ++l) recurrent[l] = types[l] == "linear_attention";
  } else {
    for (uint32_t l = 0; l < job.n_layer; ++l) recurrent[l] = (l + 1) % interval != 0;
  }
  const auto u32 = [](int64_t v) { return gguf::Value::u32(static_cast<uint32_t>(v)); };
  job.set("ssm.conv_kernel", u32(d.kc));
  job.set("ssm.state_size", u32(d.dk));
  job.set("ssm.group_count", u32(d.hk));
  job.set("ssm.time_step_rank", u32(d.hv));
  job.set("ssm.inner_size", u32(d.value_dim()));
  job.set("full_attention_interval", u32(interval));
  // A checkpoint's multi-token-prediction head (mtp.*) is kept: one more block, after the model's own.
  const bool mtp = job.ckpt.find("mtp.fc.weight") != nullptr && job.get_opt<uint32_t>("mtp_num_hidden_layers").value_or(1) > 0;
  if (mtp && job.get_opt<uint32_t>("mtp_num_hidden_layers").value_or(1) != 1) {
    throw Error(fmt::format("{}: {} multi-token-prediction layers are not supported (one)", job.config_path.string(),
                            *job.get_opt<uint32_t>("mtp_num_hidden_layers")));
  }
  if (mtp) {
    job.set("block_count", u32(job.n_layer + 1));
    job.set("nextn_predict_layers", u32(1));
  }
  std::vector<gguf::Value> flags;
  for (bool r : recurrent) flags.push_back(gguf::Value::boolean(r));
  if (mtp) flags.push_back(gguf::Value::boolean(false));
  job.set("attention.recurrent_layers", gguf::Value::array(gguf::ValueType::BOOL, flags));
  json rope = job.config.contains("rope_parameters") ? job.config["rope_parameters"] : json::object();
  const float partial = cfg_opt<float>(rope, "partial_rotary_factor").value_or(job.get_opt<float>("partial_rotary_factor").value_or(0.25f));
  job.set("rope.dimension_count", u32(static_cast<int64_t>(static_cast<float>(job.head_dim) * partial)));
  if (qwen35) {
    // Multimodal rotary sections; text positions rotate every section alike.
    std::vector<gguf::Value> sections;
    const auto given = cfg_opt<std::vector<int32_t>>(rope, "mrope_section").value_or(std::vector<int32_t>{11, 11, 10});
    for (size_t i = 0; i < 4; ++i) sections.push_back(gguf::Value::i32(i < given.size() ? given[i] : 0));
    job.set("rope.dimension_sections", gguf::Value::array(gguf::ValueType::INT32, sections));
  }
  uint32_t n_expert = 0, n_ff_exp = 0;
  if (moe) {
    n_expert = job.get<uint32_t>("num_experts");
    n_ff_exp = job.get<uint32_t>("moe_intermediate_size");
    if (const auto shared = job.get_opt<uint32_t>("shared_expert_intermediate_size")) {
      job.set("expert_shared_feed_forward_length", gguf::Value::u32(*shared));
    }
  }
  const auto layer = [&](const std::string& hp, const std::string& gp, bool is_recurrent) {
    job.need(hp + "input_layernorm.weight", gp + "attn_norm.weight");
    if (is_recurrent) {
      plan_linear_attention(job, hp, gp, d, qwen35);
    } else {
      // q_proj keeps its per-head [query | gate] rows.
      job.attention(hp, gp, true);
    }
    job.need(hp + "post_attention_layernorm.weight", gp + "post_attention_norm.weight");
    if (moe) {
      job.need(hp + "mlp.gate.weight", gp + "ffn_gate_inp.weight");
      plan_experts(job, hp, gp, n_expert, n_ff_exp);
      job.need(hp + "mlp.shared_expert.gate_proj.weight", gp + "ffn_gate_shexp.weight");
      job.need(hp + "mlp.shared_expert.up_proj.weight", gp + "ffn_up_shexp.weight");
      job.need(hp + "mlp.shared_expert.down_proj.weight", gp + "ffn_down_shexp.weight");
      const StTensor& sg = job.ckpt.get(hp + "mlp.shared_expert_gate.weight");
      job.computed(gp + "ffn_gate_inp_shexp.weight", sg, {job.n_embd}, [&sg, n = job.n_embd](int64_t, float* row) {
        copy_row(sg, 0, n, row);
      });
    } else {
      job.need(hp + "mlp.gate_proj.weight", gp + "ffn_gate.weight");
      job.need(hp + "mlp.up_proj.weight", gp + "ffn_up.weight");
      job.need(hp + "mlp.down_proj.weight", gp + "ffn_down.weight");
    }
  };
  for (uint32_t l = 0; l < job.n_layer; ++l) {
    layer("model.layers." + std::to_string(l) + ".", "blk." + std::to_string(l) + ".", recurrent[l]);
  }
  if (mtp) {
    // The multi-token-prediction head, as the block after the model's own (a full-attention layer).
    const std::string gp = "blk." + std::to_string(job.n_layer) + ".";
    layer("mtp.layers.0.", gp, false);
    job.need("mtp.fc.weight", gp + "nextn.eh_proj.weight");
    job.need("mtp.pre_fc_norm_embedding.weight", gp + "nextn.enorm.weight");
    job.need("mtp.pre_fc_norm_hidden.weight", gp + "nextn.hnorm.weight");
    job.need("mtp.norm.weight", gp + "nextn.shared_head_norm.weight");
  }
}

}  // namespace zinc::convert::detail
