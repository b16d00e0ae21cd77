// Quantization formats: per-type geometry, exact dequantization of every supported GGUF block format,
// and quantizers (the reference rounding for the simple formats, an error-minimising search for the
// K-quants and IQ4 formats).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "gguf/types.h"

namespace zinc::quant {

using gguf::TensorType;

// Bytes of a row of n elements (n must be a multiple of the block size).
size_t row_size(TensorType type, int64_t n);
int64_t block_size(TensorType type);

bool can_dequantize(TensorType type);
bool can_quantize(TensorType type);

// x[0..n) = value of the n elements stored in `src`. Throws zinc::Error for an unsupported type or an
// n that is not a multiple of the block size.
void dequantize_row(TensorType type, const void* src, float* dst, int64_t n);

// Stores x[0..n) in `dst` (row_size(type, n) bytes). Throws as above.
void quantize_row(TensorType type, const float* src, void* dst, int64_t n);

}  // namespace zinc::quant
