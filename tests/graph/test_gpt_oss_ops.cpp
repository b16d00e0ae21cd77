// The CPU backend's GPT-OSS ops against references computed exactly with a bound on float32 rounding
// (test::Fb, float_bound.h): each output must lie within its bound. Attention with per-head
// sinks (softmax over [scores..., sink], the sink's column dropped), sliding or not; the clamped
// SwiGLU; and a mixture of experts routed by the top-k biased router logits with a softmax over those
// k, every projection with its bias. Each graph reads its inputs from embedding tables (one row per
// token), so the step's tokens choose the rows and the op's output is the graph's output.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "backend/backend.h"
#include "backend/cpu/cpu_ops.h"
#include "gguf/reader.h"
#include "gguf/writer.h"
#include "graph/graph.h"
#include "float_bound.h"
#include "graph_test_util.h"
#include "raw_gguf.h"

namespace zinc {
namespace {

using graph::TensorId;
using test::Fb;

Fb clamp(const Fb& x, double lo, double hi) { return {std::clamp(x.v, lo, hi), x.e}; }  // 1-Lipschitz

// The clamped SwiGLU in the kernel's formula: g / (1 + exp(-alpha g)) * (u + 1), g <= limit, |u| <= limit.
Fb swiglu_clamped(const Fb& gate, const Fb& up, float alpha, float limit) {
  const Fb g = clamp(gate, -INFINITY, limit), u = clamp(up, -limit, limit);
  return g / (Fb(1.0) + test::exp(Fb(-alpha) * g)) * (u + Fb(1.0));
}

// Each element of `got` within its reference's bound; returns how many are not.
int outside(const std::vector<float>& got, const std::vector<Fb>& want) {
  EXPECT_EQ(got.size(), want.size());
  int bad = 0;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    if (std::fabs(got[i] - want[i].v) > want[i].e) {
      if (bad++ < 5) ADD_FAILURE() << "element " << i << ": " << got[i] << " vs " << want[i].v << " +- " << want[i].e;
    }
  }
  return bad;
}

// F32 tensors from a seeded generator.
struct Weights : test::GraphWeights {
  std::vector<float>& add(const std::string& name, std::vector<uint64_t> ne, std::mt19937& rng, float lo, float hi) {
    uint64_t n = 1;
    for (uint64_t d : ne) n *= d;
    std::uniform_real_distribution<float> u(lo, hi);
    std::vector<float> v(n);
    for (auto& x : v) x = u(rng);
    return put(name, std::move(ne), std::move(v));
  }
  gguf::File write(const test::TempDir& tmp) const { return GraphWeights::write(tmp.file("w.gguf")); }
};

std::vector<float> run_all(const graph::Graph& g, const gguf::File& f, const std::vector<int32_t>& tokens) {
  return test::run_graph(g, f, tokens);
}

TEST(GptOssOps, ClampedSwiGLU) {
  const float gate[] = {-9.0f, -1.0f, 0.0f, 0.5f, 6.9f, 7.0f, 12.0f, 3.0f};
  const float up[] = {-12.0f, -7.5f, 0.0f, 1.0f, 7.0f, 8.0f, -3.0f, 0.25f};
  float out[8];
  backend::cpu::swiglu_clamped(gate, up, out, 8, 1.702f, 7.0f);
  for (int i = 0; i < 8; ++i) {
    const Fb want = swiglu_clamped(gate[i], up[i], 1.702f, 7.0f);
    EXPECT_NEAR(out[i], want.v, want.e) << "gate " << gate[i] << " up " << up[i];
  }
}

TEST(GptOssOps, AttentionWithSinks) {
  const int n_head = 4, n_kv = 2, hd = 8, n_tok = 7;
  const int qw = n_head * hd, kw = n_kv * hd;
  for (int window : {0, 3}) {
    std::mt19937 rng(7 + window);
    Weights w;
    const auto& qt = w.add("q", {static_cast<uint64_t>(qw), n_tok}, rng, -1.5f, 1.5f);
    const auto& kt = w.add("k", {static_cast<uint64_t>(kw), n_tok}, rng, -1.5f, 1.5f);
    const auto& vt = w.add("v", {static_cast<uint64_t>(kw), n_tok}, rng, -1.0f, 1.0f);
    auto& sinks = w.add("sinks", {n_head}, rng, -1.0f, 1.0f);
    sinks[1] = 4.0f;  // one head whose sink takes most of the weight
    test::TempDir tmp;
    const gguf::File f = w.write(tmp);
    graph::Graph g;
    graph::Builder b(g);
    const TensorId q = b.embed(b.weight("q", gguf::TensorType::F32, {qw, n_tok, 1, 1}));
    const TensorId k = b.embed(b.weight("k", gguf::TensorType::F32, {kw, n_tok, 1, 1}));
    const TensorId v = b.embed(b.weight("v", gguf::TensorType::F32, {kw, n_tok, 1, 1}));
    const TensorId s = b.weight("sinks", gguf::TensorType::F32, {n_head, 1, 1, 1});
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    g.logits = b.attention(q, k, v, n_head, n_kv, hd, scale, window, 0.0f, "attn", 0, s);
    g.n_layer = 1;
    g.n_vocab = qw;
    std::vector<int32_t> tokens(n_tok);
    for (int t = 0; t < n_tok; ++t) tokens[static_cast<size_t>(t)] = t;
    const auto got = run_all(g, f, tokens);

    // The kernel's formula: scores q.k * scale; m = max(scores, sink); p_j = exp(score_j - m);
    // out = sum_j (p_j * (1 / (exp(sink - m) + sum_j p_j))) v_j.
    std::vector<Fb> want(static_cast<size_t>(n_tok * qw));
    for (int t = 0; t < n_tok; ++t) {
      for (int h = 0; h < n_head; ++h) {
        const int kh = h / (n_head / n_kv), lo = window > 0 ? std::max(0, t - window + 1) : 0;
        std::vector<Fb> logit;
        for (int j = lo; j <= t; ++j) {
          logit.push_back(test::dot(test::exact(&qt[static_cast<size_t>(t * qw + h * hd)], hd),
                                    test::exact(&kt[static_cast<size_t>(j * kw + kh * hd)], hd)) * Fb(scale));
        }
        std::vector<Fb> all = logit;
        all.push_back(sinks[static_cast<size_t>(h)]);
        const Fb mx = test::max(all);
        std::vector<Fb> p{test::exp(Fb(sinks[static_cast<size_t>(h)]) - mx)};
        for (const Fb& l : logit) p.push_back(test::exp(l - mx));
        const Fb inv = Fb(1.0) / test::sum(p);
        for (int i = 0; i < hd; ++i) {
          std::vector<Fb> pj, vj;
          for (int j = lo; j <= t; ++j) {
            pj.push_back(p[static_cast<size_t>(j - lo + 1)] * inv);
            vj.push_back(vt[static_cast<size_t>(j * kw + kh * hd + i)]);
          }
          want[static_cast<size_t>(t * qw + h * hd + i)] = test::dot(pj, vj);
        }
      }
    }
    EXPECT_EQ(outside(got, want), 0) << "window " << window;
  }
}

TEST(GptOssOps, MoeTopKSoftmaxClampedWithBiases) {
  const int d = 16, ff = 8, ne = 4, k = 2, n_tok = 6;
  std::mt19937 rng(11);
  Weights w;
  const auto u = [](int x) { return static_cast<uint64_t>(x); };
  const auto& xt = w.add("x", {u(d), n_tok}, rng, -2.0f, 2.0f);
  const auto& router = w.add("router", {u(d), u(ne)}, rng, -1.0f, 1.0f);
  const auto& router_b = w.add("router_b", {u(ne)}, rng, -1.0f, 1.0f);
  const auto& gate = w.add("gate", {u(d), u(ff), u(ne)}, rng, -1.0f, 1.0f);
  const auto& up = w.add("up", {u(d), u(ff), u(ne)}, rng, -1.0f, 1.0f);
  const auto& down = w.add("down", {u(ff), u(d), u(ne)}, rng, -1.0f, 1.0f);
  // Biases of +-5 push many pre-activations past the clamp at 7.
  const auto& gate_b = w.add("gate_b", {u(ff), u(ne)}, rng, -5.0f, 5.0f);
  const auto& up_b = w.add("up_b", {u(ff), u(ne)}, rng, -5.0f, 5.0f);
  const auto& down_b = w.add("down_b", {u(d), u(ne)}, rng, -1.0f, 1.0f);
  test::TempDir tmp;
  const gguf::File f = w.write(tmp);
  graph::Graph g;
  graph::Builder b(g);
  const auto F32 = gguf::TensorType::F32;
  const TensorId x = b.embed(b.weight("x", F32, {d, n_tok, 1, 1}));
  graph::Builder::MoeVariant mv;
  mv.routing = graph::MoeRouting::TopKSoftmax;
  mv.glu = graph::MoeGlu::SwiGLUClamped;
  mv.glu_alpha = 1.702f;
  mv.glu_limit = 7.0f;
  mv.router_b = b.weight("router_b", F32, {ne, 1, 1, 1});
  mv.gate_b = b.weight("gate_b", F32, {ff, ne, 1, 1});
  mv.up_b = b.weight("up_b", F32, {ff, ne, 1, 1});
  mv.down_b = b.weight("down_b", F32, {d, ne, 1, 1});
  g.logits = b.moe(x, b.weight("router", F32, {d, ne, 1, 1}), b.weight("gate", F32, {d, ff, ne, 1}),
                   b.weight("up", F32, {d, ff, ne, 1}), b.weight("down", F32, {ff, d, ne, 1}), k, mv, "moe", 0);
  g.n_layer = 1;
  g.n_vocab = d;
  std::vector<int32_t> tokens(n_tok);
  for (int t = 0; t < n_tok; ++t) tokens[static_cast<size_t>(t)] = t;
  const auto got = run_all(g, f, tokens);

  // The kernel's formulas: router logits x.r + b; the top k by logit (the test's data must leave the
  // k-th and the next apart by more than their bounds, or the choice would be rounding's); weights
  // exp(l - l_max) / sum over the k; each expert's gate and up x.w + b, clamped SwiGLU, down act.w + b;
  // out = sum over the k of weight * down.
  std::vector<Fb> want(static_cast<size_t>(n_tok * d));
  int clamped = 0;
  for (int t = 0; t < n_tok; ++t) {
    const auto xr = test::exact(xt.data() + t * d, d);
    std::vector<Fb> logit(ne);
    for (int e = 0; e < ne; ++e) {
      logit[static_cast<size_t>(e)] = test::dot(test::exact(&router[static_cast<size_t>(e * d)], d), xr) + Fb(router_b[static_cast<size_t>(e)]);
    }
    std::vector<int> order{0, 1, 2, 3};
    std::sort(order.begin(), order.end(), [&](int a, int c) { return logit[static_cast<size_t>(a)].v > logit[static_cast<size_t>(c)].v; });
    const Fb &kth = logit[static_cast<size_t>(order[k - 1])], &next = logit[static_cast<size_t>(order[k])];
    ASSERT_GT(kth.v - next.v, kth.e + next.e) << "token " << t << ": the routing is within rounding; change the data";
    std::vector<Fb> p;
    for (int i = 0; i < k; ++i) p.push_back(test::exp(logit[static_cast<size_t>(order[static_cast<size_t>(i)])] - logit[static_cast<size_t>(order[0])]));
    const Fb total = test::sum(p);
    std::vector<std::vector<Fb>> terms(static_cast<size_t>(d));
    for (int i = 0; i < k; ++i) {
      const int e = order[static_cast<size_t>(i)];
      const Fb wt = p[static_cast<size_t>(i)] / total;
      std::vector<Fb> act(ff);
      for (int j = 0; j < ff; ++j) {
        const size_t row = static_cast<size_t>((e * ff + j) * d);
        const Fb gv = test::dot(test::exact(&gate[row], d), xr) + Fb(gate_b[static_cast<size_t>(e * ff + j)]);
        const Fb uv = test::dot(test::exact(&up[row], d), xr) + Fb(up_b[static_cast<size_t>(e * ff + j)]);
        clamped += gv.v > 7 || std::fabs(uv.v) > 7;
        act[static_cast<size_t>(j)] = swiglu_clamped(gv, uv, 1.702f, 7.0f);
      }
      for (int o = 0; o < d; ++o) {
        const Fb y = test::dot(test::exact(&down[static_cast<size_t>((e * d + o) * ff)], ff), act) + Fb(down_b[static_cast<size_t>(e * d + o)]);
        terms[static_cast<size_t>(o)].push_back(wt * y);
      }
    }
    for (int o = 0; o < d; ++o) want[static_cast<size_t>(t * d + o)] = test::sum(terms[static_cast<size_t>(o)]);
  }
  EXPECT_EQ(outside(got, want), 0);
}

}  // namespace
}  // namespace zinc
