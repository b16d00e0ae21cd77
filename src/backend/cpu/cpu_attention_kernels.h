// The attention kernels (cpu_ops.h: attend_rows), included by one source file per instruction set
// (cpu_attention_avx512.cpp, _avx2.cpp, _base.cpp), each compiled for its set; everything here has
// internal linkage, so the copies never mix. Keys come in tiles of 16 positions transposed (element i
// of 16 keys in one register), so a row's scores for a tile are hd multiply-adds of its element i
// broadcast, with no horizontal sums, up to four rows and several tiles at a time sharing each load;
// the softmax runs on tiles too, and the weighted sum of value rows 16 elements at a time. Keys and
// values are read as floats or as fp16 bits converted in registers (exactly, so both give the same
// numbers). A row's result depends only on the row, its keys and the tile grid (absolute positions),
// never on which rows share the call: prefill in chunks equals decode token by token.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#if defined(__x86_64__) && (defined(__F16C__) || defined(__AVX512F__))
#include "quant/immintrin_x86.h"
#endif

#include "backend/cpu/cpu_attention_isa.h"
#include "backend/cpu/cpu_ops.h"
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
typedef uint16_t H16 __attribute__((vector_size(32)));  // 16 fp16 bit patterns
typedef uint16_t H8 __attribute__((vector_size(16)));
static_assert(kAttendTile == 16);
// The weighted sums run two rows at a time (sharing each value vector they load) and keep kSumVectors
// vectors of each row in registers.
// kScoreSums: the scores' sums a group of rows and tiles keeps in registers.
struct Wide {
  using F = V16;
  using I = I16;
  static constexpr int kSumVectors = 8, kScoreSums = 16;
};
struct Narrow {
  using F = V8;
  using I = I8;
  static constexpr int kSumVectors = 4, kScoreSums = 8;
};
template <class V> struct Ints;
template <> struct Ints<V16> { using I = I16; using H = H16; };
template <> struct Ints<V8> { using I = I8; using H = H8; };

template <class V>
[[gnu::always_inline]] inline V load(const float* p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class V>
[[gnu::always_inline]] inline void store(float* p, V v) { std::memcpy(p, &v, sizeof v); }
template <class V>
constexpr int lanes() { return sizeof(V) / sizeof(float); }
// x in every lane: one broadcast (x − 0 is x for every x, so compilers drop the subtraction; x + 0 is
// not, for x = −0, and filling the lanes one by one compiles to as many inserts).
template <class V>
[[gnu::always_inline]] inline V splat(float x) { return x - V{}; }
// Keeps v in a register: GCC otherwise folds a vector loaded once but used by two multiply-adds into
// both as a memory operand, loading it twice (load ports, not multiply-adds, then bound the loop).
template <class V>
[[gnu::always_inline]] inline void in_register([[maybe_unused]] V& v) {
#if defined(__x86_64__) && (defined(__AVX512F__) || defined(__AVX2__))
  if constexpr (sizeof(V) == 64 || sizeof(V) == 32) asm("" : "+v"(v));
#endif
}

// fp16 values → floats, exactly, by integer operations on the bits (any instruction set): normal
// numbers rebias the exponent, subnormals are their mantissa times 2^-24, infinities and NaNs keep the
// maximal exponent.
template <class V>
[[gnu::always_inline]] inline V halves_exact(const uint16_t* p) {
  using I = typename Ints<V>::I;
  typename Ints<V>::H w;
  std::memcpy(&w, p, sizeof w);
  const I x = __builtin_convertvector(w, I);
  const I sign = (x & 0x8000) << 16, e = (x >> 10) & 0x1f, m = x & 0x3ff;
  const V sub = __builtin_convertvector(m, V) * 0x1p-24f;
  I sub_bits;
  std::memcpy(&sub_bits, &sub, sizeof sub_bits);
  const I bits = e == 0 ? (sub_bits | sign) : e == 31 ? (sign | 0x7f800000 | m << 13) : (sign | (e + 112) << 23 | m << 13);
  V f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// A vector of fp16 values as floats: the conversion instruction where the set has one (exact too).
template <class V>
[[gnu::always_inline]] inline V load(const uint16_t* p) {
#if defined(__x86_64__) && defined(__AVX512F__)
  if constexpr (lanes<V>() == 16) return __builtin_bit_cast(V, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))));
#endif
#if defined(__x86_64__) && defined(__F16C__)
  if constexpr (lanes<V>() == 8) return __builtin_bit_cast(V, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
#endif
  return halves_exact<V>(p);
}
[[gnu::always_inline]] inline float to_float(float x) { return x; }
[[gnu::always_inline]] inline float to_float(uint16_t h) { return quant::fp16_to_f32(h); }
template <class V>
[[gnu::always_inline]] inline V vmax(V a, V b) { return a > b ? a : b; }
// e^x (softmax terms, e^−∞ = 0; the gated activations, cpu_act_kernels.h): 2^n · e^r with
// n = round(x·log2 e), r = x − n·ln 2 in two parts, e^r by Cephes' expf polynomial (within 2 ulp of the
// exact value); x < −87 gives 0, x > 88 gives e^88.
template <class T>
[[gnu::always_inline]] inline typename T::F vexp(typename T::F x) {
  using V = typename T::F;
  using I = typename T::I;
  const V zero = {};
  const V xc = x < zero - 87.0f ? zero - 87.0f : x > zero + 88.0f ? zero + 88.0f : x;
  const V y = xc * 1.44269504088896341f;
  const I ni = __builtin_convertvector(y + (y < zero ? zero - 0.5f : zero + 0.5f), I);  // toward zero: round
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

// The scaled (and capped) scores of tiles t .. t + NT − 1 for rows r .. r + NR − 1, masked to each
// row's keys, into scores + row·width + (tile − t0)·kAttendTile. Each score is one sum over the head's
// elements in ascending order, a multiply-add each from zero, whatever NR and NT: a row's scores never
// depend on which rows or tiles share the call. NR·NT·(16 / W) sums in registers are independent
// chains that hide the multiply-add latency; each key vector is loaded once for the NR rows and each
// query element broadcast once for the NT tiles (two rows on one tile took three loads for two
// multiply-adds: the load ports, not the multiply-adds, bounded that loop on CPUs with two).
template <class T, class E, int NR, int NT>
[[gnu::always_inline]] inline void score_block(const AttendRows& a, int r, int64_t t, int64_t t0, int64_t width, float* scores) {
  using V = typename T::F;
  constexpr int W = lanes<V>(), NV = kAttendTile / W;
  const int hd = a.hd;
  V acc[NR][NT][NV];
#pragma GCC unroll 16
  for (int n = 0; n < NR; ++n)
#pragma GCC unroll 16
    for (int u = 0; u < NT; ++u)
#pragma GCC unroll 16
      for (int h = 0; h < NV; ++h) acc[n][u][h] = V{};
  const E* kt[NT];
#pragma GCC unroll 16
  for (int u = 0; u < NT; ++u) kt[u] = static_cast<const E*>(a.kt[t + u]) + a.kv_offset * kAttendTile;
  const float* q[NR];
#pragma GCC unroll 16
  for (int n = 0; n < NR; ++n) q[n] = a.q[r + n];
  for (int i = 0; i < hd; ++i) {
    V qi[NR];
#pragma GCC unroll 16
    for (int n = 0; n < NR; ++n) qi[n] = splat<V>(q[n][i]);
#pragma GCC unroll 16
    for (int u = 0; u < NT; ++u)
#pragma GCC unroll 16
      for (int h = 0; h < NV; ++h) {
        V k = load<V>(kt[u] + i * kAttendTile + h * W);
        if constexpr (NR > 1) in_register(k);
#pragma GCC unroll 16
        for (int n = 0; n < NR; ++n) acc[n][u][h] += qi[n] * k;
      }
  }
  // The sums out first (every index known at compile time, so they stay in registers), then capped
  // and masked in place.
#pragma GCC unroll 16
  for (int n = 0; n < NR; ++n)
#pragma GCC unroll 16
    for (int u = 0; u < NT; ++u)
#pragma GCC unroll 16
      for (int h = 0; h < NV; ++h) store<V>(scores + (r + n) * width + (t + u - t0) * kAttendTile + h * W, acc[n][u][h] * a.scale);
  const V minus_inf = V{} - std::numeric_limits<float>::infinity();
  V lane;
  for (int l = 0; l < W; ++l) lane[l] = static_cast<float>(l);
  for (int n = 0; n < NR; ++n) {
    const auto lo = static_cast<float>(a.lo[r + n]), hi = static_cast<float>(a.hi[r + n]);
    for (int c = 0; c < NT * kAttendTile; c += W) {
      float* at = scores + (r + n) * width + (t - t0) * kAttendTile + c;
      V v = load<V>(at);
      if (a.softcap > 0) {
        for (int l = 0; l < W; ++l) v[l] = a.softcap * std::tanh(v[l] / a.softcap);
      }
      const V pos = lane + static_cast<float>(t * kAttendTile + c);
      store<V>(at, (pos >= lo && pos <= hi) ? v : minus_inf);
    }
  }
}

// Every row's scores of tiles t .. t + NT − 1: rows in groups that keep T::kScoreSums sums in registers
// (at most 4), the rest in one smaller group.
template <class T, class E, int NT>
[[gnu::always_inline]] inline void score_rows(const AttendRows& a, int64_t t, int64_t t0, int64_t width, float* scores) {
  constexpr int NV = kAttendTile / lanes<typename T::F>();
  constexpr int R = std::clamp(T::kScoreSums / (NT * NV), 1, 4);
  int r = 0;
  for (; r + R <= a.nq; r += R) score_block<T, E, R, NT>(a, r, t, t0, width, scores);
  if constexpr (R > 1) {
    switch (a.nq - r) {
      case 3: if constexpr (R > 3) score_block<T, E, 3, NT>(a, r, t, t0, width, scores); break;
      case 2: if constexpr (R > 2) score_block<T, E, 2, NT>(a, r, t, t0, width, scores); break;
      case 1: score_block<T, E, 1, NT>(a, r, t, t0, width, scores); break;
      default: break;
    }
  }
}

// Every row's scores of tiles [t0, t1]: tiles in groups as wide as the rows leave registers for (the
// keys of a group are read from memory once, then from the first-level cache for each group of rows),
// the rest in groups of 2 and 1.
template <class T, class E>
[[gnu::always_inline]] inline void scores_of(const AttendRows& a, int64_t t0, int64_t t1, float* scores) {
  constexpr int NV = kAttendTile / lanes<typename T::F>();
  const int64_t width = (t1 - t0 + 1) * kAttendTile;
  int64_t t = t0;
  // Tiles a group: as many as one group of rows (at most 4) keeps sums of in T::kScoreSums registers.
  const int rows = std::min(a.nq, 4);
  if (rows == 1 && T::kScoreSums / NV >= 8) {
    for (; t + 8 <= t1 + 1; t += 8) score_rows<T, E, 8>(a, t, t0, width, scores);
  }
  if (rows * 4 * NV <= T::kScoreSums) {
    for (; t + 4 <= t1 + 1; t += 4) score_rows<T, E, 4>(a, t, t0, width, scores);
  }
  for (; t + 2 <= t1 + 1; t += 2) score_rows<T, E, 2>(a, t, t0, width, scores);
  for (; t <= t1; ++t) score_rows<T, E, 1>(a, t, t0, width, scores);
}

// acc[n][i0, i0 + K·W) += Σ_j p[n][j] · v_j[i0, i0 + K·W) for rows r .. r + NR − 1, over the keys in
// [jb, je] any of them sees (p is 0 outside a row's keys: adding those terms changes nothing), in NR·K
// registers (from zero when `first`); each value row is read once for the NR rows. Blocks of keys in
// ascending order give each sum the same additions in the same order as one pass over all of them.
template <class V, class E, int K, int NR>
[[gnu::always_inline]] inline void weighted_sum(const AttendRows& a, int r, const float* const* p, int i0, float* const* acc,
                                                int64_t jb, int64_t je, bool first) {
  constexpr int W = lanes<V>();
  int64_t lo = a.lo[r], hi = a.hi[r];
  for (int n = 1; n < NR; ++n) {
    lo = std::min(lo, a.lo[r + n]);
    hi = std::max(hi, a.hi[r + n]);
  }
  lo = std::max(lo, jb);
  hi = std::min(hi, je);
  V o[NR][K] = {};
  if (!first) {
    for (int n = 0; n < NR; ++n)
      for (int k = 0; k < K; ++k) o[n][k] = load<V>(acc[n] + i0 + k * W);
  }
  for (int64_t j = lo; j <= hi; ++j) {
    const E* v = static_cast<const E*>(a.v[j - a.v_first]) + a.kv_offset + i0;
    for (int k = 0; k < K; ++k) {
      V vk = load<V>(v + k * W);
      if constexpr (NR > 1) in_register(vk);
      for (int n = 0; n < NR; ++n) o[n][k] += p[n][j] * vk;
    }
  }
  for (int n = 0; n < NR; ++n)
    for (int k = 0; k < K; ++k) store<V>(acc[n] + i0 + k * W, o[n][k]);
}

// The whole vectors of rows r .. r + NR − 1 over keys [jb, je]: KMAX vectors at a time, then the rest.
template <class V, class E, int NR, int KMAX>
[[gnu::always_inline]] inline void weighted_sums(const AttendRows& a, int r, const float* const* p, float* const* acc,
                                                 int64_t jb, int64_t je, bool first) {
  constexpr int W = lanes<V>();
  static_assert(KMAX >= 1 && KMAX <= 8);
  const int hd = a.hd;
  int i0 = 0;
  for (; i0 + KMAX * W <= hd; i0 += KMAX * W) weighted_sum<V, E, KMAX, NR>(a, r, p, i0, acc, jb, je, first);
  switch ((hd - i0) / W) {
    case 7: weighted_sum<V, E, 7, NR>(a, r, p, i0, acc, jb, je, first); break;
    case 6: weighted_sum<V, E, 6, NR>(a, r, p, i0, acc, jb, je, first); break;
    case 5: weighted_sum<V, E, 5, NR>(a, r, p, i0, acc, jb, je, first); break;
    case 4: weighted_sum<V, E, 4, NR>(a, r, p, i0, acc, jb, je, first); break;
    case 3: weighted_sum<V, E, 3, NR>(a, r, p, i0, acc, jb, je, first); break;
    case 2: weighted_sum<V, E, 2, NR>(a, r, p, i0, acc, jb, je, first); break;
    case 1: weighted_sum<V, E, 1, NR>(a, r, p, i0, acc, jb, je, first); break;
    default: break;
  }
}

// The elements past the whole vectors of row r (hd not a multiple of the vector), one by one.
template <class V, class E>
[[gnu::always_inline]] inline void weighted_tail(const AttendRows& a, int r, const float* p, float* acc) {
  constexpr int W = lanes<V>();
  for (int i = a.hd / W * W; i < a.hd; ++i) {
    float sum = 0;
    for (int64_t j = a.lo[r]; j <= a.hi[r]; ++j) sum += p[j] * to_float(static_cast<const E*>(a.v[j - a.v_first])[a.kv_offset + i]);
    acc[i] = sum;
  }
}

// Always inlined into the entry points below. Scores and weighted sums run two rows at a time (the
// last one alone when nq is odd), a tile of keys (scores) or a block of value rows (weighted sums) at a
// time for all the rows, so that it is read from memory once and then from the first-level cache.
template <class T, class E>
[[gnu::always_inline]] inline void attend(const AttendRows& a, float* buf) {
  using V = typename T::F;
  constexpr int KS = T::kSumVectors;
  constexpr int64_t kValueBlock = 32;  // value rows a block (32 KiB of floats at 256 elements)
  int64_t jlo = a.lo[0], jhi = a.hi[0];
  for (int r = 1; r < a.nq; ++r) {
    jlo = std::min(jlo, a.lo[r]);
    jhi = std::max(jhi, a.hi[r]);
  }
  const int64_t t0 = jlo / kAttendTile, t1 = jhi / kAttendTile, width = (t1 - t0 + 1) * kAttendTile;
  const int hd = a.hd;
  const int64_t sw = attend_sums_floats(hd);
  // The rows' sums, the rows' 1 / Σ, then each row's scores over tiles [t0, t1].
  float* acc = buf;
  float* inv = buf + a.nq * sw;
  float* scores = inv + attend_sums_floats(a.nq);
  scores_of<T, E>(a, t0, t1, scores);
  for (int r = 0; r < a.nq; ++r) {  // softmax: scores become exp(s − max), inv[r] = 1 / their sum
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
  // The weighted sums of value rows, block by block.
  const auto p = [&](int row) { return scores + row * width - t0 * kAttendTile; };  // p(row)[j] for key j
  for (int64_t jb = jlo; jb <= jhi; jb += kValueBlock) {
    const int64_t je = std::min(jhi, jb + kValueBlock - 1);
    int r = 0;
    for (; r + 2 <= a.nq; r += 2) {
      const float* ps[2] = {p(r), p(r + 1)};
      float* sums[2] = {acc + r * sw, acc + (r + 1) * sw};
      weighted_sums<V, E, 2, KS>(a, r, ps, sums, jb, je, jb == jlo);
    }
    for (; r < a.nq; ++r) {
      const float* ps[1] = {p(r)};
      float* sums[1] = {acc + r * sw};
      weighted_sums<V, E, 1, KS>(a, r, ps, sums, jb, je, jb == jlo);
    }
  }
  for (int r = 0; r < a.nq; ++r) {
    float* sums = acc + r * sw;
    weighted_tail<V, E>(a, r, p(r), sums);
    for (int i = 0; i < hd; ++i) a.out[r][i] = sums[i] * inv[r];
  }
}


// 16-float vectors with AVX-512 (32 registers), 8-float ones otherwise (16 AVX2 registers, or pairs
// of 4).
#if defined(__AVX512F__)
using Vectors = Wide;
#else
using Vectors = Narrow;
#endif

}  // namespace

void ZINC_ATTEND_ISA(attend)(const AttendRows& a, float* buf) {
  if (a.f16) attend<Vectors, uint16_t>(a, buf);
  else attend<Vectors, float>(a, buf);
}

void ZINC_ATTEND_ISA(halves_to_floats)(const uint16_t* h, float* out, int64_t n) {
  using V = Vectors::F;
  constexpr int W = lanes<V>();
  int64_t i = 0;
  for (; i + W <= n; i += W) store<V>(out + i, load<V>(h + i));
  for (; i < n; ++i) out[i] = quant::fp16_to_f32(h[i]);
}

void ZINC_ATTEND_ISA(transpose)(const float* const* rows, int64_t width, float* tile) {
  for (int l = 0; l < kAttendTile; ++l) {
    if (!rows[l]) {
      for (int64_t c = 0; c < width; ++c) tile[c * kAttendTile + l] = 0.0f;
      continue;
    }
    for (int64_t c = 0; c < width; ++c) tile[c * kAttendTile + l] = rows[l][c];
  }
}

}  // namespace zinc::backend::cpu
