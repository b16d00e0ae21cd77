// The recurrent ops of linear-attention layers: the causal convolution carried across steps, and the
// gated delta rule in both forms (token by token, chunked), each against exact values with a bound on
// float32 rounding derived from the form's own arithmetic.
#include <gtest/gtest.h>

#include <cmath>
#include <ostream>
#include <random>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "core/thread_pool.h"
#include "float_bound.h"

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
  // Exact values with a bound on float32 rounding (float_bound.h), in the kernel's formula: a dot
  // product of K terms, then s / (1 + exp(-s)).
  using test::Fb;
  std::vector<Fb> expected(static_cast<size_t>(n * width));
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t c = 0; c < width; ++c) {
      std::vector<Fb> wj, xj;
      for (int j = 0; j < K; ++j) {
        const int64_t src = t - K + 1 + j;
        wj.push_back(w[static_cast<size_t>(c * K + j)]);
        xj.push_back(src >= 0 ? x[static_cast<size_t>(src * width + c)] : 0.0f);
      }
      const Fb s = test::dot(wj, xj);
      expected[static_cast<size_t>(t * width + c)] = s / (Fb(1.0) + test::exp(-s));
    }
  }
  std::vector<float> state(static_cast<size_t>((K - 1) * width), 0.0f), out(static_cast<size_t>(n * width));
  int64_t at = 0;
  for (int64_t step : {1, 3, 5}) {
    ssm_conv(x.data() + at * width, w.data(), state.data(), out.data() + at * width, width, K, step);
    at += step;
  }
  for (size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(out[i], expected[i].v, expected[i].e) << i;
}

struct DeltaCase {
  DeltaNetShape shape;
  int64_t n;
};

// The delta rule's exact values and a bound on the kernels' float32 rounding, per value head.
// Within a step (one token for the recurrent form, one block for the chunked form) the kernel's own
// formulas are evaluated in Fb arithmetic (float_bound.h) from the exact state: that bounds the step's
// rounding, componentwise. Across steps, errors already in the state are not amplified: the exact map
// S -> exp(g) (I - beta k k^T) S is a contraction in the 2-norm for g <= 0, 0 <= beta <= 1 and |k| <= 1,
// so each column's error bound E_j carries over unchanged and the step's rounding is added to it; an
// output o = S^T q reads the state's error times |q|. (Bounding the carried error componentwise
// instead would grow it by 1 + dk per token.)
using test::Fb;

struct HeadBound {
  int dk, dv;
  std::vector<double> S;  // exact state, dk x dv
  std::vector<double> E;  // per value column j: bound on |computed column - exact column|_2
  HeadBound(int k, int v) : dk(k), dv(v), S(static_cast<size_t>(k * v)), E(static_cast<size_t>(v)) {}
};

// x / sqrt(sum x^2 + 1e-6) * scale, as the kernel computes it (inv = scale / sqrt(...), then x * inv).
std::vector<Fb> l2_normalised(const float* x, int n, const Fb& scale) {
  const auto xs = test::exact(x, static_cast<size_t>(n));
  const Fb inv = scale / test::sqrt(test::dot(xs, xs) + Fb(1e-6f));
  std::vector<Fb> out;
  for (const Fb& v : xs) out.push_back(v * inv);
  return out;
}

double norm2(const std::vector<Fb>& x) {
  double s = 0;
  for (const Fb& v : x) s += v.v * v.v;
  return std::sqrt(s);
}

// Tokens [t0, t0 + m) of one head through the kernel's formulas (q, k, v, g, beta point at the head's
// first column); writes exact outputs and their bounds at t * v_stride + column.
// chunk_form: the chunked kernel's block formulas, else the recurrent kernel's token step (m = 1).
void step_bound(HeadBound& hb, bool chunk_form, const float* q, const float* k, const float* v, const float* g,
                const float* beta, int64_t t0, size_t m, int64_t q_stride, int64_t v_stride, int64_t gate_stride,
                std::vector<double>& out_v, std::vector<double>& out_e) {
  const int dk = hb.dk, dv = hb.dv;
  const auto udk = static_cast<size_t>(dk), udv = static_cast<size_t>(dv);
  const Fb scale = Fb(1.0) / test::sqrt(Fb(static_cast<double>(dk)));  // 1 / sqrt(dk), rounded as the kernel does
  std::vector<std::vector<Fb>> qn, kn;
  std::vector<Fb> c, b;
  Fb acc = 0.0;
  for (size_t i = 0; i < m; ++i) {
    const int64_t t = t0 + static_cast<int64_t>(i);
    qn.push_back(l2_normalised(q + t * q_stride, dk, scale));
    kn.push_back(l2_normalised(k + t * q_stride, dk, Fb(1.0)));
    acc += Fb(g[t * gate_stride]);
    c.push_back(acc);
    b.push_back(beta[t * gate_stride]);
  }
  const auto Sat = [&](size_t d, size_t e) { return Fb(hb.S[d * udv + e]); };
  std::vector<std::vector<Fb>> o(m, std::vector<Fb>(udv)), S_new(udk, std::vector<Fb>(udv));
  if (!chunk_form) {
    // S *= exp(g); delta = (v - S^T k) beta; S += k delta^T; o = S^T q.
    const Fb decay = test::exp(Fb(g[t0 * gate_stride]));
    const float* vt = v + t0 * v_stride;
    for (size_t e = 0; e < udv; ++e) {
      std::vector<Fb> col(udk);
      for (size_t d = 0; d < udk; ++d) col[d] = Sat(d, e) * decay;
      const Fb delta = (Fb(vt[e]) - test::dot(col, kn[0])) * b[0];
      for (size_t d = 0; d < udk; ++d) S_new[d][e] = col[d] + kn[0][d] * delta;
      std::vector<Fb> sc(udk);
      for (size_t d = 0; d < udk; ++d) sc[d] = S_new[d][e];
      o[0][e] = test::dot(sc, qn[0]);
    }
  } else {
    // T = (I - L)^-1 by forward substitution, U = T (beta v), W = T (beta exp(c) k), V' = U - W S;
    // o_i = exp(c_i) q_i S + sum_j (q_i . k_j) exp(c_i - c_j) V'_j; S = exp(c_last) S + sum_j exp(c_last - c_j) k_j V'_j^T.
    std::vector<std::vector<Fb>> L(m, std::vector<Fb>(m)), T(m, std::vector<Fb>(m));
    for (size_t i = 0; i < m; ++i) {
      for (size_t j = 0; j < i; ++j) L[i][j] = -b[i] * test::dot(kn[i], kn[j]) * test::exp(c[i] - c[j]);
      for (size_t j = 0; j < i; ++j) {
        std::vector<Fb> terms{L[i][j]};
        for (size_t l = j + 1; l < i; ++l) terms.push_back(L[i][l] * T[l][j]);
        T[i][j] = test::sum(terms);
      }
      T[i][i] = 1.0;
    }
    std::vector<std::vector<Fb>> Vn(m, std::vector<Fb>(udv));
    for (size_t i = 0; i < m; ++i) {
      std::vector<Fb> tv, tk;
      for (size_t j = 0; j <= i; ++j) {
        tv.push_back(T[i][j] * b[j]);
        tk.push_back(tv.back() * test::exp(c[j]));
      }
      std::vector<Fb> W(udk);
      for (size_t d = 0; d < udk; ++d) {
        std::vector<Fb> kj;
        for (size_t j = 0; j <= i; ++j) kj.push_back(kn[j][d]);
        W[d] = test::dot(tk, kj);
      }
      for (size_t e = 0; e < udv; ++e) {
        std::vector<Fb> vj;
        for (size_t j = 0; j <= i; ++j) vj.push_back(v[(t0 + static_cast<int64_t>(j)) * v_stride + static_cast<int64_t>(e)]);
        std::vector<Fb> terms{test::dot(tv, vj)};
        for (size_t d = 0; d < udk; ++d) terms.push_back(-(W[d] * Sat(d, e)));
        Vn[i][e] = test::sum(terms);
      }
    }
    for (size_t i = 0; i < m; ++i) {
      const Fb ec = test::exp(c[i]);
      std::vector<Fb> a;
      for (size_t j = 0; j <= i; ++j) a.push_back(test::dot(qn[i], kn[j]) * test::exp(c[i] - c[j]));
      for (size_t e = 0; e < udv; ++e) {
        std::vector<Fb> terms;
        for (size_t d = 0; d < udk; ++d) terms.push_back(ec * qn[i][d] * Sat(d, e));
        for (size_t j = 0; j <= i; ++j) terms.push_back(a[j] * Vn[j][e]);
        o[i][e] = test::sum(terms);
      }
    }
    const Fb el = test::exp(c[m - 1]);
    for (size_t d = 0; d < udk; ++d) {
      for (size_t e = 0; e < udv; ++e) {
        std::vector<Fb> terms{Sat(d, e) * el};
        for (size_t j = 0; j < m; ++j) terms.push_back(test::exp(c[m - 1] - c[j]) * kn[j][d] * Vn[j][e]);
        S_new[d][e] = test::sum(terms);
      }
    }
  }
  for (size_t i = 0; i < m; ++i) {
    const double qnorm = norm2(qn[i]);
    for (size_t e = 0; e < udv; ++e) {
      const size_t at = static_cast<size_t>(t0 + static_cast<int64_t>(i)) * static_cast<size_t>(v_stride) + e;
      out_v[at] = o[i][e].v;
      out_e[at] = o[i][e].e + qnorm * hb.E[e];
    }
  }
  for (size_t e = 0; e < udv; ++e) {
    double local = 0;
    for (size_t d = 0; d < udk; ++d) {
      hb.S[d * udv + e] = S_new[d][e].v;
      local += S_new[d][e].e * S_new[d][e].e;
    }
    hb.E[e] += std::sqrt(local);
  }
}

void PrintTo(const DeltaCase& c, std::ostream* os) {
  *os << c.shape.n_head_k << " key heads of " << c.shape.dk << ", " << c.shape.n_head_v << " value heads of "
      << c.shape.dv << (c.shape.tiled ? " tiled" : " grouped") << ", " << c.n << " tokens";
}

class DeltaRule : public ::testing::TestWithParam<DeltaCase> {};

TEST_P(DeltaRule, BothFormsMatchTheDefinition) {
  // Two calls (so the second starts from a non-zero state), each run token by token and in chunks of
  // 1, 4, 7 and 64 tokens (several chunks, a ragged last one, one chunk holding everything). Each
  // output and state element must lie within the bound of its form's arithmetic (step_bound).
  const DeltaCase c = GetParam();
  const auto& s = c.shape;
  std::mt19937 rng(11);
  const int64_t qs = int64_t{s.n_head_k} * s.dk, vs = int64_t{s.n_head_v} * s.dv;
  ThreadPool pool(2);
  const std::vector<int> chunks{0, 1, 4, 7, 64};
  std::vector<std::vector<float>> states(chunks.size(), std::vector<float>(static_cast<size_t>(s.n_head_v * s.dk * s.dv), 0.0f));
  std::vector<std::vector<HeadBound>> bounds(chunks.size(), std::vector<HeadBound>(static_cast<size_t>(s.n_head_v), HeadBound(s.dk, s.dv)));
  for (int call = 0; call < 2; ++call) {
    const auto q = random_vec(static_cast<size_t>(c.n * qs), rng);
    const auto k = random_vec(static_cast<size_t>(c.n * qs), rng);
    const auto v = random_vec(static_cast<size_t>(c.n * vs), rng);
    const auto g = random_vec(static_cast<size_t>(c.n * s.n_head_v), rng, -2.0f, 0.0f);
    const auto beta = random_vec(static_cast<size_t>(c.n * s.n_head_v), rng, 0.0f, 1.0f);
    for (size_t form = 0; form < chunks.size(); ++form) {
      const int chunk = chunks[form];
      std::vector<double> want(static_cast<size_t>(c.n * vs)), bound(want.size());
      for (int h = 0; h < s.n_head_v; ++h) {
        const int kh = s.tiled ? h % s.n_head_k : h / (s.n_head_v / s.n_head_k);
        const int64_t step = chunk > 0 ? chunk : 1;
        for (int64_t t0 = 0; t0 < c.n; t0 += step) {
          std::vector<double> ov(want.size()), oe(want.size());
          step_bound(bounds[form][static_cast<size_t>(h)], chunk > 0, q.data() + kh * s.dk, k.data() + kh * s.dk,
                     v.data() + h * s.dv, g.data() + h, beta.data() + h, t0, static_cast<size_t>(std::min(step, c.n - t0)),
                     qs, vs, s.n_head_v, ov, oe);
          for (int64_t t = t0; t < std::min(t0 + step, c.n); ++t) {
            for (int j = 0; j < s.dv; ++j) {
              const auto at = static_cast<size_t>(t * vs + h * s.dv + j), from = static_cast<size_t>(t * vs + j);
              want[at] = ov[from];
              bound[at] = oe[from];
            }
          }
        }
      }
      std::vector<float> out(static_cast<size_t>(c.n * vs));
      gated_delta_rule(q.data(), k.data(), v.data(), g.data(), beta.data(), states[form].data(), out.data(), c.n, s,
                       chunk, pool);
      int bad = 0;
      for (size_t i = 0; i < out.size(); ++i) bad += std::fabs(out[i] - want[i]) > bound[i];
      EXPECT_EQ(bad, 0) << "call " << call << " chunk " << chunk << ": outputs outside their bounds";
      int bad_state = 0;
      for (int h = 0; h < s.n_head_v; ++h) {
        const HeadBound& hb = bounds[form][static_cast<size_t>(h)];
        for (int d = 0; d < s.dk; ++d) {
          for (int j = 0; j < s.dv; ++j) {
            const size_t at = static_cast<size_t>((h * s.dk + d) * s.dv + j);
            bad_state += std::fabs(states[form][at] - hb.S[static_cast<size_t>(d * s.dv + j)]) > hb.E[static_cast<size_t>(j)];
          }
        }
      }
      EXPECT_EQ(bad_state, 0) << "call " << call << " chunk " << chunk << ": state outside its bound";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, DeltaRule,
                         ::testing::Values(DeltaCase{{1, 1, 8, 8, false}, 13}, DeltaCase{{2, 4, 16, 16, false}, 19},
                                           DeltaCase{{2, 4, 16, 16, true}, 19}, DeltaCase{{2, 6, 8, 12, false}, 70}));

}  // namespace
}  // namespace zinc::backend::cpu
