// The CPU backend's GPT-OSS ops against naive double-precision references: attention with per-head
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
#include "graph_test_util.h"
#include "raw_gguf.h"

namespace zinc {
namespace {

using graph::TensorId;

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

double max_abs_diff(const std::vector<float>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
  return worst;
}

TEST(GptOssOps, ClampedSwiGLU) {
  const float gate[] = {-9.0f, -1.0f, 0.0f, 0.5f, 6.9f, 7.0f, 12.0f, 3.0f};
  const float up[] = {-12.0f, -7.5f, 0.0f, 1.0f, 7.0f, 8.0f, -3.0f, 0.25f};
  float out[8];
  backend::cpu::swiglu_clamped(gate, up, out, 8, 1.702f, 7.0f);
  for (int i = 0; i < 8; ++i) {
    const double g = std::min<double>(gate[i], 7.0), u = std::clamp<double>(up[i], -7.0, 7.0);
    const double want = g / (1.0 + std::exp(-1.702 * g)) * (u + 1.0);
    EXPECT_NEAR(out[i], want, 1e-5 * (1.0 + std::fabs(want))) << "gate " << gate[i] << " up " << up[i];
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

    std::vector<double> want(static_cast<size_t>(n_tok * qw));
    for (int t = 0; t < n_tok; ++t) {
      for (int h = 0; h < n_head; ++h) {
        const int kh = h / (n_head / n_kv), lo = window > 0 ? std::max(0, t - window + 1) : 0;
        std::vector<double> logit;
        for (int j = lo; j <= t; ++j) {
          double dot = 0;
          for (int i = 0; i < hd; ++i) dot += static_cast<double>(qt[t * qw + h * hd + i]) * kt[j * kw + kh * hd + i];
          logit.push_back(dot * scale);
        }
        logit.push_back(sinks[static_cast<size_t>(h)]);
        double mx = -INFINITY, sum = 0;
        for (double x : logit) mx = std::max(mx, x);
        for (double x : logit) sum += std::exp(x - mx);
        for (int j = lo; j <= t; ++j) {
          const double p = std::exp(logit[static_cast<size_t>(j - lo)] - mx) / sum;
          for (int i = 0; i < hd; ++i) want[static_cast<size_t>(t * qw + h * hd + i)] += p * vt[j * kw + kh * hd + i];
        }
      }
    }
    EXPECT_LT(max_abs_diff(got, want), 1e-5) << "window " << window;
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

  std::vector<double> want(static_cast<size_t>(n_tok * d));
  int clamped = 0;
  for (int t = 0; t < n_tok; ++t) {
    const float* xr = xt.data() + t * d;
    std::vector<double> logit(ne);
    for (int e = 0; e < ne; ++e) {
      logit[static_cast<size_t>(e)] = router_b[static_cast<size_t>(e)];
      for (int i = 0; i < d; ++i) logit[static_cast<size_t>(e)] += static_cast<double>(router[e * d + i]) * xr[i];
    }
    std::vector<int> order{0, 1, 2, 3};
    std::sort(order.begin(), order.end(), [&](int a, int c) { return logit[static_cast<size_t>(a)] > logit[static_cast<size_t>(c)]; });
    double sum = 0;
    for (int i = 0; i < k; ++i) sum += std::exp(logit[static_cast<size_t>(order[static_cast<size_t>(i)])] - logit[static_cast<size_t>(order[0])]);
    for (int i = 0; i < k; ++i) {
      const int e = order[static_cast<size_t>(i)];
      const double wt = std::exp(logit[static_cast<size_t>(e)] - logit[static_cast<size_t>(order[0])]) / sum;
      std::vector<double> act(ff);
      for (int j = 0; j < ff; ++j) {
        double gv = gate_b[static_cast<size_t>(e * ff + j)], uv = up_b[static_cast<size_t>(e * ff + j)];
        for (int c = 0; c < d; ++c) {
          gv += static_cast<double>(gate[static_cast<size_t>((e * ff + j) * d + c)]) * xr[c];
          uv += static_cast<double>(up[static_cast<size_t>((e * ff + j) * d + c)]) * xr[c];
        }
        clamped += gv > 7 || std::fabs(uv) > 7;
        gv = std::min(gv, 7.0);
        uv = std::clamp(uv, -7.0, 7.0);
        act[static_cast<size_t>(j)] = gv / (1.0 + std::exp(-1.702 * gv)) * (uv + 1.0);
      }
      for (int o = 0; o < d; ++o) {
        double y = down_b[static_cast<size_t>(e * d + o)];
        for (int j = 0; j < ff; ++j) y += static_cast<double>(down[static_cast<size_t>((e * d + o) * ff + j)]) * act[static_cast<size_t>(j)];
        want[static_cast<size_t>(t * d + o)] += wt * y;
      }
    }
  }
  EXPECT_GT(clamped, 0) << "the inputs never reach the clamp";
  EXPECT_LT(max_abs_diff(got, want), 1e-4);
}

}  // namespace
}  // namespace zinc
