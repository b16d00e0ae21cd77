// The recurrent ops of linear-attention layers: the short causal convolution in front of them and the
// gated delta rule, in its token-by-token form (decode) and its chunked form (prefill).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_ops.h"

namespace zinc::backend::cpu {

namespace {

float silu(float x) { return x / (1.0f + std::exp(-x)); }

// x / sqrt(sum x^2 + 1e-6), as the reference models normalise q and k.
void l2_normalise(const float* x, float* out, int n, float scale) {
  float ss = 0;
  for (int i = 0; i < n; ++i) ss += x[i] * x[i];
  const float inv = scale / std::sqrt(ss + 1e-6f);
  for (int i = 0; i < n; ++i) out[i] = x[i] * inv;
}

// One v head, token by token. S is dk x dv (row i: key dimension i).
void recurrent_head(const float* q, const float* k, const float* v, const float* g, const float* beta, float* S,
                    float* out, int64_t n, int64_t q_stride, int64_t v_stride, int64_t gate_stride, int dk, int dv) {
  std::vector<float> qn(static_cast<size_t>(dk)), kn(static_cast<size_t>(dk)), delta(static_cast<size_t>(dv));
  const float scale = 1.0f / std::sqrt(static_cast<float>(dk));
  for (int64_t t = 0; t < n; ++t) {
    l2_normalise(q + t * q_stride, qn.data(), dk, scale);
    l2_normalise(k + t * q_stride, kn.data(), dk, 1.0f);
    const float decay = std::exp(g[t * gate_stride]), b = beta[t * gate_stride];
    const float* vt = v + t * v_stride;
    // delta = beta (v - S^T k), after the decay of S.
    for (int j = 0; j < dv; ++j) delta[static_cast<size_t>(j)] = 0;
    for (int i = 0; i < dk; ++i) {
      float* row = S + static_cast<int64_t>(i) * dv;
      const float ki = kn[static_cast<size_t>(i)];
      for (int j = 0; j < dv; ++j) {
        row[j] *= decay;
        delta[static_cast<size_t>(j)] += row[j] * ki;
      }
    }
    for (int j = 0; j < dv; ++j) delta[static_cast<size_t>(j)] = (vt[j] - delta[static_cast<size_t>(j)]) * b;
    float* o = out + t * v_stride;
    for (int j = 0; j < dv; ++j) o[j] = 0;
    for (int i = 0; i < dk; ++i) {
      float* row = S + static_cast<int64_t>(i) * dv;
      const float ki = kn[static_cast<size_t>(i)], qi = qn[static_cast<size_t>(i)];
      for (int j = 0; j < dv; ++j) {
        row[j] += ki * delta[static_cast<size_t>(j)];
        o[j] += row[j] * qi;
      }
    }
  }
}

// One v head in blocks of up to `chunk` tokens. Within a block of C tokens with cumulative log decay
// c_i, the delta rule's corrections solve a unit lower-triangular system: T = (I - L)^-1 with
// L_ij = -beta_i (k_i . k_j) exp(c_i - c_j) for j < i. Then U = T (beta v), W = T (beta k exp(c)), the
// block's new values are V' = U - W S, its outputs exp(c_i) q_i S + sum_{j<=i} (q_i . k_j) exp(c_i - c_j) V'_j,
// and the state moves to exp(c_last) S + sum_j exp(c_last - c_j) k_j V'_j^T.
void chunked_head(const float* q, const float* k, const float* v, const float* g, const float* beta, float* S,
                  float* out, int64_t n, int64_t q_stride, int64_t v_stride, int64_t gate_stride, int dk, int dv,
                  int chunk) {
  const auto C = static_cast<size_t>(chunk);
  const auto udk = static_cast<size_t>(dk), udv = static_cast<size_t>(dv);
  std::vector<float> qn(C * udk), kn(C * udk), c(C), b(C), T(C * C), U(C * udv), W(C * udk), Vn(C * udv);
  const float scale = 1.0f / std::sqrt(static_cast<float>(dk));
  for (int64_t t0 = 0; t0 < n; t0 += chunk) {
    const auto m = static_cast<size_t>(std::min<int64_t>(chunk, n - t0));
    float acc = 0;
    for (size_t i = 0; i < m; ++i) {
      const int64_t t = t0 + static_cast<int64_t>(i);
      l2_normalise(q + t * q_stride, qn.data() + i * udk, dk, scale);
      l2_normalise(k + t * q_stride, kn.data() + i * udk, dk, 1.0f);
      acc += g[t * gate_stride];
      c[i] = acc;
      b[i] = beta[t * gate_stride];
    }
    const auto dot = [&](const float* x, const float* y) {
      float s = 0;
      for (size_t d = 0; d < udk; ++d) s += x[d] * y[d];
      return s;
    };
    // T: rows in order, each from the rows above it (forward substitution). Going left to right, the
    // entries right of j still hold L's values, which is what row i's update reads.
    for (size_t i = 0; i < m; ++i) {
      float* Ti = T.data() + i * C;
      for (size_t j = 0; j < i; ++j) Ti[j] = -b[i] * dot(kn.data() + i * udk, kn.data() + j * udk) * std::exp(c[i] - c[j]);
      for (size_t j = 0; j < i; ++j) {
        float sum = Ti[j];
        for (size_t l = j + 1; l < i; ++l) sum += Ti[l] * T[l * C + j];
        Ti[j] = sum;
      }
      Ti[i] = 1.0f;
    }
    // U = T (beta v), W = T (beta exp(c) k), then V' = U - W S.
    for (size_t i = 0; i < m; ++i) {
      float* Ui = U.data() + i * udv;
      float* Wi = W.data() + i * udk;
      std::fill(Ui, Ui + udv, 0.0f);
      std::fill(Wi, Wi + udk, 0.0f);
      for (size_t j = 0; j <= i; ++j) {
        const float tv = T[i * C + j] * b[j], tk = tv * std::exp(c[j]);
        const float* vj = v + (t0 + static_cast<int64_t>(j)) * v_stride;
        const float* kj = kn.data() + j * udk;
        for (size_t d = 0; d < udv; ++d) Ui[d] += tv * vj[d];
        for (size_t d = 0; d < udk; ++d) Wi[d] += tk * kj[d];
      }
      float* Vi = Vn.data() + i * udv;
      std::copy(Ui, Ui + udv, Vi);
      for (size_t d = 0; d < udk; ++d) {
        const float* Sd = S + d * udv;
        for (size_t e = 0; e < udv; ++e) Vi[e] -= Wi[d] * Sd[e];
      }
    }
    // Outputs: the state's contribution and the block's own.
    for (size_t i = 0; i < m; ++i) {
      float* o = out + (t0 + static_cast<int64_t>(i)) * v_stride;
      const float* qi = qn.data() + i * udk;
      const float ec = std::exp(c[i]);
      std::fill(o, o + udv, 0.0f);
      for (size_t d = 0; d < udk; ++d) {
        const float* Sd = S + d * udv;
        const float w = ec * qi[d];
        for (size_t e = 0; e < udv; ++e) o[e] += w * Sd[e];
      }
      for (size_t j = 0; j <= i; ++j) {
        const float a = dot(qi, kn.data() + j * udk) * std::exp(c[i] - c[j]);
        const float* Vj = Vn.data() + j * udv;
        for (size_t e = 0; e < udv; ++e) o[e] += a * Vj[e];
      }
    }
    // The state after the block.
    const float last = c[m - 1], el = std::exp(last);
    for (size_t d = 0; d < udk * udv; ++d) S[d] *= el;
    for (size_t j = 0; j < m; ++j) {
      const float dj = std::exp(last - c[j]);
      const float* kj = kn.data() + j * udk;
      const float* Vj = Vn.data() + j * udv;
      for (size_t d = 0; d < udk; ++d) {
        float* Sd = S + d * udv;
        const float w = dj * kj[d];
        for (size_t e = 0; e < udv; ++e) Sd[e] += w * Vj[e];
      }
    }
  }
}

}  // namespace

void ssm_conv(const float* x, const float* w, float* state, float* out, int64_t width, int kernel, int64_t n_tokens, ThreadPool* pool) {
  const int64_t hist = kernel - 1;
  // Rows of (state, x) as one sequence: row r < hist is state row r, else x row r - hist.
  const auto row = [&](int64_t r) { return r < hist ? state + r * width : x + (r - hist) * width; };
  // Each output: s = 0, then s += w[j]·row[j] for j = 0, 1, ..., in that order whichever loop computes it,
  // so every token's values are the same in a prompt or alone.
  if (n_tokens < 4) {
    for (int64_t t = 0; t < n_tokens; ++t) {
      float* o = out + t * width;
      for (int64_t ch = 0; ch < width; ++ch) {
        const float* wc = w + ch * kernel;
        float s = 0;
        for (int j = 0; j < kernel; ++j) s += wc[j] * row(t + j)[ch];
        o[ch] = silu(s);
      }
    }
  } else {
    // Prompts: the taps transposed (tap j of every channel in a row), so a token's channels run as vectors;
    // tokens split among the threads (each reads rows t .. t + hist; the state changes only after).
    thread_local std::vector<float> wt;
    wt.resize(static_cast<size_t>(kernel * width));
    for (int64_t ch = 0; ch < width; ++ch)
      for (int j = 0; j < kernel; ++j) wt[static_cast<size_t>(j * width + ch)] = w[ch * kernel + j];
    const float* wtp = wt.data();
    const auto tokens = [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        float* o = out + t * width;
        std::fill_n(o, width, 0.0f);
        for (int j = 0; j < kernel; ++j) {
          const float* r = row(t + j);
          const float* wj = wtp + j * width;
          for (int64_t ch = 0; ch < width; ++ch) o[ch] += wj[ch] * r[ch];
        }
        for (int64_t ch = 0; ch < width; ++ch) o[ch] = silu(o[ch]);
      }
    };
    if (pool && n_tokens * width >= 16384) pool->parallel_for(n_tokens, tokens);
    else tokens(0, n_tokens);
  }
  // The new state: the last hist rows of (state, x).
  std::vector<float> keep(static_cast<size_t>(hist * width));
  for (int64_t r = 0; r < hist; ++r) std::memcpy(keep.data() + r * width, row(n_tokens + r), static_cast<size_t>(width) * sizeof(float));
  if (!keep.empty()) std::memcpy(state, keep.data(), keep.size() * sizeof(float));
}

void gated_delta_rule(const float* q, const float* k, const float* v, const float* g, const float* beta, float* state,
                      float* out, int64_t n_tokens, const DeltaNetShape& s, int chunk, ThreadPool& pool) {
  const int64_t q_stride = int64_t{s.n_head_k} * s.dk, v_stride = int64_t{s.n_head_v} * s.dv;
  const int ratio = s.n_head_v / s.n_head_k;
  pool.parallel_for(s.n_head_v, [&](int64_t h0, int64_t h1) {
    for (int64_t h = h0; h < h1; ++h) {
      const int64_t kh = s.tiled ? h % s.n_head_k : h / ratio;
      const float* qh = q + kh * s.dk;
      const float* kk = k + kh * s.dk;
      float* S = state + h * s.dk * s.dv;
      if (chunk > 0) {
        chunked_head(qh, kk, v + h * s.dv, g + h, beta + h, S, out + h * s.dv, n_tokens, q_stride, v_stride, s.n_head_v,
                     s.dk, s.dv, chunk);
      } else {
        recurrent_head(qh, kk, v + h * s.dv, g + h, beta + h, S, out + h * s.dv, n_tokens, q_stride, v_stride,
                       s.n_head_v, s.dk, s.dv);
      }
    }
  });
}

}  // namespace zinc::backend::cpu
