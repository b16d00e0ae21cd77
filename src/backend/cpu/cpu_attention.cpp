// Attention of a block of query rows over float key and value rows (cpu_ops.h: attend_rows). Keys
// come in tiles of 16 positions transposed (element i of 16 keys in one register), so a row's scores
// for a tile are hd multiply-adds of its element i broadcast, with no horizontal sums, two rows at a
// time sharing each tile; the softmax runs on tiles too, and the weighted sum of value rows 16
// elements at a time. A row's result depends only on the row, its keys and the tile grid (absolute
// positions), never on which rows share the call: prefill in chunks equals decode token by token.
// The same C++ (GCC vector extensions) is compiled for AVX-512, AVX2+FMA and the baseline; the
// instruction set the CPU kernels use (quant::dot_isa_in_use) picks one.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "quant/dot.h"
#include "quant/fp16.h"

namespace zinc::backend::cpu {

namespace {

// The vector helpers are always inlined into the per-ISA functions, so no vector crosses a call.
#pragma GCC diagnostic ignored "-Wpsabi"

// 16 floats: one AVX-512 register, two AVX2 registers or four SSE registers, as compiled.
typedef float V16 __attribute__((vector_size(64)));
typedef _Float16 H16 __attribute__((vector_size(32)));  // 16 halves (converted by F16C where compiled with it)
static_assert(kAttendTile == 16);

[[gnu::always_inline]] inline V16 load16(const float* p) {
  V16 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
[[gnu::always_inline]] inline void store16(float* p, V16 v) { std::memcpy(p, &v, sizeof v); }
[[gnu::always_inline]] inline V16 vmax(V16 a, V16 b) { return a > b ? a : b; }

// The scaled (and capped) scores of key tiles [t0, t1] for row r, and row r + 1 when kTwo, masked to
// each row's keys. Four sums over i ≡ 0..3 (mod 4) per row, combined in a fixed order.
template <bool kTwo>
[[gnu::always_inline]] inline void scores_of(const AttendRows& a, int r, int64_t t0, int64_t t1, float* s0, float* s1) {
  const int hd = a.hd;
  const V16 minus_inf = V16{} - std::numeric_limits<float>::infinity();
  V16 lane;
  for (int l = 0; l < kAttendTile; ++l) lane[l] = static_cast<float>(l);
  const float* q0 = a.q[r];
  const float* q1 = kTwo ? a.q[r + 1] : q0;
  for (int64_t t = t0; t <= t1; ++t) {
    const float* kt = a.kt + t * a.kt_stride + a.kv_offset * kAttendTile;
    V16 x0 = {}, x1 = {}, x2 = {}, x3 = {}, y0 = {}, y1 = {}, y2 = {}, y3 = {};
    int i = 0;
    for (; i + 4 <= hd; i += 4) {
      const V16 k0 = load16(kt + (i + 0) * kAttendTile), k1 = load16(kt + (i + 1) * kAttendTile);
      const V16 k2 = load16(kt + (i + 2) * kAttendTile), k3 = load16(kt + (i + 3) * kAttendTile);
      x0 += q0[i] * k0;
      x1 += q0[i + 1] * k1;
      x2 += q0[i + 2] * k2;
      x3 += q0[i + 3] * k3;
      if constexpr (kTwo) {
        y0 += q1[i] * k0;
        y1 += q1[i + 1] * k1;
        y2 += q1[i + 2] * k2;
        y3 += q1[i + 3] * k3;
      }
    }
    for (; i < hd; ++i) {
      const V16 k = load16(kt + i * kAttendTile);
      x0 += q0[i] * k;
      if constexpr (kTwo) y0 += q1[i] * k;
    }
    const V16 pos = lane + static_cast<float>(t * kAttendTile);
    for (int w = 0; w < (kTwo ? 2 : 1); ++w) {
      V16 v = (w == 0 ? (x0 + x1) + (x2 + x3) : (y0 + y1) + (y2 + y3)) * a.scale;
      if (a.softcap > 0) {
        for (int l = 0; l < kAttendTile; ++l) v[l] = a.softcap * std::tanh(v[l] / a.softcap);
      }
      const auto lo = static_cast<float>(a.lo[r + w]), hi = static_cast<float>(a.hi[r + w]);
      v = (pos >= lo && pos <= hi) ? v : minus_inf;
      store16((w == 0 ? s0 : s1) + (t - t0) * kAttendTile, v);
    }
  }
}

// Always inlined into the per-ISA entry points below, so it is compiled for each of them.
[[gnu::always_inline]] inline void attend(const AttendRows& a, float* buf) {
  int64_t jlo = a.lo[0], jhi = a.hi[0];
  for (int r = 1; r < a.nq; ++r) {
    jlo = std::min(jlo, a.lo[r]);
    jhi = std::max(jhi, a.hi[r]);
  }
  const int64_t t0 = jlo / kAttendTile, t1 = jhi / kAttendTile, width = (t1 - t0 + 1) * kAttendTile;
  const int hd = a.hd;
  float* acc = buf;  // hd floats, then each row's scores over tiles [t0, t1]
  float* scores = buf + (hd + kAttendTile - 1) / kAttendTile * kAttendTile;
  int r = 0;
  for (; r + 2 <= a.nq; r += 2) scores_of<true>(a, r, t0, t1, scores + r * width, scores + (r + 1) * width);
  if (r < a.nq) scores_of<false>(a, r, t0, t1, scores + r * width, nullptr);
  for (r = 0; r < a.nq; ++r) {
    float* s = scores + r * width;
    V16 mv = V16{} - std::numeric_limits<float>::infinity();
    for (int64_t t = 0; t <= t1 - t0; ++t) mv = vmax(mv, load16(s + t * kAttendTile));
    float mx = mv[0];
    for (int l = 1; l < kAttendTile; ++l) mx = std::max(mx, mv[l]);
    // A sink is one more logit in the softmax whose value row is zero: it only enlarges the sum.
    if (a.sink) mx = std::max(mx, a.sink[r]);
    V16 sum = {};
    for (int64_t t = 0; t <= t1 - t0; ++t) {
      V16 e = load16(s + t * kAttendTile);
      for (int l = 0; l < kAttendTile; ++l) e[l] = std::exp(e[l] - mx);
      sum += e;
      store16(s + t * kAttendTile, e);
    }
    float total = 0;
    for (int l = 0; l < kAttendTile; ++l) total += sum[l];
    if (a.sink) total += std::exp(a.sink[r] - mx);
    const float inv = 1.0f / total;
    // The weighted sum of value rows in a local buffer (no aliasing with the rows read).
    const int full = hd / kAttendTile * kAttendTile;
    std::fill(acc, acc + hd, 0.0f);
    for (int64_t j = a.lo[r]; j <= a.hi[r]; ++j) {
      const float p = s[j - t0 * kAttendTile];
      const float* v = a.v[j - a.v_first] + a.kv_offset;
      for (int i = 0; i < full; i += kAttendTile) store16(acc + i, load16(acc + i) + p * load16(v + i));
      for (int i = full; i < hd; ++i) acc[i] += p * v[i];
    }
    for (int i = 0; i < hd; ++i) a.out[r][i] = acc[i] * inv;
  }
}

// Lane l of a tile from row l: F32 copied, F16 converted (by F16C where the instruction set has it),
// 16 elements of the row at a time.
[[gnu::always_inline]] inline void transpose(const void* const* rows, bool f16, int64_t width, float* tile) {
  for (int l = 0; l < kAttendTile; ++l) {
    if (!rows[l]) {
      for (int64_t c = 0; c < width; ++c) tile[c * kAttendTile + l] = 0.0f;
      continue;
    }
    for (int64_t c0 = 0; c0 < width; c0 += kAttendTile) {
      const int64_t n = std::min<int64_t>(kAttendTile, width - c0);
      float v[kAttendTile];
      if (!f16) {
        std::memcpy(v, static_cast<const float*>(rows[l]) + c0, static_cast<size_t>(n) * sizeof(float));
      } else {
        const uint16_t* h = static_cast<const uint16_t*>(rows[l]) + c0;
        if (n == kAttendTile) {
          H16 x;
          std::memcpy(&x, h, sizeof x);
          const V16 f = __builtin_convertvector(x, V16);
          std::memcpy(v, &f, sizeof f);
        } else {
          for (int64_t i = 0; i < n; ++i) v[i] = quant::fp16_to_f32(h[i]);
        }
      }
      for (int64_t i = 0; i < n; ++i) tile[(c0 + i) * kAttendTile + l] = v[i];
    }
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
[[gnu::target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]] void transpose_avx512(const void* const* r, bool f16, int64_t w, float* t) { transpose(r, f16, w, t); }
[[gnu::target("avx2,fma,f16c")]] void transpose_avx2(const void* const* r, bool f16, int64_t w, float* t) { transpose(r, f16, w, t); }
#endif
void transpose_base(const void* const* r, bool f16, int64_t w, float* t) { transpose(r, f16, w, t); }

using TransposeFn = void (*)(const void* const*, bool, int64_t, float*);

TransposeFn transpose_fn() {
  const std::string isa = quant::dot_isa_in_use();
#if defined(__x86_64__) && defined(__GNUC__)
  if (isa == "avx512") return transpose_avx512;
  if (isa == "avx2") return transpose_avx2;
#endif
  return transpose_base;
}

#if defined(__x86_64__) && defined(__GNUC__)
[[gnu::target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]] void attend_avx512(const AttendRows& a, float* buf) { attend(a, buf); }
[[gnu::target("avx2,fma,f16c")]] void attend_avx2(const AttendRows& a, float* buf) { attend(a, buf); }
#endif
void attend_base(const AttendRows& a, float* buf) { attend(a, buf); }

using AttendFn = void (*)(const AttendRows&, float*);

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
  // One row of sums, then every row's scores over the tiles the rows see.
  const int64_t tiles = jhi / kAttendTile - jlo / kAttendTile + 1;
  const size_t need = static_cast<size_t>((a.hd + kAttendTile - 1) / kAttendTile * kAttendTile + a.nq * tiles * kAttendTile);
  if (scratch.size() < need) scratch.resize(need);
  fn(a, scratch.data());
}

void transpose_keys(const void* const* rows, bool f16, int64_t width, float* tile) {
  static const TransposeFn fn = transpose_fn();
  fn(rows, f16, width, tile);
}

}  // namespace zinc::backend::cpu
