// NEON dot products (AArch64): one weight row against one activation row, the same results as
// dot_ref() up to float summation order. Plain ARMv8.0 NEON; where the compiler targets the dot-product
// extension (__ARM_FEATURE_DOTPROD, e.g. -march=armv8.2-a+dotprod or Apple targets) the int8 core uses
// SDOT, otherwise widening multiplies (SMULL) with pairwise accumulation (SADALP). On other
// architectures this file compiles to a table that returns nullptr.
//
// Layout: rows of packed blocks exactly as in blocks.h (unaligned loads); activations as dot.h pairs
// them (F32, Q8_0, Q8_1, Q8_K). Weight codes are widened to signed int8 in registers (Q4_0: q-8,
// Q6_K: q-32, Q3_K: q-4 ...), so every product is int8·int8 and every sub-block sum is exact in int32;
// each (sub-)block sum is then scaled once, as the reference does.
//
// Bytes moved per call: the weight row (row_size(type, n)) plus the activation row
// (activation_row_size(type, n)); nothing is written but the returned float.
#include "quant/dot.h"

#if defined(__aarch64__)

#include <arm_neon.h>

#include <cstdint>
#include <cstring>

#include "quant/blocks.h"
#include "quant/fp16.h"

namespace zinc::quant {

namespace {

// ---- helpers ------------------------------------------------------------------------------------

inline float h2f(uint16_t h) { return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0); }

// acc + Σ a·b over 16 int8 pairs, spread over 4 int32 lanes (the lane split differs with/without SDOT;
// callers only use the total).
inline int32x4_t dot16(int32x4_t acc, int8x16_t a, int8x16_t b) {
#if defined(__ARM_FEATURE_DOTPROD)
  return vdotq_s32(acc, a, b);
#else
  acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(a), vget_low_s8(b)));
  return vpadalq_s16(acc, vmull_high_s8(a, b));
#endif
}

inline int8x16_t s8(uint8x16_t v) { return vreinterpretq_s8_u8(v); }

// Bits 0..15 of `bits` → 16 bytes, 0xff where the bit is set.
inline uint8x16_t bits_to_bytes16(uint32_t bits) {
  static const uint8_t kBit[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
  const uint8x16_t spread = vcombine_u8(vdup_n_u8(static_cast<uint8_t>(bits)), vdup_n_u8(static_cast<uint8_t>(bits >> 8)));
  return vtstq_u8(spread, vld1q_u8(kBit));
}

// ---- float weights ------------------------------------------------------------------------------

struct F32 {
  using T = float;
  static void load8(const float* p, float32x4_t* lo, float32x4_t* hi) {
    *lo = vld1q_f32(p);
    *hi = vld1q_f32(p + 4);
  }
  static float one(float f) { return f; }
};
struct F16 {
  using T = uint16_t;
  static void load8(const uint16_t* p, float32x4_t* lo, float32x4_t* hi) {
    const float16x8_t h = vreinterpretq_f16_u16(vld1q_u16(p));
    *lo = vcvt_f32_f16(vget_low_f16(h));
    *hi = vcvt_high_f32_f16(h);
  }
  static float one(uint16_t h) { return h2f(h); }
};
struct BF16 {
  using T = uint16_t;
  static void load8(const uint16_t* p, float32x4_t* lo, float32x4_t* hi) {
    const uint16x8_t h = vld1q_u16(p);
    *lo = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h), 16));
    *hi = vreinterpretq_f32_u32(vshll_high_n_u16(h, 16));
  }
  static float one(uint16_t h) { return bf16_to_f32(h); }
};

template <class C>
float dot_float(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const typename C::T*>(w);
  const auto* y = static_cast<const float*>(a);
  float32x4_t acc0 = vdupq_n_f32(0), acc1 = vdupq_n_f32(0), acc2 = vdupq_n_f32(0), acc3 = vdupq_n_f32(0);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    float32x4_t x0, x1, x2, x3;
    C::load8(x + i, &x0, &x1);
    C::load8(x + i + 8, &x2, &x3);
    acc0 = vfmaq_f32(acc0, x0, vld1q_f32(y + i));
    acc1 = vfmaq_f32(acc1, x1, vld1q_f32(y + i + 4));
    acc2 = vfmaq_f32(acc2, x2, vld1q_f32(y + i + 8));
    acc3 = vfmaq_f32(acc3, x3, vld1q_f32(y + i + 12));
  }
  for (; i + 8 <= n; i += 8) {
    float32x4_t x0, x1;
    C::load8(x + i, &x0, &x1);
    acc0 = vfmaq_f32(acc0, x0, vld1q_f32(y + i));
    acc1 = vfmaq_f32(acc1, x1, vld1q_f32(y + i + 4));
  }
  float s = vaddvq_f32(vaddq_f32(vaddq_f32(acc0, acc1), vaddq_f32(acc2, acc3)));
  for (; i < n; ++i) s += C::one(x[i]) * y[i];
  return s;
}

// ---- 32-element blocks against Q8_0 / Q8_1 ------------------------------------------------------

// codes(b, &lo, &hi): the signed codes of elements 0..15 and 16..31.
struct DecodeQ4_0 {
  using Block = BlockQ4_0;
  static void codes(const Block& b, int8x16_t* lo, int8x16_t* hi) {
    const uint8x16_t v = vld1q_u8(b.qs);
    *lo = vsubq_s8(s8(vandq_u8(v, vdupq_n_u8(0x0f))), vdupq_n_s8(8));
    *hi = vsubq_s8(s8(vshrq_n_u8(v, 4)), vdupq_n_s8(8));
  }
  static float scale(const Block& b) { return h2f(b.d); }
};
// q - 16 = nibble when the fifth bit is set, nibble - 16 (= nibble | 0xf0 as int8) when it is not.
inline void q5_codes(const uint8_t* qs, const uint8_t* qh, bool centred, int8x16_t* lo, int8x16_t* hi) {
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
  const uint8x16_t v = vld1q_u8(qs);
  const uint8x16_t n_lo = vandq_u8(v, vdupq_n_u8(0x0f)), n_hi = vshrq_n_u8(v, 4);
  const uint8x16_t b_lo = bits_to_bytes16(bits), b_hi = bits_to_bytes16(bits >> 16);
  if (centred) {
    *lo = s8(vorrq_u8(n_lo, vbicq_u8(vdupq_n_u8(0xf0), b_lo)));
    *hi = s8(vorrq_u8(n_hi, vbicq_u8(vdupq_n_u8(0xf0), b_hi)));
  } else {
    *lo = s8(vorrq_u8(n_lo, vandq_u8(b_lo, vdupq_n_u8(0x10))));
    *hi = s8(vorrq_u8(n_hi, vandq_u8(b_hi, vdupq_n_u8(0x10))));
  }
}
struct DecodeQ5_0 {
  using Block = BlockQ5_0;
  static void codes(const Block& b, int8x16_t* lo, int8x16_t* hi) { q5_codes(b.qs, b.qh, true, lo, hi); }
  static float scale(const Block& b) { return h2f(b.d); }
};
struct DecodeQ8_0 {
  using Block = BlockQ8_0;
  static void codes(const Block& b, int8x16_t* lo, int8x16_t* hi) {
    *lo = vld1q_s8(b.qs);
    *hi = vld1q_s8(b.qs + 16);
  }
  static float scale(const Block& b) { return h2f(b.d); }
};
inline void codebook_codes(const int8_t* table, const uint8_t* qs, int8x16_t* lo, int8x16_t* hi) {
  const int8x16_t t = vld1q_s8(table);
  const uint8x16_t v = vld1q_u8(qs);
  *lo = vqtbl1q_s8(t, vandq_u8(v, vdupq_n_u8(0x0f)));
  *hi = vqtbl1q_s8(t, vshrq_n_u8(v, 4));
}
struct DecodeIQ4_NL {
  using Block = BlockIQ4_NL;
  static void codes(const Block& b, int8x16_t* lo, int8x16_t* hi) { codebook_codes(kIQ4NLValues, b.qs, lo, hi); }
  static float scale(const Block& b) { return h2f(b.d); }
};
struct DecodeMXFP4 {
  using Block = BlockMXFP4;
  static void codes(const Block& b, int8x16_t* lo, int8x16_t* hi) { codebook_codes(kMXFP4Values, b.qs, lo, hi); }
  static float scale(const Block& b) { return e8m0_to_f32_half(b.e); }
};

template <class D, class X>
inline int32x4_t block_dot(const X& x, const int8_t* a) {
  int8x16_t lo, hi;
  D::codes(x, &lo, &hi);
  return dot16(dot16(vdupq_n_s32(0), lo, vld1q_s8(a)), hi, vld1q_s8(a + 16));
}

template <class D>
float dot_q8_0_family(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const typename D::Block*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  const int64_t nb = n / kQK;
  float32x4_t acc0 = vdupq_n_f32(0), acc1 = vdupq_n_f32(0);
  int64_t i = 0;
  for (; i + 2 <= nb; i += 2) {
    const int32x4_t s0 = block_dot<D>(x[i], y[i].qs);
    const int32x4_t s1 = block_dot<D>(x[i + 1], y[i + 1].qs);
    acc0 = vfmaq_n_f32(acc0, vcvtq_f32_s32(s0), D::scale(x[i]) * h2f(y[i].d));
    acc1 = vfmaq_n_f32(acc1, vcvtq_f32_s32(s1), D::scale(x[i + 1]) * h2f(y[i + 1].d));
  }
  if (i < nb) acc0 = vfmaq_n_f32(acc0, vcvtq_f32_s32(block_dot<D>(x[i], y[i].qs)), D::scale(x[i]) * h2f(y[i].d));
  return vaddvq_f32(vaddq_f32(acc0, acc1));
}

struct DecodeQ4_1 {
  using Block = BlockQ4_1;
  static void codes(const Block& b, int8x16_t* lo, int8x16_t* hi) {
    const uint8x16_t v = vld1q_u8(b.qs);
    *lo = s8(vandq_u8(v, vdupq_n_u8(0x0f)));
    *hi = s8(vshrq_n_u8(v, 4));
  }
};
struct DecodeQ5_1 {
  using Block = BlockQ5_1;
  static void codes(const Block& b, int8x16_t* lo, int8x16_t* hi) { q5_codes(b.qs, b.qh, false, lo, hi); }
};

// x·a = d·da·Σq·a + m·s per block.
template <class D>
float dot_q8_1_family(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const typename D::Block*>(w);
  const auto* y = static_cast<const BlockQ8_1*>(a);
  const int64_t nb = n / kQK;
  float32x4_t acc0 = vdupq_n_f32(0), acc1 = vdupq_n_f32(0);
  float sum_m = 0;
  int64_t i = 0;
  for (; i + 2 <= nb; i += 2) {
    const int32x4_t s0 = block_dot<D>(x[i], y[i].qs);
    const int32x4_t s1 = block_dot<D>(x[i + 1], y[i + 1].qs);
    acc0 = vfmaq_n_f32(acc0, vcvtq_f32_s32(s0), h2f(x[i].d) * h2f(y[i].d));
    acc1 = vfmaq_n_f32(acc1, vcvtq_f32_s32(s1), h2f(x[i + 1].d) * h2f(y[i + 1].d));
    sum_m += h2f(x[i].m) * h2f(y[i].s) + h2f(x[i + 1].m) * h2f(y[i + 1].s);
  }
  if (i < nb) {
    acc0 = vfmaq_n_f32(acc0, vcvtq_f32_s32(block_dot<D>(x[i], y[i].qs)), h2f(x[i].d) * h2f(y[i].d));
    sum_m += h2f(x[i].m) * h2f(y[i].s);
  }
  return vaddvq_f32(vaddq_f32(acc0, acc1)) + sum_m;
}

// ---- K-quants against Q8_K ----------------------------------------------------------------------

// Σ m_k · (bsums[2k] + bsums[2k+1]) for 8 mins (Q4_K, Q5_K).
inline int32_t mins_dot_pairs(const uint8_t mins[8], const int16_t* bsums) {
  const int16x8_t pairs = vpaddq_s16(vld1q_s16(bsums), vld1q_s16(bsums + 8));
  const int16x8_t m = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(mins)));
  return vaddvq_s32(vaddq_s32(vmull_s16(vget_low_s16(pairs), vget_low_s16(m)), vmull_high_s16(pairs, m)));
}

// Q4_K / Q5_K packed scales → sc[0..7], m[0..7].
inline void kquant_scales_mins(const uint8_t* p, uint8_t sc[8], uint8_t m[8]) {
  uint32_t u[3];
  std::memcpy(u, p, 12);
  const uint32_t s[2] = {u[0] & 0x3f3f3f3fu, (u[2] & 0x0f0f0f0fu) | ((u[0] >> 2) & 0x30303030u)};
  const uint32_t mm[2] = {u[1] & 0x3f3f3f3fu, ((u[2] >> 4) & 0x0f0f0f0fu) | ((u[1] >> 2) & 0x30303030u)};
  std::memcpy(sc, s, 8);
  std::memcpy(m, mm, 8);
}

float dot_q2_k(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ2_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float s = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const uint8x16_t sc8 = vld1q_u8(x[i].scales);
    // Mins: Σ (scales[sb] >> 4) · bsums[sb].
    const int16x8_t mins_lo = vreinterpretq_s16_u16(vmovl_u8(vshr_n_u8(vget_low_u8(sc8), 4)));
    const int16x8_t mins_hi = vreinterpretq_s16_u16(vmovl_high_u8(vshrq_n_u8(sc8, 4)));
    const int16x8_t bs_lo = vld1q_s16(y[i].bsums), bs_hi = vld1q_s16(y[i].bsums + 8);
    int32x4_t m = vmull_s16(vget_low_s16(mins_lo), vget_low_s16(bs_lo));
    m = vmlal_high_s16(m, mins_lo, bs_lo);
    m = vmlal_s16(m, vget_low_s16(mins_hi), vget_low_s16(bs_hi));
    m = vmlal_high_s16(m, mins_hi, bs_hi);
    uint8_t sc[16];
    vst1q_u8(sc, vandq_u8(sc8, vdupq_n_u8(0x0f)));
    int32x4_t sumi = vdupq_n_s32(0);
    const int8_t* q8 = y[i].qs;
    for (int nn = 0; nn < 2; ++nn) {
      const uint8x16_t q_a = vld1q_u8(x[i].qs + 32 * nn), q_b = vld1q_u8(x[i].qs + 32 * nn + 16);
      for (int j = 0; j < 4; ++j) {
        const int sh = 2 * j;
        const int8x16_t c_a = s8(vandq_u8(vshlq_u8(q_a, vdupq_n_s8(static_cast<int8_t>(-sh))), vdupq_n_u8(3)));
        const int8x16_t c_b = s8(vandq_u8(vshlq_u8(q_b, vdupq_n_s8(static_cast<int8_t>(-sh))), vdupq_n_u8(3)));
        const int sb = 8 * nn + 2 * j;
        sumi = vmlaq_n_s32(sumi, dot16(vdupq_n_s32(0), c_a, vld1q_s8(q8 + 128 * nn + 32 * j)), sc[sb]);
        sumi = vmlaq_n_s32(sumi, dot16(vdupq_n_s32(0), c_b, vld1q_s8(q8 + 128 * nn + 32 * j + 16)), sc[sb + 1]);
      }
    }
    s += y[i].d * (h2f(x[i].d) * static_cast<float>(vaddvq_s32(sumi)) - h2f(x[i].dmin) * static_cast<float>(vaddvq_s32(m)));
  }
  return s;
}

float dot_q3_k(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ3_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float s = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    uint8_t sc[16];
    q3k_scales(x[i].scales, sc);
    const uint8x16_t hm_a = vld1q_u8(x[i].hmask), hm_b = vld1q_u8(x[i].hmask + 16);
    int32x4_t sumi = vdupq_n_s32(0);
    const int8_t* q8 = y[i].qs;
    for (int nn = 0; nn < 2; ++nn) {
      const uint8x16_t q_a = vld1q_u8(x[i].qs + 32 * nn), q_b = vld1q_u8(x[i].qs + 32 * nn + 16);
      for (int j = 0; j < 4; ++j) {
        const int8x16_t down = vdupq_n_s8(static_cast<int8_t>(-2 * j));
        const uint8x16_t bit = vdupq_n_u8(static_cast<uint8_t>(1u << (4 * nn + j)));
        // code = low bits - 4 unless the hmask bit is set: (low | 4·bit) - 4.
        const uint8x16_t h_a = vandq_u8(vtstq_u8(hm_a, bit), vdupq_n_u8(4));
        const uint8x16_t h_b = vandq_u8(vtstq_u8(hm_b, bit), vdupq_n_u8(4));
        const int8x16_t c_a = vsubq_s8(s8(vorrq_u8(vandq_u8(vshlq_u8(q_a, down), vdupq_n_u8(3)), h_a)), vdupq_n_s8(4));
        const int8x16_t c_b = vsubq_s8(s8(vorrq_u8(vandq_u8(vshlq_u8(q_b, down), vdupq_n_u8(3)), h_b)), vdupq_n_s8(4));
        const int sb = 8 * nn + 2 * j;
        sumi = vmlaq_n_s32(sumi, dot16(vdupq_n_s32(0), c_a, vld1q_s8(q8 + 128 * nn + 32 * j)), sc[sb] - 32);
        sumi = vmlaq_n_s32(sumi, dot16(vdupq_n_s32(0), c_b, vld1q_s8(q8 + 128 * nn + 32 * j + 16)), sc[sb + 1] - 32);
      }
    }
    s += y[i].d * h2f(x[i].d) * static_cast<float>(vaddvq_s32(sumi));
  }
  return s;
}

template <bool kFive, class B>
float dot_q45_k(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const B*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float s = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    uint8_t sc[8], m[8];
    kquant_scales_mins(x[i].scales, sc, m);
    const int32_t sum_m = mins_dot_pairs(m, y[i].bsums);
    uint8x16_t qh_a, qh_b;
    if constexpr (kFive) {
      qh_a = vld1q_u8(x[i].qh);
      qh_b = vld1q_u8(x[i].qh + 16);
    }
    int32x4_t sumi = vdupq_n_s32(0);
    const int8_t* q8 = y[i].qs;
    for (int c = 0; c < 4; ++c) {
      const uint8x16_t q_a = vld1q_u8(x[i].qs + 32 * c), q_b = vld1q_u8(x[i].qs + 32 * c + 16);
      uint8x16_t lo_a = vandq_u8(q_a, vdupq_n_u8(0x0f)), lo_b = vandq_u8(q_b, vdupq_n_u8(0x0f));
      uint8x16_t hi_a = vshrq_n_u8(q_a, 4), hi_b = vshrq_n_u8(q_b, 4);
      if constexpr (kFive) {
        const uint8x16_t bit_lo = vdupq_n_u8(static_cast<uint8_t>(1u << (2 * c)));
        const uint8x16_t bit_hi = vdupq_n_u8(static_cast<uint8_t>(2u << (2 * c)));
        const uint8x16_t b16 = vdupq_n_u8(0x10);
        lo_a = vorrq_u8(lo_a, vandq_u8(vtstq_u8(qh_a, bit_lo), b16));
        lo_b = vorrq_u8(lo_b, vandq_u8(vtstq_u8(qh_b, bit_lo), b16));
        hi_a = vorrq_u8(hi_a, vandq_u8(vtstq_u8(qh_a, bit_hi), b16));
        hi_b = vorrq_u8(hi_b, vandq_u8(vtstq_u8(qh_b, bit_hi), b16));
      }
      const int8_t* a8 = q8 + 64 * c;
      const int32x4_t p_lo = dot16(dot16(vdupq_n_s32(0), s8(lo_a), vld1q_s8(a8)), s8(lo_b), vld1q_s8(a8 + 16));
      const int32x4_t p_hi = dot16(dot16(vdupq_n_s32(0), s8(hi_a), vld1q_s8(a8 + 32)), s8(hi_b), vld1q_s8(a8 + 48));
      sumi = vmlaq_n_s32(sumi, p_lo, sc[2 * c]);
      sumi = vmlaq_n_s32(sumi, p_hi, sc[2 * c + 1]);
    }
    s += y[i].d * (h2f(x[i].d) * static_cast<float>(vaddvq_s32(sumi)) - h2f(x[i].dmin) * static_cast<float>(sum_m));
  }
  return s;
}

float dot_q6_k(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ6_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  const uint8x16_t m15 = vdupq_n_u8(0x0f), m48 = vdupq_n_u8(0x30);
  const int8x16_t k32 = vdupq_n_s8(32);
  float s = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const int8_t* sc = x[i].scales;
    int32x4_t sumi = vdupq_n_s32(0);
    for (int nn = 0; nn < 2; ++nn) {
      const uint8_t* ql = x[i].ql + 64 * nn;
      const uint8_t* qh = x[i].qh + 32 * nn;
      const int8_t* a8 = y[i].qs + 128 * nn;
      for (int h = 0; h < 2; ++h) {  // elements l = 16h .. 16h+15 of each 32-element group k
        const uint8x16_t l0 = vld1q_u8(ql + 16 * h), l1 = vld1q_u8(ql + 32 + 16 * h);
        const uint8x16_t hb = vld1q_u8(qh + 16 * h);
        const int8x16_t q0 = vsubq_s8(s8(vorrq_u8(vandq_u8(l0, m15), vandq_u8(vshlq_n_u8(hb, 4), m48))), k32);
        const int8x16_t q1 = vsubq_s8(s8(vorrq_u8(vandq_u8(l1, m15), vandq_u8(vshlq_n_u8(hb, 2), m48))), k32);
        const int8x16_t q2 = vsubq_s8(s8(vorrq_u8(vshrq_n_u8(l0, 4), vandq_u8(hb, m48))), k32);
        const int8x16_t q3 = vsubq_s8(s8(vorrq_u8(vshrq_n_u8(l1, 4), vandq_u8(vshrq_n_u8(hb, 2), m48))), k32);
        // Group k covers elements nn*128 + 32k + l: sub-block 8nn + 2k + h.
        const int sb = 8 * nn + h;
        sumi = vmlaq_n_s32(sumi, dot16(vdupq_n_s32(0), q0, vld1q_s8(a8 + 16 * h)), sc[sb]);
        sumi = vmlaq_n_s32(sumi, dot16(vdupq_n_s32(0), q1, vld1q_s8(a8 + 32 + 16 * h)), sc[sb + 2]);
        sumi = vmlaq_n_s32(sumi, dot16(vdupq_n_s32(0), q2, vld1q_s8(a8 + 64 + 16 * h)), sc[sb + 4]);
        sumi = vmlaq_n_s32(sumi, dot16(vdupq_n_s32(0), q3, vld1q_s8(a8 + 96 + 16 * h)), sc[sb + 6]);
      }
    }
    s += y[i].d * h2f(x[i].d) * static_cast<float>(vaddvq_s32(sumi));
  }
  return s;
}

float dot_iq4_xs(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockIQ4_XS*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float s = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    int32x4_t sumi = vdupq_n_s32(0);
    for (int sb = 0; sb < 8; ++sb) {
      const int ls = ((x[i].scales_l[sb / 2] >> (4 * (sb % 2))) & 0xf) | (((x[i].scales_h >> (2 * sb)) & 3) << 4);
      int8x16_t lo, hi;
      codebook_codes(kIQ4NLValues, x[i].qs + 16 * sb, &lo, &hi);
      const int8_t* a8 = y[i].qs + 32 * sb;
      sumi = vmlaq_n_s32(sumi, dot16(dot16(vdupq_n_s32(0), lo, vld1q_s8(a8)), hi, vld1q_s8(a8 + 16)), ls - 32);
    }
    s += y[i].d * h2f(x[i].d) * static_cast<float>(vaddvq_s32(sumi));
  }
  return s;
}

}  // namespace

DotFn dot_fn_neon(TensorType w) {
  switch (w) {
    case TensorType::F32: return dot_float<F32>;
    case TensorType::F16: return dot_float<F16>;
    case TensorType::BF16: return dot_float<BF16>;
    case TensorType::Q4_0: return dot_q8_0_family<DecodeQ4_0>;
    case TensorType::Q5_0: return dot_q8_0_family<DecodeQ5_0>;
    case TensorType::Q8_0: return dot_q8_0_family<DecodeQ8_0>;
    case TensorType::IQ4_NL: return dot_q8_0_family<DecodeIQ4_NL>;
    case TensorType::MXFP4: return dot_q8_0_family<DecodeMXFP4>;
    case TensorType::Q4_1: return dot_q8_1_family<DecodeQ4_1>;
    case TensorType::Q5_1: return dot_q8_1_family<DecodeQ5_1>;
    case TensorType::Q2_K: return dot_q2_k;
    case TensorType::Q3_K: return dot_q3_k;
    case TensorType::Q4_K: return dot_q45_k<false, BlockQ4_K>;
    case TensorType::Q5_K: return dot_q45_k<true, BlockQ5_K>;
    case TensorType::Q6_K: return dot_q6_k;
    case TensorType::IQ4_XS: return dot_iq4_xs;
    default: return nullptr;
  }
}

}  // namespace zinc::quant

#else  // not AArch64: no NEON kernels

namespace zinc::quant {

DotFn dot_fn_neon(TensorType) { return nullptr; }

}  // namespace zinc::quant

#endif
