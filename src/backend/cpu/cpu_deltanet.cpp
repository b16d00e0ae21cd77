// The recurrent ops of linear-attention layers: the short causal convolution in front of them and the
// gated delta rule, in its token-by-token form (decode) and its chunked form (prefill).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_deltanet_isa.h"
#include "backend/cpu/cpu_isa.h"
#include "backend/cpu/cpu_ops.h"

namespace zinc::backend::cpu {

namespace {

float silu(float x) { return x / (1.0f + std::exp(-x)); }

#if !defined(__x86_64__)
// Never called: by_isa picks the baseline.
constexpr DeltaHeadFn chunked_head_avx512 = chunked_head_base, chunked_head_avx2 = chunked_head_base;
constexpr DeltaHeadFn recurrent_head_avx512 = recurrent_head_base, recurrent_head_avx2 = recurrent_head_base;
#endif

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
  static const DeltaHeadFn chunked_head = by_isa<DeltaHeadFn>(chunked_head_avx512, chunked_head_avx2, chunked_head_base);
  static const DeltaHeadFn recurrent_head = by_isa<DeltaHeadFn>(recurrent_head_avx512, recurrent_head_avx2, recurrent_head_base);
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
                       s.n_head_v, s.dk, s.dv, 0);
      }
    }
  });
}

}  // namespace zinc::backend::cpu
