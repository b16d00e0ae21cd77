// The graph features Gemma 4 added, run on the CPU backend against naive references: the routed
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

double gelu_tanh(double x) { return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }

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

  for (size_t t = 0; t < tokens.size(); ++t) {
    const float* xv = emb.data() + tokens[t] * d;
    std::vector<double> p(n_expert);
    for (int64_t e = 0; e < n_expert; ++e) {
      double s = 0;
      for (int64_t i = 0; i < d; ++i) s += router[static_cast<size_t>(e * d + i)] * xv[i] * xv[i];
      p[static_cast<size_t>(e)] = s * 0.35;
    }
    const double mx = *std::max_element(p.begin(), p.end());
    double sum = 0;
    for (double& v : p) sum += v = std::exp(v - mx);
    for (double& v : p) v /= sum;
    std::vector<int> order(n_expert);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int a, int c) { return p[static_cast<size_t>(a)] > p[static_cast<size_t>(c)]; });
    const double top = p[static_cast<size_t>(order[0])] + p[static_cast<size_t>(order[1])];
    std::vector<double> want(d, 0.0);
    for (int i = 0; i < k; ++i) {
      const int e = order[static_cast<size_t>(i)];
      const double wt = p[static_cast<size_t>(e)] / top * escale[static_cast<size_t>(e)];
      std::vector<double> act(ff);
      for (int64_t r = 0; r < ff; ++r) {
        double gs = 0, us = 0;
        for (int64_t c = 0; c < d; ++c) {
          gs += gate_up[static_cast<size_t>((e * 2 * ff + r) * d + c)] * xv[c];
          us += gate_up[static_cast<size_t>((e * 2 * ff + ff + r) * d + c)] * xv[c];
        }
        act[static_cast<size_t>(r)] = gelu_tanh(gs) * us;
      }
      for (int64_t o = 0; o < d; ++o) {
        double s = 0;
        for (int64_t c = 0; c < ff; ++c) s += down[static_cast<size_t>((e * d + o) * ff + c)] * act[static_cast<size_t>(c)];
        want[static_cast<size_t>(o)] += wt * s;
      }
    }
    for (int64_t o = 0; o < d; ++o) EXPECT_NEAR(got[t * d + static_cast<size_t>(o)], want[static_cast<size_t>(o)], 1e-5) << t << " " << o;
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
      double ss = 0;
      for (int64_t i = 0; i < head; ++i) ss += xv[h * head + i] * xv[h * head + i];
      const double inv = 1.0 / std::sqrt(ss / head + 1e-6);
      for (int64_t i = 0; i < head; ++i) {
        const int64_t j = h * head + i;
        EXPECT_NEAR(got[static_cast<size_t>(t * d + j)], xv[j] * inv * 2.5 * each[static_cast<size_t>(j)], 1e-5);
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

  // Naive reference over the whole sequence.
  const std::vector<int32_t> tokens{1, 4, 0, 5, 2};
  const auto n = tokens.size();
  std::vector<std::vector<double>> h(n, std::vector<double>(d));
  for (size_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < d; ++i) h[t][static_cast<size_t>(i)] = emb[static_cast<size_t>(tokens[t] * d + i)];
  const auto mv = [](const std::vector<float>& m, int64_t in, int64_t out, const std::vector<double>& v) {
    std::vector<double> r(static_cast<size_t>(out));
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = 0; i < in; ++i) r[static_cast<size_t>(o)] += m[static_cast<size_t>(o * in + i)] * v[static_cast<size_t>(i)];
    return r;
  };
  const auto ref_layer = [&](const std::vector<float>& wq, const std::vector<float>& wk, const std::vector<float>& wv,
                             const std::vector<float>& wo, int n_head, int hd) {
    std::vector<std::vector<double>> q, k, v;
    for (size_t t = 0; t < n; ++t) {
      q.push_back(mv(wq, d, n_head * hd, h[t]));
      k.push_back(mv(wk, d, hd, h[t]));
      v.push_back(mv(wv, d, hd, h[t]));
    }
    for (size_t t = 0; t < n; ++t) {
      std::vector<double> att(static_cast<size_t>(n_head * hd));
      for (int hh = 0; hh < n_head; ++hh) {
        std::vector<double> s(t + 1);
        for (size_t j = 0; j <= t; ++j)
          for (int i = 0; i < hd; ++i) s[j] += q[t][static_cast<size_t>(hh * hd + i)] * k[j][static_cast<size_t>(i)];
        const double mx = *std::max_element(s.begin(), s.end());
        double sum = 0;
        for (double& e : s) sum += e = std::exp(e - mx);
        for (size_t j = 0; j <= t; ++j)
          for (int i = 0; i < hd; ++i) att[static_cast<size_t>(hh * hd + i)] += s[j] / sum * v[j][static_cast<size_t>(i)];
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
    for (int64_t i = 0; i < d; ++i) EXPECT_NEAR(got[t * d + static_cast<size_t>(i)], h[t][static_cast<size_t>(i)], 1e-4) << t;
}

}  // namespace
}  // namespace zinc
