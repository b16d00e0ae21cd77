#include "backend/vulkan/vk_router_split.h"

#include <algorithm>

namespace zinc::backend::vk {

using graph::Op;
using graph::TensorId;
using graph::TensorKind;

std::vector<RouterSite> router_sites(const graph::Graph& g, bool with_biases) {
  std::vector<int64_t> producer(g.tensors.size(), -1);
  for (size_t i = 0; i < g.nodes.size(); ++i) producer[static_cast<size_t>(g.nodes[i].out)] = static_cast<int64_t>(i);
  const auto made_by = [&](TensorId t, Op op) -> const graph::Node* {
    const int64_t i = t >= 0 ? producer[static_cast<size_t>(t)] : -1;
    return i >= 0 && g.nodes[static_cast<size_t>(i)].op == op ? &g.nodes[static_cast<size_t>(i)] : nullptr;
  };
  std::vector<RouterSite> sites;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const graph::Node& moe = g.nodes[i];
    if (moe.op != Op::MoE) continue;
    const graph::MoeParams& mp = moe.moe();
    const TensorId x = moe.in[0];
    if ((mp.bias >= 0 && !with_biases) || (mp.router_in >= 0 && moe.in[static_cast<size_t>(mp.router_in)] != x) || mp.n_expert <= 0 ||
        mp.n_expert > 256 || mp.n_expert_used <= 0 || mp.n_expert_used > 16 || mp.n_expert_used > mp.n_expert) {
      continue;
    }
    const auto& rt = g.tensor(moe.in[1]);
    const graph::Node* norm = made_by(x, Op::RmsNorm);
    if (rt.type != gguf::TensorType::F32 || rt.kind != TensorKind::Weight || !norm || norm->norm().group > 0) continue;
    const graph::Node* add = made_by(norm->in[0], Op::Add);
    if (!add) continue;
    // The product: the addend a bias-free MatMul made (the later one, where both are).
    int64_t o = -1;
    TensorId r = -1, o_bias = -1;
    for (int k = 0; k < 2; ++k) {
      const TensorId t = add->in[static_cast<size_t>(k)], other = add->in[static_cast<size_t>(1 - k)];
      const graph::Node* mm = made_by(t, Op::MatMul);
      const bool biased = with_biases && mm && mm->in.size() == 3 && g.tensor(mm->in[2]).kind == TensorKind::Weight &&
                          g.tensor(mm->in[2]).type == gguf::TensorType::F32;
      if (!mm || (mm->in.size() != 2 && !biased) || g.tensor(mm->in[0]).kind != TensorKind::Weight || t == other) continue;
      if (producer[static_cast<size_t>(t)] > o) {
        o = producer[static_cast<size_t>(t)];
        r = other;
        o_bias = biased ? mm->in[2] : -1;
      }
    }
    if (o < 0 || g.tensor(r).kind != TensorKind::Act) continue;
    const int64_t d = rt.ne[0];
    const auto& wo = g.tensor(g.nodes[static_cast<size_t>(o)].in[0]);
    if (rt.ne[1] != mp.n_expert || wo.ne[1] != d || g.tensor(r).ne[0] != d || g.tensor(x).ne[0] != d) continue;
    sites.push_back({static_cast<size_t>(o), static_cast<size_t>(producer[static_cast<size_t>(x)]), i, r, o_bias, mp.bias >= 0});
  }
  return sites;
}

void router_split_matrices(const float* r, const float* w, float offset, const float* wo, size_t n_expert, size_t d,
                           size_t d_in, float* rw, float* m) {
  for (size_t e = 0; e < n_expert; ++e) {
    for (size_t j = 0; j < d; ++j) rw[e * d + j] = w ? r[e * d + j] * (w[j] + offset) : r[e * d + j];
  }
  // M = R_w W_o by column tiles: each tile's sums for every expert over W_o's rows in order.
  constexpr size_t kTile = 256;
  std::vector<float> acc(n_expert * kTile);
  for (size_t c0 = 0; c0 < d_in; c0 += kTile) {
    const size_t nc = std::min(kTile, d_in - c0);
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (size_t j = 0; j < d; ++j) {
      const float* row = wo + j * d_in + c0;
      for (size_t e = 0; e < n_expert; ++e) {
        const float a = rw[e * d + j];
        float* out = acc.data() + e * kTile;
        for (size_t c = 0; c < nc; ++c) out[c] += a * row[c];
      }
    }
    for (size_t e = 0; e < n_expert; ++e) std::copy_n(acc.data() + e * kTile, nc, m + e * d_in + c0);
  }
}

void router_fold_matrices(const float* r, const float* w, float offset, const float* wo, const float* bias, size_t n_expert,
                          size_t d, size_t d_in, float* fold) {
  std::vector<float> rw(n_expert * d), m(n_expert * d_in);
  router_split_matrices(r, w, offset, wo, n_expert, d, d_in, rw.data(), m.data());
  for (size_t e = 0; e < n_expert; ++e) {
    float* row = fold + e * (d_in + d);
    std::copy_n(m.data() + e * d_in, d_in, row);
    std::copy_n(rw.data() + e * d, d, row + d_in);
    float c = 0.0f;
    for (size_t j = 0; bias && j < d; ++j) c += rw[e * d + j] * bias[j];
    fold[n_expert * (d_in + d) + e] = c;
  }
}

}  // namespace zinc::backend::vk
