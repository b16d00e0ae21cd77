// Q4_K rows as floats (get_rows_k.h), as deq_q4_k makes them: d * scale and dmin * min once a
// sub-block, then d_l * q - m_l.
#define KERNEL get_rows_q4_k
#define BLOCK_BYTES 144u
#include "get_rows_k.h"

static void dequantize_part(__global const uchar* blk, uint t, __global float* o) {
  // Element e = 4t + k: chunk ch = e / 64 of 32 nibble bytes, low nibbles (sub-block 2 ch) for its
  // first 32 elements, high (2 ch + 1) for the next 32.
  const uint e = 4u * t, ch = e / 64u, hi = (e % 64u) / 32u;
  const uint2 sm = q4_k_scale_min(blk, 2u * ch + hi);
  const float d = f16_bits_to_float((uint)blk[0] | ((uint)blk[1] << 8)), dmin = f16_bits_to_float((uint)blk[2] | ((uint)blk[3] << 8));
  const float dl = d * (float)sm.x, ml = dmin * (float)sm.y;
  for (uint k = 0; k < 4u; ++k) o[e + k] = dl * (float)((blk[16u + ch * 32u + e % 32u + k] >> (4u * hi)) & 0xfu) - ml;
}
