#include "quant/matmul.h"

#include <algorithm>
#include <vector>

#include "quant/dot.h"
#include "quant/quant.h"

namespace zinc::quant {

void matvec(gguf::TensorType type, const void* w, int64_t rows, int64_t cols, const float* x, float* y,
            ThreadPool& pool) {
  matmul(type, w, rows, cols, x, 1, y, pool);
}

void matmul(gguf::TensorType type, const void* w, int64_t rows, int64_t cols, const float* x, int64_t n_tokens,
            float* y, ThreadPool& pool) {
  const DotKernel k = dot_kernel(type);
  const size_t arow = activation_row_size(type, cols);
  const size_t wrow = row_size(type, cols);
  std::vector<uint8_t> act(arow * static_cast<size_t>(n_tokens));
  pool.parallel_for(n_tokens, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) quantize_activation(type, x + t * cols, act.data() + static_cast<size_t>(t) * arow, cols);
  });
  const auto* wb = static_cast<const uint8_t*>(w);
  // Tiles of weight rows; each row is dotted with every token while it is hot in cache.
  constexpr int64_t kTile = 16;
  const int64_t tiles = (rows + kTile - 1) / kTile;
  pool.parallel_for(tiles, [&](int64_t tb, int64_t te) {
    for (int64_t tile = tb; tile < te; ++tile) {
      const int64_t r0 = tile * kTile, r1 = std::min(rows, r0 + kTile);
      for (int64_t t = 0; t < n_tokens; ++t) {
        const uint8_t* a = act.data() + static_cast<size_t>(t) * arow;
        for (int64_t r = r0; r < r1; ++r) y[t * rows + r] = k.fn(wb + static_cast<size_t>(r) * wrow, a, cols);
      }
    }
  });
}

}  // namespace zinc::quant
