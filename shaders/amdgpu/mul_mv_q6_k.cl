// y[r] = W[r] . x for Q6_K rows of W (210-byte blocks of 256 values: 128 bytes of low nibbles ql, 64 of
// high bit pairs qh, 16 int8 scales of 16 values, the half d; src/quant/blocks.h) and x as Q8_K codes,
// bit for bit the CPU's dot_q6_k: per block the integer sum of scale times (code - 32) times activation
// code, then d_x * d * sum (mul_mv_k.h). Blocks are 2-byte aligned: bytes are read one at a time.
#define KERNEL mul_mv_q6_k
#define BLOCK_BYTES 210u
#include "mul_mv_k.h"

static int2 block_part(__global const uchar* blk, __global const uint* xb, uint t) {
  // Element e = 4t + k: its 6-bit code and scale (q6_k_code, one scale for the work-item's 4).
  const uint e = 4u * t, c = xb[1u + t];
  int dot = 0;
  for (uint k = 0; k < 4u; ++k) dot += q6_k_code(blk, e + k) * (int)(char)((c >> (8u * k)) & 0xffu);
  return (int2)(q6_k_scale(blk, e) * dot, 0);
}

static float block_value(__global const uchar* blk, float dx, int2 sums) {
  return dx * half_at(blk, 208u) * (float)sums.x;
}
