// Gemma 3 (text): the embedding is scaled by sqrt(width); each block normalises q and k per head, runs
// attention and a GEGLU feed-forward network, and normalises both sub-layer outputs again before adding
// them to the residual stream. Five of every six layers attend within a sliding window with their own
// rotary base (10000) and no scaling; every sixth layer is global with the file's rope settings. As stored in GGUF the
// norm weights already include Gemma's "+1", so they scale directly. The output projection is tied to
// the embeddings.
#include <cmath>

#include "model/model.h"

namespace zinc::model {

graph::Graph build_gemma3(const gguf::File& f, HParams& hp) {
  hp = read_common_hparams(f, "gemma3");
  const int window = static_cast<int>(f.get_or<uint32_t>("gemma3.attention.sliding_window", 0));
  const float local_base = 10000.0f;
  const float final_cap = f.get_or<float>("gemma3.final_logit_softcapping", 0.0f);
  graph::Graph g;
  graph::Builder b(g);
  const int64_t d = hp.n_embd, hd = hp.head_dim, q_w = hp.n_head * hd, kv_w = hp.n_head_kv * hd, ff = hp.n_ff;
  g.n_layer = hp.n_layer;
  g.n_vocab = hp.n_vocab;
  const auto tok = require_weight(b, f, "token_embd.weight", {d, hp.n_vocab});
  graph::TensorId x = b.embed(tok, std::sqrt(static_cast<float>(d)));
  const float attn_scale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (int l = 0; l < hp.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    const bool global = (l + 1) % 6 == 0 || window == 0;
    // Local layers rotate with their own base and no scaling; global ones with the file's settings.
    graph::RopeParams rope = hp.rope;
    if (!global) rope = graph::RopeParams{.base = local_base};
    const float eps = hp.rms_eps;
    auto h = b.rms_norm(x, require_weight(b, f, p + "attn_norm.weight", {d}, l), eps, 0.0f, p + "attn_norm", l);
    auto q = b.matmul(require_weight(b, f, p + "attn_q.weight", {d, q_w}, l), h, p + "q", l);
    auto k = b.matmul(require_weight(b, f, p + "attn_k.weight", {d, kv_w}, l), h, p + "k", l);
    auto v = b.matmul(require_weight(b, f, p + "attn_v.weight", {d, kv_w}, l), h, p + "v", l);
    q = b.rms_norm_heads(q, require_weight(b, f, p + "attn_q_norm.weight", {hd}, l), hp.head_dim, eps, p + "q_norm", l);
    k = b.rms_norm_heads(k, require_weight(b, f, p + "attn_k_norm.weight", {hd}, l), hp.head_dim, eps, p + "k_norm", l);
    q = b.rope(q, hp.n_head, hp.head_dim, hp.n_rot, graph::RopeMode::NeoX, rope, p + "q_rope", l);
    k = b.rope(k, hp.n_head_kv, hp.head_dim, hp.n_rot, graph::RopeMode::NeoX, rope, p + "k_rope", l);
    auto a = b.attention(q, k, v, hp.n_head, hp.n_head_kv, hp.head_dim, attn_scale, global ? 0 : window, 0.0f,
                         p + "attn", l);
    auto o = b.matmul(require_weight(b, f, p + "attn_output.weight", {q_w, d}, l), a, p + "attn_out", l);
    o = b.rms_norm(o, require_weight(b, f, p + "post_attention_norm.weight", {d}, l), eps, 0.0f, p + "post_attn_norm", l);
    x = b.add(x, o, p + "attn_residual", l);
    h = b.rms_norm(x, require_weight(b, f, p + "ffn_norm.weight", {d}, l), eps, 0.0f, p + "ffn_norm", l);
    auto act = b.geglu(b.matmul(require_weight(b, f, p + "ffn_gate.weight", {d, ff}, l), h, p + "ffn_gate", l),
                       b.matmul(require_weight(b, f, p + "ffn_up.weight", {d, ff}, l), h, p + "ffn_up", l),
                       p + "ffn_act", l);
    auto down = b.matmul(require_weight(b, f, p + "ffn_down.weight", {ff, d}, l), act, p + "ffn_out", l);
    down = b.rms_norm(down, require_weight(b, f, p + "post_ffw_norm.weight", {d}, l), eps, 0.0f, p + "post_ffw_norm", l);
    x = b.add(x, down, p + "ffn_residual", l);
  }
  build_output(b, g, f, hp, x, tok, final_cap);
  return g;
}

}  // namespace zinc::model
