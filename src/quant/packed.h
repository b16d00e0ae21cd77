// Weight matrices repacked once at load for the CPU's matrix products: kPackRows rows interleaved so
// that one 512-bit register holds four consecutive codes of each of 16 rows (AVX2: half of it, 8
// rows). A product then multiplies that register by four activation codes of one token broadcast to
// every lane (one integer multiply-accumulate instruction for 16 rows × 4 elements with AVX-512
// VNNI), keeps a token tile's sums in registers and writes 16 rows of output at once; the per-block
// scales are applied once per block and row group, not once per row pair. Decode (one token) reads
// the same layout; a token's results do not depend on the tile it runs in.
//
// Layouts (per group of 16 rows, per block of the original format; all codes unsigned):
//   Q8_0: the 16 scales, then 8 registers of codes + 128 (lane r: 4 codes of row r).
//   Q4_0, IQ4_NL, MXFP4: the 16 scales (fp16; MXFP4: the E8M0 exponent bytes), then 4 registers of
//         packed nibbles (low: elements 8q..8q+3, high: 8q+4..8q+7), codes as stored (kernels map them
//         to values through a 16-entry table).
//   Q4_K: scales d and dmin, the 6-bit sub-block scales and minimums one byte each, then per
//         32-element sub-block 4 registers of packed nibbles (low: elements 8p..8p+3, high: 8p+4..8p+7).
//   Q5_K: as Q4_K, each sub-block's 4 registers followed by one of its fifth bits: lane r, byte b, bit j
//         = bit 4 of the code of element 4j + b of row r (the element at byte b of code register j).
//   IQ4_XS: scale d, the sub-block scales − 32 one byte each, then Q4_K's nibble registers (indices
//         into the IQ4_NL values).
//   Q6_K: scale d, sub-block scales (as bytes and as pairs for the offset term), then per 16-element
//         sub-block 3 registers: three of its 4-element groups' 6-bit codes, the fourth's in their top bits.
//   Q2_K: scales d and dmin, each sub-block's scale/minimum byte as stored (in pairs of sub-blocks per
//         row), then per 16-element sub-block one register of 2-bit codes: lane r, byte b, bits 2g..2g+1
//         = the code of element 4g + b.
//   Q3_K: scale d, the sub-block scales − 32 one byte each, then per pair of 16-element sub-blocks the
//         two sub-blocks' low 2 bits as Q2_K's codes and one register of their third bits: lane r,
//         byte b, bit j = bit 2 of the code of element 4j + b of the pair (codes 0..7, value code − 4).
// Activations are quantized once per product into the formats below (the same codes and scales as the
// Q8_0 / Q8_K activations of dot.h, with the sums the kernels need precomputed).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/big_buffer.h"
#include "core/thread_pool.h"
#include "gguf/types.h"

namespace zinc::quant {

using gguf::TensorType;

inline constexpr int kPackRows = 16;
inline constexpr int kPackTokens = 8;  // the widest token tile of the packed kernels

struct PackQ8_0 {
  uint16_t d[kPackRows];
  uint8_t qs[8][64];
};
struct PackQ4_0 {  // also IQ4_NL
  uint16_t d[kPackRows];
  uint8_t qs[4][64];
};
struct PackMXFP4 {
  uint8_t e[kPackRows];
  uint8_t qs[4][64];
};
struct PackQ4_K {
  uint16_t d[kPackRows], dmin[kPackRows];
  uint8_t sc[8][kPackRows];      // sub-block s, row r
  uint8_t mn[4][kPackRows * 2];  // minimums of sub-blocks 2p and 2p+1 per row
  uint8_t qs[8][4][64];
};
struct PackQ5_K {
  uint16_t d[kPackRows], dmin[kPackRows];
  uint8_t sc[8][kPackRows];
  uint8_t mn[4][kPackRows * 2];
  uint8_t qs[8][5][64];  // sub-block s: 4 registers of nibbles as Q4_K's, then the fifth bits
};
struct PackIQ4_XS {
  uint16_t d[kPackRows];
  int8_t sc[8][kPackRows];  // sub-block s, row r: its scale − 32
  uint8_t qs[8][4][64];
};
struct PackQ6_K {
  uint16_t d[kPackRows];
  int8_t sc[16][kPackRows];       // sub-block s, row r
  int8_t scp[8][kPackRows * 2];   // scales of sub-blocks 2p and 2p+1 per row
  // Sub-block s: lane r, byte b of q[s][0], q[s][1], q[s][2]: codes of elements 16s + b, + 4 + b and
  // + 12 + b in bits 0-5; their bits 6-7 hold bits 4-5, 2-3 and 0-1 of the code of element 16s + 8 + b.
  uint8_t q[16][3][64];
};
struct PackQ2_K {
  uint16_t d[kPackRows], dmin[kPackRows];
  uint8_t sm[8][kPackRows * 2];  // pair p: byte 2r + k = the scale (low nibble) and minimum of sub-block 2p + k of row r
  uint8_t qs[16][64];
};
struct PackQ3_K {
  uint16_t d[kPackRows];
  int8_t sc[16][kPackRows];  // sub-block s, row r: its scale − 32
  uint8_t q[8][3][64];       // pair p: the low bits of sub-blocks 2p and 2p + 1, then the pair's third bits
};
static_assert(sizeof(PackQ8_0) == 544 && sizeof(PackQ4_K) == 2368 && sizeof(PackQ5_K) == 2880 && sizeof(PackQ6_K) == 3616);
static_assert(sizeof(PackQ4_0) == 288 && sizeof(PackMXFP4) == 272 && sizeof(PackIQ4_XS) == 2208);
static_assert(sizeof(PackQ2_K) == 1344 && sizeof(PackQ3_K) == 1824);

// Activation blocks of the packed kernels.
struct BlockQ8_0P {  // a Q8_0 block with its scale as a float and −128 × the sum of its codes
  float d;
  int32_t neg_sum128;
  int8_t qs[32];
};
struct BlockQ8_KP {  // a Q8_K block with the sums of its codes per 32 elements as well as per 16
  float d;
  int8_t qs[256];
  int16_t bsums[16];
  int16_t bsum32[8];
};

// A view of packed rows: `rows` (a multiple of kPackRows) rows of `cols` elements.
struct PackedRows {
  TensorType type = TensorType::F32;
  int64_t rows = 0, cols = 0;
  const uint8_t* data = nullptr;
  // Rows [first, first + n) (multiples of kPackRows), e.g. one expert of a stacked expert tensor.
  PackedRows slice(int64_t first, int64_t n) const;
};

// Whether this CPU has packed kernels for `type` and the shape fits them (rows a multiple of
// kPackRows, cols of the type's block). ZINC_CPU_ISA caps it as it caps dot_kernel().
bool can_pack(TensorType type, int64_t rows, int64_t cols);

// A packed copy of a row-major weight matrix (in huge pages where the system gives them).
class PackedMatrix {
 public:
  PackedMatrix() = default;
  // Repacks `rows` rows of `cols` elements stored in `type` (can_pack must hold), in parallel.
  PackedMatrix(TensorType type, const void* w, int64_t rows, int64_t cols, ThreadPool& pool);
  PackedRows view() const { return {type_, rows_, cols_, data_.data()}; }
  size_t bytes() const { return data_.size(); }

 private:
  TensorType type_ = TensorType::F32;
  int64_t rows_ = 0, cols_ = 0;
  BigBuffer data_;
};

// Bytes of one packed group of kPackRows rows of n elements.
size_t packed_group_size(TensorType type, int64_t n);

// Y[t][r] = W[r,:] · X[t,:] over packed weights; same results as matmul() on the original rows up to
// float summation order. x_key: products on one thread given the same nonzero key for the same x (its
// rows unchanged in between: q, k and v of one step; an expert's gate and up) quantize x once, where
// the weights take the same activation rows; 0 always quantizes.
void matmul_packed(const PackedRows& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool, uint64_t x_key = 0);

// The kernels: kPackRows rows (one group) × nt tokens (1..kPackTokens) of packed activations
// (act_stride bytes apart); y[t·y_stride + r] for r < kPackRows.
using PackedTileFn = void (*)(const uint8_t* w, int64_t n, const uint8_t* act, size_t act_stride, float* y,
                              int64_t y_stride);
// Per instruction set (nullptr where it has none for the type); the products use them when
// dot_kernel() uses that set.
PackedTileFn packed_tile_avx512(TensorType weight, int nt);
PackedTileFn packed_tile_avx2(TensorType weight, int nt);
PackedTileFn packed_tile_neon(TensorType weight, int nt);  // needs the dot-product extension
// AMX (packed_amx.cpp): the kernel of kAmxTokens tokens × one row group for `weight` (Q8_0, Q4_K; others
// null), with the AVX-512 kernels' results; amx_permitted() asks the OS for the tile state once.
inline constexpr int kAmxTokens = 16;
PackedTileFn packed_tile_amx(TensorType weight);
bool amx_permitted();
// Whether prompts' products of `weight` take the AMX kernel here: a CPU with AMX-INT8 whose OS grants
// the tile state, the AVX-512 kernels in use (ZINC_CPU_ISA), and ZINC_CPU_AMX not 0.
bool packed_amx_in_use(TensorType weight);

// The activation row of n elements the packed kernels for `weight` read (BlockQ8_0P or BlockQ8_KP
// blocks): the codes and scales quantize_activation() gives, with their sums.
size_t packed_activation_row_size(TensorType weight, int64_t n);
void quantize_packed_activation(TensorType weight, const float* x, uint8_t* out, int64_t n);
// The same with AVX2 (the packed products use it where the CPU kernels are AVX2 or AVX-512).
void quantize_q8_0p_avx2(const float* x, BlockQ8_0P* y, int64_t nb);
void quantize_q8_kp_avx2(const float* x, BlockQ8_KP* y, int64_t nb);

}  // namespace zinc::quant
