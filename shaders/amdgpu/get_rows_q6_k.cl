// Q6_K rows as floats (get_rows_k.h), as deq_q6_k makes them: d * scale * (q - 32), left to right.
#define KERNEL get_rows_q6_k
#define BLOCK_BYTES 210u
#include "get_rows_k.h"

static void dequantize_part(__global const uchar* blk, uint t, __global float* o) {
  const uint e = 4u * t;
  const float d = half_at(blk, 208u), scale = (float)q6_k_scale(blk, e);
  for (uint k = 0; k < 4u; ++k) o[e + k] = d * scale * (float)q6_k_code(blk, e + k);
}
