// The recurrent ops of linear-attention layers: the causal convolution carried across steps, and the
// gated delta rule in both forms (token by token, chunked), each against a plain double-precision
// implementation of the definition.
#include <gtest/gtest.h>

#include <cmath>
#include <ostream>
#include <random>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "core/thread_pool.h"

namespace zinc::backend::cpu {
namespace {

std::vector<float> random_vec(size_t n, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

TEST(SsmConv, StepsCarryTheLastInputs) {
  // out[t][c] = silu(sum_j w[c][j] x[t - K + 1 + j][c]) with zeros before the first token; fed in
  // steps of 1, 3 and 5 tokens, the state must make the steps equal one pass over all 9.
  std::mt19937 rng(7);
  const int64_t width = 6, n = 9;
  const int K = 4;
  const auto x = random_vec(static_cast<size_t>(n * width), rng);
  const auto w = random_vec(static_cast<size_t>(width * K), rng);
  std::vector<double> expected(static_cast<size_t>(n * width));
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t c = 0; c < width; ++c) {
      double s = 0;
      for (int j = 0; j < K; ++j) {
        const int64_t src = t - K + 1 + j;
        if (src >= 0) s += static_cast<double>(w[static_cast<size_t>(c * K + j)]) * x[static_cast<size_t>(src * width + c)];
      }
      expected[static_cast<size_t>(t * width + c)] = s / (1 + std::exp(-s));
    }
  }
  std::vector<float> state(static_cast<size_t>((K - 1) * width), 0.0f), out(static_cast<size_t>(n * width));
  int64_t at = 0;
  for (int64_t step : {1, 3, 5}) {
    ssm_conv(x.data() + at * width, w.data(), state.data(), out.data() + at * width, width, K, step);
    at += step;
  }
  for (size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(out[i], expected[i], 1e-5) << i;
}

struct DeltaCase {
  DeltaNetShape shape;
  int64_t n;
};

// The definition, per value head h with key head kh: S <- exp(g) S; S <- S + k (beta (v - S^T k))^T;
// o = S^T q, with q and k L2-normalised (q also scaled by 1/sqrt(dk)).
std::vector<double> reference(const DeltaCase& c, const std::vector<float>& q, const std::vector<float>& k,
                              const std::vector<float>& v, const std::vector<float>& g, const std::vector<float>& beta,
                              std::vector<double>& S) {
  const auto& s = c.shape;
  const int64_t qs = int64_t{s.n_head_k} * s.dk, vs = int64_t{s.n_head_v} * s.dv;
  std::vector<double> out(static_cast<size_t>(c.n * vs));
  for (int h = 0; h < s.n_head_v; ++h) {
    const int kh = s.tiled ? h % s.n_head_k : h / (s.n_head_v / s.n_head_k);
    double* Sh = S.data() + static_cast<size_t>(h) * s.dk * s.dv;
    for (int64_t t = 0; t < c.n; ++t) {
      std::vector<double> qn(static_cast<size_t>(s.dk)), kn(static_cast<size_t>(s.dk));
      double qq = 0, kk = 0;
      for (int i = 0; i < s.dk; ++i) {
        qq += std::pow(q[static_cast<size_t>(t * qs + kh * s.dk + i)], 2);
        kk += std::pow(k[static_cast<size_t>(t * qs + kh * s.dk + i)], 2);
      }
      for (int i = 0; i < s.dk; ++i) {
        qn[static_cast<size_t>(i)] = q[static_cast<size_t>(t * qs + kh * s.dk + i)] / std::sqrt(qq + 1e-6) / std::sqrt(s.dk);
        kn[static_cast<size_t>(i)] = k[static_cast<size_t>(t * qs + kh * s.dk + i)] / std::sqrt(kk + 1e-6);
      }
      const double decay = std::exp(static_cast<double>(g[static_cast<size_t>(t * s.n_head_v + h)]));
      const double b = beta[static_cast<size_t>(t * s.n_head_v + h)];
      for (int i = 0; i < s.dk * s.dv; ++i) Sh[i] *= decay;
      for (int j = 0; j < s.dv; ++j) {
        double mem = 0;
        for (int i = 0; i < s.dk; ++i) mem += Sh[i * s.dv + j] * kn[static_cast<size_t>(i)];
        const double delta = b * (v[static_cast<size_t>(t * vs + h * s.dv + j)] - mem);
        for (int i = 0; i < s.dk; ++i) Sh[i * s.dv + j] += kn[static_cast<size_t>(i)] * delta;
      }
      for (int j = 0; j < s.dv; ++j) {
        double o = 0;
        for (int i = 0; i < s.dk; ++i) o += Sh[i * s.dv + j] * qn[static_cast<size_t>(i)];
        out[static_cast<size_t>(t * vs + h * s.dv + j)] = o;
      }
    }
  }
  return out;
}

void PrintTo(const DeltaCase& c, std::ostream* os) {
  *os << c.shape.n_head_k << " key heads of " << c.shape.dk << ", " << c.shape.n_head_v << " value heads of "
      << c.shape.dv << (c.shape.tiled ? " tiled" : " grouped") << ", " << c.n << " tokens";
}

class DeltaRule : public ::testing::TestWithParam<DeltaCase> {};

TEST_P(DeltaRule, BothFormsMatchTheDefinition) {
  // Two calls (so the second starts from a non-zero state), each run token by token and in chunks of
  // 1, 4, 7 and 64 tokens (several chunks, a ragged last one, one chunk holding everything).
  const DeltaCase c = GetParam();
  const auto& s = c.shape;
  std::mt19937 rng(11);
  const int64_t qs = int64_t{s.n_head_k} * s.dk, vs = int64_t{s.n_head_v} * s.dv;
  ThreadPool pool(2);
  std::vector<double> S_ref(static_cast<size_t>(s.n_head_v * s.dk * s.dv), 0.0);
  std::vector<std::vector<float>> states;
  for (int chunk : {0, 1, 4, 7, 64}) {
    (void)chunk;
    states.emplace_back(S_ref.size(), 0.0f);
  }
  for (int call = 0; call < 2; ++call) {
    const auto q = random_vec(static_cast<size_t>(c.n * qs), rng);
    const auto k = random_vec(static_cast<size_t>(c.n * qs), rng);
    const auto v = random_vec(static_cast<size_t>(c.n * vs), rng);
    const auto g = random_vec(static_cast<size_t>(c.n * s.n_head_v), rng, -2.0f, 0.0f);
    const auto beta = random_vec(static_cast<size_t>(c.n * s.n_head_v), rng, 0.0f, 1.0f);
    const auto expected = reference(c, q, k, v, g, beta, S_ref);
    size_t form = 0;
    for (int chunk : {0, 1, 4, 7, 64}) {
      std::vector<float> out(static_cast<size_t>(c.n * vs));
      gated_delta_rule(q.data(), k.data(), v.data(), g.data(), beta.data(), states[form].data(), out.data(), c.n, s,
                       chunk, pool);
      double worst = 0;
      for (size_t i = 0; i < out.size(); ++i) worst = std::max(worst, std::fabs(out[i] - expected[i]));
      EXPECT_LT(worst, 2e-5) << "call " << call << " chunk " << chunk;
      double worst_state = 0;
      for (size_t i = 0; i < S_ref.size(); ++i) worst_state = std::max(worst_state, std::fabs(states[form][i] - S_ref[i]));
      EXPECT_LT(worst_state, 2e-5) << "call " << call << " chunk " << chunk;
      ++form;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, DeltaRule,
                         ::testing::Values(DeltaCase{{1, 1, 8, 8, false}, 13}, DeltaCase{{2, 4, 16, 16, false}, 19},
                                           DeltaCase{{2, 4, 16, 16, true}, 19}, DeltaCase{{2, 6, 8, 12, false}, 70}));

}  // namespace
}  // namespace zinc::backend::cpu
