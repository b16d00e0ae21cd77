// AVX-512 VNNI kernels of the packed matrix products (packed.h): one group of 16 weight rows × up to
// kPackTokens tokens. Each 512-bit register of codes (4 consecutive codes of 16 rows) is decoded once
// per block and meets every token of the tile in one _mm512_dpbusd_epi32, whose second operand is the
// token's 4 activation codes broadcast from memory. Per block (Q8_0) or sub-block (K-quants) the int32
// sums are converted once and scaled by the 16 rows' scales; offsets and minimums go through the
// activation block sums (one _mm512_dpwssd_epi32 per pair of sub-blocks); the 4-bit codes of Q4_0,
// IQ4_NL and MXFP4 go through a 16-entry table. Compiled with the AVX-512 flags; the dispatcher calls
// it only when the CPU has AVX-512 F/BW/VL/VNNI.
#include "quant/packed.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512VNNI__) && defined(__AVX512DQ__) && defined(__F16C__)

#include "quant/immintrin_x86.h"

#include <cstring>
#include <type_traits>

#include "quant/blocks.h"

namespace zinc::quant {

namespace {

inline __m512i load512(const void* p) { return _mm512_loadu_si512(p); }
inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline __m128i load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }
// Four bytes (codes, or two int16 sums) in every 32-bit lane.
inline __m512i bcast4(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}
// 16 fp16 scales → floats.
inline __m512 scales16(const uint16_t* d) { return _mm512_cvtph_ps(load256(d)); }

// Decode reads each packed block once, front to back: step `part` of a block asks for `lines` cache
// lines of the next block.
template <class P>
inline void prefetch_next(const P* block, int part, int lines) {
  const char* next = reinterpret_cast<const char*>(block + 1) + 64 * lines * part;
  for (int l = 0; l < lines; ++l) _mm_prefetch(next + 64 * l, _MM_HINT_T0);
}

template <class B>
inline const B* act_row(const uint8_t* act, size_t stride, int t) {
  return reinterpret_cast<const B*>(act + stride * static_cast<size_t>(t));
}

template <int NT>
void q8_0_tile(const uint8_t* w, int64_t n, const uint8_t* act, size_t stride, float* y, int64_t y_stride) {
  const auto* blocks = reinterpret_cast<const PackQ8_0*>(w);
  __m512 acc[NT];
  for (auto& v : acc) v = _mm512_setzero_ps();
  for (int64_t i = 0; i < n / 32; ++i) {
    const PackQ8_0& b = blocks[i];
    prefetch_next(&b, 0, 9);
    const __m512 dw = scales16(b.d);
    __m512i c[8];
    for (int j = 0; j < 8; ++j) c[j] = load512(b.qs[j]);
    for (int t = 0; t < NT; ++t) {
      const BlockQ8_0P& a = act_row<BlockQ8_0P>(act, stride, t)[i];
      // Σ (w + 128)·a − 128·Σa = Σ w·a.
      __m512i s = _mm512_set1_epi32(a.neg_sum128);
      for (int j = 0; j < 8; ++j) s = _mm512_dpbusd_epi32(s, c[j], bcast4(a.qs + 4 * j));
      acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(s), _mm512_set1_ps(a.d)), dw, acc[t]);
    }
  }
  for (int t = 0; t < NT; ++t) _mm512_storeu_ps(y + t * y_stride, acc[t]);
}

// Q4_0, IQ4_NL and MXFP4: each nibble mapped through the format's 16 values + 128 (one vpshufb per
// register), then the products of Q8_0 (the offset through neg_sum128). Scales: fp16, or E8M0 as
// MXFP4 uses it (2^(e−128), subnormal for e < 2).
template <TensorType T>
const uint8_t* nibble_values() {
  static const auto table = [] {
    struct Table { alignas(16) uint8_t v[16]; } t{};
    for (int k = 0; k < 16; ++k) {
      const int v = T == TensorType::Q4_0 ? k - 8 : T == TensorType::IQ4_NL ? kIQ4NLValues[k] : kMXFP4Values[k];
      t.v[k] = static_cast<uint8_t>(v + 128);
    }
    return t;
  }();
  return table.v;
}

inline __m512 e8m0_half16(const uint8_t* e) {
  const __m512i x = _mm512_cvtepu8_epi32(load128(e));
  const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(x, _mm512_set1_epi32(1)), 23);
  const __m512i sub = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), x);
  return _mm512_castsi512_ps(_mm512_mask_blend_epi32(_mm512_cmplt_epu32_mask(x, _mm512_set1_epi32(2)), normal, sub));
}

template <TensorType T, int NT>
void nibble32_tile(const uint8_t* w, int64_t n, const uint8_t* act, size_t stride, float* y, int64_t y_stride) {
  using P = std::conditional_t<T == TensorType::MXFP4, PackMXFP4, PackQ4_0>;
  const auto* blocks = reinterpret_cast<const P*>(w);
  const __m512i lut = _mm512_broadcast_i32x4(load128(nibble_values<T>())), m15 = _mm512_set1_epi8(0x0f);
  __m512 acc[NT];
  for (auto& v : acc) v = _mm512_setzero_ps();
  for (int64_t i = 0; i < n / 32; ++i) {
    const P& b = blocks[i];
    prefetch_next(&b, 0, (sizeof(P) + 63) / 64);
    __m512 dw;
    if constexpr (T == TensorType::MXFP4) dw = e8m0_half16(b.e);
    else dw = scales16(b.d);
    __m512i c[8];  // c[j]: values + 128 of elements 4j .. 4j + 3 of each row
    for (int q = 0; q < 4; ++q) {
      const __m512i v = load512(b.qs[q]);
      c[2 * q] = _mm512_shuffle_epi8(lut, _mm512_and_si512(v, m15));
      c[2 * q + 1] = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(v, 4), m15));
    }
    for (int t = 0; t < NT; ++t) {
      const BlockQ8_0P& a = act_row<BlockQ8_0P>(act, stride, t)[i];
      __m512i sum = _mm512_set1_epi32(a.neg_sum128);
      for (int j = 0; j < 8; ++j) sum = _mm512_dpbusd_epi32(sum, c[j], bcast4(a.qs + 4 * j));
      acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(sum), _mm512_set1_ps(a.d)), dw, acc[t]);
    }
  }
  for (int t = 0; t < NT; ++t) _mm512_storeu_ps(y + t * y_stride, acc[t]);
}

// Q4_K and Q5_K (P: PackQ4_K or PackQ5_K): Q5_K's fifth bits join each code register as bit 4 (bit j of
// a byte belongs to register j: moved to bit 4 by a shift, merged by one ternary-logic instruction).
template <class P, int NT>
void q4_5_k_tile(const uint8_t* w, int64_t n, const uint8_t* act, size_t stride, float* y, int64_t y_stride) {
  constexpr bool kFive = std::is_same_v<P, PackQ5_K>;
  constexpr int kLines = (sizeof(P) / 64 + 7) / 8;  // of the next block, per sub-block
  const auto* blocks = reinterpret_cast<const P*>(w);
  const __m512i m15 = _mm512_set1_epi8(0x0f), m16 = _mm512_set1_epi8(0x10);
  __m512 acc[NT];
  for (auto& v : acc) v = _mm512_setzero_ps();
  for (int64_t i = 0; i < n / 256; ++i) {
    const P& b = blocks[i];
    const __m512 dw = scales16(b.d);
    __m512 blk[NT];  // dw·Σ_s scale_s·Σ code·a, per token
    for (auto& v : blk) v = _mm512_setzero_ps();
    for (int s = 0; s < 8; ++s) {
      prefetch_next(&b, s, kLines);
      const __m512 sc = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(load128(b.sc[s]))), dw);
      __m512i c[8];  // c[j]: elements 32s + 4j .. 32s + 4j + 3 of each row
      for (int q = 0; q < 4; ++q) {
        const __m512i v = load512(b.qs[s][q]);
        c[2 * q] = _mm512_and_si512(v, m15);
        c[2 * q + 1] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m15);
      }
      if constexpr (kFive) {
        const __m512i h = load512(b.qs[s][4]);
        constexpr int kOrAnd = 0xf8;  // a | (b & c)
        c[0] = _mm512_ternarylogic_epi32(c[0], _mm512_slli_epi16(h, 4), m16, kOrAnd);
        c[1] = _mm512_ternarylogic_epi32(c[1], _mm512_slli_epi16(h, 3), m16, kOrAnd);
        c[2] = _mm512_ternarylogic_epi32(c[2], _mm512_slli_epi16(h, 2), m16, kOrAnd);
        c[3] = _mm512_ternarylogic_epi32(c[3], _mm512_slli_epi16(h, 1), m16, kOrAnd);
        c[4] = _mm512_ternarylogic_epi32(c[4], h, m16, kOrAnd);
        c[5] = _mm512_ternarylogic_epi32(c[5], _mm512_srli_epi16(h, 1), m16, kOrAnd);
        c[6] = _mm512_ternarylogic_epi32(c[6], _mm512_srli_epi16(h, 2), m16, kOrAnd);
        c[7] = _mm512_ternarylogic_epi32(c[7], _mm512_srli_epi16(h, 3), m16, kOrAnd);
      }
      for (int t = 0; t < NT; ++t) {
        const int8_t* a = act_row<BlockQ8_KP>(act, stride, t)[i].qs + 32 * s;
        __m512i sum = _mm512_setzero_si512();
        for (int j = 0; j < 8; ++j) sum = _mm512_dpbusd_epi32(sum, c[j], bcast4(a + 4 * j));
        blk[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), sc, blk[t]);
      }
    }
    const __m512 dm = scales16(b.dmin);
    __m512i mins[4];
    for (int p = 0; p < 4; ++p) mins[p] = _mm512_cvtepu8_epi16(load256(b.mn[p]));
    for (int t = 0; t < NT; ++t) {
      const BlockQ8_KP& a = act_row<BlockQ8_KP>(act, stride, t)[i];
      __m512i m = _mm512_setzero_si512();
      for (int p = 0; p < 4; ++p) m = _mm512_dpwssd_epi32(m, mins[p], bcast4(a.bsum32 + 2 * p));
      // dy·(dw·Σ scale·Σ code·a − dmin·Σ min·Σa)
      acc[t] = _mm512_fmadd_ps(_mm512_fnmadd_ps(_mm512_cvtepi32_ps(m), dm, blk[t]), _mm512_set1_ps(a.d), acc[t]);
    }
  }
  for (int t = 0; t < NT; ++t) _mm512_storeu_ps(y + t * y_stride, acc[t]);
}

// IQ4_XS: the nibbles through the IQ4_NL table + 128, as nibble32_tile, with a signed scale per 32-element
// sub-block; the + 128 comes off through the activation's sums per sub-block.
template <int NT>
void iq4_xs_tile(const uint8_t* w, int64_t n, const uint8_t* act, size_t stride, float* y, int64_t y_stride) {
  constexpr int kLines = (sizeof(PackIQ4_XS) / 64 + 8) / 8;
  const auto* blocks = reinterpret_cast<const PackIQ4_XS*>(w);
  const __m512i lut = _mm512_broadcast_i32x4(load128(nibble_values<TensorType::IQ4_NL>())), m15 = _mm512_set1_epi8(0x0f);
  __m512 acc[NT];
  for (auto& v : acc) v = _mm512_setzero_ps();
  for (int64_t i = 0; i < n / 256; ++i) {
    const PackIQ4_XS& b = blocks[i];
    const __m512 dw = scales16(b.d);
    __m512 blk[NT];
    for (auto& v : blk) v = _mm512_setzero_ps();
    for (int s = 0; s < 8; ++s) {
      prefetch_next(&b, s, kLines);
      const __m512 sc = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(load128(b.sc[s]))), dw);
      __m512i c[8];
      for (int q = 0; q < 4; ++q) {
        const __m512i v = load512(b.qs[s][q]);
        c[2 * q] = _mm512_shuffle_epi8(lut, _mm512_and_si512(v, m15));
        c[2 * q + 1] = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(v, 4), m15));
      }
      for (int t = 0; t < NT; ++t) {
        const BlockQ8_KP& a = act_row<BlockQ8_KP>(act, stride, t)[i];
        __m512i sum = _mm512_set1_epi32(-128 * a.bsum32[s]);
        for (int j = 0; j < 8; ++j) sum = _mm512_dpbusd_epi32(sum, c[j], bcast4(a.qs + 32 * s + 4 * j));
        blk[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), sc, blk[t]);
      }
    }
    for (int t = 0; t < NT; ++t) acc[t] = _mm512_fmadd_ps(blk[t], _mm512_set1_ps(act_row<BlockQ8_KP>(act, stride, t)[i].d), acc[t]);
  }
  for (int t = 0; t < NT; ++t) _mm512_storeu_ps(y + t * y_stride, acc[t]);
}

template <int NT>
void q6_k_tile(const uint8_t* w, int64_t n, const uint8_t* act, size_t stride, float* y, int64_t y_stride) {
  const auto* blocks = reinterpret_cast<const PackQ6_K*>(w);
  const __m512i m63 = _mm512_set1_epi8(0x3f), m_c0 = _mm512_set1_epi8(static_cast<char>(0xc0)),
                m_f0 = _mm512_set1_epi8(static_cast<char>(0xf0));
  constexpr int kSelect = 0xd8;  // ternarylogic(a, b, c): c ? b : a, bit by bit
  __m512 acc[NT];
  for (auto& v : acc) v = _mm512_setzero_ps();
  for (int64_t i = 0; i < n / 256; ++i) {
    const PackQ6_K& b = blocks[i];
    // The scales are read at the block's start and the pair scales at its end: their lines are asked
    // for up front (asking for the next block's lines instead left the pair scales missing at every
    // block's end: 0.85× the row-by-row products' bandwidth on one thread, against 1.05×).
    for (int l = 0; l < 9; ++l) _mm_prefetch(reinterpret_cast<const char*>(&b) + 64 * l, _MM_HINT_T0);
    const __m512 dw = scales16(b.d);
    __m512 blk[NT];
    for (auto& v : blk) v = _mm512_setzero_ps();
    for (int s = 0; s < 16; ++s) {
      const __m512 sc = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(load128(b.sc[s]))), dw);
      const __m512i r0 = load512(b.q[s][0]), r1 = load512(b.q[s][1]), r2 = load512(b.q[s][2]);
      // The split code: bits 6-7 of r0, r1, r2 gathered to bits 6-7, 4-5, 2-3 (selects), then moved down.
      const __m512i u = _mm512_ternarylogic_epi32(_mm512_srli_epi16(r1, 2), r0, m_c0, kSelect);
      const __m512i v = _mm512_ternarylogic_epi32(_mm512_srli_epi16(r2, 4), u, m_f0, kSelect);
      const __m512i c[4] = {_mm512_and_si512(r0, m63), _mm512_and_si512(r1, m63),
                            _mm512_and_si512(_mm512_srli_epi16(v, 2), m63), _mm512_and_si512(r2, m63)};
      for (int t = 0; t < NT; ++t) {
        const int8_t* a = act_row<BlockQ8_KP>(act, stride, t)[i].qs + 16 * s;
        __m512i sum = _mm512_setzero_si512();
        for (int j = 0; j < 4; ++j) sum = _mm512_dpbusd_epi32(sum, c[j], bcast4(a + 4 * j));
        blk[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), sc, blk[t]);
      }
    }
    // Codes are stored + 32: subtract 32·dw·Σ scale·Σa per 16-element sub-block.
    const __m512 d32 = _mm512_mul_ps(dw, _mm512_set1_ps(32.0f));
    __m512i scp[8];
    for (int p = 0; p < 8; ++p) scp[p] = _mm512_cvtepi8_epi16(load256(b.scp[p]));
    for (int t = 0; t < NT; ++t) {
      const BlockQ8_KP& a = act_row<BlockQ8_KP>(act, stride, t)[i];
      __m512i m = _mm512_setzero_si512();
      for (int p = 0; p < 8; ++p) m = _mm512_dpwssd_epi32(m, scp[p], bcast4(a.bsums + 2 * p));
      acc[t] = _mm512_fmadd_ps(_mm512_fnmadd_ps(_mm512_cvtepi32_ps(m), d32, blk[t]), _mm512_set1_ps(a.d), acc[t]);
    }
  }
  for (int t = 0; t < NT; ++t) _mm512_storeu_ps(y + t * y_stride, acc[t]);
}

// Q2_K: 2-bit codes (one register per 16-element sub-block, 4 code groups by shifts), a 4-bit scale and
// minimum per sub-block from one byte; the minimums through the activation's 16-element sums.
template <int NT>
void q2_k_tile(const uint8_t* w, int64_t n, const uint8_t* act, size_t stride, float* y, int64_t y_stride) {
  constexpr int kLines = (sizeof(PackQ2_K) + 63) / 64;
  const auto* blocks = reinterpret_cast<const PackQ2_K*>(w);
  const __m512i m3 = _mm512_set1_epi8(3), m15 = _mm512_set1_epi32(0xf);
  __m512 acc[NT];
  for (auto& v : acc) v = _mm512_setzero_ps();
  for (int64_t i = 0; i < n / 256; ++i) {
    const PackQ2_K& b = blocks[i];
    const __m512 dw = scales16(b.d);
    __m512 blk[NT];
    for (auto& v : blk) v = _mm512_setzero_ps();
    for (int p = 0; p < 8; ++p) {
      prefetch_next(&b, p, (kLines + 7) / 8);
      const __m512i x = _mm512_cvtepu8_epi16(load256(b.sm[p]));  // lane r: the bytes of sub-blocks 2p, 2p + 1
      const __m512 sc[2] = {_mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_and_si512(x, m15)), dw),
                            _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(x, 16), m15)), dw)};
      for (int k = 0; k < 2; ++k) {
        const int s = 2 * p + k;
        const __m512i v = load512(b.qs[s]);
        const __m512i c[4] = {_mm512_and_si512(v, m3), _mm512_and_si512(_mm512_srli_epi16(v, 2), m3),
                              _mm512_and_si512(_mm512_srli_epi16(v, 4), m3), _mm512_and_si512(_mm512_srli_epi16(v, 6), m3)};
        for (int t = 0; t < NT; ++t) {
          const int8_t* a = act_row<BlockQ8_KP>(act, stride, t)[i].qs + 16 * s;
          __m512i sum = _mm512_setzero_si512();
          for (int g = 0; g < 4; ++g) sum = _mm512_dpbusd_epi32(sum, c[g], bcast4(a + 4 * g));
          blk[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), sc[k], blk[t]);
        }
      }
    }
    const __m512 dm = scales16(b.dmin);
    __m512i mins[8];
    for (int p = 0; p < 8; ++p) mins[p] = _mm512_srli_epi16(_mm512_cvtepu8_epi16(load256(b.sm[p])), 4);
    for (int t = 0; t < NT; ++t) {
      const BlockQ8_KP& a = act_row<BlockQ8_KP>(act, stride, t)[i];
      __m512i m = _mm512_setzero_si512();
      for (int p = 0; p < 8; ++p) m = _mm512_dpwssd_epi32(m, mins[p], bcast4(a.bsums + 2 * p));
      acc[t] = _mm512_fmadd_ps(_mm512_fnmadd_ps(_mm512_cvtepi32_ps(m), dm, blk[t]), _mm512_set1_ps(a.d), acc[t]);
    }
  }
  for (int t = 0; t < NT; ++t) _mm512_storeu_ps(y + t * y_stride, acc[t]);
}

// Bit j of each byte of h moved to bit 2 (Q3_K's third bit of code register j of a pair), the rest 0.
template <int J>
inline __m512i third_bit(__m512i h) {
  const __m512i m4 = _mm512_set1_epi8(4);
  if constexpr (J < 2) return _mm512_and_si512(_mm512_slli_epi16(h, 2 - J), m4);
  else if constexpr (J == 2) return _mm512_and_si512(h, m4);
  else return _mm512_and_si512(_mm512_srli_epi16(h, J - 2), m4);
}

// Q3_K: codes 0..7 (low 2 bits as Q2_K's, the third bit merged in per register), value code − 4: each
// sub-block's sum starts at −4·Σa; a signed scale per 16-element sub-block.
template <int NT>
void q3_k_tile(const uint8_t* w, int64_t n, const uint8_t* act, size_t stride, float* y, int64_t y_stride) {
  constexpr int kLines = (sizeof(PackQ3_K) + 63) / 64;
  const auto* blocks = reinterpret_cast<const PackQ3_K*>(w);
  const __m512i m3 = _mm512_set1_epi8(3);
  constexpr int kAndOr = 0xea;  // (a & b) | c
  __m512 acc[NT];
  for (auto& v : acc) v = _mm512_setzero_ps();
  for (int64_t i = 0; i < n / 256; ++i) {
    const PackQ3_K& b = blocks[i];
    const __m512 dw = scales16(b.d);
    __m512 blk[NT];
    for (auto& v : blk) v = _mm512_setzero_ps();
    for (int p = 0; p < 8; ++p) {
      prefetch_next(&b, p, (kLines + 7) / 8);
      const __m512i h = load512(b.q[p][2]);
      const __m512i hb[8] = {third_bit<0>(h), third_bit<1>(h), third_bit<2>(h), third_bit<3>(h),
                             third_bit<4>(h), third_bit<5>(h), third_bit<6>(h), third_bit<7>(h)};
      for (int k = 0; k < 2; ++k) {
        const int s = 2 * p + k;
        const __m512 sc = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(load128(b.sc[s]))), dw);
        const __m512i v = load512(b.q[p][k]);
        const __m512i c[4] = {_mm512_ternarylogic_epi32(v, m3, hb[4 * k], kAndOr),
                              _mm512_ternarylogic_epi32(_mm512_srli_epi16(v, 2), m3, hb[4 * k + 1], kAndOr),
                              _mm512_ternarylogic_epi32(_mm512_srli_epi16(v, 4), m3, hb[4 * k + 2], kAndOr),
                              _mm512_ternarylogic_epi32(_mm512_srli_epi16(v, 6), m3, hb[4 * k + 3], kAndOr)};
        for (int t = 0; t < NT; ++t) {
          const BlockQ8_KP& a = act_row<BlockQ8_KP>(act, stride, t)[i];
          __m512i sum = _mm512_set1_epi32(-4 * a.bsums[s]);
          for (int g = 0; g < 4; ++g) sum = _mm512_dpbusd_epi32(sum, c[g], bcast4(a.qs + 16 * s + 4 * g));
          blk[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), sc, blk[t]);
        }
      }
    }
    for (int t = 0; t < NT; ++t) acc[t] = _mm512_fmadd_ps(blk[t], _mm512_set1_ps(act_row<BlockQ8_KP>(act, stride, t)[i].d), acc[t]);
  }
  for (int t = 0; t < NT; ++t) _mm512_storeu_ps(y + t * y_stride, acc[t]);
}

template <template <int> class K>
PackedTileFn by_tokens(int nt) {
  switch (nt) {
    case 1: return K<1>::fn;
    case 2: return K<2>::fn;
    case 3: return K<3>::fn;
    case 4: return K<4>::fn;
    case 5: return K<5>::fn;
    case 6: return K<6>::fn;
    case 7: return K<7>::fn;
    case 8: return K<8>::fn;
    default: return nullptr;
  }
}
template <int NT> struct Q8_0K { static constexpr PackedTileFn fn = q8_0_tile<NT>; };
template <int NT> struct Q4_0K { static constexpr PackedTileFn fn = nibble32_tile<TensorType::Q4_0, NT>; };
template <int NT> struct IQ4_NLK { static constexpr PackedTileFn fn = nibble32_tile<TensorType::IQ4_NL, NT>; };
template <int NT> struct MXFP4K { static constexpr PackedTileFn fn = nibble32_tile<TensorType::MXFP4, NT>; };
template <int NT> struct Q4_KK { static constexpr PackedTileFn fn = q4_5_k_tile<PackQ4_K, NT>; };
template <int NT> struct Q5_KK { static constexpr PackedTileFn fn = q4_5_k_tile<PackQ5_K, NT>; };
template <int NT> struct IQ4_XSK { static constexpr PackedTileFn fn = iq4_xs_tile<NT>; };
template <int NT> struct Q6_KK { static constexpr PackedTileFn fn = q6_k_tile<NT>; };
template <int NT> struct Q2_KK { static constexpr PackedTileFn fn = q2_k_tile<NT>; };
template <int NT> struct Q3_KK { static constexpr PackedTileFn fn = q3_k_tile<NT>; };
static_assert(kPackTokens == 8);

}  // namespace

PackedTileFn packed_tile_avx512(TensorType t, int nt) {
  switch (t) {
    case TensorType::Q8_0: return by_tokens<Q8_0K>(nt);
    case TensorType::Q4_0: return by_tokens<Q4_0K>(nt);
    case TensorType::IQ4_NL: return by_tokens<IQ4_NLK>(nt);
    case TensorType::MXFP4: return by_tokens<MXFP4K>(nt);
    case TensorType::Q4_K: return by_tokens<Q4_KK>(nt);
    case TensorType::Q5_K: return by_tokens<Q5_KK>(nt);
    case TensorType::IQ4_XS: return by_tokens<IQ4_XSK>(nt);
    case TensorType::Q6_K: return by_tokens<Q6_KK>(nt);
    case TensorType::Q2_K: return by_tokens<Q2_KK>(nt);
    case TensorType::Q3_K: return by_tokens<Q3_KK>(nt);
    default: return nullptr;
  }
}

}  // namespace zinc::quant

#else

namespace zinc::quant {
PackedTileFn packed_tile_avx512(TensorType, int) { return nullptr; }
}  // namespace zinc::quant

#endif
