// AVX2 kernels of the packed matrix products (packed.h) for Q8_0 and K-quants: each group of 16 rows runs as two
// halves of 8 rows (one 256-bit register: 4 codes of each of 8 rows), up to 4 tokens at a time (8 as
// two passes). Codes meet a token's 4 activation codes, broadcast, in _mm256_maddubs_epi16; the int16
// pair sums of several code registers are added before one _mm256_madd_epi16 widens them (Q4_K: a whole
// 32-element sub-block, 8·2·15·127 < 2^15; Q5_K: four registers, 4·2·31·127 < 2^15; Q6_K: two
// registers, 2·2·63·127 < 2^15). Scales are applied
// per sub-block in float, the token's scale folded in. Compiled with -mavx2 -mfma -mf16c; the
// dispatcher calls it only when the CPU has all three.
#include "quant/packed.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

#include <immintrin.h>

#include <cstring>
#include <type_traits>

#include "quant/blocks.h"

namespace zinc::quant {

namespace {

inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline __m128i load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }
inline __m128i load64(const void* p) { return _mm_loadl_epi64(static_cast<const __m128i*>(p)); }
inline __m256i bcast4(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}
// Bits of b where m is set, of a elsewhere.
inline __m256i select(__m256i a, __m256i b, __m256i m) { return _mm256_xor_si256(a, _mm256_and_si256(_mm256_xor_si256(a, b), m)); }

template <class B>
inline const B* act_row(const uint8_t* act, size_t stride, int t) {
  return reinterpret_cast<const B*>(act + stride * static_cast<size_t>(t));
}

// Bit j of each byte of h moved to bit 4 (Q5_K's fifth bit of code register j).
template <int J>
inline __m256i fifth_bit(__m256i h, __m256i m16) {
  if constexpr (J <= 4) return _mm256_and_si256(_mm256_slli_epi16(h, 4 - J), m16);
  else return _mm256_and_si256(_mm256_srli_epi16(h, J - 4), m16);
}

// Register j of a Q4_K or Q5_K sub-block (half h): elements 4j .. 4j + 3 of each of its 8 rows.
template <class P, int J>
inline __m256i k_codes(const P& b, int s, int h, __m256i m15, __m256i m16) {
  const __m256i v = load256(b.qs[s][J / 2] + 32 * h);
  const __m256i c = J % 2 ? _mm256_and_si256(_mm256_srli_epi16(v, 4), m15) : _mm256_and_si256(v, m15);
  if constexpr (std::is_same_v<P, PackQ5_K>) return _mm256_or_si256(c, fifth_bit<J>(load256(b.qs[s][4] + 32 * h), m16));
  else return c;
}

// Σ over a sub-block's 8 code registers of code·a, as int32 per row. Q4_K adds every int16 pair sum before
// widening (8·2·15·127 < 2^15); Q5_K's 5-bit codes allow 4 (4·2·31·127 < 2^15).
template <class P>
inline __m256i k_sum(const __m256i c[8], const int8_t* a, __m256i ones) {
  constexpr int kRun = std::is_same_v<P, PackQ5_K> ? 4 : 8;
  __m256i sum = _mm256_setzero_si256();
  for (int j0 = 0; j0 < 8; j0 += kRun) {
    __m256i p = _mm256_maddubs_epi16(c[j0], bcast4(a + 4 * j0));
    for (int j = j0 + 1; j < j0 + kRun; ++j) p = _mm256_add_epi16(p, _mm256_maddubs_epi16(c[j], bcast4(a + 4 * j)));
    sum = j0 == 0 ? _mm256_madd_epi16(p, ones) : _mm256_add_epi32(sum, _mm256_madd_epi16(p, ones));
  }
  return sum;
}

template <class P>
inline void k_codes_all(const P& b, int s, int h, __m256i m15, __m256i m16, __m256i c[8]) {
  c[0] = k_codes<P, 0>(b, s, h, m15, m16);
  c[1] = k_codes<P, 1>(b, s, h, m15, m16);
  c[2] = k_codes<P, 2>(b, s, h, m15, m16);
  c[3] = k_codes<P, 3>(b, s, h, m15, m16);
  c[4] = k_codes<P, 4>(b, s, h, m15, m16);
  c[5] = k_codes<P, 5>(b, s, h, m15, m16);
  c[6] = k_codes<P, 6>(b, s, h, m15, m16);
  c[7] = k_codes<P, 7>(b, s, h, m15, m16);
}

// Sub-block s of a block asks for the s-th eighth of the next block (in whole cache lines).
template <class P>
inline void prefetch_sub(const P& b, int s) {
  constexpr int kStride = static_cast<int>(sizeof(P) / 8), kLines = (kStride + 63) / 64;
  for (int l = 0; l < kLines; ++l) _mm_prefetch(reinterpret_cast<const char*>(&b + 1) + kStride * s + 64 * l, _MM_HINT_T0);
}

// Rows 8h .. 8h + 7 of a Q4_K or Q5_K group × NT tokens.
template <class P, int NT>
void q4_5_k_half(const P* blocks, int64_t nb, int h, const uint8_t* act, size_t stride, float* y, int64_t y_stride) {
  const __m256i m15 = _mm256_set1_epi8(0x0f), m16 = _mm256_set1_epi8(0x10), ones = _mm256_set1_epi16(1);
  __m256 acc[NT];
  for (auto& v : acc) v = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const P& b = blocks[i];
    const __m256 dw = _mm256_cvtph_ps(load128(b.d + 8 * h));
    __m256 dy[NT];
    for (int t = 0; t < NT; ++t) dy[t] = _mm256_set1_ps(act_row<BlockQ8_KP>(act, stride, t)[i].d);
    for (int s = 0; s < 8; ++s) {
      prefetch_sub(b, s);
      const __m256 sc = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(load64(b.sc[s] + 8 * h))), dw);
      __m256i c[8];
      k_codes_all(b, s, h, m15, m16, c);
      for (int t = 0; t < NT; ++t) {
        const int8_t* a = act_row<BlockQ8_KP>(act, stride, t)[i].qs + 32 * s;
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(k_sum<P>(c, a, ones)), _mm256_mul_ps(sc, dy[t]), acc[t]);
      }
    }
    const __m256 dm = _mm256_cvtph_ps(load128(b.dmin + 8 * h));
    for (int t = 0; t < NT; ++t) {
      const BlockQ8_KP& a = act_row<BlockQ8_KP>(act, stride, t)[i];
      __m256i m = _mm256_setzero_si256();
      for (int p = 0; p < 4; ++p) m = _mm256_add_epi32(m, _mm256_madd_epi16(_mm256_cvtepu8_epi16(load128(b.mn[p] + 16 * h)), bcast4(a.bsum32 + 2 * p)));
      acc[t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(m), _mm256_mul_ps(dm, dy[t]), acc[t]);
    }
  }
  for (int t = 0; t < NT; ++t) _mm256_storeu_ps(y + t * y_stride + 8 * h, acc[t]);
}

// Rows 8h .. 8h + 7 of a Q6_K group × NT tokens.
template <int NT>
void q6_k_half(const PackQ6_K* blocks, int64_t nb, int h, const uint8_t* act, size_t stride, float* y, int64_t y_stride) {
  const __m256i m63 = _mm256_set1_epi8(0x3f), m_c0 = _mm256_set1_epi8(static_cast<char>(0xc0)),
                m_f0 = _mm256_set1_epi8(static_cast<char>(0xf0)), ones = _mm256_set1_epi16(1);
  __m256 acc[NT];
  for (auto& v : acc) v = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const PackQ6_K& b = blocks[i];
    const __m256 dw = _mm256_cvtph_ps(load128(b.d + 8 * h));
    __m256 dy[NT];
    for (int t = 0; t < NT; ++t) dy[t] = _mm256_set1_ps(act_row<BlockQ8_KP>(act, stride, t)[i].d);
    for (int s = 0; s < 16; ++s) {
      for (int l = 0; l < 3; ++l) _mm_prefetch(reinterpret_cast<const char*>(&b + 1) + 192 * s + 64 * l, _MM_HINT_T0);
      const __m256 sc = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(load64(b.sc[s] + 8 * h))), dw);
      const __m256i r0 = load256(b.q[s][0] + 32 * h), r1 = load256(b.q[s][1] + 32 * h), r2 = load256(b.q[s][2] + 32 * h);
      const __m256i u = select(_mm256_srli_epi16(r1, 2), r0, m_c0);
      const __m256i v = select(_mm256_srli_epi16(r2, 4), u, m_f0);
      const __m256i c[4] = {_mm256_and_si256(r0, m63), _mm256_and_si256(r1, m63),
                            _mm256_and_si256(_mm256_srli_epi16(v, 2), m63), _mm256_and_si256(r2, m63)};
      for (int t = 0; t < NT; ++t) {
        const int8_t* a = act_row<BlockQ8_KP>(act, stride, t)[i].qs + 16 * s;
        const __m256i p01 = _mm256_add_epi16(_mm256_maddubs_epi16(c[0], bcast4(a)), _mm256_maddubs_epi16(c[1], bcast4(a + 4)));
        const __m256i p23 = _mm256_add_epi16(_mm256_maddubs_epi16(c[2], bcast4(a + 8)), _mm256_maddubs_epi16(c[3], bcast4(a + 12)));
        const __m256i sum = _mm256_add_epi32(_mm256_madd_epi16(p01, ones), _mm256_madd_epi16(p23, ones));
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_mul_ps(sc, dy[t]), acc[t]);
      }
    }
    // Codes are stored + 32: subtract 32·dw·Σ scale·Σa per 16-element sub-block.
    const __m256 d32 = _mm256_mul_ps(dw, _mm256_set1_ps(32.0f));
    for (int t = 0; t < NT; ++t) {
      const BlockQ8_KP& a = act_row<BlockQ8_KP>(act, stride, t)[i];
      __m256i m = _mm256_setzero_si256();
      for (int p = 0; p < 8; ++p) m = _mm256_add_epi32(m, _mm256_madd_epi16(_mm256_cvtepi8_epi16(load128(b.scp[p] + 16 * h)), bcast4(a.bsums + 2 * p)));
      acc[t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(m), _mm256_mul_ps(d32, dy[t]), acc[t]);
    }
  }
  for (int t = 0; t < NT; ++t) _mm256_storeu_ps(y + t * y_stride + 8 * h, acc[t]);
}

// Rows 8h .. 8h + 7 of a Q8_0 group × NT tokens in one pass (a code register meets every token): the
// integer sums in registers, the float sums in memory. The codes are stored + 128; flipping the top
// bit gives the signed code w, and |w|·(a·sign w) = w·a with the unsigned operand first, as maddubs
// wants (|w| ≤ 128 and |a| ≤ 127, so a pair sum stays under 2^15); each register's pair sums are
// widened before they are added.
template <int NT>
void q8_0_half(const PackQ8_0* blocks, int64_t nb, int h, const uint8_t* act, size_t stride, float* y, int64_t y_stride) {
  const __m256i m80 = _mm256_set1_epi8(static_cast<char>(0x80)), ones = _mm256_set1_epi16(1);
  alignas(32) float acc[NT][8] = {};
  for (int64_t i = 0; i < nb; ++i) {
    const PackQ8_0& b = blocks[i];
    _mm_prefetch(reinterpret_cast<const char*>(&b + 2) + 256 * h, _MM_HINT_T0);
    __m256i s[NT];
    for (auto& v : s) v = _mm256_setzero_si256();
    for (int j = 0; j < 8; ++j) {
      const __m256i w = _mm256_xor_si256(load256(b.qs[j] + 32 * h), m80), aw = _mm256_sign_epi8(w, w);
      for (int t = 0; t < NT; ++t) {
        const __m256i p = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(bcast4(act_row<BlockQ8_0P>(act, stride, t)[i].qs + 4 * j), w));
        s[t] = _mm256_add_epi32(s[t], _mm256_madd_epi16(p, ones));
      }
    }
    const __m256 dw = _mm256_cvtph_ps(load128(b.d + 8 * h));
    for (int t = 0; t < NT; ++t) {
      const __m256 scale = _mm256_mul_ps(dw, _mm256_set1_ps(act_row<BlockQ8_0P>(act, stride, t)[i].d));
      _mm256_store_ps(acc[t], _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[t]), scale, _mm256_load_ps(acc[t])));
    }
  }
  for (int t = 0; t < NT; ++t) _mm256_storeu_ps(y + t * y_stride + 8 * h, _mm256_load_ps(acc[t]));
}

// Q4_0, IQ4_NL and MXFP4: each nibble mapped through the format's 16 signed values (one pshufb per
// register), then the products of Q8_0's kernel. Where the values are small (Q4_0: −8..7, MXFP4:
// ±12) a block's 8 registers of pair sums add up in int16 before one widening (8·2·12·127 < 2^15);
// IQ4_NL's values reach −127, so its pair sums are widened register by register.
template <TensorType T>
const int8_t* nibble_values() {
  static const auto table = [] {
    struct Table { alignas(16) int8_t v[16]; } t{};
    for (int k = 0; k < 16; ++k) t.v[k] = static_cast<int8_t>(T == TensorType::Q4_0 ? k - 8 : T == TensorType::IQ4_NL ? kIQ4NLValues[k] : kMXFP4Values[k]);
    return t;
  }();
  return table.v;
}
template <TensorType T>
using NibblePack = std::conditional_t<T == TensorType::MXFP4, PackMXFP4, PackQ4_0>;

// The scales of rows 8h .. 8h + 7: fp16, or E8M0 as MXFP4 uses it (2^(e−128), subnormal for e < 2).
template <TensorType T>
inline __m256 nibble_scales(const NibblePack<T>& b, int h) {
  if constexpr (T == TensorType::MXFP4) {
    const __m256i x = _mm256_cvtepu8_epi32(load64(b.e + 8 * h));
    const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(x, _mm256_set1_epi32(1)), 23);
    const __m256i sub = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), x);
    return _mm256_castsi256_ps(_mm256_blendv_epi8(normal, sub, _mm256_cmpgt_epi32(_mm256_set1_epi32(2), x)));
  } else {
    return _mm256_cvtph_ps(load128(b.d + 8 * h));
  }
}

// Rows 8h .. 8h + 7 × NT tokens of a Q4_0 / IQ4_NL / MXFP4 group, all tokens in one pass.
template <TensorType T, int NT>
void nibble32_half(const NibblePack<T>* blocks, int64_t nb, int h, const uint8_t* act, size_t stride, float* y, int64_t y_stride) {
  constexpr bool kInt16 = T != TensorType::IQ4_NL;
  const __m256i lut = _mm256_broadcastsi128_si256(load128(nibble_values<T>())), m15 = _mm256_set1_epi8(0x0f),
                ones = _mm256_set1_epi16(1);
  alignas(32) float acc[NT][8] = {};
  for (int64_t i = 0; i < nb; ++i) {
    const NibblePack<T>& b = blocks[i];
    _mm_prefetch(reinterpret_cast<const char*>(&b + 4), _MM_HINT_T0);
    __m256i s[NT];
    for (auto& v : s) v = _mm256_setzero_si256();
    for (int q = 0; q < 4; ++q) {
      const __m256i v = load256(b.qs[q] + 32 * h);
      for (int half = 0; half < 2; ++half) {  // elements 8q + 4·half .. + 3
        const __m256i w = _mm256_shuffle_epi8(lut, _mm256_and_si256(half ? _mm256_srli_epi16(v, 4) : v, m15)), aw = _mm256_sign_epi8(w, w);
        for (int t = 0; t < NT; ++t) {
          const __m256i p = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(bcast4(act_row<BlockQ8_0P>(act, stride, t)[i].qs + 8 * q + 4 * half), w));
          s[t] = kInt16 ? _mm256_add_epi16(s[t], p) : _mm256_add_epi32(s[t], _mm256_madd_epi16(p, ones));
        }
      }
    }
    const __m256 dw = nibble_scales<T>(b, h);
    for (int t = 0; t < NT; ++t) {
      const __m256i sum = kInt16 ? _mm256_madd_epi16(s[t], ones) : s[t];
      const __m256 scale = _mm256_mul_ps(dw, _mm256_set1_ps(act_row<BlockQ8_0P>(act, stride, t)[i].d));
      _mm256_store_ps(acc[t], _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), scale, _mm256_load_ps(acc[t])));
    }
  }
  for (int t = 0; t < NT; ++t) _mm256_storeu_ps(y + t * y_stride + 8 * h, _mm256_load_ps(acc[t]));
}

// One token (decode): both halves in one pass over the blocks, the same operations per half as
// nibble32_half<T, 1>.
template <TensorType T>
void nibble32_one(const NibblePack<T>* blocks, int64_t nb, const uint8_t* act, float* y) {
  constexpr bool kInt16 = T != TensorType::IQ4_NL;
  const __m256i lut = _mm256_broadcastsi128_si256(load128(nibble_values<T>())), m15 = _mm256_set1_epi8(0x0f),
                ones = _mm256_set1_epi16(1);
  const auto* a = reinterpret_cast<const BlockQ8_0P*>(act);
  __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int64_t i = 0; i < nb; ++i) {
    const NibblePack<T>& b = blocks[i];
    __m256i s[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
    for (int q = 0; q < 4; ++q) {
      const __m256i v[2] = {load256(b.qs[q]), load256(b.qs[q] + 32)};
      for (int half = 0; half < 2; ++half) {
        const __m256i x = bcast4(a[i].qs + 8 * q + 4 * half);
        for (int h = 0; h < 2; ++h) {
          const __m256i w = _mm256_shuffle_epi8(lut, _mm256_and_si256(half ? _mm256_srli_epi16(v[h], 4) : v[h], m15));
          const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
          s[h] = kInt16 ? _mm256_add_epi16(s[h], p) : _mm256_add_epi32(s[h], _mm256_madd_epi16(p, ones));
        }
      }
    }
    const __m256 dy = _mm256_set1_ps(a[i].d);
    for (int h = 0; h < 2; ++h) {
      const __m256i sum = kInt16 ? _mm256_madd_epi16(s[h], ones) : s[h];
      acc[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_mul_ps(nibble_scales<T>(b, h), dy), acc[h]);
    }
  }
  _mm256_storeu_ps(y, acc[0]);
  _mm256_storeu_ps(y + 8, acc[1]);
}

// IQ4_XS (rows 8h .. 8h + 7 × NT tokens): IQ4_NL's signed values by table and the sign trick, each register's
// pair sums widened (the values reach −127), a signed scale per 32-element sub-block.
template <int NT>
void iq4_xs_half(const PackIQ4_XS* blocks, int64_t nb, int h, const uint8_t* act, size_t stride, float* y, int64_t y_stride) {
  const __m256i lut = _mm256_broadcastsi128_si256(load128(nibble_values<TensorType::IQ4_NL>())), m15 = _mm256_set1_epi8(0x0f),
                ones = _mm256_set1_epi16(1);
  __m256 acc[NT];
  for (auto& v : acc) v = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const PackIQ4_XS& b = blocks[i];
    const __m256 dw = _mm256_cvtph_ps(load128(b.d + 8 * h));
    __m256 dy[NT];
    for (int t = 0; t < NT; ++t) dy[t] = _mm256_set1_ps(act_row<BlockQ8_KP>(act, stride, t)[i].d);
    for (int s = 0; s < 8; ++s) {
      prefetch_sub(b, s);
      const __m256 sc = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(load64(b.sc[s] + 8 * h))), dw);
      __m256i sum[NT];
      for (auto& v : sum) v = _mm256_setzero_si256();
      for (int q = 0; q < 4; ++q) {
        const __m256i v = load256(b.qs[s][q] + 32 * h);
        for (int half = 0; half < 2; ++half) {  // elements 8q + 4·half .. + 3
          const __m256i w = _mm256_shuffle_epi8(lut, _mm256_and_si256(half ? _mm256_srli_epi16(v, 4) : v, m15)), aw = _mm256_sign_epi8(w, w);
          for (int t = 0; t < NT; ++t) {
            const int8_t* a = act_row<BlockQ8_KP>(act, stride, t)[i].qs + 32 * s + 8 * q + 4 * half;
            sum[t] = _mm256_add_epi32(sum[t], _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(bcast4(a), w)), ones));
          }
        }
      }
      for (int t = 0; t < NT; ++t) acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum[t]), _mm256_mul_ps(sc, dy[t]), acc[t]);
    }
  }
  for (int t = 0; t < NT; ++t) _mm256_storeu_ps(y + t * y_stride + 8 * h, acc[t]);
}

// One token: both halves in one pass, the same operations per half as iq4_xs_half<1>.
void iq4_xs_one(const PackIQ4_XS* blocks, int64_t nb, const uint8_t* act, float* y) {
  const __m256i lut = _mm256_broadcastsi128_si256(load128(nibble_values<TensorType::IQ4_NL>())), m15 = _mm256_set1_epi8(0x0f),
                ones = _mm256_set1_epi16(1);
  __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  const auto* a = reinterpret_cast<const BlockQ8_KP*>(act);
  for (int64_t i = 0; i < nb; ++i) {
    const PackIQ4_XS& b = blocks[i];
    const __m256 dy = _mm256_set1_ps(a[i].d);
    const __m256 dw[2] = {_mm256_cvtph_ps(load128(b.d)), _mm256_cvtph_ps(load128(b.d + 8))};
    for (int s = 0; s < 8; ++s) {
      prefetch_sub(b, s);
      for (int h = 0; h < 2; ++h) {
        const __m256 sc = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(load64(b.sc[s] + 8 * h))), dw[h]);
        __m256i sum = _mm256_setzero_si256();
        for (int q = 0; q < 4; ++q) {
          const __m256i v = load256(b.qs[s][q] + 32 * h);
          for (int half = 0; half < 2; ++half) {
            const __m256i w = _mm256_shuffle_epi8(lut, _mm256_and_si256(half ? _mm256_srli_epi16(v, 4) : v, m15)), aw = _mm256_sign_epi8(w, w);
            sum = _mm256_add_epi32(sum, _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(bcast4(a[i].qs + 32 * s + 8 * q + 4 * half), w)), ones));
          }
        }
        acc[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_mul_ps(sc, dy), acc[h]);
      }
    }
  }
  _mm256_storeu_ps(y, acc[0]);
  _mm256_storeu_ps(y + 8, acc[1]);
}

template <TensorType T, int NT>
void nibble32_tile(const uint8_t* w, int64_t n, const uint8_t* act, size_t stride, float* y, int64_t y_stride) {
  const auto* blocks = reinterpret_cast<const NibblePack<T>*>(w);
  if constexpr (NT == 1) nibble32_one<T>(blocks, n / 32, act, y);
  else for (int h = 0; h < 2; ++h) nibble32_half<T, NT>(blocks, n / 32, h, act, stride, y, y_stride);
}

// One token (decode): both halves in one pass over the blocks; the same operations per half as
// q4_5_k_half<P, 1>, so the same results.
template <class P>
void q4_5_k_one(const P* blocks, int64_t nb, const uint8_t* act, float* y) {
  const __m256i m15 = _mm256_set1_epi8(0x0f), m16 = _mm256_set1_epi8(0x10), ones = _mm256_set1_epi16(1);
  __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  const auto* a = reinterpret_cast<const BlockQ8_KP*>(act);
  for (int64_t i = 0; i < nb; ++i) {
    const P& b = blocks[i];
    const __m256 dy = _mm256_set1_ps(a[i].d);
    const __m256 dw[2] = {_mm256_cvtph_ps(load128(b.d)), _mm256_cvtph_ps(load128(b.d + 8))};
    for (int s = 0; s < 8; ++s) {
      prefetch_sub(b, s);
      const int8_t* q8 = a[i].qs + 32 * s;
      for (int h = 0; h < 2; ++h) {
        const __m256 sc = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(load64(b.sc[s] + 8 * h))), dw[h]);
        __m256i c[8];
        k_codes_all(b, s, h, m15, m16, c);
        acc[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(k_sum<P>(c, q8, ones)), _mm256_mul_ps(sc, dy), acc[h]);
      }
    }
    for (int h = 0; h < 2; ++h) {
      const __m256 dm = _mm256_cvtph_ps(load128(b.dmin + 8 * h));
      __m256i m = _mm256_setzero_si256();
      for (int p = 0; p < 4; ++p) m = _mm256_add_epi32(m, _mm256_madd_epi16(_mm256_cvtepu8_epi16(load128(b.mn[p] + 16 * h)), bcast4(a[i].bsum32 + 2 * p)));
      acc[h] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(m), _mm256_mul_ps(dm, dy), acc[h]);
    }
  }
  _mm256_storeu_ps(y, acc[0]);
  _mm256_storeu_ps(y + 8, acc[1]);
}

void q6_k_one(const PackQ6_K* blocks, int64_t nb, const uint8_t* act, float* y) {
  const __m256i m63 = _mm256_set1_epi8(0x3f), m_c0 = _mm256_set1_epi8(static_cast<char>(0xc0)),
                m_f0 = _mm256_set1_epi8(static_cast<char>(0xf0)), ones = _mm256_set1_epi16(1);
  __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  const auto* a = reinterpret_cast<const BlockQ8_KP*>(act);
  for (int64_t i = 0; i < nb; ++i) {
    const PackQ6_K& b = blocks[i];
    const __m256 dy = _mm256_set1_ps(a[i].d);
    // The block's scales are read at its start and its pair scales at its end: their lines are asked
    // for together up front (without this the pair scales missed at the end of every block and a
    // single thread streamed a third of the bandwidth; asking for the next block's lines instead
    // measured no better). The codes follow in order for the hardware prefetcher.
    for (int l = 0; l < 9; ++l) _mm_prefetch(reinterpret_cast<const char*>(&b) + 64 * l, _MM_HINT_T0);
    const __m256 dw[2] = {_mm256_cvtph_ps(load128(b.d)), _mm256_cvtph_ps(load128(b.d + 8))};
    for (int s = 0; s < 16; ++s) {
      const int8_t* q8 = a[i].qs + 16 * s;
      for (int h = 0; h < 2; ++h) {
        const __m256 sc = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(load64(b.sc[s] + 8 * h))), dw[h]);
        const __m256i r0 = load256(b.q[s][0] + 32 * h), r1 = load256(b.q[s][1] + 32 * h), r2 = load256(b.q[s][2] + 32 * h);
        const __m256i u = select(_mm256_srli_epi16(r1, 2), r0, m_c0);
        const __m256i v = select(_mm256_srli_epi16(r2, 4), u, m_f0);
        const __m256i p01 = _mm256_add_epi16(_mm256_maddubs_epi16(_mm256_and_si256(r0, m63), bcast4(q8)),
                                             _mm256_maddubs_epi16(_mm256_and_si256(r1, m63), bcast4(q8 + 4)));
        const __m256i p23 = _mm256_add_epi16(_mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(v, 2), m63), bcast4(q8 + 8)),
                                             _mm256_maddubs_epi16(_mm256_and_si256(r2, m63), bcast4(q8 + 12)));
        const __m256i sum = _mm256_add_epi32(_mm256_madd_epi16(p01, ones), _mm256_madd_epi16(p23, ones));
        acc[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_mul_ps(sc, dy), acc[h]);
      }
    }
    for (int h = 0; h < 2; ++h) {
      const __m256 d32 = _mm256_mul_ps(_mm256_cvtph_ps(load128(b.d + 8 * h)), _mm256_set1_ps(32.0f));
      __m256i m = _mm256_setzero_si256();
      for (int p = 0; p < 8; ++p) m = _mm256_add_epi32(m, _mm256_madd_epi16(_mm256_cvtepi8_epi16(load128(b.scp[p] + 16 * h)), bcast4(a[i].bsums + 2 * p)));
      acc[h] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(m), _mm256_mul_ps(d32, dy), acc[h]);
    }
  }
  _mm256_storeu_ps(y, acc[0]);
  _mm256_storeu_ps(y + 8, acc[1]);
}

// The same operations per half as q8_0_half<1>, both halves in one pass.
void q8_0_one(const PackQ8_0* blocks, int64_t nb, const uint8_t* act, float* y) {
  const __m256i m80 = _mm256_set1_epi8(static_cast<char>(0x80)), ones = _mm256_set1_epi16(1);
  __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  const auto* a = reinterpret_cast<const BlockQ8_0P*>(act);
  for (int64_t i = 0; i < nb; ++i) {
    const PackQ8_0& b = blocks[i];
    __m256i s[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
    for (int j = 0; j < 8; ++j) {
      const __m256i q = bcast4(a[i].qs + 4 * j);
      for (int h = 0; h < 2; ++h) {
        const __m256i w = _mm256_xor_si256(load256(b.qs[j] + 32 * h), m80);
        s[h] = _mm256_add_epi32(s[h], _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(q, w)), ones));
      }
    }
    const __m256 dy = _mm256_set1_ps(a[i].d);
    for (int h = 0; h < 2; ++h) acc[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[h]), _mm256_mul_ps(_mm256_cvtph_ps(load128(b.d + 8 * h)), dy), acc[h]);
  }
  _mm256_storeu_ps(y, acc[0]);
  _mm256_storeu_ps(y + 8, acc[1]);
}

// Bit j of each byte of h moved to bit 2 (Q3_K's third bit of code register j of a pair), the rest 0.
template <int J>
inline __m256i third_bit(__m256i h, __m256i m4) {
  if constexpr (J < 2) return _mm256_and_si256(_mm256_slli_epi16(h, 2 - J), m4);
  else if constexpr (J == 2) return _mm256_and_si256(h, m4);
  else return _mm256_and_si256(_mm256_srli_epi16(h, J - 2), m4);
}

// Q2_K and Q3_K, rows 8h .. 8h + 7 for h in [h0, h0 + NH) × NT tokens (tile() runs one token with both
// halves in one pass; the operations per half do not depend on NH, so neither do the results). A sub-block's 4 code
// registers meet the token in maddubs, their pair sums added in int16 (4·2·7·127 < 2^15) and multiplied
// by the row's scale as they are widened (madd against the scale in both halves of each lane): the
// block's sum stays in int32 (16·31·4·2·7·127 < 2^31) and is converted once. Q3_K's −4 offset joins
// each sub-block's pair sums before the widening (|4·Σa| ≤ 8128, so the int16 sums stay under 2^15).
template <class P, int NT, int NH>
void q2_3_k_rows(const P* blocks, int64_t nb, int h0, const uint8_t* act, size_t stride, float* y, int64_t y_stride) {
  constexpr bool kThree = std::is_same_v<P, PackQ3_K>;
  constexpr int kStride = static_cast<int>(sizeof(P) / 8);
  const __m256i m3 = _mm256_set1_epi8(3), m4 = _mm256_set1_epi8(4), m15 = _mm256_set1_epi32(0x000f000f);
  // Within each lane, the int16 of sub-block 2p (bytes 0-1) or 2p + 1 (bytes 2-3) in both halves.
  const __m256i even = _mm256_setr_epi8(0, 1, 0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12, 13, 0, 1, 0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12, 13);
  const __m256i odd = _mm256_add_epi8(even, _mm256_set1_epi8(2));
  __m256 acc[NH][NT];
  for (auto& a : acc)
    for (auto& v : a) v = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const P& b = blocks[i];
    __m256i isum[NH][NT];
    for (auto& a : isum)
      for (auto& v : a) v = _mm256_setzero_si256();
    for (int p = 0; p < 8; ++p) {
      for (int l = 0; l < (kStride + 63) / 64; ++l) _mm_prefetch(reinterpret_cast<const char*>(&b + 1) + kStride * p + 64 * l, _MM_HINT_T0);
      for (int hh = 0; hh < NH; ++hh) {
        const int h = h0 + hh;
        __m256i scale[2];  // per lane: the row's scale of sub-block 2p + k in both int16 halves
        __m256i c[8];      // c[4k + g]: elements 4g .. 4g + 3 of sub-block 2p + k
        if constexpr (kThree) {
          for (int k = 0; k < 2; ++k) {
            const __m128i x = load64(b.sc[2 * p + k] + 8 * h);
            scale[k] = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(x, x));
          }
          const __m256i hb = load256(b.q[p][2] + 32 * h);
          const __m256i lo[2] = {load256(b.q[p][0] + 32 * h), load256(b.q[p][1] + 32 * h)};
          const __m256i third[8] = {third_bit<0>(hb, m4), third_bit<1>(hb, m4), third_bit<2>(hb, m4), third_bit<3>(hb, m4),
                                    third_bit<4>(hb, m4), third_bit<5>(hb, m4), third_bit<6>(hb, m4), third_bit<7>(hb, m4)};
          for (int k = 0; k < 2; ++k)
            for (int g = 0; g < 4; ++g)
              c[4 * k + g] = _mm256_or_si256(_mm256_and_si256(g ? _mm256_srli_epi16(lo[k], 2 * g) : lo[k], m3), third[4 * k + g]);
        } else {
          const __m256i x = _mm256_and_si256(_mm256_cvtepu8_epi16(load128(b.sm[p] + 16 * h)), m15);
          scale[0] = _mm256_shuffle_epi8(x, even);
          scale[1] = _mm256_shuffle_epi8(x, odd);
          for (int k = 0; k < 2; ++k) {
            const __m256i v = load256(b.qs[2 * p + k] + 32 * h);
            for (int g = 0; g < 4; ++g) c[4 * k + g] = _mm256_and_si256(g ? _mm256_srli_epi16(v, 2 * g) : v, m3);
          }
        }
        for (int t = 0; t < NT; ++t) {
          const BlockQ8_KP& a = act_row<BlockQ8_KP>(act, stride, t)[i];
          for (int k = 0; k < 2; ++k) {
            const int s = 2 * p + k;
            const int8_t* q8 = a.qs + 16 * s;
            __m256i pr = _mm256_add_epi16(_mm256_maddubs_epi16(c[4 * k], bcast4(q8)), _mm256_maddubs_epi16(c[4 * k + 1], bcast4(q8 + 4)));
            pr = _mm256_add_epi16(pr, _mm256_add_epi16(_mm256_maddubs_epi16(c[4 * k + 2], bcast4(q8 + 8)), _mm256_maddubs_epi16(c[4 * k + 3], bcast4(q8 + 12))));
            if constexpr (kThree) pr = _mm256_add_epi16(pr, _mm256_set1_epi32(static_cast<uint16_t>(-4 * a.bsums[s])));
            isum[hh][t] = _mm256_add_epi32(isum[hh][t], _mm256_madd_epi16(pr, scale[k]));
          }
        }
      }
    }
    for (int hh = 0; hh < NH; ++hh) {
      const int h = h0 + hh;
      const __m256 dw = _mm256_cvtph_ps(load128(b.d + 8 * h));
      for (int t = 0; t < NT; ++t) {
        const BlockQ8_KP& a = act_row<BlockQ8_KP>(act, stride, t)[i];
        const __m256 dy = _mm256_set1_ps(a.d);
        acc[hh][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[hh][t]), _mm256_mul_ps(dw, dy), acc[hh][t]);
        if constexpr (!kThree) {
          __m256i m = _mm256_setzero_si256();
          for (int p = 0; p < 8; ++p)
            m = _mm256_add_epi32(m, _mm256_madd_epi16(_mm256_srli_epi16(_mm256_cvtepu8_epi16(load128(b.sm[p] + 16 * h)), 4), bcast4(a.bsums + 2 * p)));
          acc[hh][t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(m), _mm256_mul_ps(_mm256_cvtph_ps(load128(b.dmin + 8 * h)), dy), acc[hh][t]);
        }
      }
    }
  }
  for (int hh = 0; hh < NH; ++hh)
    for (int t = 0; t < NT; ++t) _mm256_storeu_ps(y + t * y_stride + 8 * (h0 + hh), acc[hh][t]);
}

// A group: both halves; K-quant tokens 4 at a time, Q8_0 tokens all at once.
template <class P, template <int> class Half, int NT>
void tile(const uint8_t* w, int64_t n, const uint8_t* act, size_t stride, float* y, int64_t y_stride) {
  const auto* blocks = reinterpret_cast<const P*>(w);
  if constexpr (std::is_same_v<P, PackQ8_0>) {
    if constexpr (NT == 1) q8_0_one(blocks, n / 32, act, y);
    else for (int h = 0; h < 2; ++h) q8_0_half<NT>(blocks, n / 32, h, act, stride, y, y_stride);
  } else if constexpr (NT == 1) {
    if constexpr (std::is_same_v<P, PackQ6_K>) q6_k_one(blocks, n / 256, act, y);
    else if constexpr (std::is_same_v<P, PackIQ4_XS>) iq4_xs_one(blocks, n / 256, act, y);
    else if constexpr (std::is_same_v<P, PackQ2_K> || std::is_same_v<P, PackQ3_K>) q2_3_k_rows<P, 1, 2>(blocks, n / 256, 0, act, stride, y, y_stride);
    else q4_5_k_one(blocks, n / 256, act, y);
  } else {
    constexpr int kFirst = NT > 4 ? 4 : NT;
    for (int h = 0; h < 2; ++h) {
      Half<kFirst>::run(blocks, n / 256, h, act, stride, y, y_stride);
      if constexpr (NT > 4) Half<NT - 4>::run(blocks, n / 256, h, act + 4 * stride, stride, y + 4 * y_stride, y_stride);
    }
  }
}
template <int NT> struct Q8_0H { static constexpr auto run = q8_0_half<NT>; };
template <int NT> struct Q4_KH { static constexpr auto run = q4_5_k_half<PackQ4_K, NT>; };
template <int NT> struct Q5_KH { static constexpr auto run = q4_5_k_half<PackQ5_K, NT>; };
template <int NT> struct IQ4_XSH { static constexpr auto run = iq4_xs_half<NT>; };
template <int NT> struct Q6_KH { static constexpr auto run = q6_k_half<NT>; };
template <int NT> struct Q2_KH { static constexpr auto run = q2_3_k_rows<PackQ2_K, NT, 1>; };
template <int NT> struct Q3_KH { static constexpr auto run = q2_3_k_rows<PackQ3_K, NT, 1>; };

template <TensorType T>
PackedTileFn nibble_by_tokens(int nt) {
  switch (nt) {
    case 1: return nibble32_tile<T, 1>;
    case 2: return nibble32_tile<T, 2>;
    case 3: return nibble32_tile<T, 3>;
    case 4: return nibble32_tile<T, 4>;
    case 5: return nibble32_tile<T, 5>;
    case 6: return nibble32_tile<T, 6>;
    case 7: return nibble32_tile<T, 7>;
    case 8: return nibble32_tile<T, 8>;
    default: return nullptr;
  }
}

template <class P, template <int> class Half>
PackedTileFn by_tokens(int nt) {
  switch (nt) {
    case 1: return tile<P, Half, 1>;
    case 2: return tile<P, Half, 2>;
    case 3: return tile<P, Half, 3>;
    case 4: return tile<P, Half, 4>;
    case 5: return tile<P, Half, 5>;
    case 6: return tile<P, Half, 6>;
    case 7: return tile<P, Half, 7>;
    case 8: return tile<P, Half, 8>;
    default: return nullptr;
  }
}
static_assert(kPackTokens == 8);

// ---- activations --------------------------------------------------------------------------------

// max |x| over n floats (a multiple of 8), NaN skipped: the integer maximum of the bit patterns, as
// rounding.h's abs_max.
inline float abs_max8(const float* x, int n) {
  const __m256i abs = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
  __m256i m = _mm256_setzero_si256();
  for (int j = 0; j < n; j += 8) {
    const __m256i b = _mm256_and_si256(load256(x + j), abs);
    m = _mm256_max_epi32(m, _mm256_andnot_si256(_mm256_cmpgt_epi32(b, inf), b));
  }
  __m128i h = _mm_max_epi32(_mm256_castsi256_si128(m), _mm256_extracti128_si256(m, 1));
  h = _mm_max_epi32(h, _mm_shuffle_epi32(h, 0x4e));
  h = _mm_max_epi32(h, _mm_shuffle_epi32(h, 0xb1));
  float f;
  const int32_t bits = _mm_cvtsi128_si32(h);
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// Codes of 8 floats times id, clamped to ±127 (NaN → −127) and rounded as code_round_away (kAway) or
// code_round_even (rounding.h), exactly.
template <bool kAway>
inline __m256i codes8(const float* x, __m256 id) {
  __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x), id);
  v = _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(-127.0f)), _mm256_set1_ps(127.0f));
  if constexpr (kAway) {
    const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC), f = _mm256_sub_ps(v, t), one = _mm256_set1_ps(1.0f);
    v = _mm256_sub_ps(_mm256_add_ps(t, _mm256_and_ps(_mm256_cmp_ps(f, _mm256_set1_ps(0.5f), _CMP_GE_OQ), one)),
                      _mm256_and_ps(_mm256_cmp_ps(f, _mm256_set1_ps(-0.5f), _CMP_LE_OQ), one));
  } else {
    v = _mm256_sub_ps(_mm256_add_ps(v, _mm256_set1_ps(12582912.0f)), _mm256_set1_ps(12582912.0f));
  }
  return _mm256_cvttps_epi32(v);
}

inline int32_t hsum8(__m256i v) {
  __m128i h = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4e));
  h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xb1));
  return _mm_cvtsi128_si32(h);
}

// 32 int32 codes (4 registers in order) → 32 bytes in order.
inline void store_codes32(int8_t* out, const __m256i c[4]) {
  const __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(c[0], c[1]), _mm256_packs_epi32(c[2], c[3]));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}

}  // namespace

void quantize_q8_0p_avx2(const float* x, BlockQ8_0P* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 32) {
    const float d = abs_max8(x, 32) / 127;
    const __m256 id = _mm256_set1_ps(d != 0 ? 1.0f / d : 0.0f);
    __m256i c[4];
    for (int k = 0; k < 4; ++k) c[k] = codes8<true>(x + 8 * k, id);
    store_codes32(y[i].qs, c);
    y[i].d = _cvtsh_ss(_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT));
    y[i].neg_sum128 = -128 * hsum8(_mm256_add_epi32(_mm256_add_epi32(c[0], c[1]), _mm256_add_epi32(c[2], c[3])));
  }
}

void quantize_q8_kp_avx2(const float* x, BlockQ8_KP* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 256) {
    const float d = abs_max8(x, 256) / 127;
    const __m256 id = _mm256_set1_ps(d != 0 ? 1.0f / d : 0.0f);
    y[i].d = d;
    for (int s = 0; s < 8; ++s) {
      __m256i c[4];
      for (int k = 0; k < 4; ++k) c[k] = codes8<false>(x + 32 * s + 8 * k, id);
      store_codes32(y[i].qs + 32 * s, c);
      const int32_t lo = hsum8(_mm256_add_epi32(c[0], c[1])), hi = hsum8(_mm256_add_epi32(c[2], c[3]));
      y[i].bsums[2 * s] = static_cast<int16_t>(lo);
      y[i].bsums[2 * s + 1] = static_cast<int16_t>(hi);
      y[i].bsum32[s] = static_cast<int16_t>(lo + hi);
    }
  }
}

PackedTileFn packed_tile_avx2(TensorType t, int nt) {
  switch (t) {
    case TensorType::Q8_0: return by_tokens<PackQ8_0, Q8_0H>(nt);
    case TensorType::Q4_0: return nibble_by_tokens<TensorType::Q4_0>(nt);
    case TensorType::IQ4_NL: return nibble_by_tokens<TensorType::IQ4_NL>(nt);
    case TensorType::MXFP4: return nibble_by_tokens<TensorType::MXFP4>(nt);
    case TensorType::Q4_K: return by_tokens<PackQ4_K, Q4_KH>(nt);
    case TensorType::Q5_K: return by_tokens<PackQ5_K, Q5_KH>(nt);
    case TensorType::IQ4_XS: return by_tokens<PackIQ4_XS, IQ4_XSH>(nt);
    case TensorType::Q6_K: return by_tokens<PackQ6_K, Q6_KH>(nt);
    case TensorType::Q2_K: return by_tokens<PackQ2_K, Q2_KH>(nt);
    case TensorType::Q3_K: return by_tokens<PackQ3_K, Q3_KH>(nt);
    default: return nullptr;
  }
}

}  // namespace zinc::quant

#else

namespace zinc::quant {
PackedTileFn packed_tile_avx2(TensorType, int) { return nullptr; }
void quantize_q8_0p_avx2(const float*, BlockQ8_0P*, int64_t) {}
void quantize_q8_kp_avx2(const float*, BlockQ8_KP*, int64_t) {}
}  // namespace zinc::quant

#endif
