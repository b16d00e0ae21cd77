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

// Vectors of 16 floats (one AVX-512 register) or 8 (one AVX2 register, two SSE ones), as the
// instruction set compiled for holds them natively; a key tile is 16 / W vectors.
typedef float V16 __attribute__((vector_size(64)));
typedef int32_t I16 __attribute__((vector_size(64)));
typedef float V8 __attribute__((vector_size(32)));
typedef int32_t I8 __attribute__((vector_size(32)));
typedef uint16_t W16 __attribute__((vector_size(32)));  // 16 fp16 bit patterns
static_assert(kAttendTile == 16);
struct Wide {
  using F = V16;
  using I = I16;
};
struct Narrow {
  using F = V8;
  using I = I8;
};

template <class V>
[[gnu::always_inline]] inline V load(const float* p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class V>
[[gnu::always_inline]] inline void store(float* p, V v) { std::memcpy(p, &v, sizeof v); }
template <class V>
[[gnu::always_inline]] inline V vmax(V a, V b) { return a > b ? a : b; }
template <class V>
constexpr int lanes() { return sizeof(V) / sizeof(float); }

// e^x for x ≤ 0 (softmax terms; e^−∞ = 0): 2^n · e^r with n = round(x·log2 e), r = x − n·ln 2 in two
// parts, e^r by Cephes' expf polynomial (within 2 ulp of the exact value); x < −87 gives 0.
template <class T>
[[gnu::always_inline]] inline typename T::F vexp(typename T::F x) {
  using V = typename T::F;
  using I = typename T::I;
  const V zero = {};
  const V xc = x < zero - 87.0f ? zero - 87.0f : x;
  const I ni = __builtin_convertvector(xc * 1.44269504088896341f - 0.5f, I);  // toward zero: round
  const V n = __builtin_convertvector(ni, V);
  const V r = (xc - n * 0.693359375f) + n * 2.12194440e-4f;
  V p = zero + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  const I bits = (ni + 127) << 23;
  V scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return x < zero - 87.0f ? zero : p * scale;
}

// The scaled (and capped) scores of key tiles [t0, t1] for row r, and row r + 1 when kTwo, masked to
// each row's keys. Four sums over i ≡ 0..3 (mod 4) per row and vector of the tile, combined in a
// fixed order.
template <class T, bool kTwo>
[[gnu::always_inline]] inline void scores_of(const AttendRows& a, int r, int64_t t0, int64_t t1, float* s0, float* s1) {
  using V = typename T::F;
  constexpr int W = lanes<V>();
  const int hd = a.hd;
  const V minus_inf = V{} - std::numeric_limits<float>::infinity();
  V lane;
  for (int l = 0; l < W; ++l) lane[l] = static_cast<float>(l);
  const float* q0 = a.q[r];
  const float* q1 = kTwo ? a.q[r + 1] : q0;
  for (int64_t t = t0; t <= t1; ++t) {
    for (int h = 0; h < kAttendTile / W; ++h) {
      const float* kt = a.kt + t * a.kt_stride + a.kv_offset * kAttendTile + h * W;
      V x0 = {}, x1 = {}, x2 = {}, x3 = {}, y0 = {}, y1 = {}, y2 = {}, y3 = {};
      int i = 0;
      for (; i + 4 <= hd; i += 4) {
        const V k0 = load<V>(kt + (i + 0) * kAttendTile), k1 = load<V>(kt + (i + 1) * kAttendTile);
        const V k2 = load<V>(kt + (i + 2) * kAttendTile), k3 = load<V>(kt + (i + 3) * kAttendTile);
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
        const V k = load<V>(kt + i * kAttendTile);
        x0 += q0[i] * k;
        if constexpr (kTwo) y0 += q1[i] * k;
      }
      const V pos = lane + static_cast<float>(t * kAttendTile + h * W);
      for (int w = 0; w < (kTwo ? 2 : 1); ++w) {
        V v = (w == 0 ? (x0 + x1) + (x2 + x3) : (y0 + y1) + (y2 + y3)) * a.scale;
        if (a.softcap > 0) {
          for (int l = 0; l < W; ++l) v[l] = a.softcap * std::tanh(v[l] / a.softcap);
        }
        const auto lo = static_cast<float>(a.lo[r + w]), hi = static_cast<float>(a.hi[r + w]);
        v = (pos >= lo && pos <= hi) ? v : minus_inf;
        store<V>((w == 0 ? s0 : s1) + (t - t0) * kAttendTile + h * W, v);
      }
    }
  }
}

// Floats of a scratch array of n, rounded up to whole tiles.
inline int64_t attend_sums_floats(int64_t n) { return (n + kAttendTile - 1) / kAttendTile * kAttendTile; }

// acc[n][i0, i0 + K·W) = Σ_j p[n][j] · v_j[i0, i0 + K·W) for rows r .. r + NR − 1, over the keys any of
// them sees (p is 0 outside a row's keys: adding those terms changes nothing), in NR·K registers; each
// value row is read once for the NR rows.
template <class V, int K, int NR>
[[gnu::always_inline]] inline void weighted_sum(const AttendRows& a, int r, const float* const* p, int i0, float* const* acc) {
  constexpr int W = lanes<V>();
  int64_t lo = a.lo[r], hi = a.hi[r];
  for (int n = 1; n < NR; ++n) {
    lo = std::min(lo, a.lo[r + n]);
    hi = std::max(hi, a.hi[r + n]);
  }
  V o[NR][K] = {};
  for (int64_t j = lo; j <= hi; ++j) {
    const float* v = a.v[j - a.v_first] + a.kv_offset + i0;
    for (int k = 0; k < K; ++k) {
      const V vk = load<V>(v + k * W);
      for (int n = 0; n < NR; ++n) o[n][k] += p[n][j] * vk;
    }
  }
  for (int n = 0; n < NR; ++n)
    for (int k = 0; k < K; ++k) store<V>(acc[n] + i0 + k * W, o[n][k]);
}

// Every element of rows r .. r + NR − 1: KMAX vectors at a time, then the rest of the whole vectors,
// then one by one.
template <class V, int NR, int KMAX>
[[gnu::always_inline]] inline void weighted_sums(const AttendRows& a, int r, const float* const* p, float* const* acc) {
  constexpr int W = lanes<V>();
  static_assert(KMAX == 8);
  const int hd = a.hd;
  int i0 = 0;
  for (; i0 + KMAX * W <= hd; i0 += KMAX * W) weighted_sum<V, KMAX, NR>(a, r, p, i0, acc);
  switch ((hd - i0) / W) {
    case 7: weighted_sum<V, 7, NR>(a, r, p, i0, acc); break;
    case 6: weighted_sum<V, 6, NR>(a, r, p, i0, acc); break;
    case 5: weighted_sum<V, 5, NR>(a, r, p, i0, acc); break;
    case 4: weighted_sum<V, 4, NR>(a, r, p, i0, acc); break;
    case 3: weighted_sum<V, 3, NR>(a, r, p, i0, acc); break;
    case 2: weighted_sum<V, 2, NR>(a, r, p, i0, acc); break;
    case 1: weighted_sum<V, 1, NR>(a, r, p, i0, acc); break;
    default: break;
  }
  for (int n = 0; n < NR; ++n) {
    for (int i = hd / W * W; i < hd; ++i) {
      float sum = 0;
      for (int64_t j = a.lo[r + n]; j <= a.hi[r + n]; ++j) sum += p[n][j] * a.v[j - a.v_first][a.kv_offset + i];
      acc[n][i] = sum;
    }
  }
}

// Always inlined into the per-ISA entry points below, so it is compiled for each of them. With Wide
// (32 registers of 16 floats, AVX-512) scores and sums run two rows at a time; with Narrow (16
// registers of 8 floats, or pairs of 4) one row at a time.
template <class T>
[[gnu::always_inline]] inline void attend(const AttendRows& a, float* buf) {
  using V = typename T::F;
  constexpr bool kPairs = lanes<V>() == 16;
  int64_t jlo = a.lo[0], jhi = a.hi[0];
  for (int r = 1; r < a.nq; ++r) {
    jlo = std::min(jlo, a.lo[r]);
    jhi = std::max(jhi, a.hi[r]);
  }
  const int64_t t0 = jlo / kAttendTile, t1 = jhi / kAttendTile, width = (t1 - t0 + 1) * kAttendTile;
  const int hd = a.hd;
  // Two rows of sums, the rows' 1 / Σ, then each row's scores over tiles [t0, t1].
  float* acc = buf;
  float* inv = buf + 2 * attend_sums_floats(hd);
  float* scores = inv + attend_sums_floats(a.nq);
  int r = 0;
  if constexpr (kPairs) {
    for (; r + 2 <= a.nq; r += 2) scores_of<T, true>(a, r, t0, t1, scores + r * width, scores + (r + 1) * width);
  }
  for (; r < a.nq; ++r) scores_of<T, false>(a, r, t0, t1, scores + r * width, nullptr);
  for (r = 0; r < a.nq; ++r) {  // softmax: scores become exp(s − max), inv[r] = 1 / their sum
    float* s = scores + r * width;
    constexpr int W = lanes<V>();
    V mv = V{} - std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < width; i += W) mv = vmax(mv, load<V>(s + i));
    float mx = mv[0];
    for (int l = 1; l < W; ++l) mx = std::max(mx, mv[l]);
    // A sink is one more logit in the softmax whose value row is zero: it only enlarges the sum.
    if (a.sink) mx = std::max(mx, a.sink[r]);
    V sum = {};
    for (int64_t i = 0; i < width; i += W) {
      const V e = vexp<T>(load<V>(s + i) - mx);
      sum += e;
      store<V>(s + i, e);
    }
    float total = 0;
    for (int l = 0; l < W; ++l) total += sum[l];
    if (a.sink) total += std::exp(a.sink[r] - mx);
    inv[r] = 1.0f / total;
  }
  // The weighted sums of value rows.
  const auto p = [&](int row) { return scores + row * width - t0 * kAttendTile; };  // p(row)[j] for key j
  r = 0;
  if constexpr (kPairs) {
    for (; r + 2 <= a.nq; r += 2) {
      const float* ps[2] = {p(r), p(r + 1)};
      float* sums[2] = {acc, acc + attend_sums_floats(hd)};
      weighted_sums<V, 2, 8>(a, r, ps, sums);
      for (int n = 0; n < 2; ++n)
        for (int i = 0; i < hd; ++i) a.out[r + n][i] = sums[n][i] * inv[r + n];
    }
  }
  for (; r < a.nq; ++r) {
    const float* ps[1] = {p(r)};
    float* sums[1] = {acc};
    weighted_sums<V, 1, 8>(a, r, ps, sums);
    for (int i = 0; i < hd; ++i) a.out[r][i] = acc[i] * inv[r];
  }
}

// 16 fp16 values → floats, exactly, by integer operations on the bits (vectorized on every
// instruction set): normal numbers rebias the exponent, subnormals are their mantissa times 2^-24,
// infinities and NaNs keep the maximal exponent.
[[gnu::always_inline]] inline V16 halves_to_floats(const uint16_t* p) {
  W16 w;
  std::memcpy(&w, p, sizeof w);
  const I16 x = __builtin_convertvector(w, I16);
  const I16 sign = (x & 0x8000) << 16, e = (x >> 10) & 0x1f, m = x & 0x3ff;
  const V16 sub = __builtin_convertvector(m, V16) * 0x1p-24f;
  I16 sub_bits;
  std::memcpy(&sub_bits, &sub, sizeof sub_bits);
  const I16 bits = e == 0 ? (sub_bits | sign) : e == 31 ? (sign | 0x7f800000 | m << 13) : (sign | (e + 112) << 23 | m << 13);
  V16 f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// Lane l of a tile from row l: F32 copied, F16 converted,
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
          const V16 f = halves_to_floats(h);
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

// The entry point of the instruction set the CPU kernels use (quant::dot_isa_in_use; off x86-64 the
// callers pass the baseline for all three).
template <class Fn>
Fn by_isa(Fn avx512, Fn avx2, Fn base) {
  const std::string isa = quant::dot_isa_in_use();
  return isa == "avx512" ? avx512 : isa == "avx2" ? avx2 : base;
}

#if defined(__x86_64__) && defined(__GNUC__)
[[gnu::target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]] void attend_avx512(const AttendRows& a, float* buf) { attend<Wide>(a, buf); }
[[gnu::target("avx2,fma,f16c")]] void attend_avx2(const AttendRows& a, float* buf) { attend<Narrow>(a, buf); }
#endif
void attend_base(const AttendRows& a, float* buf) { attend<Narrow>(a, buf); }

}  // namespace

void attend_rows(const AttendRows& a, std::vector<float>& scratch) {
#if defined(__x86_64__) && defined(__GNUC__)
  static const auto fn = by_isa(attend_avx512, attend_avx2, attend_base);
#else
  static const auto fn = by_isa(attend_base, attend_base, attend_base);
#endif
  int64_t jlo = a.lo[0], jhi = a.hi[0];
  for (int r = 1; r < a.nq; ++r) {
    jlo = std::min(jlo, a.lo[r]);
    jhi = std::max(jhi, a.hi[r]);
  }
  const int64_t tiles = jhi / kAttendTile - jlo / kAttendTile + 1;
  const size_t need = static_cast<size_t>(2 * attend_sums_floats(a.hd) + attend_sums_floats(a.nq) + a.nq * tiles * kAttendTile);
  if (scratch.size() < need) scratch.resize(need);
  fn(a, scratch.data());
}

void transpose_keys(const void* const* rows, bool f16, int64_t width, float* tile) {
#if defined(__x86_64__) && defined(__GNUC__)
  static const auto fn = by_isa(transpose_avx512, transpose_avx2, transpose_base);
#else
  static const auto fn = by_isa(transpose_base, transpose_base, transpose_base);
#endif
  fn(rows, f16, width, tile);
}

}  // namespace zinc::backend::cpu
