// AMX tiles for prompts' packed Q8_0 products (packed.h): 16 tokens × one group of 16 weight rows a
// tile. Per block of 32 columns one TDPBSUD multiplies the tokens' signed activation codes (a tile of 16
// rows of 32 bytes, each token's row of the block read in place) by the group's unsigned codes (the
// packed register layout is already AMX's second operand: 8 rows of 16 weight rows × 4 codes), which
// gives each token's 16 integer sums Σ a·(w + 128); the vector units then apply the VNNI kernel's
// epilogue to them, in the same order (+ neg_sum128, to float, × the token's scale, fused multiply-add
// with the rows' scales), so a token's results are bit-identical to the VNNI tile's: prefill on AMX
// and decode on VNNI agree. The tile unit takes a block while the vector units finish the one before
// it: even and odd blocks use their own operand and result tiles (the tile registers are not
// renamed: reusing one waits for the product reading it), the results going through two buffers.
// Compiled with the AVX-512 and AMX flags; packed.cpp calls it only when the CPU has AMX-INT8, the OS
// granted the tile state (amx_permitted) and the VNNI kernels are the ones in use.
#include "quant/packed.h"

#if defined(__x86_64__) && defined(__AMX_TILE__) && defined(__AMX_INT8__) && defined(__AVX512F__) && defined(__AVX512BW__) && \
    defined(__AVX512DQ__) && defined(__F16C__)

#include <sys/syscall.h>
#include <unistd.h>

#include <immintrin.h>

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

}  // namespace

bool amx_permitted() {
  // Linux grants a process the tile data state on request (ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA).
  static const bool ok = syscall(SYS_arch_prctl, 0x1023, 18) == 0;
  return ok;
}

PackedTileFn packed_tile_amx(TensorType t) { return t == TensorType::Q8_0 ? q8_0_amx16 : nullptr; }

}  // namespace zinc::quant

#else

namespace zinc::quant {
bool amx_permitted() { return false; }
PackedTileFn packed_tile_amx(TensorType) { return nullptr; }
}  // namespace zinc::quant

#endif
