// The decoder block shared by Llama-like architectures: pre-norm grouped-query attention with rotary
// embeddings (optionally with q/k/v biases and per-head q/k RMSNorm), a SwiGLU feed-forward network,
// final RMSNorm and an output projection (tied to the embeddings when output.weight is absent).
#include <fmt/format.h>

#include <cmath>

#include "core/error.h"

#include "model/model.h"

namespace zinc::model {

graph::Graph build_standard(const gguf::File& f, HParams& hp, const std::string& arch, const StandardOptions& opt) {
  hp = read_common_hparams(f, arch);
  if (opt.moe) {
    hp.n_expert = static_cast<int>(f.get<uint32_t>(arch + ".expert_count"));
    hp.n_expert_used = static_cast<int>(f.get<uint32_t>(arch + ".expert_used_count"));
    hp.n_ff_exp = f.get<uint32_t>(arch + ".expert_feed_forward_length");
    if (hp.n_expert < 1 || hp.n_expert_used < 1 || hp.n_expert_used > hp.n_expert || hp.n_ff_exp < 1) {
      throw Error(fmt::format("{}: {} experts with {} used and width {} is not a mixture", f.name(), hp.n_expert,
                              hp.n_expert_used, hp.n_ff_exp));
    }
  }
  graph::Graph g;
  graph::Builder b(g);
  const int64_t d = hp.n_embd, hd = hp.head_dim, q_w = hp.n_head * hd, kv_w = hp.n_head_kv * hd, ff = hp.n_ff;
  g.n_layer = hp.n_layer;
  g.n_vocab = hp.n_vocab;
  const auto tok = require_weight(b, f, "token_embd.weight", {d, hp.n_vocab});
  graph::TensorId x = b.embed(tok);
  // Llama 3.1+ stores its long-context frequency divisors as one tensor shared by every layer.
  const auto rope_factors = optional_weight(b, f, "rope_freqs.weight", {hp.n_rot / 2});
  for (int l = 0; l < hp.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    auto h = b.rms_norm(x, require_weight(b, f, p + "attn_norm.weight", {d}, l), hp.rms_eps, 0.0f, p + "attn_norm", l);
    auto q = b.matmul(require_weight(b, f, p + "attn_q.weight", {d, q_w}, l), h, p + "q", l,
                      optional_weight(b, f, p + "attn_q.bias", {q_w}, l));
    auto k = b.matmul(require_weight(b, f, p + "attn_k.weight", {d, kv_w}, l), h, p + "k", l,
                      optional_weight(b, f, p + "attn_k.bias", {kv_w}, l));
    auto v = b.matmul(require_weight(b, f, p + "attn_v.weight", {d, kv_w}, l), h, p + "v", l,
                      optional_weight(b, f, p + "attn_v.bias", {kv_w}, l));
    if (opt.qk_norm) {
      q = b.rms_norm_heads(q, require_weight(b, f, p + "attn_q_norm.weight", {hd}, l), hp.head_dim, hp.rms_eps, p + "q_norm", l);
      k = b.rms_norm_heads(k, require_weight(b, f, p + "attn_k_norm.weight", {hd}, l), hp.head_dim, hp.rms_eps, p + "k_norm", l);
    }
    q = b.rope(q, hp.n_head, hp.head_dim, hp.n_rot, opt.rope_mode, hp.rope, p + "q_rope", l, rope_factors);
    k = b.rope(k, hp.n_head_kv, hp.head_dim, hp.n_rot, opt.rope_mode, hp.rope, p + "k_rope", l, rope_factors);
    auto a = b.attention(q, k, v, hp.n_head, hp.n_head_kv, hp.head_dim, 1.0f / std::sqrt(static_cast<float>(hd)), 0, 0.0f,
                         p + "attn", l);
    x = b.add(x, b.matmul(require_weight(b, f, p + "attn_output.weight", {q_w, d}, l), a, p + "attn_out", l),
              p + "attn_residual", l);
    h = b.rms_norm(x, require_weight(b, f, p + "ffn_norm.weight", {d}, l), hp.rms_eps, 0.0f, p + "ffn_norm", l);
    graph::TensorId ffn_out;
    if (opt.moe) {
      const int64_t ne = hp.n_expert, fe = hp.n_ff_exp;
      ffn_out = b.moe(h, require_weight(b, f, p + "ffn_gate_inp.weight", {d, ne}, l),
                      require_weight(b, f, p + "ffn_gate_exps.weight", {d, fe, ne}, l),
                      require_weight(b, f, p + "ffn_up_exps.weight", {d, fe, ne}, l),
                      require_weight(b, f, p + "ffn_down_exps.weight", {fe, d, ne}, l), hp.n_expert_used,
                      opt.moe_norm_topk, p + "ffn_moe", l);
    } else {
      auto act = b.swiglu(b.matmul(require_weight(b, f, p + "ffn_gate.weight", {d, ff}, l), h, p + "ffn_gate", l),
                          b.matmul(require_weight(b, f, p + "ffn_up.weight", {d, ff}, l), h, p + "ffn_up", l),
                          p + "ffn_act", l);
      ffn_out = b.matmul(require_weight(b, f, p + "ffn_down.weight", {ff, d}, l), act, p + "ffn_out", l);
    }
    x = b.add(x, ffn_out, p + "ffn_residual", l);
  }
  build_output(b, g, f, hp, x, tok);
  return g;
}


}  // namespace zinc::model
