// AMX tiles for prompts' packed Q8_0 and Q4_K products (packed.h): 16 tokens × one group of 16 weight
// rows a tile. Q8_0 below; Q4_K (q4_k_amx16) the same way per 32-element sub-block. Per block of 32 columns one TDPBSUD multiplies the tokens' signed activation codes (a tile of 16
// rows of 32 bytes, each token's row of the block read in place) by the group's unsigned codes (the
// packed register layout is already AMX's second operand: 8 rows of 16 weight rows × 4 codes), which
// gives each token's 16 integer sums Σ a·(w + 128); the vector units then apply the VNNI kernel's
// epilogue to them, in the same order (+ neg_sum128, to float, × the token's scale, fused multiply-add
// with the rows' scales), so a token's results are bit-identical to the VNNI tile's: prefill on AMX
// and decode on VNNI agree. The tile unit takes a block while the vector units finish the one before
// it: even and odd blocks use their own operand tiles, and three result tiles and buffers keep the
// tile unit two blocks ahead (the tile registers are not renamed: reusing one waits for the product
// reading it).
// Compiled with the AVX-512 and AMX flags; packed.cpp calls it only when the CPU has AMX-INT8, the OS
// granted the tile state (amx_permitted) and the VNNI kernels are the ones in use.
#include "quant/packed.h"

// (GCC names the AMX macros __AMX_TILE__ and __AMX_INT8__, clang __AMXTILE__ and __AMXINT8__.)
#if defined(__x86_64__) && (defined(__AMX_TILE__) || defined(__AMXTILE__)) && (defined(__AMX_INT8__) || defined(__AMXINT8__)) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__) && \
    defined(__AVX512DQ__) && defined(__F16C__)

#include <sys/syscall.h>
#include <unistd.h>

#include <immintrin.h>

#include <cstring>

namespace zinc::quant {

namespace {

// The tile configuration (palette 1): results 0-2 (16 tokens × 16 int32), activations 3 and 4 (16
// tokens × 32 codes), weights 5 and 6 (8 rows of 16 rows × 4 codes).
struct alignas(64) TileConfig {
  uint8_t palette, start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};
constexpr TileConfig kConfig = {1, 0, {}, {64, 64, 64, 32, 32, 64, 64}, {16, 16, 16, 16, 16, 8, 8}};

// Each thread loads the configuration before its first tile instruction.
inline void configure() {
  thread_local bool done = false;
  if (!done) {
    _tile_loadconfig(&kConfig);
    done = true;
  }
}

// Block i's products into result tile i % 3 (operands i % 2), and that tile into sums[i % 3]. Tile
// numbers are immediates, hence the cases.
inline void tile_product(int64_t i, const int8_t* a, size_t stride, const uint8_t* w) {
  if (i % 2 == 0) {
    _tile_loadd(3, a, stride);
    _tile_loadd(5, w, 64);
  } else {
    _tile_loadd(4, a, stride);
    _tile_loadd(6, w, 64);
  }
  switch (static_cast<int>(i % 6)) {
    case 0: _tile_zero(0); _tile_dpbsud(0, 3, 5); break;
    case 1: _tile_zero(1); _tile_dpbsud(1, 4, 6); break;
    case 2: _tile_zero(2); _tile_dpbsud(2, 3, 5); break;
    case 3: _tile_zero(0); _tile_dpbsud(0, 4, 6); break;
    case 4: _tile_zero(1); _tile_dpbsud(1, 3, 5); break;
    default: _tile_zero(2); _tile_dpbsud(2, 4, 6); break;
  }
}
inline void tile_store(int64_t i, int32_t (*sums)[16][16]) {
  switch (static_cast<int>(i % 3)) {
    case 0: _tile_stored(0, sums[0], 64); break;
    case 1: _tile_stored(1, sums[1], 64); break;
    default: _tile_stored(2, sums[2], 64); break;
  }
}

// Iteration i: block i's products start, block i − 2's sums (stored an iteration before) go through
// the epilogue, then block i's sums are stored. In program order the epilogue's loads come before the
// tile store (a vector load after a tile store waits for it) and read sums stored one iteration
// earlier, so the tile unit and the vector units work side by side.
void q8_0_amx16(const uint8_t* w, int64_t n, const uint8_t* act, size_t stride, float* y, int64_t y_stride) {
  configure();
  const auto* blocks = reinterpret_cast<const PackQ8_0*>(w);
  const auto* a0 = reinterpret_cast<const BlockQ8_0P*>(act);
  alignas(64) int32_t sums[3][16][16];
  // Tokens 0-7 and 8-15: two arrays, which the compiler keeps in registers (one of 16 went to memory).
  __m512 lo[8], hi[8];
  for (int t = 0; t < 8; ++t) lo[t] = hi[t] = _mm512_setzero_ps();
  const int64_t nb = n / 32;
  for (int64_t i = 0; i < nb + 2; ++i) {
    if (i < nb) tile_product(i, a0[i].qs, stride, blocks[i].qs[0]);
    if (const int64_t j = i - 2; j >= 0) {  // block j's epilogue: the VNNI kernel's, in its order
      const int32_t(*s)[16] = sums[j % 3];
      const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blocks[j].d)));
      const auto step = [&](int t, __m512& acc) {
        const BlockQ8_0P& a = reinterpret_cast<const BlockQ8_0P*>(act + stride * static_cast<size_t>(t))[j];
        const __m512i v = _mm512_add_epi32(_mm512_load_si512(s[t]), _mm512_set1_epi32(a.neg_sum128));
        acc = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(v), _mm512_set1_ps(a.d)), dw, acc);
      };
#pragma GCC unroll 8
      for (int t = 0; t < 8; ++t) step(t, lo[t]);
#pragma GCC unroll 8
      for (int t = 0; t < 8; ++t) step(8 + t, hi[t]);
    }
    if (i < nb) tile_store(i, sums);
  }
  for (int t = 0; t < 8; ++t) {
    _mm512_storeu_ps(y + t * y_stride, lo[t]);
    _mm512_storeu_ps(y + (8 + t) * y_stride, hi[t]);
  }
}

// Q4_K: per 32-element sub-block u (of super-block u / 8) one product of the tokens' 32 activation codes
// by the rows' codes (0..15), unpacked from the packed nibble registers into a buffer an iteration
// ahead (the VNNI kernel's c[0..7] are the 8 rows of the second operand); the epilogue is the VNNI
// kernel's, in its order: each sub-block's sums times its scales into the super-block's sums, then the
// minimums' term and the activation's scale into the results.
void q4_k_amx16(const uint8_t* w, int64_t n, const uint8_t* act, size_t stride, float* y, int64_t y_stride) {
  configure();
  const auto* blocks = reinterpret_cast<const PackQ4_K*>(w);
  const auto* a0 = reinterpret_cast<const BlockQ8_KP*>(act);
  const __m512i m15 = _mm512_set1_epi8(0x0f);
  alignas(64) int32_t sums[3][16][16];
  alignas(64) uint8_t codes[2][8][64];
  alignas(64) float acc[16][16] = {};
  __m512 lo[8], hi[8];  // each token's super-block sums: dw·Σ_s scale_s·Σ code·a
  for (int t = 0; t < 8; ++t) lo[t] = hi[t] = _mm512_setzero_ps();
  const int64_t nu = n / 256 * 8;
  const auto unpack = [&](int64_t u) {
    const PackQ4_K& b = blocks[u / 8];
    uint8_t(*c)[64] = codes[u % 2];
    for (int q = 0; q < 4; ++q) {
      const __m512i v = _mm512_loadu_si512(b.qs[u % 8][q]);
      _mm512_store_si512(c[2 * q], _mm512_and_si512(v, m15));
      _mm512_store_si512(c[2 * q + 1], _mm512_and_si512(_mm512_srli_epi16(v, 4), m15));
    }
  };
  if (nu > 0) unpack(0);
  for (int64_t u = 0; u < nu + 2; ++u) {
    if (u < nu) tile_product(u, a0[u / 8].qs + 32 * (u % 8), stride, codes[u % 2][0]);
    if (u + 1 < nu) unpack(u + 1);
    if (const int64_t j = u - 2; j >= 0) {
      const PackQ4_K& b = blocks[j / 8];
      const int sb = static_cast<int>(j % 8);
      const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.d)));
      const __m512 sc = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.sc[sb])))), dw);
      const int32_t(*s)[16] = sums[j % 3];
#pragma GCC unroll 8
      for (int t = 0; t < 8; ++t) lo[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(s[t])), sc, lo[t]);
#pragma GCC unroll 8
      for (int t = 0; t < 8; ++t) hi[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(s[8 + t])), sc, hi[t]);
      if (sb == 7) {  // the super-block's minimums' term; dy·(dw·Σ scale·Σ code·a − dmin·Σ min·Σa)
        const __m512 dm = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.dmin)));
        __m512i mins[4];
        for (int p = 0; p < 4; ++p) mins[p] = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.mn[p])));
        const auto finish = [&](int t, __m512& blk) {
          const BlockQ8_KP& a = reinterpret_cast<const BlockQ8_KP*>(act + stride * static_cast<size_t>(t))[j / 8];
          __m512i m = _mm512_setzero_si512();
          for (int p = 0; p < 4; ++p) {
            int32_t pair;
            std::memcpy(&pair, a.bsum32 + 2 * p, 4);
            m = _mm512_dpwssd_epi32(m, mins[p], _mm512_set1_epi32(pair));
          }
          _mm512_store_ps(acc[t], _mm512_fmadd_ps(_mm512_fnmadd_ps(_mm512_cvtepi32_ps(m), dm, blk), _mm512_set1_ps(a.d), _mm512_load_ps(acc[t])));
          blk = _mm512_setzero_ps();
        };
        for (int t = 0; t < 8; ++t) finish(t, lo[t]);
        for (int t = 0; t < 8; ++t) finish(8 + t, hi[t]);
      }
    }
    if (u < nu) tile_store(u, sums);
  }
  for (int t = 0; t < 16; ++t) _mm512_storeu_ps(y + t * y_stride, _mm512_load_ps(acc[t]));
}

}  // namespace

bool amx_permitted() {
  // Linux grants a process the tile data state on request (ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA).
  static const bool ok = syscall(SYS_arch_prctl, 0x1023, 18) == 0;
  return ok;
}

PackedTileFn packed_tile_amx(TensorType t) {
  switch (t) {
    case TensorType::Q8_0: return q8_0_amx16;
    case TensorType::Q4_K: return q4_k_amx16;
    default: return nullptr;
  }
}

}  // namespace zinc::quant

#else

namespace zinc::quant {
bool amx_permitted() { return false; }
PackedTileFn packed_tile_amx(TensorType) { return nullptr; }
}  // namespace zinc::quant

#endif
