// CPU matrix products over quantized weights, parallel over weight rows. Weights are row-major with
// `cols` elements per row stored in `type`; activations are float rows that are quantized once to the
// weight type's activation format (see dot.h).
#pragma once

#include <cstdint>

#include "core/thread_pool.h"
#include "gguf/types.h"

namespace zinc::quant {

// y[r] = W[r,:] · x, r in [0, rows).
void matvec(gguf::TensorType type, const void* w, int64_t rows, int64_t cols, const float* x, float* y,
            ThreadPool& pool);

// Y[t][r] = W[r,:] · X[t,:] for n_tokens rows of X (n_tokens × cols) into Y (n_tokens × rows).
void matmul(gguf::TensorType type, const void* w, int64_t rows, int64_t cols, const float* x, int64_t n_tokens,
            float* y, ThreadPool& pool);

}  // namespace zinc::quant
