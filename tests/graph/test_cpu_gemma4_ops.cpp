// The graph features Gemma 4 added, run on the CPU backend against references computed exactly with a
// bound on float32 rounding (test::Fb, float_bound.h), in the kernels' formulas: the routed
// mixture of experts (router input of its own, logit scale, per-expert scale, GEGLU experts, fused
// gate/up tensor), the per-element and scalar Scale, RMSNorm per head without a weight, and KV caches
// whose row width differs from layer to layer.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "backend/backend.h"
#include "gguf/writer.h"
#include "graph/graph.h"
#include "float_bound.h"
#include "graph_test_util.h"
#include "raw_gguf.h"

namespace zinc {
namespace {

using graph::TensorId;

// F32 weights with deterministic pseudo-random values.
struct Weights : test::GraphWeights {
  uint32_t seed = 12345;

  const std::vector<float>& add(const std::string& name, std::vector<uint64_t> ne, float lo = -1.0f, float hi = 1.0f) {
    size_t n = 1;
    for (uint64_t e : ne) n *= e;
    std::vector<float> v(n);
    for (float& x : v) {
      seed = seed * 1664525u + 1013904223u;
      x = lo + (hi - lo) * static_cast<float>(seed >> 8) / static_cast<float>(1u << 24);
    }
    return put(name, std::move(ne), std::move(v));
  }
};

TensorId weight(graph::Builder& b, const Weights& w, const std::string& name) { return w.bind(b, name); }

std::vector<float> run(const graph::Graph& g, const gguf::File& f, const std::vector<int32_t>& tokens) {
  return test::run_graph(g, f, tokens);
}

using test::Fb;

// The kernel's GEGLU: 0.5 g (1 + tanh(sqrt(2/pi) g (1 + 0.044715 g^2))) up, its constants as floats.
Fb geglu(const Fb& g, const Fb& up) {
  const Fb inner = Fb(0.79788456080286535587989211986876f) * g * (Fb(1.0) + Fb(0.044715f) * g * g);
  return Fb(0.5f) * g * (Fb(1.0) + test::tanh(inner)) * up;
}

void expect_within(float got, const Fb& want, const std::string& what) {
  EXPECT_LE(std::fabs(got - want.v), want.e) << what << ": " << got << " vs " << want.v << " +- " << want.e;
}

TEST(CpuGemma4Ops, RoutedGegluExpertsWithFusedGateUp) {
  constexpr int64_t d = 8, ff = 4, n_expert = 4, k = 2, vocab = 5;
  Weights w;
  const auto& emb = w.add("emb", {d, vocab});
  const auto& router = w.add("router", {d, n_expert});
  const auto& gate_up = w.add("gate_up", {d, 2 * ff, n_expert});
  const auto& down = w.add("down", {ff, d, n_expert});
  const auto& escale = w.add("escale", {n_expert}, 0.5f, 1.5f);
  test::TempDir tmp;
  const gguf::File f = w.write(tmp.file("w.gguf"));

  graph::Graph g;
  graph::Builder b(g);
  g.n_layer = 1;
  g.n_vocab = d;
  const TensorId x = b.embed(weight(b, w, "emb"));
  const TensorId rx = b.mul(x, x, "router_in", 0);  // the router reads x^2, the experts x
  graph::Builder::MoeVariant routing;
  routing.norm_topk = true;
  routing.router_in = rx;
  routing.expert_scale = weight(b, w, "escale");
  routing.logit_scale = 0.35f;
  routing.glu = graph::MoeGlu::GeGLU;
  const TensorId gu = weight(b, w, "gate_up");
  g.logits = b.moe(x, weight(b, w, "router"), gu, gu, weight(b, w, "down"), k, routing, "moe", 0);
  const std::vector<int32_t> tokens{0, 3, 1, 4};
  const auto got = run(g, f, tokens);

  // The kernel's formulas: router logits (x*x).r * 0.35, softmax over all experts (exp(l - max) / sum),
  // the top k by probability (the data must leave the k-th and the next apart by more than their
  // bounds), weights p / (sum of the k) * expert scale, out = sum over the k of weight * down(geglu).
  for (size_t t = 0; t < tokens.size(); ++t) {
    const float* xv = emb.data() + tokens[t] * d;
    const auto xs = test::exact(xv, d);
    std::vector<Fb> x2;
    for (const Fb& v : xs) x2.push_back(v * v);
    std::vector<Fb> l(n_expert);
    for (int64_t e = 0; e < n_expert; ++e) {
      l[static_cast<size_t>(e)] = test::dot(test::exact(&router[static_cast<size_t>(e * d)], d), x2) * Fb(0.35f);
    }
    const Fb mx = test::max(l);
    std::vector<Fb> p;
    for (const Fb& v : l) p.push_back(test::exp(v - mx));
    const Fb total = test::sum(p);
    for (Fb& v : p) v = v / total;
    std::vector<int> order(n_expert);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int a, int c) { return p[static_cast<size_t>(a)].v > p[static_cast<size_t>(c)].v; });
    const Fb &kth = p[static_cast<size_t>(order[k - 1])], &next = p[static_cast<size_t>(order[k])];
    ASSERT_GT(kth.v - next.v, kth.e + next.e) << "token " << t << ": the routing is within rounding; change the data";
    const Fb top = test::sum({p[static_cast<size_t>(order[0])], p[static_cast<size_t>(order[1])]});
    std::vector<std::vector<Fb>> terms(d);
    for (int i = 0; i < k; ++i) {
      const int e = order[static_cast<size_t>(i)];
      const Fb wt = p[static_cast<size_t>(e)] / top * Fb(escale[static_cast<size_t>(e)]);
      std::vector<Fb> act(ff);
      for (int64_t r = 0; r < ff; ++r) {
        const Fb gs = test::dot(test::exact(&gate_up[static_cast<size_t>((e * 2 * ff + r) * d)], d), xs);
        const Fb us = test::dot(test::exact(&gate_up[static_cast<size_t>((e * 2 * ff + ff + r) * d)], d), xs);
        act[static_cast<size_t>(r)] = geglu(gs, us);
      }
      for (int64_t o = 0; o < d; ++o) {
        terms[static_cast<size_t>(o)].push_back(wt * test::dot(test::exact(&down[static_cast<size_t>((e * d + o) * ff)], ff), act));
      }
    }
    for (int64_t o = 0; o < d; ++o) {
      expect_within(got[t * d + static_cast<size_t>(o)], test::sum(terms[static_cast<size_t>(o)]),
                    "token " + std::to_string(t) + " output " + std::to_string(o));
    }
  }
}

TEST(CpuGemma4Ops, ScaleAndWeightlessHeadNorm) {
  constexpr int64_t d = 6, head = 3, vocab = 3;
  Weights w;
  const auto& emb = w.add("emb", {d, vocab});
  w.put("one", {1}, {2.5f});
  const auto& each = w.add("each", {d});
  test::TempDir tmp;
  const gguf::File f = w.write(tmp.file("w.gguf"));
  graph::Graph g;
  graph::Builder b(g);
  g.n_layer = 1;
  g.n_vocab = d;
  const TensorId x = b.embed(weight(b, w, "emb"));
  const TensorId n = b.rms_norm_heads(x, -1, head, 1e-6f, "norm", 0);
  g.logits = b.scale(b.scale(n, weight(b, w, "one"), "s1", 0), weight(b, w, "each"), "s2", 0);
  const auto got = run(g, f, {2, 0});
  for (int t = 0; t < 2; ++t) {
    const float* xv = emb.data() + (t == 0 ? 2 : 0) * d;
    for (int64_t h = 0; h < d / head; ++h) {
      // The kernel's formula: x * (1 / sqrt(sum(x^2) / n + eps)), then * 2.5, then * each.
      const auto xh = test::exact(xv + h * head, head);
      const Fb inv = Fb(1.0) / test::sqrt(test::dot(xh, xh) / Fb(static_cast<double>(head)) + Fb(1e-6f));
      for (int64_t i = 0; i < head; ++i) {
        const int64_t j = h * head + i;
        expect_within(got[static_cast<size_t>(t * d + j)], xh[static_cast<size_t>(i)] * inv * Fb(2.5f) * Fb(each[static_cast<size_t>(j)]),
                      "element " + std::to_string(j));
      }
    }
  }
}

TEST(CpuGemma4Ops, LayersWithDifferentKvWidths) {
  // Layer 0 attends with one head of 4, layer 1 with two query heads sharing one KV head of 8; both
  // caches carry across steps. Scores are unscaled (scale 1), as in Gemma 4.
  constexpr int64_t d = 8, vocab = 6;
  Weights w;
  const auto& emb = w.add("emb", {d, vocab});
  const auto& wq0 = w.add("wq0", {d, 4});
  const auto& wk0 = w.add("wk0", {d, 4});
  const auto& wv0 = w.add("wv0", {d, 4});
  const auto& wo0 = w.add("wo0", {4, d});
  const auto& wq1 = w.add("wq1", {d, 16});
  const auto& wk1 = w.add("wk1", {d, 8});
  const auto& wv1 = w.add("wv1", {d, 8});
  const auto& wo1 = w.add("wo1", {16, d});
  test::TempDir tmp;
  const gguf::File f = w.write(tmp.file("w.gguf"));
  graph::Graph g;
  graph::Builder b(g);
  g.n_layer = 2;
  g.n_vocab = d;
  TensorId x = b.embed(weight(b, w, "emb"));
  const auto layer = [&](int l, int n_head, int hd, TensorId in) {
    const std::string s = std::to_string(l);
    const TensorId q = b.matmul(weight(b, w, "wq" + s), in, "q" + s, l);
    const TensorId k = b.matmul(weight(b, w, "wk" + s), in, "k" + s, l);
    const TensorId v = b.matmul(weight(b, w, "wv" + s), in, "v" + s, l);
    const TensorId a = b.attention(q, k, v, n_head, 1, hd, 1.0f, 0, 0.0f, "attn" + s, l);
    return b.add(in, b.matmul(weight(b, w, "wo" + s), a, "o" + s, l), "res" + s, l);
  };
  x = layer(0, 1, 4, x);
  g.logits = layer(1, 2, 8, x);
  EXPECT_EQ(g.kv_width_of(0), 4);
  EXPECT_EQ(g.kv_width_of(1), 8);

  // Reference over the whole sequence in the kernels' formulas: projections are dot products; scores
  // q.k (scale 1), p = exp(score - max), out = sum_j (p_j * (1 / sum p)) v_j; the residual adds.
  const std::vector<int32_t> tokens{1, 4, 0, 5, 2};
  const auto n = tokens.size();
  std::vector<std::vector<Fb>> h(n);
  for (size_t t = 0; t < n; ++t) h[t] = test::exact(&emb[static_cast<size_t>(tokens[t] * d)], d);
  const auto mv = [](const std::vector<float>& m, int64_t in, int64_t out, const std::vector<Fb>& v) {
    std::vector<Fb> r(static_cast<size_t>(out));
    for (int64_t o = 0; o < out; ++o) r[static_cast<size_t>(o)] = test::dot(test::exact(&m[static_cast<size_t>(o * in)], static_cast<size_t>(in)), v);
    return r;
  };
  const auto ref_layer = [&](const std::vector<float>& wq, const std::vector<float>& wk, const std::vector<float>& wv,
                             const std::vector<float>& wo, int n_head, int hd) {
    std::vector<std::vector<Fb>> q, k, v;
    for (size_t t = 0; t < n; ++t) {
      q.push_back(mv(wq, d, n_head * hd, h[t]));
      k.push_back(mv(wk, d, hd, h[t]));
      v.push_back(mv(wv, d, hd, h[t]));
    }
    for (size_t t = 0; t < n; ++t) {
      std::vector<Fb> att(static_cast<size_t>(n_head * hd));
      for (int hh = 0; hh < n_head; ++hh) {
        const std::vector<Fb> qh(q[t].begin() + hh * hd, q[t].begin() + (hh + 1) * hd);
        std::vector<Fb> s;
        for (size_t j = 0; j <= t; ++j) s.push_back(test::dot(k[j], qh) * Fb(1.0f));
        const Fb mx = test::max(s);
        for (Fb& e : s) e = test::exp(e - mx);
        const Fb inv = Fb(1.0) / test::sum(s);
        for (int i = 0; i < hd; ++i) {
          std::vector<Fb> pj, vj;
          for (size_t j = 0; j <= t; ++j) pj.push_back(s[j] * inv), vj.push_back(v[j][static_cast<size_t>(i)]);
          att[static_cast<size_t>(hh * hd + i)] = test::dot(pj, vj);
        }
      }
      const auto o = mv(wo, n_head * hd, d, att);
      for (int64_t i = 0; i < d; ++i) h[t][static_cast<size_t>(i)] += o[static_cast<size_t>(i)];
    }
  };
  ref_layer(wq0, wk0, wv0, wo0, 1, 4);
  ref_layer(wq1, wk1, wv1, wo1, 2, 8);

  // Two steps (3 tokens, then 2), so the second reads rows the first left in each cache.
  auto backend = backend::make_cpu_backend(1);
  backend::ExecOptions opts;
  opts.n_ctx = 16;
  opts.max_tokens = 8;
  opts.kv_type = backend::KvType::F32;
  auto exe = backend->compile(g, f, opts);
  std::vector<float> got;
  exe->run(graph::StepParams::one({tokens[0], tokens[1], tokens[2]}, 0, true));
  got.assign(exe->logits().begin(), exe->logits().end());
  exe->run(graph::StepParams::one({tokens[3], tokens[4]}, 3, true));
  got.insert(got.end(), exe->logits().begin(), exe->logits().end());
  ASSERT_EQ(got.size(), n * d);
  for (size_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < d; ++i) expect_within(got[t * d + static_cast<size_t>(i)], h[t][static_cast<size_t>(i)], "token " + std::to_string(t));
}

}  // namespace
}  // namespace zinc
