// y[r] = W[r] . x for Q4_K rows of W (144-byte blocks of 256 values: d and dmin halves, 12 bytes of 6-bit
// scales and mins, 128 bytes of nibbles; src/quant/blocks.h) and x as Q8_K codes, bit for bit the CPU's
// dot_q45_k: per block the integer sums of scaled code products and of mins times code sums, then
// d_x * (d * sum_scaled - dmin * sum_mins) (mul_mv_k.h).
#define KERNEL mul_mv_q4_k
#define BLOCK_BYTES 144u
#include "mul_mv_k.h"

static int2 block_part(__global const uchar* blk, __global const uint* xb, uint t) {
  // Elements 4t..4t+3, all of sub-block j = 4t / 32.
  const uint e = 4u * t, j = e / 32u, c = xb[1u + t];
  const uint2 sm = q4_k_scale_min(blk, j);
  int dot = 0;
  for (uint k = 0; k < 4u; ++k) dot += (int)q4_k_code(blk, e + k) * (int)(char)((c >> (8u * k)) & 0xffu);
  // the mins once a sub-block (its first work-item), against its two 16-code sums (bsums 2j and 2j + 1:
  // the low and high halves of the codes' word 65 + j)
  int m = 0;
  if (t % 8u == 0u) {
    const uint sw = xb[65u + j];
    m = (int)sm.y * ((int)(short)(sw & 0xffffu) + (int)(short)(sw >> 16));
  }
  return (int2)((int)sm.x * dot, m);
}

static float block_value(__global const uchar* blk, float dx, int2 sums) {
  return dx * (half_at(blk, 0u) * (float)sums.x - half_at(blk, 2u) * (float)sums.y);
}
