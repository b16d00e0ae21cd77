// AVX2 dot products: one weight row (any type in dot.h) against one activation row, and tiles of several
// weight and activation rows for prefill (see the tile section); same results as dot_ref() up to float
// summation order. Compiled with -mavx2 -mfma -mf16c; the dispatcher calls these
// only when the CPU has all three.
//
// Layout: rows of packed blocks exactly as in blocks.h (no alignment: every load is unaligned);
// activations are F32 for F32/F16/BF16 weights, else Q8_0 / Q8_1 / Q8_K as dot.h pairs them, with
// activation codes in -127..127 (what quantize_activation() produces; -128 may overflow the sign trick).
// Weight codes may take any value their bits allow, scales any finite value.
//
// Integer core: 32 weight codes and 32 activation codes meet in _mm256_maddubs_epi16 (unsigned x signed
// bytes to int16 pairs), then _mm256_madd_epi16 widens to int32 (with ones, or with the sub-block scale
// for K-quants). Signed weight codes go through the sign trick: |w| times (a with the sign of w). Per
// block / super-block the int32 sums are scaled once in float, as dot_ref does; the fp16 scales of four
// 32-element blocks are converted by one instruction. Offsets of K-quant codes (Q3_K -4, Q6_K -32) and
// minimums are applied through the Q8_K block sums.
//
// Bytes moved per call: n/32 blocks of weights (18..34 bytes each) + n/32 * 34 or 36 activation bytes,
// or n/256 super-blocks (84..210 bytes) + n/256 * 292 activation bytes; float types 4/2/2 bytes per
// weight + 4 per activation.
#include "quant/dot.h"

// The build compiles this file with the AVX2 flags on x86-64 only; anywhere else it is an empty table.
#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "quant/blocks.h"
#include "quant/fp16.h"

namespace zinc::quant {

namespace {

// ---- helpers ------------------------------------------------------------------------------------

inline float h2f(uint16_t h) { return _cvtsh_ss(h); }

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
inline float hsum(__m128 s) {
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline __m128i load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }

// 16 bytes of packed nibbles → 32 bytes: low nibbles (elements 0..15) then high nibbles (16..31).
// (Broadcast load + per-64-bit-lane shift: no cross-lane shuffle.)
inline __m256i nibbles32(const uint8_t* qs) {
  const __m256i v = _mm256_broadcastsi128_si256(load128(qs));
  return _mm256_and_si256(_mm256_srlv_epi64(v, _mm256_set_epi64x(4, 4, 0, 0)), _mm256_set1_epi8(0x0f));
}

// 32-bit mask (bit j = element j) → 32 bytes, 0xff where the bit is set.
inline __m256i bits_to_bytes(const uint8_t* p) {
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_broadcastd_epi32(_mm_loadu_si32(p)),
      _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  return _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
}

// Σ over groups of 4 of signed w·a (8 int32 lanes). |w| ≤ 128, |a| ≤ 127, so int16 pairs never saturate.
inline __m256i dot_i8(__m256i w, __m256i a) {
  const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w));
  return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}
// Same for unsigned w ≤ 127.
inline __m256i dot_u8(__m256i w, __m256i a) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(w, a), _mm256_set1_epi16(1));
}

// Shuffle control that broadcasts 16-bit word k of each 128-bit lane across that lane.
inline __m256i word_splat(int k) { return _mm256_set1_epi16(static_cast<int16_t>(((2 * k + 1) << 8) | (2 * k))); }
// Word k of the low lane across the low lane, word k+1 across the high lane (v holds the same 8 words
// in both lanes): the scales of two consecutive 16-element sub-blocks covering one 32-byte vector.
inline __m256i word_pair_splat(__m256i v, int k) {
  return _mm256_shuffle_epi8(v, _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(((2 * k + 3) << 8) | (2 * k + 2))),
                                                 _mm_set1_epi16(static_cast<int16_t>(((2 * k + 1) << 8) | (2 * k)))));
}

// ---- float weights ------------------------------------------------------------------------------

inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
struct F16 {
  static __m256 load8(const uint16_t* p) { return _mm256_cvtph_ps(load128(p)); }
  static float one(uint16_t h) { return h2f(h); }
};
struct BF16 {
  static __m256 load8(const uint16_t* p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(load128(p)), 16));
  }
  static float one(uint16_t h) { return bf16_to_f32(h); }
};
struct F32 {
  static __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
  static float one(float f) { return f; }
};

template <class Conv, class T>
float dot_float(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const T*>(w);
  const auto* y = static_cast<const float*>(a);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps(), acc2 = _mm256_setzero_ps(),
         acc3 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    acc0 = _mm256_fmadd_ps(Conv::load8(x + i), load8(y + i), acc0);
    acc1 = _mm256_fmadd_ps(Conv::load8(x + i + 8), load8(y + i + 8), acc1);
    acc2 = _mm256_fmadd_ps(Conv::load8(x + i + 16), load8(y + i + 16), acc2);
    acc3 = _mm256_fmadd_ps(Conv::load8(x + i + 24), load8(y + i + 24), acc3);
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(Conv::load8(x + i), load8(y + i), acc0);
  float s = hsum(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
  for (; i < n; ++i) s += Conv::one(x[i]) * y[i];
  return s;
}

// ---- 32-element blocks against Q8_0 -------------------------------------------------------------

// Four fp16 scales of consecutive blocks → 4 floats (one conversion instead of four scalar ones).
template <class B>
inline __m128 fp16_scales4(const B* x) {
  const uint64_t h = static_cast<uint64_t>(x[0].d) | static_cast<uint64_t>(x[1].d) << 16 |
                     static_cast<uint64_t>(x[2].d) << 32 | static_cast<uint64_t>(x[3].d) << 48;
  return _mm_cvtph_ps(_mm_cvtsi64_si128(static_cast<long long>(h)));
}
// Lane k of v in all 8 lanes.
inline __m256 splat(__m128 v, int k) {
  return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(v), _mm256_set1_epi32(k));
}

// Each Decode gives the 32 signed weight codes of a block and its float scale (one, or four blocks').
struct DecodeQ4_0 {
  using Block = BlockQ4_0;
  static __m256i codes(const Block& b) { return _mm256_sub_epi8(nibbles32(b.qs), _mm256_set1_epi8(8)); }
  static float scale(const Block& b) { return h2f(b.d); }
  static __m128 scales4(const Block* b) { return fp16_scales4(b); }
};
struct DecodeQ5_0 {
  using Block = BlockQ5_0;
  // q - 16 = nibble when the fifth bit is set, nibble - 16 (= nibble | 0xf0 as int8) when it is not.
  static __m256i codes(const Block& b) {
    return _mm256_or_si256(nibbles32(b.qs), _mm256_andnot_si256(bits_to_bytes(b.qh), _mm256_set1_epi8(static_cast<char>(0xf0))));
  }
  static float scale(const Block& b) { return h2f(b.d); }
  static __m128 scales4(const Block* b) { return fp16_scales4(b); }
};
struct DecodeQ8_0 {
  using Block = BlockQ8_0;
  static __m256i codes(const Block& b) { return load256(b.qs); }
  static float scale(const Block& b) { return h2f(b.d); }
  static __m128 scales4(const Block* b) { return fp16_scales4(b); }
};
struct DecodeIQ4_NL {
  using Block = BlockIQ4_NL;
  static __m256i codes(const Block& b) {
    return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(load128(kIQ4NLValues)), nibbles32(b.qs));
  }
  static float scale(const Block& b) { return h2f(b.d); }
  static __m128 scales4(const Block* b) { return fp16_scales4(b); }
};
struct DecodeMXFP4 {
  using Block = BlockMXFP4;
  static __m256i codes(const Block& b) {
    return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(load128(kMXFP4Values)), nibbles32(b.qs));
  }
  static float scale(const Block& b) { return e8m0_to_f32_half(b.e); }
  // E8M0 → float bits: (e-1) << 23 for e ≥ 2, the subnormals 2^-128 and 2^-127 for e = 0, 1.
  static __m128 scales4(const Block* b) {
    const uint32_t packed = static_cast<uint32_t>(b[0].e) | static_cast<uint32_t>(b[1].e) << 8 |
                            static_cast<uint32_t>(b[2].e) << 16 | static_cast<uint32_t>(b[3].e) << 24;
    const __m128i e = _mm_cvtepu8_epi32(_mm_cvtsi32_si128(static_cast<int>(packed)));
    const __m128i normal = _mm_slli_epi32(_mm_sub_epi32(e, _mm_set1_epi32(1)), 23);
    const __m128i tiny = _mm_sllv_epi32(_mm_set1_epi32(0x00200000), e);
    return _mm_castsi128_ps(_mm_blendv_epi8(normal, tiny, _mm_cmplt_epi32(e, _mm_set1_epi32(2))));
  }
};

template <class D>
float dot_q8_0_family(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const typename D::Block*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  const int64_t nb = n / kQK;
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 4 <= nb; i += 4) {
    const __m128 d = _mm_mul_ps(D::scales4(x + i), fp16_scales4(y + i));
    const __m256 p0 = _mm256_cvtepi32_ps(dot_i8(D::codes(x[i]), load256(y[i].qs)));
    const __m256 p1 = _mm256_cvtepi32_ps(dot_i8(D::codes(x[i + 1]), load256(y[i + 1].qs)));
    const __m256 p2 = _mm256_cvtepi32_ps(dot_i8(D::codes(x[i + 2]), load256(y[i + 2].qs)));
    const __m256 p3 = _mm256_cvtepi32_ps(dot_i8(D::codes(x[i + 3]), load256(y[i + 3].qs)));
    acc0 = _mm256_fmadd_ps(splat(d, 0), p0, acc0);
    acc1 = _mm256_fmadd_ps(splat(d, 1), p1, acc1);
    acc0 = _mm256_fmadd_ps(splat(d, 2), p2, acc0);
    acc1 = _mm256_fmadd_ps(splat(d, 3), p3, acc1);
  }
  for (; i < nb; ++i) {
    const __m256 p = _mm256_cvtepi32_ps(dot_i8(D::codes(x[i]), load256(y[i].qs)));
    acc0 = _mm256_fmadd_ps(_mm256_set1_ps(D::scale(x[i]) * h2f(y[i].d)), p, acc0);
  }
  return hsum(_mm256_add_ps(acc0, acc1));
}

// ---- affine 32-element blocks against Q8_1 ------------------------------------------------------

struct DecodeQ4_1 {
  using Block = BlockQ4_1;
  static __m256i codes(const Block& b) { return nibbles32(b.qs); }
};
struct DecodeQ5_1 {
  using Block = BlockQ5_1;
  static __m256i codes(const Block& b) {
    return _mm256_or_si256(nibbles32(b.qs), _mm256_and_si256(bits_to_bytes(b.qh), _mm256_set1_epi8(0x10)));
  }
};

// Four blocks' fp16 pairs (d and m, or d and s) → 8 floats: the four d, then the four m / s.
template <class B, class F>
inline __m256 fp16_pairs4(const B* x, F second) {
  const uint64_t d = static_cast<uint64_t>(x[0].d) | static_cast<uint64_t>(x[1].d) << 16 |
                     static_cast<uint64_t>(x[2].d) << 32 | static_cast<uint64_t>(x[3].d) << 48;
  const uint64_t m = static_cast<uint64_t>(second(x[0])) | static_cast<uint64_t>(second(x[1])) << 16 |
                     static_cast<uint64_t>(second(x[2])) << 32 | static_cast<uint64_t>(second(x[3])) << 48;
  return _mm256_cvtph_ps(_mm_set_epi64x(static_cast<long long>(m), static_cast<long long>(d)));
}

// x·a = d·da·Σq·a + m·s per block (s = da·Σa stored in the activation block).
template <class D>
float dot_q8_1_family(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const typename D::Block*>(w);
  const auto* y = static_cast<const BlockQ8_1*>(a);
  const int64_t nb = n / kQK;
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  __m128 acc_m = _mm_setzero_ps();
  int64_t i = 0;
  for (; i + 4 <= nb; i += 4) {
    // [dx·dy × 4, m·s × 4]
    const __m256 f = _mm256_mul_ps(fp16_pairs4(x + i, [](const typename D::Block& b) { return b.m; }),
                                   fp16_pairs4(y + i, [](const BlockQ8_1& b) { return b.s; }));
    const __m128 d = _mm256_castps256_ps128(f);
    acc_m = _mm_add_ps(acc_m, _mm256_extractf128_ps(f, 1));
    const __m256 p0 = _mm256_cvtepi32_ps(dot_u8(D::codes(x[i]), load256(y[i].qs)));
    const __m256 p1 = _mm256_cvtepi32_ps(dot_u8(D::codes(x[i + 1]), load256(y[i + 1].qs)));
    const __m256 p2 = _mm256_cvtepi32_ps(dot_u8(D::codes(x[i + 2]), load256(y[i + 2].qs)));
    const __m256 p3 = _mm256_cvtepi32_ps(dot_u8(D::codes(x[i + 3]), load256(y[i + 3].qs)));
    acc0 = _mm256_fmadd_ps(splat(d, 0), p0, acc0);
    acc1 = _mm256_fmadd_ps(splat(d, 1), p1, acc1);
    acc0 = _mm256_fmadd_ps(splat(d, 2), p2, acc0);
    acc1 = _mm256_fmadd_ps(splat(d, 3), p3, acc1);
  }
  float sum_m = hsum(acc_m);
  for (; i < nb; ++i) {
    const __m256 p = _mm256_cvtepi32_ps(dot_u8(D::codes(x[i]), load256(y[i].qs)));
    acc0 = _mm256_fmadd_ps(_mm256_set1_ps(h2f(x[i].d) * h2f(y[i].d)), p, acc0);
    sum_m += h2f(x[i].m) * h2f(y[i].s);
  }
  return hsum(_mm256_add_ps(acc0, acc1)) + sum_m;
}

// ---- K-quants against Q8_K ----------------------------------------------------------------------

// Q4_K / Q5_K packed scales → bytes 0..7 = the 8 six-bit scales, bytes 8..15 = the 8 six-bit mins.
// p points at the 12 scale bytes, which are followed by at least 4 more bytes of the block.
//   scales 0-3 = p[0-3] & 63           scales 4-7 = (p[8-11] & 15) | (p[0-3] >> 6) << 4
//   mins   0-3 = p[4-7] & 63           mins   4-7 = (p[8-11] >> 4) | (p[4-7] >> 6) << 4
inline __m128i kquant_scales_mins(const uint8_t* p) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i low = _mm_shuffle_epi8(v, _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11));
  const __m128i top = _mm_shuffle_epi8(v, _mm_setr_epi8(-1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1, -1, 4, 5, 6, 7));
  const __m128i lo6 = _mm_or_si128(_mm_and_si128(low, _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0)),
                                   _mm_and_si128(_mm_srli_epi16(low, 4), _mm_setr_epi32(0, 0, 0, 0x0f0f0f0f)));
  return _mm_or_si128(lo6, _mm_and_si128(_mm_srli_epi16(top, 2), _mm_setr_epi32(0, 0x30303030, 0, 0x30303030)));
}

// Q3_K packed scales → the 16 six-bit scales minus 32, as int8. p points 2 bytes before the 12 scale
// bytes (a 16-byte load from there ends with the block's d, not past the block).
//   out[0-3]  = (s[0-3] & 15) | (s[8-11] & 3) << 4     out[4-7]   = (s[4-7] & 15) | (s[8-11] >> 2 & 3) << 4
//   out[8-11] = (s[0-3] >> 4) | (s[8-11] >> 4 & 3) << 4  out[12-15] = (s[4-7] >> 4) | (s[8-11] >> 6) << 4
inline __m128i q3k_scales_signed(const uint8_t* p) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i low = _mm_shuffle_epi8(v, _mm_setr_epi8(2, 3, 4, 5, 6, 7, 8, 9, 2, 3, 4, 5, 6, 7, 8, 9));
  const __m128i top = _mm_shuffle_epi8(v, _mm_setr_epi8(10, 11, 12, 13, 10, 11, 12, 13, 10, 11, 12, 13, 10, 11, 12, 13));
  const __m128i lo4 = _mm_or_si128(_mm_and_si128(low, _mm_setr_epi32(0x0f0f0f0f, 0x0f0f0f0f, 0, 0)),
                                   _mm_and_si128(_mm_srli_epi16(low, 4), _mm_setr_epi32(0, 0, 0x0f0f0f0f, 0x0f0f0f0f)));
  const __m128i hi2 = _mm_srlv_epi32(_mm_sllv_epi32(top, _mm_setr_epi32(4, 2, 0, 0)), _mm_setr_epi32(0, 0, 0, 2));
  return _mm_sub_epi8(_mm_or_si128(lo4, _mm_and_si128(hi2, _mm_set1_epi8(0x30))), _mm_set1_epi8(32));
}

// IQ4_XS: the 8 sub-block scales minus 32, as int16 words.
inline __m128i iq4xs_scales(const BlockIQ4_XS& b) {
  uint32_t l32;
  std::memcpy(&l32, b.scales_l, 4);
  // Low nibbles: byte 2i ← scales_l[i] & 15, byte 2i+1 ← scales_l[i] >> 4.
  uint64_t lo = l32;
  lo = (lo | (lo << 16)) & 0x0000ffff0000ffffull;
  lo = (lo | (lo << 8)) & 0x00ff00ff00ff00ffull;
  lo = (lo | (lo << 4)) & 0x0f0f0f0f0f0f0f0full;
  // High 2-bit fields: bits 2k..2k+1 of scales_h → bits 8k..8k+1.
  uint64_t hi = b.scales_h;
  hi = (hi | (hi << 24)) & 0x000000ff000000ffull;
  hi = (hi | (hi << 12)) & 0x000f000f000f000full;
  hi = (hi | (hi << 6)) & 0x0303030303030303ull;
  const __m128i ls = _mm_cvtsi64_si128(static_cast<long long>(lo | (hi << 4)));
  return _mm_sub_epi16(_mm_cvtepu8_epi16(ls), _mm_set1_epi16(32));
}

float dot_q2_k(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ2_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  const __m256i m3 = _mm256_set1_epi8(3);
  __m256 acc = _mm256_setzero_ps(), acc_m = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const __m128i sc8 = load128(x[i].scales);
    const __m256i scales = _mm256_cvtepu8_epi16(_mm_and_si128(sc8, _mm_set1_epi8(0x0f)));
    const __m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc8, 4), _mm_set1_epi8(0x0f)));
    const __m256i sum_m = _mm256_madd_epi16(mins, load256(y[i].bsums));
    const __m256i sc_lo = _mm256_permute2x128_si256(scales, scales, 0x00);  // scales 0..7 in both lanes
    const __m256i sc_hi = _mm256_permute2x128_si256(scales, scales, 0x11);  // scales 8..15
    const int8_t* q8 = y[i].qs;
    __m256i sumi = _mm256_setzero_si256();
    for (int nn = 0; nn < 2; ++nn) {
      const __m256i q2 = load256(x[i].qs + 32 * nn);
      const __m256i sc = nn == 0 ? sc_lo : sc_hi;
      for (int j = 0; j < 4; ++j) {
        const __m256i q = _mm256_and_si256(_mm256_srli_epi16(q2, 2 * j), m3);
        const __m256i p = _mm256_maddubs_epi16(q, load256(q8 + 128 * nn + 32 * j));
        sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, word_pair_splat(sc, 2 * j)));
      }
    }
    const float dy = y[i].d;
    acc = _mm256_fmadd_ps(_mm256_set1_ps(dy * h2f(x[i].d)), _mm256_cvtepi32_ps(sumi), acc);
    acc_m = _mm256_fmadd_ps(_mm256_set1_ps(dy * h2f(x[i].dmin)), _mm256_cvtepi32_ps(sum_m), acc_m);
  }
  return hsum(_mm256_sub_ps(acc, acc_m));
}

float dot_q3_k(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ3_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  const __m256i m3 = _mm256_set1_epi8(3), m4 = _mm256_set1_epi8(4);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const auto* block_bytes = reinterpret_cast<const uint8_t*>(&x[i]);
    const __m256i scales = _mm256_cvtepi8_epi16(q3k_scales_signed(block_bytes + offsetof(BlockQ3_K, scales) - 2));
    // Codes are q' - 4 with q' = low bits + 4·high bit in 0..7: Σ(q'-4)·a = Σq'·a - 4·bsum.
    __m256i sumi = _mm256_slli_epi32(_mm256_madd_epi16(scales, load256(y[i].bsums)), 2);
    sumi = _mm256_sub_epi32(_mm256_setzero_si256(), sumi);
    const __m256i sc_lo = _mm256_permute2x128_si256(scales, scales, 0x00);
    const __m256i sc_hi = _mm256_permute2x128_si256(scales, scales, 0x11);
    const __m256i hm = load256(x[i].hmask);
    const int8_t* q8 = y[i].qs;
    for (int nn = 0; nn < 2; ++nn) {
      const __m256i q2 = load256(x[i].qs + 32 * nn);
      const __m256i sc = nn == 0 ? sc_lo : sc_hi;
      for (int j = 0; j < 4; ++j) {
        const int b = 4 * nn + j;  // hmask bit of these 32 elements, moved to bit 2
        const __m256i hi = b <= 2 ? _mm256_and_si256(_mm256_slli_epi16(hm, 2 - b), m4)
                                  : _mm256_and_si256(_mm256_srli_epi16(hm, b - 2), m4);
        const __m256i q = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q2, 2 * j), m3), hi);
        const __m256i p = _mm256_maddubs_epi16(q, load256(q8 + 128 * nn + 32 * j));
        sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, word_pair_splat(sc, 2 * j)));
      }
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(y[i].d * h2f(x[i].d)), _mm256_cvtepi32_ps(sumi), acc);
  }
  return hsum(acc);
}

template <bool kFive, class B>
float dot_q45_k(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const B*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  const __m256i m15 = _mm256_set1_epi8(0x0f), m16 = _mm256_set1_epi8(0x10);
  __m256 acc = _mm256_setzero_ps();
  __m128 acc_m = _mm_setzero_ps();
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const __m256i scm = _mm256_cvtepu8_epi16(kquant_scales_mins(x[i].scales));  // 8 scales, 8 mins
    // Mins: sub-block sb meets bsums 2sb and 2sb+1.
    const __m128i bsum = _mm_hadd_epi16(load128(y[i].bsums), load128(y[i].bsums + 8));
    const __m128i sum_m = _mm_madd_epi16(_mm256_extracti128_si256(scm, 1), bsum);
    const __m256i sc = _mm256_permute2x128_si256(scm, scm, 0x00);  // the 8 scales in both lanes
    const int8_t* q8 = y[i].qs;
    __m256i qh;
    if constexpr (kFive) qh = load256(x[i].qh);
    __m256i sumi = _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
      const __m256i q4 = load256(x[i].qs + 32 * c);
      __m256i q_lo = _mm256_and_si256(q4, m15);
      __m256i q_hi = _mm256_and_si256(_mm256_srli_epi16(q4, 4), m15);
      if constexpr (kFive) {
        // Bit 2c (and 2c+1) of each qh byte becomes bit 4 of the code.
        const int b = 2 * c;
        const __m256i h_lo = b <= 4 ? _mm256_slli_epi16(qh, 4 - b) : _mm256_srli_epi16(qh, b - 4);
        const __m256i h_hi = b + 1 <= 4 ? _mm256_slli_epi16(qh, 3 - b) : _mm256_srli_epi16(qh, b - 3);
        q_lo = _mm256_or_si256(q_lo, _mm256_and_si256(h_lo, m16));
        q_hi = _mm256_or_si256(q_hi, _mm256_and_si256(h_hi, m16));
      }
      const __m256i p_lo = _mm256_maddubs_epi16(q_lo, load256(q8 + 64 * c));
      const __m256i p_hi = _mm256_maddubs_epi16(q_hi, load256(q8 + 64 * c + 32));
      sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p_lo, _mm256_shuffle_epi8(sc, word_splat(2 * c))));
      sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p_hi, _mm256_shuffle_epi8(sc, word_splat(2 * c + 1))));
    }
    const float dy = y[i].d;
    acc = _mm256_fmadd_ps(_mm256_set1_ps(dy * h2f(x[i].d)), _mm256_cvtepi32_ps(sumi), acc);
    acc_m = _mm_fmadd_ps(_mm_set1_ps(dy * h2f(x[i].dmin)), _mm_cvtepi32_ps(sum_m), acc_m);
  }
  return hsum(acc) - hsum(acc_m);
}

float dot_q6_k(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ6_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  const __m256i m15 = _mm256_set1_epi8(0x0f), m48 = _mm256_set1_epi8(0x30);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const __m256i scales = _mm256_cvtepi8_epi16(load128(x[i].scales));
    // Codes are q - 32 with q in 0..63: Σ(q-32)·a = Σq·a - 32·bsum per 16-element sub-block.
    __m256i sumi = _mm256_slli_epi32(_mm256_madd_epi16(scales, load256(y[i].bsums)), 5);
    sumi = _mm256_sub_epi32(_mm256_setzero_si256(), sumi);
    const __m256i sc_lo = _mm256_permute2x128_si256(scales, scales, 0x00);
    const __m256i sc_hi = _mm256_permute2x128_si256(scales, scales, 0x11);
    const int8_t* q8 = y[i].qs;
    for (int nn = 0; nn < 2; ++nn) {
      const __m256i ql0 = load256(x[i].ql + 64 * nn);
      const __m256i ql1 = load256(x[i].ql + 64 * nn + 32);
      const __m256i qh = load256(x[i].qh + 32 * nn);
      const __m256i sc = nn == 0 ? sc_lo : sc_hi;
      const __m256i q0 = _mm256_or_si256(_mm256_and_si256(ql0, m15), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m48));
      const __m256i q1 = _mm256_or_si256(_mm256_and_si256(ql1, m15), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m48));
      const __m256i q2 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m15), _mm256_and_si256(qh, m48));
      const __m256i q3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m15),
                                         _mm256_and_si256(_mm256_srli_epi16(qh, 2), m48));
      const int8_t* a8 = q8 + 128 * nn;
      const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(q0, load256(a8)), word_pair_splat(sc, 0));
      const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(q1, load256(a8 + 32)), word_pair_splat(sc, 2));
      const __m256i p2 = _mm256_madd_epi16(_mm256_maddubs_epi16(q2, load256(a8 + 64)), word_pair_splat(sc, 4));
      const __m256i p3 = _mm256_madd_epi16(_mm256_maddubs_epi16(q3, load256(a8 + 96)), word_pair_splat(sc, 6));
      sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(_mm256_add_epi32(p0, p1), _mm256_add_epi32(p2, p3)));
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(y[i].d * h2f(x[i].d)), _mm256_cvtepi32_ps(sumi), acc);
  }
  return hsum(acc);
}

float dot_iq4_xs(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockIQ4_XS*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  const __m256i table = _mm256_broadcastsi128_si256(load128(kIQ4NLValues));
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const __m256i sc = _mm256_broadcastsi128_si256(iq4xs_scales(x[i]));
    __m256i sumi0 = _mm256_setzero_si256(), sumi1 = _mm256_setzero_si256();
    for (int sb = 0; sb < 8; sb += 2) {
      const __m256i v0 = _mm256_shuffle_epi8(table, nibbles32(x[i].qs + 16 * sb));
      const __m256i v1 = _mm256_shuffle_epi8(table, nibbles32(x[i].qs + 16 * sb + 16));
      const __m256i a0 = load256(y[i].qs + 32 * sb), a1 = load256(y[i].qs + 32 * sb + 32);
      const __m256i p0 = _mm256_maddubs_epi16(_mm256_sign_epi8(v0, v0), _mm256_sign_epi8(a0, v0));
      const __m256i p1 = _mm256_maddubs_epi16(_mm256_sign_epi8(v1, v1), _mm256_sign_epi8(a1, v1));
      sumi0 = _mm256_add_epi32(sumi0, _mm256_madd_epi16(p0, _mm256_shuffle_epi8(sc, word_splat(sb))));
      sumi1 = _mm256_add_epi32(sumi1, _mm256_madd_epi16(p1, _mm256_shuffle_epi8(sc, word_splat(sb + 1))));
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(y[i].d * h2f(x[i].d)), _mm256_cvtepi32_ps(_mm256_add_epi32(sumi0, sumi1)), acc);
  }
  return hsum(acc);
}

// ---- tiles of weight rows × activation rows (prefill) -------------------------------------------
//
// A tile runs as passes of one weight row × kPassTokens activation rows (sixteen registers hold the
// sums of no more): each weight block is unpacked once per pass (codes, scales and their shuffled
// copies) and used for every activation row of the pass. Bytes moved per pass: one weight row and
// kPassTokens activation rows.

constexpr int kPassTokens = 4;
static_assert(kDotTileTokens % kPassTokens == 0 && kDotFewTokens % kPassTokens == 0);
using PassFn = void (*)(const void* w, const void* a, size_t a_stride, int64_t n, float* out);

// Row k of a pass: the k-th block array, `stride` bytes after the previous one.
template <class B>
inline const B* tile_row(const void* base, size_t stride, int k) {
  return reinterpret_cast<const B*>(static_cast<const uint8_t*>(base) + stride * static_cast<size_t>(k));
}

template <PassFn kPass, int NT>
void dot_tile_by_passes(const void* w, size_t w_stride, const void* a, size_t a_stride, int64_t n, float* out) {
  for (int r = 0; r < kDotTileRows; ++r) {
    for (int t0 = 0; t0 < NT; t0 += kPassTokens) {
      kPass(tile_row<uint8_t>(w, w_stride, r), tile_row<uint8_t>(a, a_stride, t0), a_stride, n, out + r * NT + t0);
    }
  }
}

template <class D>
void dot_q8_0_family_pass(const void* w, const void* a, size_t a_stride, int64_t n, float* out) {
  using B = typename D::Block;
  const int64_t nb = n / kQK;
  const B* x = static_cast<const B*>(w);
  __m256 acc[kPassTokens];
  for (auto& v : acc) v = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 4 <= nb; i += 4) {
    const __m128 dx = D::scales4(x + i);
    __m128 d[kPassTokens];
    for (int t = 0; t < kPassTokens; ++t) d[t] = _mm_mul_ps(dx, fp16_scales4(tile_row<BlockQ8_0>(a, a_stride, t) + i));
    for (int k = 0; k < 4; ++k) {
      const __m256i code = D::codes(x[i + k]);
      const __m256i mag = _mm256_sign_epi8(code, code);
      for (int t = 0; t < kPassTokens; ++t) {
        // Sign trick as in dot_i8: |w| times (a with the sign of w).
        const __m256i av = _mm256_sign_epi8(load256(tile_row<BlockQ8_0>(a, a_stride, t)[i + k].qs), code);
        const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(mag, av), _mm256_set1_epi16(1));
        acc[t] = _mm256_fmadd_ps(splat(d[t], k), _mm256_cvtepi32_ps(s), acc[t]);
      }
    }
  }
  for (int t = 0; t < kPassTokens; ++t) {
    out[t] = hsum(acc[t]);
    if (i < nb) out[t] += dot_q8_0_family<D>(x + i, tile_row<BlockQ8_0>(a, a_stride, t) + i, (nb - i) * kQK);
  }
}

template <bool kFive, class B>
void dot_q45_k_pass(const void* w, const void* a, size_t a_stride, int64_t n, float* out) {
  const __m256i m15 = _mm256_set1_epi8(0x0f), m16 = _mm256_set1_epi8(0x10);
  const B* x = static_cast<const B*>(w);
  __m256 acc[kPassTokens];
  for (auto& v : acc) v = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const __m128i sm = kquant_scales_mins(x[i].scales);
    const __m256i scm = _mm256_cvtepu8_epi16(sm);
    const __m256i sc = _mm256_permute2x128_si256(scm, scm, 0x00);  // the 8 scales in both lanes
    // Mins, each twice: sub-block sb meets the 16-element activation sums 2sb and 2sb+1.
    const __m256i mins = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(sm, _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15)));
    __m256i sumi[kPassTokens];
    for (auto& v : sumi) v = _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
      const __m256i q4 = load256(x[i].qs + 32 * c);
      __m256i q_lo = _mm256_and_si256(q4, m15);
      __m256i q_hi = _mm256_and_si256(_mm256_srli_epi16(q4, 4), m15);
      if constexpr (kFive) {
        const __m256i qh = load256(x[i].qh);
        const int b = 2 * c;  // bit 2c (and 2c+1) of each qh byte becomes bit 4 of the code
        const __m256i h_lo = b <= 4 ? _mm256_slli_epi16(qh, 4 - b) : _mm256_srli_epi16(qh, b - 4);
        const __m256i h_hi = b + 1 <= 4 ? _mm256_slli_epi16(qh, 3 - b) : _mm256_srli_epi16(qh, b - 3);
        q_lo = _mm256_or_si256(q_lo, _mm256_and_si256(h_lo, m16));
        q_hi = _mm256_or_si256(q_hi, _mm256_and_si256(h_hi, m16));
      }
      const __m256i s_lo = _mm256_shuffle_epi8(sc, word_splat(2 * c)), s_hi = _mm256_shuffle_epi8(sc, word_splat(2 * c + 1));
      for (int t = 0; t < kPassTokens; ++t) {
        const int8_t* q8 = tile_row<BlockQ8_K>(a, a_stride, t)[i].qs + 64 * c;
        const __m256i p_lo = _mm256_madd_epi16(_mm256_maddubs_epi16(q_lo, load256(q8)), s_lo);
        const __m256i p_hi = _mm256_madd_epi16(_mm256_maddubs_epi16(q_hi, load256(q8 + 32)), s_hi);
        sumi[t] = _mm256_add_epi32(sumi[t], _mm256_add_epi32(p_lo, p_hi));
      }
    }
    const __m256 dx = _mm256_set1_ps(h2f(x[i].d)), mx = _mm256_set1_ps(h2f(x[i].dmin));
    for (int t = 0; t < kPassTokens; ++t) {
      const BlockQ8_K& y = tile_row<BlockQ8_K>(a, a_stride, t)[i];
      // dy·(dx·Σ s·q·a − dmin·Σ m·bsum): the activation scale is applied once, to both terms.
      const __m256 min_term = _mm256_mul_ps(mx, _mm256_cvtepi32_ps(_mm256_madd_epi16(mins, load256(y.bsums))));
      const __m256 block = _mm256_fmsub_ps(dx, _mm256_cvtepi32_ps(sumi[t]), min_term);
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(y.d), block, acc[t]);
    }
  }
  for (int t = 0; t < kPassTokens; ++t) out[t] = hsum(acc[t]);
}

void dot_q6_k_pass(const void* w, const void* a, size_t a_stride, int64_t n, float* out) {
  const __m256i m15 = _mm256_set1_epi8(0x0f), m48 = _mm256_set1_epi8(0x30);
  const BlockQ6_K* x = static_cast<const BlockQ6_K*>(w);
  __m256 acc[kPassTokens];
  for (auto& v : acc) v = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const __m256i scales = _mm256_cvtepi8_epi16(load128(x[i].scales));
    // Codes are q - 32 with q in 0..63: Σ(q-32)·a = Σq·a - 32·bsum per 16-element sub-block.
    __m256i sumi[kPassTokens];
    for (int t = 0; t < kPassTokens; ++t) {
      const __m256i bias = _mm256_madd_epi16(scales, load256(tile_row<BlockQ8_K>(a, a_stride, t)[i].bsums));
      sumi[t] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(bias, 5));
    }
    const __m256i sc_halves[2] = {_mm256_permute2x128_si256(scales, scales, 0x00), _mm256_permute2x128_si256(scales, scales, 0x11)};
    for (int nn = 0; nn < 2; ++nn) {
      const __m256i sc = sc_halves[nn];
      const __m256i ql0 = load256(x[i].ql + 64 * nn), ql1 = load256(x[i].ql + 64 * nn + 32);
      const __m256i qh = load256(x[i].qh + 32 * nn);
      for (int k = 0; k < 4; ++k) {
        // k = 0, 1: low nibbles of ql0, ql1 with qh bits 0-1, 2-3; k = 2, 3: high nibbles, bits 4-5, 6-7.
        const __m256i ql = k % 2 == 0 ? ql0 : ql1;
        const __m256i lo = k < 2 ? _mm256_and_si256(ql, m15) : _mm256_and_si256(_mm256_srli_epi16(ql, 4), m15);
        const __m256i hi = k == 0 ? _mm256_slli_epi16(qh, 4) : k == 1 ? _mm256_slli_epi16(qh, 2) : k == 2 ? qh : _mm256_srli_epi16(qh, 2);
        const __m256i q = _mm256_or_si256(lo, _mm256_and_si256(hi, m48));
        const __m256i s = word_pair_splat(sc, 2 * k);
        for (int t = 0; t < kPassTokens; ++t) {
          const int8_t* q8 = tile_row<BlockQ8_K>(a, a_stride, t)[i].qs + 128 * nn + 32 * k;
          sumi[t] = _mm256_add_epi32(sumi[t], _mm256_madd_epi16(_mm256_maddubs_epi16(q, load256(q8)), s));
        }
      }
    }
    const __m256 dx = _mm256_set1_ps(h2f(x[i].d));
    for (int t = 0; t < kPassTokens; ++t) {
      const float dy = tile_row<BlockQ8_K>(a, a_stride, t)[i].d;
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(dy), _mm256_mul_ps(dx, _mm256_cvtepi32_ps(sumi[t])), acc[t]);
    }
  }
  for (int t = 0; t < kPassTokens; ++t) out[t] = hsum(acc[t]);
}

// The tile kernels of NT tokens per type.
template <int NT>
DotTileFn tile_table(TensorType w) {
  switch (w) {
    case TensorType::Q4_0: return dot_tile_by_passes<dot_q8_0_family_pass<DecodeQ4_0>, NT>;
    case TensorType::Q5_0: return dot_tile_by_passes<dot_q8_0_family_pass<DecodeQ5_0>, NT>;
    case TensorType::Q8_0: return dot_tile_by_passes<dot_q8_0_family_pass<DecodeQ8_0>, NT>;
    case TensorType::IQ4_NL: return dot_tile_by_passes<dot_q8_0_family_pass<DecodeIQ4_NL>, NT>;
    case TensorType::MXFP4: return dot_tile_by_passes<dot_q8_0_family_pass<DecodeMXFP4>, NT>;
    case TensorType::Q4_K: return dot_tile_by_passes<dot_q45_k_pass<false, BlockQ4_K>, NT>;
    case TensorType::Q5_K: return dot_tile_by_passes<dot_q45_k_pass<true, BlockQ5_K>, NT>;
    case TensorType::Q6_K: return dot_tile_by_passes<dot_q6_k_pass, NT>;
    default: return nullptr;
  }
}
}  // namespace

DotTileFn dot_tile_fn_avx2(TensorType w, int tokens) {
  if (tokens == kDotTileTokens) return tile_table<kDotTileTokens>(w);
  if (tokens == kDotFewTokens) return tile_table<kDotFewTokens>(w);
  return nullptr;
}

DotFn dot_fn_avx2(TensorType w) {
  switch (w) {
    case TensorType::F32: return dot_float<F32, float>;
    case TensorType::F16: return dot_float<F16, uint16_t>;
    case TensorType::BF16: return dot_float<BF16, uint16_t>;
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

#else

namespace zinc::quant {

DotFn dot_fn_avx2(TensorType) { return nullptr; }
DotTileFn dot_tile_fn_avx2(TensorType, int) { return nullptr; }

}  // namespace zinc::quant

#endif
