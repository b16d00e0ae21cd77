// Attention of a block of query rows over float key and value rows (cpu_ops.h: attend_rows): each key
// row meets every query row of the block while it is in cache; dot products and the weighted sum of
// values run 16 lanes at a time (GCC vector extensions). The same C++ is compiled for AVX-512,
// AVX2+FMA and the baseline, and the instruction set the CPU kernels use (quant::dot_isa_in_use)
// picks one.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "quant/dot.h"

namespace zinc::backend::cpu {

namespace {

// The vector helpers are always inlined into the per-ISA functions, so no vector crosses a call.
#pragma GCC diagnostic ignored "-Wpsabi"

// 16 floats: one AVX-512 register, two AVX2 registers or four SSE registers, as compiled.
typedef float V16 __attribute__((vector_size(64)));
[[gnu::always_inline]] inline V16 load16(const float* p) {
  V16 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
[[gnu::always_inline]] inline void store16(float* p, V16 v) { std::memcpy(p, &v, sizeof v); }

// Always inlined into the per-ISA entry points below, so it is compiled for each of them.
[[gnu::always_inline]] inline float dot(const float* a, const float* b, int n) {
  V16 acc0 = {}, acc1 = {};
  int i = 0;
  for (; i + 32 <= n; i += 32) {
    acc0 += load16(a + i) * load16(b + i);
    acc1 += load16(a + i + 16) * load16(b + i + 16);
  }
  for (; i + 16 <= n; i += 16) acc0 += load16(a + i) * load16(b + i);
  acc0 += acc1;
  float s = 0;
  for (int l = 0; l < 16; ++l) s += acc0[l];
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

[[gnu::always_inline]] inline void attend(const AttendRows& a, float* scores, float* acc) {
  int64_t jlo = a.lo[0], jhi = a.hi[0];
  for (int r = 1; r < a.nq; ++r) {
    jlo = std::min(jlo, a.lo[r]);
    jhi = std::max(jhi, a.hi[r]);
  }
  const int64_t nk = jhi - jlo + 1;
  const int hd = a.hd;
  // Scores, key by key: each key row is read once from memory for every query row.
  for (int64_t j = jlo; j <= jhi; ++j) {
    const float* k = a.k[j] + a.kv_offset;
    for (int r = 0; r < a.nq; ++r) {
      if (j >= a.lo[r] && j <= a.hi[r]) scores[r * nk + (j - jlo)] = dot(a.q[r], k, hd) * a.scale;
    }
  }
  for (int r = 0; r < a.nq; ++r) {
    float* s = scores + r * nk - jlo;  // s[j] for key j
    const int64_t lo = a.lo[r], hi = a.hi[r];
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t j = lo; j <= hi; ++j) {
      if (a.softcap > 0) s[j] = a.softcap * std::tanh(s[j] / a.softcap);
      mx = std::max(mx, s[j]);
    }
    // A sink is one more logit in the softmax whose value row is zero: it only enlarges the sum.
    if (a.sink) mx = std::max(mx, a.sink[r]);
    float sum = a.sink ? std::exp(a.sink[r] - mx) : 0.0f;
    for (int64_t j = lo; j <= hi; ++j) sum += s[j] = std::exp(s[j] - mx);
    const float inv = 1.0f / sum;
    // The weighted sum of value rows in a local buffer (no aliasing with the rows read), 16 lanes at a time.
    const int full = hd / 16 * 16;
    std::fill(acc, acc + hd, 0.0f);
    for (int64_t j = lo; j <= hi; ++j) {
      const float p = s[j] * inv;
      const float* v = a.v[j] + a.kv_offset;
      for (int i = 0; i < full; i += 16) store16(acc + i, load16(acc + i) + p * load16(v + i));
      for (int i = full; i < hd; ++i) acc[i] += p * v[i];
    }
    std::memcpy(a.out[r], acc, static_cast<size_t>(hd) * sizeof(float));
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
[[gnu::target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]] void attend_avx512(const AttendRows& a, float* s, float* t) { attend(a, s, t); }
[[gnu::target("avx2,fma,f16c")]] void attend_avx2(const AttendRows& a, float* s, float* t) { attend(a, s, t); }
#endif
void attend_base(const AttendRows& a, float* s, float* t) { attend(a, s, t); }

using AttendFn = void (*)(const AttendRows&, float*, float*);

AttendFn attend_fn() {
  const std::string isa = quant::dot_isa_in_use();
#if defined(__x86_64__) && defined(__GNUC__)
  if (isa == "avx512") return attend_avx512;
  if (isa == "avx2") return attend_avx2;
#endif
  return attend_base;
}

}  // namespace

void attend_rows(const AttendRows& a, std::vector<float>& scratch) {
  static const AttendFn fn = attend_fn();
  int64_t jlo = a.lo[0], jhi = a.hi[0];
  for (int r = 1; r < a.nq; ++r) {
    jlo = std::min(jlo, a.lo[r]);
    jhi = std::max(jhi, a.hi[r]);
  }
  const size_t need = static_cast<size_t>(a.nq * (jhi - jlo + 1) + a.hd);
  if (scratch.size() < need) scratch.resize(need);
  fn(a, scratch.data() + a.hd, scratch.data());
}

}  // namespace zinc::backend::cpu
