// The gated delta rule's per-head kernels (cpu_deltanet_isa.h), included by one source file per
// instruction set (cpu_deltanet_avx512.cpp, _avx2.cpp, _base.cpp), each compiled for its set; the
// helpers have internal linkage, so the copies never mix. Every inner loop runs over a contiguous row
// (an axpy, or a dot product with 16 partial sums), which the compiler lays out in that set's vector
// registers. The two forms compute the same function up to rounding (the tests bound both against
// the definition).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_deltanet_isa.h"

namespace zinc::backend::cpu {
namespace {

// The vector helpers are always inlined into the per-ISA functions, so no vector crosses a call.
#pragma GCC diagnostic ignored "-Wpsabi"
// The product's column block: 16 floats (one register) with AVX-512, 8 (one AVX2 register, two SSE
// ones) otherwise, so four rows of accumulators never leave the registers.
#if defined(__AVX512F__)
constexpr int kVec = 16;
#else
constexpr int kVec = 8;
#endif
typedef float VecF __attribute__((vector_size(kVec * 4)));

// x · y over n floats: 16 partial sums (whole vector registers), added pairwise, then the tail.
inline float dot16(const float* x, const float* y, int n) {
  float s[16] = {};
  int d = 0;
  for (; d + 16 <= n; d += 16)
    for (int i = 0; i < 16; ++i) s[i] += x[d + i] * y[d + i];
  for (int w = 8; w > 0; w /= 2)
    for (int i = 0; i < w; ++i) s[i] += s[i + w];
  float sum = s[0];
  for (; d < n; ++d) sum += x[d] * y[d];
  return sum;
}

// y += a x over n floats.
inline void axpy(float a, const float* x, float* y, int n) {
  for (int i = 0; i < n; ++i) y[i] += a * x[i];
}

// C[i][e] += sign * sum_k A(i, k) B[k][e] for i < M, e < N: A(i, k) = A[i * a_row + k * a_col], B rows
// ldb apart, C rows ldc apart. Four rows of C by kVec columns stay in registers over the whole sum
// (each B element loaded once for four rows); the sum over k runs in order.
inline void matmul_add(float* C, int64_t ldc, const float* A, int64_t a_row, int64_t a_col, const float* B, int64_t ldb, int M, int K,
                       int N, float sign) {
  int i = 0;
  for (; i + 4 <= M; i += 4) {
    int e = 0;
    for (; e + kVec <= N; e += kVec) {
      VecF acc[4] = {};
      for (int k = 0; k < K; ++k) {
        VecF b;
        std::memcpy(&b, B + k * ldb + e, sizeof(b));
        for (int r = 0; r < 4; ++r) acc[r] += A[(i + r) * a_row + k * a_col] * b;
      }
      for (int r = 0; r < 4; ++r) {
        VecF c;
        std::memcpy(&c, C + (i + r) * ldc + e, sizeof(c));
        c += sign * acc[r];
        std::memcpy(C + (i + r) * ldc + e, &c, sizeof(c));
      }
    }
    for (; e < N; ++e) {
      for (int r = 0; r < 4; ++r) {
        float acc = 0;
        for (int k = 0; k < K; ++k) acc += A[(i + r) * a_row + k * a_col] * B[k * ldb + e];
        C[(i + r) * ldc + e] += sign * acc;
      }
    }
  }
  for (; i < M; ++i) {
    for (int e = 0; e < N; ++e) {
      float acc = 0;
      for (int k = 0; k < K; ++k) acc += A[i * a_row + k * a_col] * B[k * ldb + e];
      C[i * ldc + e] += sign * acc;
    }
  }
}

// x / sqrt(sum x^2 + 1e-6) * scale, as the reference models normalise q and k.
inline void l2_normalise(const float* x, float* out, int n, float scale) {
  const float inv = scale / std::sqrt(dot16(x, x, n) + 1e-6f);
  for (int i = 0; i < n; ++i) out[i] = x[i] * inv;
}

}  // namespace

// One v head, token by token. S is dk x dv (row i: key dimension i).
void ZINC_DELTA_ISA(recurrent_head)(const float* q, const float* k, const float* v, const float* g, const float* beta, float* S,
                                    float* out, int64_t n, int64_t q_stride, int64_t v_stride, int64_t gate_stride, int dk, int dv,
                                    int) {
  std::vector<float> qn(static_cast<size_t>(dk)), kn(static_cast<size_t>(dk)), delta(static_cast<size_t>(dv));
  const float scale = 1.0f / std::sqrt(static_cast<float>(dk));
  for (int64_t t = 0; t < n; ++t) {
    l2_normalise(q + t * q_stride, qn.data(), dk, scale);
    l2_normalise(k + t * q_stride, kn.data(), dk, 1.0f);
    const float decay = std::exp(g[t * gate_stride]), b = beta[t * gate_stride];
    const float* vt = v + t * v_stride;
    // delta = beta (v - S^T k), after the decay of S.
    std::fill(delta.begin(), delta.end(), 0.0f);
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
    std::fill(o, o + dv, 0.0f);
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
void ZINC_DELTA_ISA(chunked_head)(const float* q, const float* k, const float* v, const float* g, const float* beta, float* S,
                                  float* out, int64_t n, int64_t q_stride, int64_t v_stride, int64_t gate_stride, int dk, int dv,
                                  int chunk) {
  const auto C = static_cast<size_t>(chunk);
  const auto udk = static_cast<size_t>(dk), udv = static_cast<size_t>(dv);
  std::vector<float> qn(C * udk), kn(C * udk), c(C), b(C), L(C), T(C * C), U(C * udv), W(C * udk), Vn(C * udv);
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
    // T by rows: row i (below the diagonal) = L_i + sum_{l<i} L_il T_l, each T_l's entries left of
    // its diagonal (forward substitution, as axpys over rows already done).
    for (size_t i = 0; i < m; ++i) {
      float* Ti = T.data() + i * C;
      for (size_t j = 0; j < i; ++j) L[j] = -b[i] * dot16(kn.data() + i * udk, kn.data() + j * udk, dk) * std::exp(c[i] - c[j]);
      std::copy(L.begin(), L.begin() + static_cast<int64_t>(i), Ti);
      for (size_t l = 1; l < i; ++l) axpy(L[l], T.data() + l * C, Ti, static_cast<int>(l));
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
        axpy(tv, v + (t0 + static_cast<int64_t>(j)) * v_stride, Ui, dv);
        axpy(tk, kn.data() + j * udk, Wi, dk);
      }
    }
    std::copy(U.begin(), U.begin() + static_cast<int64_t>(m * udv), Vn.begin());
    matmul_add(Vn.data(), dv, W.data(), dk, 1, S, dv, static_cast<int>(m), dk, dv, -1.0f);
    // Outputs: the state's contribution (exp(c_i) q_i S, as one product) and the block's own.
    for (size_t i = 0; i < m; ++i) {
      const float ec = std::exp(c[i]);
      for (size_t d = 0; d < udk; ++d) W[i * udk + d] = ec * qn[i * udk + d];  // W is free again: exp(c_i) q_i
      float* o = out + (t0 + static_cast<int64_t>(i)) * v_stride;
      std::fill(o, o + udv, 0.0f);
    }
    matmul_add(out + t0 * v_stride, v_stride, W.data(), dk, 1, S, dv, static_cast<int>(m), dk, dv, 1.0f);
    for (size_t i = 0; i < m; ++i) {
      float* o = out + (t0 + static_cast<int64_t>(i)) * v_stride;
      const float* qi = qn.data() + i * udk;
      for (size_t j = 0; j <= i; ++j) {
        const float a = dot16(qi, kn.data() + j * udk, dk) * std::exp(c[i] - c[j]);
        axpy(a, Vn.data() + j * udv, o, dv);
      }
    }
    // The state after the block: exp(c_last) S + K^T diag(exp(c_last - c_j)) V' (one product, A(d, j) =
    // exp(c_last - c_j) k_j[d], kept in W's rows).
    const float last = c[m - 1], el = std::exp(last);
    for (size_t d = 0; d < udk * udv; ++d) S[d] *= el;
    for (size_t j = 0; j < m; ++j) {
      const float dj = std::exp(last - c[j]);
      for (size_t d = 0; d < udk; ++d) W[j * udk + d] = dj * kn[j * udk + d];
    }
    matmul_add(S, dv, W.data(), 1, dk, Vn.data(), dv, dk, static_cast<int>(m), dv, 1.0f);
  }
}

}  // namespace zinc::backend::cpu
