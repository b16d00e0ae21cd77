// Q4_K rows as floats (get_rows_k.h), as deq_q4_k makes them: d * scale and dmin * min once a
// sub-block, then d_l * q - m_l.
#define KERNEL get_rows_q4_k
#define BLOCK_BYTES 144u
#include "get_rows_k.h"

static void dequantize_part(__global const uchar* blk, uint t, __global float* o) {
  const uint e = 4u * t;  // elements 4t..4t+3, all of sub-block e / 32
  const uint2 sm = q4_k_scale_min(blk, e / 32u);
  const float dl = half_at(blk, 0u) * (float)sm.x, ml = half_at(blk, 2u) * (float)sm.y;
  for (uint k = 0; k < 4u; ++k) o[e + k] = dl * (float)q4_k_code(blk, e + k) - ml;
}
