#include "quant/matmul.h"

#include <algorithm>
#include <atomic>
#include <vector>

#include "quant/dot.h"
#include "quant/quant.h"

namespace zinc::quant {

namespace {

// Tokens [t, t + NT) of rows [r0, r1): NT-token tiles over kDotTileRows rows at a time, the single-row
// kernel for a last odd row.
template <int NT>
void tile_group(DotTileFn tile, DotFn fn, const uint8_t* w, size_t wrow, int64_t r0, int64_t r1, int64_t rows,
                const uint8_t* a, size_t arow, int64_t cols, int64_t t, float* y) {
  const int64_t tiled_end = r0 + (r1 - r0) / kDotTileRows * kDotTileRows;
  for (int64_t r = r0; r < tiled_end; r += kDotTileRows) {
    float out[kDotTileRows * NT];
    tile(w + static_cast<size_t>(r) * wrow, wrow, a, arow, cols, out);
    for (int i = 0; i < kDotTileRows; ++i)
      for (int j = 0; j < NT; ++j) y[(t + j) * rows + r + i] = out[i * NT + j];
  }
  for (int64_t r = tiled_end; r < r1; ++r)
    for (int j = 0; j < NT; ++j) y[(t + j) * rows + r] = fn(w + static_cast<size_t>(r) * wrow, a + static_cast<size_t>(j) * arow, cols);
}

// Rows [r0, r1) of Y against every token: kDotTileRows × kDotTileTokens tiles where the kernel has them,
// then one kDotTileRows × kDotFewTokens tile group (a step of a few sequences' tokens), the single-row
// kernel for the tokens left over. Token groups are the outer loop: the rows' weights stay in L1 across
// groups, and each group's activations across the rows.
void product_rows(const DotKernel& k, const uint8_t* w, size_t wrow, int64_t r0, int64_t r1, int64_t rows,
                  const uint8_t* act, size_t arow, int64_t cols, int64_t n_tokens, float* y) {
  int64_t t = 0;
  if (k.tile) {
    for (; t + kDotTileTokens <= n_tokens; t += kDotTileTokens)
      tile_group<kDotTileTokens>(k.tile, k.fn, w, wrow, r0, r1, rows, act + static_cast<size_t>(t) * arow, arow, cols, t, y);
  }
  if (k.tile_few && t + kDotFewTokens <= n_tokens) {
    tile_group<kDotFewTokens>(k.tile_few, k.fn, w, wrow, r0, r1, rows, act + static_cast<size_t>(t) * arow, arow, cols, t, y);
    t += kDotFewTokens;
  }
  for (; t < n_tokens; ++t) {
    const uint8_t* a = act + static_cast<size_t>(t) * arow;
    for (int64_t r = r0; r < r1; ++r) y[t * rows + r] = k.fn(w + static_cast<size_t>(r) * wrow, a, cols);
  }
}

}  // namespace

void matvec(gguf::TensorType type, const void* w, int64_t rows, int64_t cols, const float* x, float* y,
            ThreadPool& pool) {
  matmul(type, w, rows, cols, x, 1, y, pool);
}

void matmul(gguf::TensorType type, const void* w, int64_t rows, int64_t cols, const float* x, int64_t n_tokens,
            float* y, ThreadPool& pool) {
  const DotKernel k = dot_kernel(type);
  const size_t arow = activation_row_size(type, cols);
  const size_t wrow = row_size(type, cols);
  // Quantized activations, kept per calling thread so that a forward pass does not allocate (and clear)
  // a buffer for every product; it only grows.
  thread_local std::vector<uint8_t> act_buf;
  const size_t act_bytes = arow * static_cast<size_t>(n_tokens);
  if (act_buf.size() < act_bytes) act_buf.resize(act_bytes);
  uint8_t* act = act_buf.data();
  pool.parallel_for(n_tokens, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) quantize_activation(type, x + t * cols, act + static_cast<size_t>(t) * arow, cols);
  });
  const auto* wb = static_cast<const uint8_t*>(w);
  // Blocks of 16 weight rows (a multiple of kDotTileRows).
  constexpr int64_t kBlock = 16;
  const int64_t blocks = (rows + kBlock - 1) / kBlock;
  if (n_tokens < kDotTileTokens) {
    // Decode (fewer tokens than a tile): a block is well under a microsecond of work, so the blocks are
    // split statically, with no shared counter to contend on.
    pool.parallel_for(blocks, [&](int64_t bb, int64_t be) {
      for (int64_t b = bb; b < be; ++b)
        product_rows(k, wb, wrow, b * kBlock, std::min(rows, (b + 1) * kBlock), rows, act, arow, cols, n_tokens, y);
    });
    return;
  }
  // Prefill: blocks are handed out one at a time, so a thread slowed down by anything else running on
  // its core does not hold up the whole product.
  std::atomic<int64_t> next{0};
  pool.parallel_for(static_cast<int64_t>(pool.size()), [&](int64_t, int64_t) {
    for (int64_t b; (b = next.fetch_add(1, std::memory_order_relaxed)) < blocks;)
      product_rows(k, wb, wrow, b * kBlock, std::min(rows, (b + 1) * kBlock), rows, act, arow, cols, n_tokens, y);
  });
}

}  // namespace zinc::quant
