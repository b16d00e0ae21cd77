// AVX-512 dot products (F, BW, VL, VNNI, DQ): one weight row against one activation row, and tiles of
// kDotTileRows weight rows × kDotTileTokens activation rows for prefill (see the tile section), the same
// results as dot_ref() up to float summation order. Only used when the CPU also has AVX512-VNNI
// (checked here, since the dispatcher tests F/BW/VL only); otherwise the AVX2 kernels run.
//
// Layout: rows of packed blocks exactly as in blocks.h, read with unaligned loads; activations as dot.h
// pairs them (F32, Q8_0, Q8_1, Q8_K), activation codes in -127..127 as quantize_activation() writes.
//
// Integer cores:
//  - 32-element formats: two blocks per 512-bit register. Weight codes are made unsigned by an offset K
//    (Q4_0: 8, Q5_0: 16, Q8_0 / codebooks: 128), so one _mm512_dpbusd_epi32 gives Σ(w+K)·a and a
//    second gives K·Σa; their difference is the exact block sum. Scales of eight blocks are converted
//    together and applied with one float FMA per pair of blocks.
//  - K-quants: _mm512_maddubs_epi16 (unsigned codes × activations → int16 pairs) followed by
//    _mm512_dpwssd_epi32, which multiplies by the 16-bit sub-block scales and accumulates in int32.
//    Offsets of signed codes (Q3_K -4, Q6_K -32) and the minimums are applied through the Q8_K block
//    sums, as the reference does.
//
// Bytes moved per call: the weight row (row_size(type, n)) plus the activation row
// (activation_row_size(type, n)); nothing is written but the returned float.
#include "quant/dot.h"

// The build compiles this file with the AVX-512 flags on x86-64 only; anywhere else it is an empty table.
#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512VNNI__) && defined(__AVX512DQ__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

#include "quant/immintrin_x86.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/system_info.h"
#include "quant/blocks.h"
#include "quant/fp16.h"

namespace zinc::quant {

namespace {

// ---- helpers ------------------------------------------------------------------------------------

inline float h2f(uint16_t h) { return _cvtsh_ss(h); }

inline __m512i load512(const void* p) { return _mm512_loadu_si512(p); }
inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline __m128i load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Two 256-bit halves from two addresses.
inline __m512i load_pair256(const void* lo, const void* hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(load256(lo)), load256(hi), 1);
}

// Packed nibbles of two 32-element blocks → 64 bytes: [block 0 low, block 0 high, block 1 low, block 1 high].
inline __m512i nibbles64(const uint8_t* qs0, const uint8_t* qs1) {
  const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_broadcastsi128_si256(load128(qs0))),
                                       _mm256_broadcastsi128_si256(load128(qs1)), 1);
  return _mm512_and_si512(_mm512_srlv_epi64(v, _mm512_set_epi64(4, 4, 0, 0, 4, 4, 0, 0)), _mm512_set1_epi8(0x0f));
}

// A 16-entry signed codebook shifted by +128 (so codes become unsigned), in every 128-bit lane.
inline __m512i codebook_u8(const int8_t* values) {
  return _mm512_xor_si512(_mm512_broadcast_i32x4(load128(values)), _mm512_set1_epi8(static_cast<char>(0x80)));
}

// The field at byte offset kOff of 8 consecutive kStride-byte blocks, one per 32-bit lane, shifted
// down to bit 0 (higher bits hold the bytes that follow it). Dword permutes pick the fields out of two
// 128-byte windows of the group; no byte outside the 8 blocks is read. Converting scales this way
// instead of with scalar loads or word permutes roughly halves the time of the 32-element formats.
template <int kStride, int kOff>
struct Gather8 {
  static_assert(8 * kStride >= 128 && kOff % 2 == 0);
  static constexpr int kB = 8 * kStride - 128 < 128 ? (8 * kStride - 128) & ~3 : 128;  // window B start
  static constexpr int byte(int k) { return kStride * k + kOff; }
  static constexpr int dword(int k) { return byte(k) / 4; }
  static constexpr bool in_a(int k) { return dword(k) < 32; }
  static constexpr std::array<int32_t, 16> index(bool window_b) {
    std::array<int32_t, 16> idx{};
    for (int k = 0; k < 8; ++k) {
      const int d = window_b ? dword(k) - kB / 4 : dword(k);
      idx[k] = d >= 0 && d < 32 ? d : 0;
      if (!in_a(k) && (dword(k) - kB / 4 < 0 || dword(k) - kB / 4 >= 32)) throw "field outside both windows";
    }
    return idx;
  }
  static constexpr std::array<int32_t, 8> shifts() {
    std::array<int32_t, 8> sh{};
    for (int k = 0; k < 8; ++k) sh[k] = 8 * (byte(k) % 4);
    return sh;
  }
  static constexpr bool needs_b() { return !in_a(7); }
  static constexpr bool needs_shift() { return shifts() != std::array<int32_t, 8>{}; }
  static constexpr uint16_t b_lanes() {
    unsigned m = 0;
    for (int k = 0; k < 8; ++k)
      if (!in_a(k)) m |= 1u << k;
    return static_cast<uint16_t>(m);
  }
  static constexpr std::array<int32_t, 16> kIdxA = index(false), kIdxB = index(true);
  static constexpr std::array<int32_t, 8> kShifts = shifts();

  static __m256i load(const void* group) {
    const auto* p = static_cast<const uint8_t*>(group);
    __m512i r = _mm512_permutex2var_epi32(load512(p), load512(kIdxA.data()), load512(p + 64));
    if constexpr (needs_b()) {
      const __m512i rb = _mm512_permutex2var_epi32(load512(p + kB), load512(kIdxB.data()), load512(p + kB + 64));
      r = _mm512_mask_blend_epi32(b_lanes(), r, rb);
    }
    __m256i v = _mm512_castsi512_si256(r);
    if constexpr (needs_shift()) v = _mm256_srlv_epi32(v, load256(kShifts.data()));
    return v;
  }
};

// An fp16 field of 8 consecutive blocks → 16 floats whose even lanes 2k hold block k's value (the odd
// lanes hold whatever followed the field; they are never used).
template <size_t kOff, class B>
inline __m512 fp16_8(const B* x) {
  return _mm512_cvtph_ps(Gather8<static_cast<int>(sizeof(B)), static_cast<int>(kOff)>::load(x));
}

// Lanes 0..7 = v[4k], lanes 8..15 = v[4k+2]: the scales of block pair k of eight, from even lanes.
inline __m512 pair_splat(__m512 v, int k) {
  const __m512i idx = _mm512_add_epi32(_mm512_set_epi32(2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0), _mm512_set1_epi32(4 * k));
  return _mm512_permutexvar_ps(idx, v);
}

// ---- float weights ------------------------------------------------------------------------------

struct F32 {
  using T = float;
  static __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
  static __m512 load16_masked(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
};
struct F16 {
  using T = uint16_t;
  static __m512 load16(const uint16_t* p) { return _mm512_cvtph_ps(load256(p)); }
  static __m512 load16_masked(const uint16_t* p, __mmask16 m) { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p)); }
};
struct BF16 {
  using T = uint16_t;
  static __m512 widen(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }
  static __m512 load16(const uint16_t* p) { return widen(load256(p)); }
  static __m512 load16_masked(const uint16_t* p, __mmask16 m) { return widen(_mm256_maskz_loadu_epi16(m, p)); }
};

template <class C>
float dot_float(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const typename C::T*>(w);
  const auto* y = static_cast<const float*>(a);
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps(), acc2 = _mm512_setzero_ps(), acc3 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    acc0 = _mm512_fmadd_ps(C::load16(x + i), _mm512_loadu_ps(y + i), acc0);
    acc1 = _mm512_fmadd_ps(C::load16(x + i + 16), _mm512_loadu_ps(y + i + 16), acc1);
    acc2 = _mm512_fmadd_ps(C::load16(x + i + 32), _mm512_loadu_ps(y + i + 32), acc2);
    acc3 = _mm512_fmadd_ps(C::load16(x + i + 48), _mm512_loadu_ps(y + i + 48), acc3);
  }
  for (; i + 16 <= n; i += 16) acc0 = _mm512_fmadd_ps(C::load16(x + i), _mm512_loadu_ps(y + i), acc0);
  if (i < n) {  // masked tail: lanes past n load as zero and are never touched in memory
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    acc1 = _mm512_fmadd_ps(C::load16_masked(x + i, m), _mm512_maskz_loadu_ps(m, y + i), acc1);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc0, acc1), _mm512_add_ps(acc2, acc3)));
}

// ---- 32-element blocks against Q8_0 -------------------------------------------------------------

// codes2(b0, b1): the 64 codes of two blocks plus kOffset, as unsigned bytes. scales8: 8 blocks' scales
// in the even lanes.
struct DecodeQ4_0 {
  using Block = BlockQ4_0;
  static constexpr int kOffset = 8;
  static __m512i codes2(const Block& b0, const Block& b1) { return nibbles64(b0.qs, b1.qs); }
  static __m512 scales8(const Block* b) { return fp16_8<offsetof(Block, d)>(b); }
  static float scale(const Block& b) { return h2f(b.d); }
};
struct DecodeQ5_0 {
  using Block = BlockQ5_0;
  static constexpr int kOffset = 16;
  static __m512i codes2(const Block& b0, const Block& b1) {
    uint32_t h0, h1;
    std::memcpy(&h0, b0.qh, 4);
    std::memcpy(&h1, b1.qh, 4);
    const __mmask64 bit4 = _cvtu64_mask64(static_cast<uint64_t>(h0) | static_cast<uint64_t>(h1) << 32);
    const __m512i nib = nibbles64(b0.qs, b1.qs);
    return _mm512_mask_add_epi8(nib, bit4, nib, _mm512_set1_epi8(16));
  }
  static __m512 scales8(const Block* b) { return fp16_8<offsetof(Block, d)>(b); }
  static float scale(const Block& b) { return h2f(b.d); }
};
struct DecodeQ8_0 {
  using Block = BlockQ8_0;
  static constexpr int kOffset = 128;
  static __m512i codes2(const Block& b0, const Block& b1) {
    return _mm512_xor_si512(load_pair256(b0.qs, b1.qs), _mm512_set1_epi8(static_cast<char>(0x80)));
  }
  static __m512 scales8(const Block* b) { return fp16_8<offsetof(Block, d)>(b); }
  static float scale(const Block& b) { return h2f(b.d); }
};
struct DecodeIQ4_NL {
  using Block = BlockIQ4_NL;
  static constexpr int kOffset = 128;
  static __m512i codes2(const Block& b0, const Block& b1) {
    return _mm512_shuffle_epi8(codebook_u8(kIQ4NLValues), nibbles64(b0.qs, b1.qs));
  }
  static __m512 scales8(const Block* b) { return fp16_8<offsetof(Block, d)>(b); }
  static float scale(const Block& b) { return h2f(b.d); }
};
struct DecodeMXFP4 {
  using Block = BlockMXFP4;
  static constexpr int kOffset = 128;
  static __m512i codes2(const Block& b0, const Block& b1) {
    return _mm512_shuffle_epi8(codebook_u8(kMXFP4Values), nibbles64(b0.qs, b1.qs));
  }
  // E8M0 → float bits: (e-1) << 23 for e ≥ 2, the subnormals 2^-128 and 2^-127 for e = 0, 1; block k's
  // scale in lane 2k, as fp16_8 lays them out.
  static __m512 scales8(const Block* b) {
    const __m256i e = _mm256_and_si256(Gather8<sizeof(Block), offsetof(Block, e)>::load(b), _mm256_set1_epi32(0xff));
    const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
    const __m256i tiny = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
    const __m256 f = _mm256_castsi256_ps(_mm256_mask_blend_epi32(_mm256_cmplt_epi32_mask(e, _mm256_set1_epi32(2)), normal, tiny));
    return _mm512_permutexvar_ps(_mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0), _mm512_castps256_ps512(f));
  }
  static float scale(const Block& b) { return e8m0_to_f32_half(b.e); }
};

// Σ over the two blocks' lanes of (w+K)·a − K·a: exact int32 sums, lanes 0..7 block 0, 8..15 block 1.
template <class D>
inline __m512i block_pair_sums(const typename D::Block* x, const BlockQ8_0* y) {
  const __m512i a = load_pair256(y[0].qs, y[1].qs);
  const __m512i wa = _mm512_dpbusd_epi32(_mm512_setzero_si512(), D::codes2(x[0], x[1]), a);
  const __m512i ka = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(static_cast<char>(D::kOffset)), a);
  return _mm512_sub_epi32(wa, ka);
}

template <class D>
float dot_q8_0_family(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const typename D::Block*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  const int64_t nb = n / kQK;
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= nb; i += 8) {
    const __m512 d = _mm512_mul_ps(D::scales8(x + i), fp16_8<offsetof(BlockQ8_0, d)>(y + i));
    const __m512 p0 = _mm512_cvtepi32_ps(block_pair_sums<D>(x + i, y + i));
    const __m512 p1 = _mm512_cvtepi32_ps(block_pair_sums<D>(x + i + 2, y + i + 2));
    const __m512 p2 = _mm512_cvtepi32_ps(block_pair_sums<D>(x + i + 4, y + i + 4));
    const __m512 p3 = _mm512_cvtepi32_ps(block_pair_sums<D>(x + i + 6, y + i + 6));
    acc0 = _mm512_fmadd_ps(pair_splat(d, 0), p0, acc0);
    acc1 = _mm512_fmadd_ps(pair_splat(d, 1), p1, acc1);
    acc0 = _mm512_fmadd_ps(pair_splat(d, 2), p2, acc0);
    acc1 = _mm512_fmadd_ps(pair_splat(d, 3), p3, acc1);
  }
  // Remaining 0..7 blocks one at a time, in 256-bit registers.
  __m256 acc = _mm256_setzero_ps();
  for (; i < nb; ++i) {
    const __m256i a8 = load256(y[i].qs);
    const __m256i codes = _mm512_castsi512_si256(D::codes2(x[i], x[i]));
    const __m256i wa = _mm256_dpbusd_epi32(_mm256_setzero_si256(), codes, a8);
    const __m256i ka = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(static_cast<char>(D::kOffset)), a8);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(D::scale(x[i]) * h2f(y[i].d)), _mm256_cvtepi32_ps(_mm256_sub_epi32(wa, ka)), acc);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1)) + hsum(acc);
}

// ---- affine 32-element blocks against Q8_1 ------------------------------------------------------

struct DecodeQ4_1 {
  using Block = BlockQ4_1;
  static __m512i codes2(const Block& b0, const Block& b1) { return nibbles64(b0.qs, b1.qs); }
};
struct DecodeQ5_1 {
  using Block = BlockQ5_1;
  static __m512i codes2(const Block& b0, const Block& b1) {
    uint32_t h0, h1;
    std::memcpy(&h0, b0.qh, 4);
    std::memcpy(&h1, b1.qh, 4);
    const __mmask64 bit4 = _cvtu64_mask64(static_cast<uint64_t>(h0) | static_cast<uint64_t>(h1) << 32);
    const __m512i nib = nibbles64(b0.qs, b1.qs);
    return _mm512_mask_add_epi8(nib, bit4, nib, _mm512_set1_epi8(16));
  }
};

// x·a = d·da·Σq·a + m·s per block.
template <class D>
float dot_q8_1_family(const void* w, const void* a, int64_t n) {
  using B = typename D::Block;
  static_assert(offsetof(B, d) == 0 && offsetof(B, m) == 2 && offsetof(BlockQ8_1, s) == 2);
  const auto* x = static_cast<const B*>(w);
  const auto* y = static_cast<const BlockQ8_1*>(a);
  const int64_t nb = n / kQK;
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps(), acc_m = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= nb; i += 8) {
    // The 32-bit field at offset 0 is (d, m) or (d, s): converted, lane 2k = dx·dy and lane 2k+1 = m·s
    // of block k. Even lanes scale the dot products, odd lanes are summed.
    static_assert(sizeof(B) % 4 == 0 && sizeof(BlockQ8_1) % 4 == 0);
    const __m512 f = _mm512_mul_ps(fp16_8<0>(x + i), fp16_8<0>(y + i));
    acc_m = _mm512_mask_add_ps(acc_m, 0xaaaa, acc_m, f);
    for (int k = 0; k < 4; ++k) {
      const __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), D::codes2(x[i + 2 * k], x[i + 2 * k + 1]),
                                            load_pair256(y[i + 2 * k].qs, y[i + 2 * k + 1].qs));
      const __m512 scale = pair_splat(f, k);
      if (k % 2 == 0) acc0 = _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(s), acc0);
      else acc1 = _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(s), acc1);
    }
  }
  float tail = 0;
  for (; i < nb; ++i) {
    const __m256i s = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm512_castsi512_si256(D::codes2(x[i], x[i])),
                                          load256(y[i].qs));
    tail += h2f(x[i].d) * h2f(y[i].d) * hsum(_mm256_cvtepi32_ps(s)) + h2f(x[i].m) * h2f(y[i].s);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1)) + _mm512_reduce_add_ps(acc_m) + tail;
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
  uint64_t lo = l32;  // byte 2i ← scales_l[i] & 15, byte 2i+1 ← scales_l[i] >> 4
  lo = (lo | (lo << 16)) & 0x0000ffff0000ffffull;
  lo = (lo | (lo << 8)) & 0x00ff00ff00ff00ffull;
  lo = (lo | (lo << 4)) & 0x0f0f0f0f0f0f0f0full;
  uint64_t hi = b.scales_h;  // bits 2k..2k+1 → bits 8k..8k+1
  hi = (hi | (hi << 24)) & 0x000000ff000000ffull;
  hi = (hi | (hi << 12)) & 0x000f000f000f000full;
  hi = (hi | (hi << 6)) & 0x0303030303030303ull;
  const __m128i ls = _mm_cvtsi64_si128(static_cast<long long>(lo | (hi << 4)));
  return _mm_sub_epi16(_mm_cvtepu8_epi16(ls), _mm_set1_epi16(32));
}

// Scale words for one 512-bit register of maddubs output (32 int16, one per byte pair), from `w8`, a
// register holding the same 8 scale words in each 128-bit lane: lane L gets word w_L everywhere.
// In-lane byte shuffles (one instruction each) rather than word permutes across the register.
inline __m512i splat_words(__m512i w8, int w0, int w1, int w2, int w3) {
  auto pattern = [](int w) {
    return static_cast<long long>(static_cast<uint64_t>(((2 * w + 1) << 8) | (2 * w)) * 0x0001000100010001ull);
  };
  return _mm512_shuffle_epi8(w8, _mm512_set_epi64(pattern(w3), pattern(w3), pattern(w2), pattern(w2), pattern(w1),
                                                  pattern(w1), pattern(w0), pattern(w0)));
}
// 16-element sub-blocks (Q2_K, Q3_K, Q6_K): lane L covers sub-block b + L.
inline __m512i scales_per_lane(__m512i w8, int b) { return splat_words(w8, b, b + 1, b + 2, b + 3); }
// 32-element sub-blocks (Q4_K, Q5_K, IQ4_XS): lanes 0,1 are sub-block s, lanes 2,3 sub-block s+1.
inline __m512i scales_per_half(__m512i w8, int s) { return splat_words(w8, s, s, s + 1, s + 1); }
inline __m512i bcast_lo(__m256i v) { return _mm512_broadcast_i32x4(_mm256_castsi256_si128(v)); }
inline __m512i bcast_hi(__m256i v) { return _mm512_broadcast_i32x4(_mm256_extracti128_si256(v, 1)); }

float dot_q2_k(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ2_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  const __m512i m3 = _mm512_set1_epi8(3);
  __m512 acc = _mm512_setzero_ps();
  __m256 acc_m = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const __m128i sc8 = load128(x[i].scales);
    const __m256i scales = _mm256_cvtepu8_epi16(_mm_and_si128(sc8, _mm_set1_epi8(0x0f)));
    const __m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc8, 4), _mm_set1_epi8(0x0f)));
    const __m256i sum_m = _mm256_madd_epi16(mins, load256(y[i].bsums));
    __m512i sumi = _mm512_setzero_si512();
    for (int nn = 0; nn < 2; ++nn) {
      const __m512i w8 = nn == 0 ? bcast_lo(scales) : bcast_hi(scales);  // scales of sub-blocks 8nn..8nn+7
      // The 32 code bytes of this half, twice: shift pairs (0, 2) and (4, 6) give j = 0,1 and 2,3.
      const __m512i q2 = _mm512_broadcast_i64x4(load256(x[i].qs + 32 * nn));
      const __m512i q01 = _mm512_and_si512(_mm512_srlv_epi64(q2, _mm512_set_epi64(2, 2, 2, 2, 0, 0, 0, 0)), m3);
      const __m512i q23 = _mm512_and_si512(_mm512_srlv_epi64(q2, _mm512_set_epi64(6, 6, 6, 6, 4, 4, 4, 4)), m3);
      const __m512i p01 = _mm512_maddubs_epi16(q01, load512(y[i].qs + 128 * nn));
      const __m512i p23 = _mm512_maddubs_epi16(q23, load512(y[i].qs + 128 * nn + 64));
      sumi = _mm512_dpwssd_epi32(sumi, p01, scales_per_lane(w8, 0));
      sumi = _mm512_dpwssd_epi32(sumi, p23, scales_per_lane(w8, 4));
    }
    const float dy = y[i].d;
    acc = _mm512_fmadd_ps(_mm512_set1_ps(dy * h2f(x[i].d)), _mm512_cvtepi32_ps(sumi), acc);
    acc_m = _mm256_fmadd_ps(_mm256_set1_ps(dy * h2f(x[i].dmin)), _mm256_cvtepi32_ps(sum_m), acc_m);
  }
  return _mm512_reduce_add_ps(acc) - hsum(acc_m);
}

float dot_q3_k(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ3_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  const __m512i m3 = _mm512_set1_epi8(3), m4 = _mm512_set1_epi8(4);
  __m512 acc = _mm512_setzero_ps();
  __m256 acc_b = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const auto* block_bytes = reinterpret_cast<const uint8_t*>(&x[i]);
    const __m256i scales = _mm256_cvtepi8_epi16(q3k_scales_signed(block_bytes + offsetof(BlockQ3_K, scales) - 2));
    // Codes q' - 4 with q' = low bits + 4·high bit in 0..7: Σ(q'-4)·a = Σq'·a - 4·bsum.
    const __m256i bias = _mm256_madd_epi16(scales, load256(y[i].bsums));
    const __m512i hm = _mm512_broadcast_i64x4(load256(x[i].hmask));
    __m512i sumi = _mm512_setzero_si512();
    for (int nn = 0; nn < 2; ++nn) {
      const __m512i w8 = nn == 0 ? bcast_lo(scales) : bcast_hi(scales);  // scales of sub-blocks 8nn..8nn+7
      const __m512i q2 = _mm512_broadcast_i64x4(load256(x[i].qs + 32 * nn));
      const __m512i q01 = _mm512_and_si512(_mm512_srlv_epi64(q2, _mm512_set_epi64(2, 2, 2, 2, 0, 0, 0, 0)), m3);
      const __m512i q23 = _mm512_and_si512(_mm512_srlv_epi64(q2, _mm512_set_epi64(6, 6, 6, 6, 4, 4, 4, 4)), m3);
      // hmask bit 4nn+j → bit 2 (shift right by 4nn+j-2; a negative count is a left shift).
      const int b = 4 * nn;
      const __m512i h01 = b == 0 ? _mm512_sllv_epi64(hm, _mm512_set_epi64(1, 1, 1, 1, 2, 2, 2, 2))
                                 : _mm512_srlv_epi64(hm, _mm512_set_epi64(b - 1, b - 1, b - 1, b - 1, b - 2, b - 2, b - 2, b - 2));
      const __m512i h23 = b == 0 ? _mm512_srlv_epi64(hm, _mm512_set_epi64(1, 1, 1, 1, 0, 0, 0, 0))
                                 : _mm512_srlv_epi64(hm, _mm512_set_epi64(b + 1, b + 1, b + 1, b + 1, b, b, b, b));
      const __m512i c01 = _mm512_or_si512(q01, _mm512_and_si512(h01, m4));
      const __m512i c23 = _mm512_or_si512(q23, _mm512_and_si512(h23, m4));
      const __m512i p01 = _mm512_maddubs_epi16(c01, load512(y[i].qs + 128 * nn));
      const __m512i p23 = _mm512_maddubs_epi16(c23, load512(y[i].qs + 128 * nn + 64));
      sumi = _mm512_dpwssd_epi32(sumi, p01, scales_per_lane(w8, 0));
      sumi = _mm512_dpwssd_epi32(sumi, p23, scales_per_lane(w8, 4));
    }
    const float d = y[i].d * h2f(x[i].d);
    acc = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(sumi), acc);
    acc_b = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(bias), acc_b);
  }
  return _mm512_reduce_add_ps(acc) - 4 * hsum(acc_b);
}

template <bool kFive, class B>
float dot_q45_k(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const B*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  const __m512i m15 = _mm512_set1_epi8(0x0f), m16 = _mm512_set1_epi8(0x10);
  __m512 acc = _mm512_setzero_ps();
  __m128 acc_m = _mm_setzero_ps();
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const __m256i scm = _mm256_cvtepu8_epi16(kquant_scales_mins(x[i].scales));  // 8 scales, 8 mins
    const __m128i bsum = _mm_hadd_epi16(load128(y[i].bsums), load128(y[i].bsums + 8));
    const __m128i sum_m = _mm_madd_epi16(_mm256_extracti128_si256(scm, 1), bsum);
    __m512i qh;
    if constexpr (kFive) qh = _mm512_broadcast_i64x4(load256(x[i].qh));
    const __m512i w8 = bcast_lo(scm);  // the 8 scales
    __m512i sumi = _mm512_setzero_si512();
    for (int c = 0; c < 4; ++c) {
      // 32 code bytes → [low nibbles: sub-block 2c | high nibbles: sub-block 2c+1].
      const __m512i q4 = _mm512_broadcast_i64x4(load256(x[i].qs + 32 * c));
      __m512i q = _mm512_and_si512(_mm512_srlv_epi64(q4, _mm512_set_epi64(4, 4, 4, 4, 0, 0, 0, 0)), m15);
      if constexpr (kFive) {
        // Bit 2c (low half) and 2c+1 (high half) of each qh byte → bit 4.
        const int b = 2 * c;
        const __m512i h = b + 1 <= 4 ? _mm512_sllv_epi64(qh, _mm512_set_epi64(3 - b, 3 - b, 3 - b, 3 - b, 4 - b, 4 - b, 4 - b, 4 - b))
                                     : _mm512_srlv_epi64(qh, _mm512_set_epi64(b - 3, b - 3, b - 3, b - 3, b - 4, b - 4, b - 4, b - 4));
        q = _mm512_or_si512(q, _mm512_and_si512(h, m16));
      }
      const __m512i p = _mm512_maddubs_epi16(q, load512(y[i].qs + 64 * c));
      sumi = _mm512_dpwssd_epi32(sumi, p, scales_per_half(w8, 2 * c));
    }
    const float dy = y[i].d;
    acc = _mm512_fmadd_ps(_mm512_set1_ps(dy * h2f(x[i].d)), _mm512_cvtepi32_ps(sumi), acc);
    acc_m = _mm_fmadd_ps(_mm_set1_ps(dy * h2f(x[i].dmin)), _mm_cvtepi32_ps(sum_m), acc_m);
  }
  __m128 m = _mm_add_ps(acc_m, _mm_movehl_ps(acc_m, acc_m));
  m = _mm_add_ss(m, _mm_movehdup_ps(m));
  return _mm512_reduce_add_ps(acc) - _mm_cvtss_f32(m);
}

float dot_q6_k(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ6_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  const __m512i m15 = _mm512_set1_epi8(0x0f), m48 = _mm512_set1_epi8(0x30);
  __m512 acc = _mm512_setzero_ps();
  __m256 acc_b = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const __m256i scales = _mm256_cvtepi8_epi16(load128(x[i].scales));
    // Codes q - 32 with q in 0..63: Σ(q-32)·a = Σq·a - 32·bsum per 16-element sub-block.
    const __m256i bias = _mm256_madd_epi16(scales, load256(y[i].bsums));
    __m512i sumi = _mm512_setzero_si512();
    for (int nn = 0; nn < 2; ++nn) {
      const __m512i w8 = nn == 0 ? bcast_lo(scales) : bcast_hi(scales);  // scales of sub-blocks 8nn..8nn+7
      const __m512i ql = load512(x[i].ql + 64 * nn);  // [ql0 | ql1]: low nibbles are k = 0 | 1
      const __m512i qh = _mm512_broadcast_i64x4(load256(x[i].qh + 32 * nn));
      // k = 0, 1 take qh bits 0-1, 2-3 (→ bits 4-5); k = 2, 3 take bits 4-5, 6-7.
      const __m512i h01 = _mm512_and_si512(_mm512_sllv_epi64(qh, _mm512_set_epi64(2, 2, 2, 2, 4, 4, 4, 4)), m48);
      const __m512i h23 = _mm512_and_si512(_mm512_srlv_epi64(qh, _mm512_set_epi64(2, 2, 2, 2, 0, 0, 0, 0)), m48);
      const __m512i q01 = _mm512_or_si512(_mm512_and_si512(ql, m15), h01);
      const __m512i q23 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m15), h23);
      const __m512i p01 = _mm512_maddubs_epi16(q01, load512(y[i].qs + 128 * nn));
      const __m512i p23 = _mm512_maddubs_epi16(q23, load512(y[i].qs + 128 * nn + 64));
      sumi = _mm512_dpwssd_epi32(sumi, p01, scales_per_lane(w8, 0));
      sumi = _mm512_dpwssd_epi32(sumi, p23, scales_per_lane(w8, 4));
    }
    const float d = y[i].d * h2f(x[i].d);
    acc = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(sumi), acc);
    acc_b = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(bias), acc_b);
  }
  return _mm512_reduce_add_ps(acc) - 32 * hsum(acc_b);
}

float dot_iq4_xs(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockIQ4_XS*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  // |codebook| for maddubs; the sign goes onto the activations (codes 0..7 are the negative entries).
  const __m512i abs_table = _mm512_abs_epi8(_mm512_broadcast_i32x4(load128(kIQ4NLValues)));
  __m512 acc = _mm512_setzero_ps();
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const __m512i w8 = _mm512_broadcast_i32x4(iq4xs_scales(x[i]));
    __m512i sumi = _mm512_setzero_si512();
    for (int sb = 0; sb < 8; sb += 2) {
      const __m512i nib = nibbles64(x[i].qs + 16 * sb, x[i].qs + 16 * sb + 16);
      const __m512i av = load512(y[i].qs + 32 * sb);
      const __mmask64 neg = _mm512_testn_epi8_mask(nib, _mm512_set1_epi8(8));
      const __m512i sa = _mm512_mask_sub_epi8(av, neg, _mm512_setzero_si512(), av);
      const __m512i p = _mm512_maddubs_epi16(_mm512_shuffle_epi8(abs_table, nib), sa);
      sumi = _mm512_dpwssd_epi32(sumi, p, scales_per_half(w8, sb));
    }
    acc = _mm512_fmadd_ps(_mm512_set1_ps(y[i].d * h2f(x[i].d)), _mm512_cvtepi32_ps(sumi), acc);
  }
  return _mm512_reduce_add_ps(acc);
}

// ---- tiles of weight rows × activation rows (prefill) -------------------------------------------
//
// Each weight block is unpacked once (codes, scales and their shuffled copies), then only the part
// that touches activations runs for each activation row. The integer cores differ from the
// single-row kernels where sharing makes another split cheaper per row pair:
//  - 32-element formats: activations are made unsigned (a + 128, once per activation block for both
//    weight rows) and meet the signed codes in one _mm512_dpbusd_epi32 per pair of blocks, whose
//    accumulator starts at −128·Σcode (once per weight block for all activation rows).
//  - K-quants: _mm512_dpbusd_epi32 sums four products per int32 lane; those sums fit in int16
//    (Q4_K 4·15·127, Q5_K 4·31·127, Q6_K 4·63·127 ≤ 32767), so _mm512_packs_epi32 narrows two registers
//    of them into one, which a single _mm512_dpwssd_epi32 multiplies by the sub-block scales: six
//    multiplies per row pair and 256 elements instead of eight. Both weight rows run one after the
//    other: there is no activation-side work left to share.
// Bytes moved per call: the kDotTileRows weight rows once, the kDotTileTokens activation rows once
// (32-element formats) or once per weight row (K-quants; from L1 the second time).

// Row k of a tile: the k-th block array, `stride` bytes after the previous one.
template <class B>
inline const B* tile_row(const void* base, size_t stride, int k) {
  return reinterpret_cast<const B*>(static_cast<const uint8_t*>(base) + stride * static_cast<size_t>(k));
}

template <class D, int NT>
void dot_q8_0_family_tile(const void* w, size_t w_stride, const void* a, size_t a_stride, int64_t n, float* out) {
  using B = typename D::Block;
  const int64_t nb = n / kQK;
  const __m512i k80 = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512 acc[kDotTileRows][NT];
  for (auto& row : acc)
    for (auto& v : row) v = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= nb; i += 8) {
    __m512 dx[kDotTileRows];
    __m512i code[kDotTileRows][4], bias[kDotTileRows][4];  // block pair k: signed codes, −128·Σcode per lane
    for (int r = 0; r < kDotTileRows; ++r) {
      const B* x = tile_row<B>(w, w_stride, r) + i;
      dx[r] = D::scales8(x);
      for (int k = 0; k < 4; ++k) {
        code[r][k] = _mm512_sub_epi8(D::codes2(x[2 * k], x[2 * k + 1]), _mm512_set1_epi8(static_cast<char>(D::kOffset)));
        bias[r][k] = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), k80, code[r][k]));
      }
    }
    for (int t = 0; t < NT; ++t) {
      const BlockQ8_0* y = tile_row<BlockQ8_0>(a, a_stride, t) + i;
      const __m512 dy = fp16_8<offsetof(BlockQ8_0, d)>(y);
      __m512 d[kDotTileRows];
      for (int r = 0; r < kDotTileRows; ++r) d[r] = _mm512_mul_ps(dx[r], dy);
      for (int k = 0; k < 4; ++k) {
        const __m512i a_u8 = _mm512_xor_si512(load_pair256(y[2 * k].qs, y[2 * k + 1].qs), k80);
        for (int r = 0; r < kDotTileRows; ++r) {
          const __m512i s = _mm512_dpbusd_epi32(bias[r][k], a_u8, code[r][k]);
          acc[r][t] = _mm512_fmadd_ps(pair_splat(d[r], k), _mm512_cvtepi32_ps(s), acc[r][t]);
        }
      }
    }
  }
  for (int r = 0; r < kDotTileRows; ++r) {
    for (int t = 0; t < NT; ++t) {
      float& o = out[r * NT + t];
      o = _mm512_reduce_add_ps(acc[r][t]);
      if (i < nb) o += dot_q8_0_family<D>(tile_row<B>(w, w_stride, r) + i, tile_row<BlockQ8_0>(a, a_stride, t) + i, (nb - i) * kQK);
    }
  }
}

// Scale words for a register of _mm512_packs_epi32(P, Q), whose 128-bit lane L holds four sums of P
// then four of Q: lane L takes word p[L] of w8 (the same 8 words in every lane) four times, then word
// q[L] four times.
inline __m512i packs_scales(__m512i w8, std::array<int, 4> p, std::array<int, 4> q) {
  auto pattern = [](int w) {
    return static_cast<long long>(static_cast<uint64_t>(((2 * w + 1) << 8) | (2 * w)) * 0x0001000100010001ull);
  };
  return _mm512_shuffle_epi8(w8, _mm512_set_epi64(pattern(q[3]), pattern(p[3]), pattern(q[2]), pattern(p[2]),
                                                  pattern(q[1]), pattern(p[1]), pattern(q[0]), pattern(p[0])));
}

template <bool kFive, class B, int NT>
void dot_q45_k_tile(const void* w, size_t w_stride, const void* a, size_t a_stride, int64_t n, float* out) {
  const __m512i m15 = _mm512_set1_epi8(0x0f), m16 = _mm512_set1_epi8(0x10);
  // Mins, each twice: sub-block sb meets the 16-element activation sums 2sb and 2sb+1.
  const __m256i mins_twice = _mm256_setr_epi16(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
  for (int r = 0; r < kDotTileRows; ++r) {
    const B* x = tile_row<B>(w, w_stride, r);
    __m512 acc[NT];
    for (auto& v : acc) v = _mm512_setzero_ps();
    for (int64_t i = 0; i < n / kQKK; ++i) {
      const __m256i scm = _mm256_cvtepu8_epi16(kquant_scales_mins(x[i].scales));  // 8 scales, 8 mins
      const __m256i mins = _mm256_permutexvar_epi16(mins_twice, scm);
      // q[c]: codes of elements 64c..64c+63, sub-block 2c in lanes 0-1, 2c+1 in lanes 2-3; so in
      // packs(dpbusd(q[0]), dpbusd(q[1])) lanes 0-1 hold sub-blocks 0 and 2, lanes 2-3 sub-blocks 1, 3.
      const __m512i w8 = bcast_lo(scm);
      const __m512i sc01 = packs_scales(w8, {0, 0, 1, 1}, {2, 2, 3, 3});
      const __m512i sc23 = packs_scales(w8, {4, 4, 5, 5}, {6, 6, 7, 7});
      __m512i qh;
      if constexpr (kFive) qh = _mm512_broadcast_i64x4(load256(x[i].qh));
      __m512i q[4];
      for (int c = 0; c < 4; ++c) {
        const __m512i q4 = _mm512_broadcast_i64x4(load256(x[i].qs + 32 * c));
        q[c] = _mm512_and_si512(_mm512_srlv_epi64(q4, _mm512_set_epi64(4, 4, 4, 4, 0, 0, 0, 0)), m15);
        if constexpr (kFive) {
          const int b = 2 * c;  // bit 2c (low half) and 2c+1 (high half) of each qh byte → bit 4
          const __m512i h = b + 1 <= 4 ? _mm512_sllv_epi64(qh, _mm512_set_epi64(3 - b, 3 - b, 3 - b, 3 - b, 4 - b, 4 - b, 4 - b, 4 - b))
                                       : _mm512_srlv_epi64(qh, _mm512_set_epi64(b - 3, b - 3, b - 3, b - 3, b - 4, b - 4, b - 4, b - 4));
          q[c] = _mm512_or_si512(q[c], _mm512_and_si512(h, m16));
        }
      }
      const __m512 dx = _mm512_set1_ps(h2f(x[i].d));
      const __m256 mx = _mm256_set1_ps(h2f(x[i].dmin));
      for (int t = 0; t < NT; ++t) {
        const BlockQ8_K& y = tile_row<BlockQ8_K>(a, a_stride, t)[i];
        __m512i p[4];
        for (int c = 0; c < 4; ++c) p[c] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q[c], load512(y.qs + 64 * c));
        __m512i sumi = _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_packs_epi32(p[0], p[1]), sc01);
        sumi = _mm512_dpwssd_epi32(sumi, _mm512_packs_epi32(p[2], p[3]), sc23);
        // dy·(dx·Σ s·q·a − dmin·Σ m·bsum): the activation scale is applied once, to both terms.
        const __m256 min_term = _mm256_mul_ps(mx, _mm256_cvtepi32_ps(_mm256_madd_epi16(mins, load256(y.bsums))));
        const __m512 block = _mm512_fmsub_ps(dx, _mm512_cvtepi32_ps(sumi), _mm512_zextps256_ps512(min_term));
        acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(y.d), block, acc[t]);
      }
    }
    for (int t = 0; t < NT; ++t) out[r * NT + t] = _mm512_reduce_add_ps(acc[t]);
  }
}

template <int NT>
void dot_q6_k_tile(const void* w, size_t w_stride, const void* a, size_t a_stride, int64_t n, float* out) {
  const __m512i m15 = _mm512_set1_epi8(0x0f), m48 = _mm512_set1_epi8(0x30);
  for (int r = 0; r < kDotTileRows; ++r) {
    const BlockQ6_K* x = tile_row<BlockQ6_K>(w, w_stride, r);
    __m512 acc[NT];
    for (auto& v : acc) v = _mm512_setzero_ps();
    for (int64_t i = 0; i < n / kQKK; ++i) {
      const __m256i scales = _mm256_cvtepi8_epi16(load128(x[i].scales));
      // q[2nn] covers elements 128nn..128nn+63, q[2nn+1] the next 64; 16-element sub-blocks, one per
      // 128-bit lane, so packs(dpbusd(q[2nn]), dpbusd(q[2nn+1])) lane L holds sub-blocks 8nn+L, 8nn+4+L.
      __m512i q[4], sc[2];
      for (int nn = 0; nn < 2; ++nn) {
        const __m512i ql = load512(x[i].ql + 64 * nn);
        const __m512i qh = _mm512_broadcast_i64x4(load256(x[i].qh + 32 * nn));
        const __m512i h01 = _mm512_and_si512(_mm512_sllv_epi64(qh, _mm512_set_epi64(2, 2, 2, 2, 4, 4, 4, 4)), m48);
        const __m512i h23 = _mm512_and_si512(_mm512_srlv_epi64(qh, _mm512_set_epi64(2, 2, 2, 2, 0, 0, 0, 0)), m48);
        q[2 * nn] = _mm512_or_si512(_mm512_and_si512(ql, m15), h01);
        q[2 * nn + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m15), h23);
        sc[nn] = packs_scales(nn == 0 ? bcast_lo(scales) : bcast_hi(scales), {0, 1, 2, 3}, {4, 5, 6, 7});
      }
      const __m512 dx = _mm512_set1_ps(h2f(x[i].d));
      for (int t = 0; t < NT; ++t) {
        const BlockQ8_K& y = tile_row<BlockQ8_K>(a, a_stride, t)[i];
        __m512i sumi = _mm512_setzero_si512();
        for (int nn = 0; nn < 2; ++nn) {
          const __m512i p01 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q[2 * nn], load512(y.qs + 128 * nn));
          const __m512i p23 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q[2 * nn + 1], load512(y.qs + 128 * nn + 64));
          sumi = _mm512_dpwssd_epi32(sumi, _mm512_packs_epi32(p01, p23), sc[nn]);
        }
        // Codes q - 32: Σ(q-32)·a = Σq·a - 32·bsum per sub-block (|sums| < 2^29, no int32 overflow).
        const __m256i bias = _mm256_slli_epi32(_mm256_madd_epi16(scales, load256(y.bsums)), 5);
        sumi = _mm512_sub_epi32(sumi, _mm512_zextsi256_si512(bias));
        acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(y.d), _mm512_mul_ps(dx, _mm512_cvtepi32_ps(sumi)), acc[t]);
      }
    }
    for (int t = 0; t < NT; ++t) out[r * NT + t] = _mm512_reduce_add_ps(acc[t]);
  }
}

// The tile kernels of NT tokens per type.
template <int NT>
DotTileFn tile_table(TensorType w) {
  switch (w) {
    case TensorType::Q4_0: return dot_q8_0_family_tile<DecodeQ4_0, NT>;
    case TensorType::Q5_0: return dot_q8_0_family_tile<DecodeQ5_0, NT>;
    case TensorType::Q8_0: return dot_q8_0_family_tile<DecodeQ8_0, NT>;
    case TensorType::IQ4_NL: return dot_q8_0_family_tile<DecodeIQ4_NL, NT>;
    case TensorType::MXFP4: return dot_q8_0_family_tile<DecodeMXFP4, NT>;
    case TensorType::Q4_K: return dot_q45_k_tile<false, BlockQ4_K, NT>;
    case TensorType::Q5_K: return dot_q45_k_tile<true, BlockQ5_K, NT>;
    case TensorType::Q6_K: return dot_q6_k_tile<NT>;
    default: return nullptr;
  }
}
}  // namespace

DotTileFn dot_tile_fn_avx512(TensorType w, int tokens) {
  static const bool vnni = cpu_info().avx512vnni;
  if (!vnni) return nullptr;
  if (tokens == kDotTileTokens) return tile_table<kDotTileTokens>(w);
  if (tokens == kDotFewTokens) return tile_table<kDotFewTokens>(w);
  return nullptr;
}

DotFn dot_fn_avx512(TensorType w) {
  // This file is compiled with VNNI (and DQ, which every VNNI CPU has); without VNNI use AVX2.
  static const bool vnni = cpu_info().avx512vnni;
  if (!vnni) return nullptr;
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

#else

namespace zinc::quant {

DotFn dot_fn_avx512(TensorType) { return nullptr; }
DotTileFn dot_tile_fn_avx512(TensorType, int) { return nullptr; }

}  // namespace zinc::quant

#endif
