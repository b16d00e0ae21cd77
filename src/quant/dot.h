// Dot products of a quantized weight row with an activation row, the inner loop of every CPU
// matrix-vector and matrix-matrix product. Activations are quantized once per row to the format the
// weight type pairs with (integer products per block, one float multiply per block):
//   Q4_0, Q5_0, Q8_0, IQ4_NL, MXFP4 → Q8_0;  Q4_1, Q5_1 → Q8_1;  K-quants and IQ4_XS → Q8_K;
//   F32, F16, BF16 → F32 (no activation quantization).
// dot_ref() is the scalar definition; dot_kernel() returns the fastest implementation this CPU runs
// (AVX2, AVX-512/VNNI or NEON where compiled and supported), tested against dot_ref().
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "gguf/types.h"

namespace zinc::quant {

using gguf::TensorType;

bool has_dot(TensorType weight);
TensorType dot_activation_type(TensorType weight);
size_t activation_row_size(TensorType weight, int64_t n);
// Quantizes x[0..n) into the activation format paired with `weight` (F32 activations are copied).
void quantize_activation(TensorType weight, const float* x, void* act, int64_t n);

float dot_ref(TensorType weight, const void* w, const void* act, int64_t n);

using DotFn = float (*)(const void* w, const void* act, int64_t n);

// A tile of the matrix product: kDotTileRows weight rows (w_stride bytes apart) against kDotTileTokens
// activation rows (act_stride bytes apart), out[r·kDotTileTokens + t] = W_r · act_t. Each weight block is
// unpacked once for all activation rows (and, where it pays, each activation block once for both weight
// rows), which is what makes a product over many tokens (prefill) cheaper than one call per row pair.
// Same results as the single-row kernel up to float summation order.
inline constexpr int kDotTileRows = 2;
inline constexpr int kDotTileTokens = 8;
inline constexpr int kDotFewTokens = 4;  // the narrower tile, for steps of a few sequences' tokens
using DotTileFn = void (*)(const void* w, size_t w_stride, const void* act, size_t act_stride, int64_t n,
                           float* out);

struct DotKernel {
  DotFn fn = nullptr;
  DotTileFn tile = nullptr;    // optional, same instruction set as fn; where absent, call fn per pair
  DotTileFn tile_few = nullptr;  // optional: kDotTileRows × kDotFewTokens (out[r·kDotFewTokens + t])
  const char* isa = "scalar";  // which implementation: "scalar", "avx2", "avx512", "neon"
};
// Throws zinc::Error when the weight type has no dot product.
DotKernel dot_kernel(TensorType weight);

// The instruction sets whose kernel tables this CPU can run, best first, always ending in "scalar"
// (e.g. {"avx512", "avx2", "scalar"}), and the one dot_kernel() uses: the best of them unless
// ZINC_CPU_ISA=scalar|avx2|avx512|neon caps it (to compare paths, or to run on an AVX-512 machine
// the kernels an AVX2-only machine would run).
std::vector<std::string> dot_isas_available();
std::string dot_isa_in_use();

// Kernel tables of each instruction set (nullptr where a type has no fast path). Defined in the
// per-ISA translation units; the dispatcher picks the best table the CPU supports.
DotFn dot_fn_scalar(TensorType weight);
DotFn dot_fn_avx2(TensorType weight);
DotFn dot_fn_avx512(TensorType weight);
DotFn dot_fn_neon(TensorType weight);
// Tile kernels of kDotTileRows × `tokens` (kDotTileTokens or kDotFewTokens), where an instruction set
// has one for the type (else nullptr).
DotTileFn dot_tile_fn_avx2(TensorType weight, int tokens);
DotTileFn dot_tile_fn_avx512(TensorType weight, int tokens);

}  // namespace zinc::quant
