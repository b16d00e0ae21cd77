// GPT-OSS ("gpt-oss"): pre-norm attention with q/k/v/o biases, NeoX rotary embeddings (YaRN) and a
// learned per-head attention sink, alternating sliding-window and full layers; every feed-forward
// network is a mixture of experts routed by the top-k router logits (router bias included) with a
// softmax over those k, each expert a clamped SwiGLU (alpha 1.702, limit 7) with biases on all three
// projections. The sliding layers are the even ones unless attention.sliding_window_pattern lists
// them (one bool per layer).
#include <fmt/format.h>

#include <cmath>

#include "core/error.h"
#include "model/model.h"

namespace zinc::model {

namespace {

// Which layers attend within the window: the file's per-layer pattern, else every other layer from
// the first.
std::vector<bool> sliding_layers(const gguf::File& f, int n_layer) {
  std::vector<bool> out(static_cast<size_t>(n_layer));
  const std::string key = "gpt-oss.attention.sliding_window_pattern";
  if (const auto* kv = f.find(key); kv && kv->value.type() == gguf::ValueType::ARRAY) {
    const auto arr = kv->value.array();
    if (arr.size() != static_cast<uint64_t>(n_layer)) {
      throw Error(fmt::format("{}: {} lists {} layers, the model has {}", f.name(), key, arr.size(), n_layer));
    }
    for (int l = 0; l < n_layer; ++l) {
      const auto v = arr.at(static_cast<uint64_t>(l)).as<bool>();
      if (!v) throw Error(fmt::format("{}: {} must hold bools", f.name(), key));
      out[static_cast<size_t>(l)] = *v;
    }
    return out;
  }
  const auto period = static_cast<int>(f.get_or<uint32_t>(key, 2));
  for (int l = 0; l < n_layer; ++l) out[static_cast<size_t>(l)] = period > 1 && l % period < period - 1;
  return out;
}

}  // namespace

graph::Graph build_gpt_oss(const gguf::File& f, HParams& hp) {
  const std::string a = "gpt-oss";
  hp = read_common_hparams(f, a);
  hp.n_expert = static_cast<int>(f.get<uint32_t>(a + ".expert_count"));
  hp.n_expert_used = static_cast<int>(f.get<uint32_t>(a + ".expert_used_count"));
  hp.n_ff_exp = f.get<uint32_t>(a + ".expert_feed_forward_length");
  if (hp.n_expert < 1 || hp.n_expert_used < 1 || hp.n_expert_used > hp.n_expert || hp.n_ff_exp < 1) {
    throw Error(fmt::format("{}: {} experts with {} used and width {} is not a mixture", f.name(), hp.n_expert,
                            hp.n_expert_used, hp.n_ff_exp));
  }
  const int window = static_cast<int>(f.get<uint32_t>(a + ".attention.sliding_window"));
  const std::vector<bool> sliding = sliding_layers(f, hp.n_layer);

  graph::Graph g;
  graph::Builder b(g);
  const int64_t d = hp.n_embd, hd = hp.head_dim, q_w = hp.n_head * hd, kv_w = hp.n_head_kv * hd;
  const int64_t ne = hp.n_expert, fe = hp.n_ff_exp;
  g.n_layer = hp.n_layer;
  g.n_vocab = hp.n_vocab;
  const auto tok = require_weight(b, f, "token_embd.weight", {d, hp.n_vocab});
  graph::TensorId x = b.embed(tok);
  const float attn_scale = 1.0f / std::sqrt(static_cast<float>(hd));
  graph::Builder::MoeVariant moe;
  moe.routing = graph::MoeRouting::TopKSoftmax;
  moe.glu = graph::MoeGlu::SwiGLUClamped;
  moe.glu_alpha = 1.702f;
  moe.glu_limit = 7.0f;
  for (int l = 0; l < hp.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    auto h = b.rms_norm(x, require_weight(b, f, p + "attn_norm.weight", {d}, l), hp.rms_eps, 0.0f, p + "attn_norm", l);
    auto q = b.matmul(require_weight(b, f, p + "attn_q.weight", {d, q_w}, l), h, p + "q", l,
                      require_weight(b, f, p + "attn_q.bias", {q_w}, l));
    auto k = b.matmul(require_weight(b, f, p + "attn_k.weight", {d, kv_w}, l), h, p + "k", l,
                      require_weight(b, f, p + "attn_k.bias", {kv_w}, l));
    auto v = b.matmul(require_weight(b, f, p + "attn_v.weight", {d, kv_w}, l), h, p + "v", l,
                      require_weight(b, f, p + "attn_v.bias", {kv_w}, l));
    q = b.rope(q, hp.n_head, hp.head_dim, hp.n_rot, graph::RopeMode::NeoX, hp.rope, p + "q_rope", l);
    k = b.rope(k, hp.n_head_kv, hp.head_dim, hp.n_rot, graph::RopeMode::NeoX, hp.rope, p + "k_rope", l);
    const auto sinks = require_weight(b, f, p + "attn_sinks.weight", {hp.n_head}, l);
    auto att = b.attention(q, k, v, hp.n_head, hp.n_head_kv, hp.head_dim, attn_scale,
                           sliding[static_cast<size_t>(l)] ? window : 0, 0.0f, p + "attn", l, sinks);
    x = b.add(x,
              b.matmul(require_weight(b, f, p + "attn_output.weight", {q_w, d}, l), att, p + "attn_out", l,
                       require_weight(b, f, p + "attn_output.bias", {d}, l)),
              p + "attn_residual", l);
    h = b.rms_norm(x, require_weight(b, f, p + "post_attention_norm.weight", {d}, l), hp.rms_eps, 0.0f,
                   p + "post_attention_norm", l);
    moe.router_b = require_weight(b, f, p + "ffn_gate_inp.bias", {ne}, l);
    moe.gate_b = require_weight(b, f, p + "ffn_gate_exps.bias", {fe, ne}, l);
    moe.up_b = require_weight(b, f, p + "ffn_up_exps.bias", {fe, ne}, l);
    moe.down_b = require_weight(b, f, p + "ffn_down_exps.bias", {d, ne}, l);
    auto ffn = b.moe(h, require_weight(b, f, p + "ffn_gate_inp.weight", {d, ne}, l),
                     require_weight(b, f, p + "ffn_gate_exps.weight", {d, fe, ne}, l),
                     require_weight(b, f, p + "ffn_up_exps.weight", {d, fe, ne}, l),
                     require_weight(b, f, p + "ffn_down_exps.weight", {fe, d, ne}, l), hp.n_expert_used, moe,
                     p + "ffn_moe", l);
    x = b.add(x, ffn, p + "ffn_residual", l);
  }
  build_output(b, g, f, hp, x, tok);
  return g;
}

}  // namespace zinc::model
