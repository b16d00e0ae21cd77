// Qwen3-Next and Qwen3.5 (dense and MoE): hybrid stacks where most layers are gated-DeltaNet linear
// attention (a short causal convolution over q|k|v, then the gated delta rule with a recurrent state
// per value head, a per-head RMSNorm gated by silu(z)) and every few layers are full attention with
// q/k norms, partial NeoX rotation and an output gate (q_proj yields each head's query and gate side
// by side; the attention output is multiplied by sigmoid(gate)). Feed-forward: SwiGLU (qwen35) or a
// mixture of experts plus a shared expert scaled by sigmoid(w · x) (qwen3next, qwen35moe).
// Value heads of qwen35 files are stored tiled (v head n reads key head n % Hk), of qwen3next files
// grouped (v head h reads key head h / (Hv / Hk)).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "model/model.h"

namespace zinc::model {

namespace {

// The multi-token-prediction head (blk.<n_layer>): the embedding of token t+1 and the hidden state of
// token t, each RMS-normed, side by side through nextn.eh_proj, then one gated full-attention layer
// with its feed-forward, the head's own final norm and the model's output projection. Emitted into
// g's tensors and cut into g.mtp; g hands out its final-normed rows of every token (g.hidden).
template <class Layer>
void build_mtp(graph::Builder& b, graph::Graph& g, const gguf::File& f, const HParams& hp, graph::TensorId x,
               graph::TensorId tok, const Layer& layer) {
  const auto existing = [&](const std::string& name) {
    for (size_t i = 0; i < g.tensors.size(); ++i) {
      if (g.tensors[i].name == name) return static_cast<graph::TensorId>(i);
    }
    throw Error(fmt::format("{}: the graph has no tensor {}", f.name(), name));
  };
  const int l = hp.n_layer;
  const int64_t d = hp.n_embd;
  const std::string p = "blk." + std::to_string(l) + ".";
  const auto W = [&](const std::string& name, std::vector<int64_t> shape) { return require_weight(b, f, p + name, std::move(shape), l); };
  const auto output = std::find_if(g.tensors.begin(), g.tensors.end(), [](const graph::Tensor& t) { return t.name == "output.weight"; });
  const graph::TensorId out_w = output == g.tensors.end() ? tok : static_cast<graph::TensorId>(output - g.tensors.begin());
  g.hidden = b.rms_norm(x, existing("output_norm.weight"), hp.rms_eps, 0.0f, "result_hidden", -1);
  const size_t main_nodes = g.nodes.size();
  auto e = b.rms_norm(b.embed(tok, 1.0f, "mtp_inp_embd"), W("nextn.enorm.weight", {d}), hp.rms_eps, 0.0f, p + "mtp_enorm", l);
  auto h = b.rms_norm(b.input(d, "mtp_inp_hidden"), W("nextn.hnorm.weight", {d}), hp.rms_eps, 0.0f, p + "mtp_hnorm", l);
  auto y = b.matmul(W("nextn.eh_proj.weight", {2 * d, d}), b.concat({e, h}, p + "mtp_concat", l), p + "mtp_proj", l);
  y = b.select_last(layer(y, l, false), "mtp_result_last");
  const auto normed = b.rms_norm(y, W("nextn.shared_head_norm.weight", {d}), hp.rms_eps, 0.0f, "mtp_result_norm", -1);
  const auto logits = b.matmul(out_w, normed, "mtp_result_output", -1);
  auto mtp = std::make_shared<graph::Graph>(g);
  mtp->nodes.erase(mtp->nodes.begin(), mtp->nodes.begin() + static_cast<std::ptrdiff_t>(main_nodes));
  mtp->logits = logits;
  mtp->hidden = normed;
  mtp->n_layer = l + 1;
  mtp->mtp = nullptr;
  g.nodes.resize(main_nodes);
  g.mtp = std::move(mtp);
}

graph::Graph build_hybrid(const gguf::File& f, HParams& hp, const std::string& arch) {
  hp = read_common_hparams(f, arch);
  const std::string p0 = arch + ".";
  // Files with a multi-token-prediction head count its layer among the blocks, after the model's own.
  const auto nextn = static_cast<int>(f.get_or<uint32_t>(p0 + "nextn_predict_layers", 0));
  if (nextn < 0 || nextn > 1 || nextn >= hp.n_layer) {
    throw Error(fmt::format("{}: {} multi-token-prediction layers of {} blocks are not supported (one at most)", f.name(),
                            nextn, hp.n_layer));
  }
  hp.n_layer -= nextn;
  const bool grouped_ba = arch == "qwen3next", tiled = arch != "qwen3next", moe = arch != "qwen35";
  const int hk = static_cast<int>(f.get<uint32_t>(p0 + "ssm.group_count"));
  const int hv = static_cast<int>(f.get<uint32_t>(p0 + "ssm.time_step_rank"));
  const int dk = static_cast<int>(f.get<uint32_t>(p0 + "ssm.state_size"));
  const int64_t vd = f.get<uint32_t>(p0 + "ssm.inner_size");
  const int64_t kc = f.get<uint32_t>(p0 + "ssm.conv_kernel");
  if (hk <= 0 || hv <= 0 || hv % hk || vd % hv || vd / hv != dk || kc < 1) {
    throw Error(fmt::format("{}: linear attention with {} key heads of {}, {} value heads and width {} is not supported",
                            f.name(), hk, dk, hv, vd));
  }
  const int dv = static_cast<int>(vd / hv), r = hv / hk;
  const int64_t kd = int64_t{hk} * dk, conv_dim = 2 * kd + vd;
  std::vector<bool> recurrent(static_cast<size_t>(hp.n_layer));
  if (const auto* kv = f.find(p0 + "attention.recurrent_layers")) {
    if (kv->value.type() != gguf::ValueType::ARRAY) throw Error(fmt::format("{}: attention.recurrent_layers is not an array", f.name()));
    const auto flags = kv->value.array();
    if (flags.size() != recurrent.size() && flags.size() != recurrent.size() + static_cast<size_t>(nextn)) {
      throw Error(fmt::format("{}: attention.recurrent_layers lists {} layers, the model has {}", f.name(), flags.size(),
                              hp.n_layer));
    }
    size_t i = 0;
    for (gguf::ValueView v : flags) {
      if (i < recurrent.size()) recurrent[i] = v.as<bool>().value_or(false);
      ++i;
    }
  } else {
    const auto interval = static_cast<int>(f.get_or<uint32_t>(p0 + "full_attention_interval", 4));
    for (int l = 0; l < hp.n_layer; ++l) recurrent[static_cast<size_t>(l)] = interval <= 0 || (l + 1) % interval != 0;
  }
  int64_t ff_shared = 0;
  if (moe) {
    hp.n_expert = static_cast<int>(f.get<uint32_t>(p0 + "expert_count"));
    hp.n_expert_used = static_cast<int>(f.get<uint32_t>(p0 + "expert_used_count"));
    hp.n_ff_exp = f.get<uint32_t>(p0 + "expert_feed_forward_length");
    ff_shared = f.get_or<uint32_t>(p0 + "expert_shared_feed_forward_length", static_cast<uint32_t>(hp.n_ff));
    if (hp.n_expert < 1 || hp.n_expert_used < 1 || hp.n_expert_used > hp.n_expert || hp.n_ff_exp < 1 || ff_shared < 1) {
      throw Error(fmt::format("{}: {} experts with {} used, width {} and shared width {} is not a mixture", f.name(),
                              hp.n_expert, hp.n_expert_used, hp.n_ff_exp, ff_shared));
    }
  }

  graph::Graph g;
  graph::Builder b(g);
  const int64_t d = hp.n_embd, hd = hp.head_dim, q_w = hp.n_head * hd, kv_w = hp.n_head_kv * hd;
  const float eps = hp.rms_eps;
  g.n_layer = hp.n_layer;
  g.n_vocab = hp.n_vocab;
  const auto tok = require_weight(b, f, "token_embd.weight", {d, hp.n_vocab});
  // One decoder layer over x (recurrent: gated DeltaNet, else gated full attention), then its feed-forward.
  const auto layer = [&](graph::TensorId x, int l, bool is_recurrent) {
    const std::string p = "blk." + std::to_string(l) + ".";
    const auto W = [&](const std::string& name, std::vector<int64_t> shape) { return require_weight(b, f, p + name, std::move(shape), l); };
    auto h = b.rms_norm(x, W("attn_norm.weight", {d}), eps, 0.0f, p + "attn_norm", l);
    graph::TensorId mixed;
    if (is_recurrent) {
      auto qkv = b.matmul(W("attn_qkv.weight", {d, conv_dim}), h, p + "qkv", l);
      auto z = b.matmul(W("attn_gate.weight", {d, vd}), h, p + "z", l);
      graph::TensorId beta, alpha;
      if (grouped_ba) {  // per key head: r betas, then r alphas
        auto ba = b.matmul(W("ssm_ba.weight", {d, 2 * int64_t{hv}}), h, p + "ba", l);
        beta = b.split(ba, hk, 2 * r, 0, r, p + "beta_in", l);
        alpha = b.split(ba, hk, 2 * r, r, r, p + "alpha_in", l);
      } else {
        beta = b.matmul(W("ssm_beta.weight", {d, hv}), h, p + "beta_in", l);
        alpha = b.matmul(W("ssm_alpha.weight", {d, hv}), h, p + "alpha_in", l);
      }
      auto conv = b.ssm_conv(qkv, W("ssm_conv1d.weight", {kc, conv_dim}), p + "conv", l);
      auto q = b.split(conv, 1, conv_dim, 0, kd, p + "lin_q", l);
      auto k = b.split(conv, 1, conv_dim, kd, kd, p + "lin_k", l);
      auto v = b.split(conv, 1, conv_dim, 2 * kd, vd, p + "lin_v", l);
      auto o = b.delta_net(q, k, v, alpha, beta, W("ssm_a", {hv}), W("ssm_dt.bias", {hv}), hk, hv, dk, dv, tiled,
                           p + "delta", l);
      o = b.rms_norm_heads(o, W("ssm_norm.weight", {dv}), dv, eps, p + "delta_norm", l);
      o = b.swiglu(z, o, p + "delta_gated", l);
      mixed = b.matmul(W("ssm_out.weight", {vd, d}), o, p + "delta_out", l);
    } else {
      auto qg = b.matmul(W("attn_q.weight", {d, 2 * q_w}), h, p + "q_gate", l);
      auto q = b.split(qg, hp.n_head, 2 * hd, 0, hd, p + "q", l);
      auto gate = b.split(qg, hp.n_head, 2 * hd, hd, hd, p + "attn_gate", l);
      auto k = b.matmul(W("attn_k.weight", {d, kv_w}), h, p + "k", l);
      auto v = b.matmul(W("attn_v.weight", {d, kv_w}), h, p + "v", l);
      q = b.rms_norm_heads(q, W("attn_q_norm.weight", {hd}), hp.head_dim, eps, p + "q_norm", l);
      k = b.rms_norm_heads(k, W("attn_k_norm.weight", {hd}), hp.head_dim, eps, p + "k_norm", l);
      q = b.rope(q, hp.n_head, hp.head_dim, hp.n_rot, graph::RopeMode::NeoX, hp.rope, p + "q_rope", l);
      k = b.rope(k, hp.n_head_kv, hp.head_dim, hp.n_rot, graph::RopeMode::NeoX, hp.rope, p + "k_rope", l);
      auto a = b.attention(q, k, v, hp.n_head, hp.n_head_kv, hp.head_dim, 1.0f / std::sqrt(static_cast<float>(hd)), 0,
                           0.0f, p + "attn", l);
      a = b.sigmoid_mul(a, gate, p + "attn_gated", l);
      mixed = b.matmul(W("attn_output.weight", {q_w, d}), a, p + "attn_out", l);
    }
    x = b.add(x, mixed, p + "attn_residual", l);
    h = b.rms_norm(x, W("post_attention_norm.weight", {d}), eps, 0.0f, p + "ffn_norm", l);
    graph::TensorId ffn;
    if (moe) {
      const int64_t ne = hp.n_expert, fe = hp.n_ff_exp;
      ffn = b.moe(h, W("ffn_gate_inp.weight", {d, ne}), W("ffn_gate_exps.weight", {d, fe, ne}),
                  W("ffn_up_exps.weight", {d, fe, ne}), W("ffn_down_exps.weight", {fe, d, ne}), hp.n_expert_used, true,
                  p + "ffn_moe", l);
      auto act = b.swiglu(b.matmul(W("ffn_gate_shexp.weight", {d, ff_shared}), h, p + "shexp_gate", l),
                          b.matmul(W("ffn_up_shexp.weight", {d, ff_shared}), h, p + "shexp_up", l), p + "shexp_act", l);
      auto shared = b.matmul(W("ffn_down_shexp.weight", {ff_shared, d}), act, p + "shexp_out", l);
      auto weight = b.matmul(W("ffn_gate_inp_shexp.weight", {d}), h, p + "shexp_weight", l);
      ffn = b.add(ffn, b.sigmoid_mul(shared, weight, p + "shexp_scaled", l), p + "ffn_out", l);
    } else {
      const int64_t ff = hp.n_ff;
      auto act = b.swiglu(b.matmul(W("ffn_gate.weight", {d, ff}), h, p + "ffn_gate", l),
                          b.matmul(W("ffn_up.weight", {d, ff}), h, p + "ffn_up", l), p + "ffn_act", l);
      ffn = b.matmul(W("ffn_down.weight", {ff, d}), act, p + "ffn_out", l);
    }
    return b.add(x, ffn, p + "ffn_residual", l);
  };
  graph::TensorId x = b.embed(tok);
  for (int l = 0; l < hp.n_layer; ++l) x = layer(x, l, recurrent[static_cast<size_t>(l)]);
  build_output(b, g, f, hp, x, tok);
  if (nextn > 0) build_mtp(b, g, f, hp, x, tok, layer);
  return g;
}

}  // namespace

graph::Graph build_qwen3next(const gguf::File& f, HParams& hp) { return build_hybrid(f, hp, "qwen3next"); }
graph::Graph build_qwen35(const gguf::File& f, HParams& hp) { return build_hybrid(f, hp, "qwen35"); }
graph::Graph build_qwen35moe(const gguf::File& f, HParams& hp) { return build_hybrid(f, hp, "qwen35moe"); }

}  // namespace zinc::model
