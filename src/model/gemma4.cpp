// Gemma 4 (text, dense and mixture of experts). Like Gemma 3: the embedding is scaled by sqrt(width),
// q and k are normalised per head, each sub-layer output is normalised again before the residual add,
// the feed-forward network is GEGLU and the logits are soft-capped. What differs:
// - local (sliding-window) and global layers have their own head size (key_length_swa / key_length)
//   and rotary settings; the global layers use "proportional" rope, which rotates only the first pairs
//   of a full-width rotation: rope_freqs.weight divides the frequency of the other pairs by 1e30.
// - v is RMS-normalised per head without a weight, and the attention scores are not scaled.
// - the norm weights scale directly (no "+1"); a layer may end with a learned scalar (layer_output_scale).
// - MoE layers run the dense MLP and a mixture of GEGLU experts side by side on the same residual, each
//   with its own pre/post norms, and add them before the final post-norm. The router reads the
//   RMS-normalised residual times a learned vector and 1/sqrt(width); after top-k renormalisation each
//   expert's weight is multiplied by a learned per-expert scale (ffn_down_exps.scale).
// Not supported yet (the loader says so): KV sharing across layers and per-layer input embeddings.
#include <fmt/format.h>

#include <cmath>

#include "core/error.h"
#include "model/model.h"

namespace zinc::model {

graph::Graph build_gemma4(const gguf::File& f, HParams& hp) {
  const std::string a = "gemma4.";
  hp = read_common_hparams(f, "gemma4");
  if (f.get_or<uint32_t>(a + "attention.shared_kv_layers", 0) != 0) {
    throw Error(fmt::format("{}: Gemma 4 with KV shared across layers is not supported yet", f.name()));
  }
  if (f.get_or<uint32_t>(a + "embedding_length_per_layer_input", 0) != 0) {
    throw Error(fmt::format("{}: Gemma 4 with per-layer input embeddings is not supported yet", f.name()));
  }
  const auto swa = f.get<std::vector<bool>>(a + "attention.sliding_window_pattern");
  if (swa.size() != static_cast<size_t>(hp.n_layer)) {
    throw Error(fmt::format("{}: sliding_window_pattern has {} entries for {} layers", f.name(), swa.size(), hp.n_layer));
  }
  const int window = static_cast<int>(f.get<uint32_t>(a + "attention.sliding_window"));
  const int hd_swa = static_cast<int>(f.get<uint32_t>(a + "attention.key_length_swa"));
  const int n_rot_swa = static_cast<int>(f.get_or<uint32_t>(a + "rope.dimension_count_swa", static_cast<uint32_t>(hd_swa)));
  if (f.get_or<uint32_t>(a + "attention.value_length", static_cast<uint32_t>(hp.head_dim)) != static_cast<uint32_t>(hp.head_dim) ||
      f.get_or<uint32_t>(a + "attention.value_length_swa", static_cast<uint32_t>(hd_swa)) != static_cast<uint32_t>(hd_swa)) {
    throw Error(fmt::format("{}: Gemma 4 needs value heads as wide as key heads", f.name()));
  }
  graph::RopeParams rope_swa = hp.rope;
  rope_swa.base = f.get_or<float>(a + "rope.freq_base_swa", 10000.0f);
  const float final_cap = f.get_or<float>(a + "final_logit_softcapping", 0.0f);
  hp.n_expert = static_cast<int>(f.get_or<uint32_t>(a + "expert_count", 0));
  hp.n_expert_used = static_cast<int>(f.get_or<uint32_t>(a + "expert_used_count", 0));
  hp.n_ff_exp = f.get_or<uint32_t>(a + "expert_feed_forward_length", 0);

  graph::Graph g;
  graph::Builder b(g);
  const int64_t d = hp.n_embd, ff = hp.n_ff;
  g.n_layer = hp.n_layer;
  g.n_vocab = hp.n_vocab;
  const auto tok = require_weight(b, f, "token_embd.weight", {d, hp.n_vocab});
  graph::TensorId x = b.embed(tok, std::sqrt(static_cast<float>(d)));
  // One tensor of per-pair divisors, shared by the global layers.
  const auto rope_factors = optional_weight(b, f, "rope_freqs.weight", {hp.n_rot / 2});
  const float eps = hp.rms_eps;
  for (int l = 0; l < hp.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    const bool local = swa[static_cast<size_t>(l)];
    const int hd = local ? hd_swa : hp.head_dim, n_rot = local ? n_rot_swa : hp.n_rot;
    const int64_t q_w = static_cast<int64_t>(hp.n_head) * hd, kv_w = static_cast<int64_t>(hp.kv_heads(l)) * hd;
    const auto norm = [&](graph::TensorId in, const std::string& w, const std::string& name) {
      return b.rms_norm(in, require_weight(b, f, p + w, {d}, l), eps, 0.0f, p + name, l);
    };

    auto h = norm(x, "attn_norm.weight", "attn_norm");
    auto q = b.matmul(require_weight(b, f, p + "attn_q.weight", {d, q_w}, l), h, p + "q", l);
    auto k = b.matmul(require_weight(b, f, p + "attn_k.weight", {d, kv_w}, l), h, p + "k", l);
    // Without attn_v (attention_k_eq_v), the values are the keys before their norm and rotation.
    const auto wv = optional_weight(b, f, p + "attn_v.weight", {d, kv_w}, l);
    auto v = wv >= 0 ? b.matmul(wv, h, p + "v", l) : k;
    q = b.rms_norm_heads(q, require_weight(b, f, p + "attn_q_norm.weight", {hd}, l), hd, eps, p + "q_norm", l);
    k = b.rms_norm_heads(k, require_weight(b, f, p + "attn_k_norm.weight", {hd}, l), hd, eps, p + "k_norm", l);
    v = b.rms_norm_heads(v, -1, hd, eps, p + "v_norm", l);
    const graph::RopeParams& rope = local ? rope_swa : hp.rope;
    const graph::TensorId factors = local ? -1 : rope_factors;
    q = b.rope(q, hp.n_head, hd, n_rot, graph::RopeMode::NeoX, rope, p + "q_rope", l, factors);
    k = b.rope(k, hp.kv_heads(l), hd, n_rot, graph::RopeMode::NeoX, rope, p + "k_rope", l, factors);
    auto att = b.attention(q, k, v, hp.n_head, hp.kv_heads(l), hd, 1.0f, local ? window : 0, 0.0f, p + "attn", l);
    auto o = b.matmul(require_weight(b, f, p + "attn_output.weight", {q_w, d}, l), att, p + "attn_out", l);
    x = b.add(x, norm(o, "post_attention_norm.weight", "post_attn_norm"), p + "attn_residual", l);

    h = norm(x, "ffn_norm.weight", "ffn_norm");
    auto act = b.geglu(b.matmul(require_weight(b, f, p + "ffn_gate.weight", {d, ff}, l), h, p + "ffn_gate", l),
                       b.matmul(require_weight(b, f, p + "ffn_up.weight", {d, ff}, l), h, p + "ffn_up", l),
                       p + "ffn_act", l);
    auto ffn = b.matmul(require_weight(b, f, p + "ffn_down.weight", {ff, d}, l), act, p + "ffn_out", l);
    const auto router = hp.n_expert > 0 ? optional_weight(b, f, p + "ffn_gate_inp.weight", {d, hp.n_expert}, l) : -1;
    if (router >= 0) {
      const int64_t ne = hp.n_expert, fe = hp.n_ff_exp;
      if (hp.n_expert_used < 1 || hp.n_expert_used > hp.n_expert || fe < 1) {
        throw Error(fmt::format("{}: {} experts with {} used and width {} is not a mixture", f.name(), hp.n_expert,
                                hp.n_expert_used, fe));
      }
      ffn = norm(ffn, "post_ffw_norm_1.weight", "post_ffw_norm_1");
      graph::Builder::MoeVariant routing;
      routing.norm_topk = true;
      routing.router_in = norm(x, "ffn_gate_inp.scale", "router_in");
      routing.expert_scale = require_weight(b, f, p + "ffn_down_exps.scale", {ne}, l);
      routing.logit_scale = 1.0f / std::sqrt(static_cast<float>(d));
      routing.glu = graph::MoeGlu::GeGLU;
      // The experts' gate and up projections come fused (as llama.cpp converts them) or apart.
      graph::TensorId gate = optional_weight(b, f, p + "ffn_gate_up_exps.weight", {d, 2 * fe, ne}, l), up = gate;
      if (gate < 0) {
        gate = require_weight(b, f, p + "ffn_gate_exps.weight", {d, fe, ne}, l);
        up = require_weight(b, f, p + "ffn_up_exps.weight", {d, fe, ne}, l);
      }
      auto moe = b.moe(norm(x, "pre_ffw_norm_2.weight", "pre_ffw_norm_2"), router, gate, up,
                       require_weight(b, f, p + "ffn_down_exps.weight", {fe, d, ne}, l), hp.n_expert_used, routing,
                       p + "ffn_moe", l);
      ffn = b.add(ffn, norm(moe, "post_ffw_norm_2.weight", "post_ffw_norm_2"), p + "ffn_mlp_moe", l);
    }
    x = b.add(x, norm(ffn, "post_ffw_norm.weight", "post_ffw_norm"), p + "ffn_residual", l);
    if (const auto s = optional_weight(b, f, p + "layer_output_scale.weight", {1}, l); s >= 0) {
      x = b.scale(x, s, p + "layer_out", l);
    }
  }
  build_output(b, g, f, hp, x, tok, final_cap);
  return g;
}

}  // namespace zinc::model
