// The K-quant products (included by mul_mv_q4_k.cl and mul_mv_q6_k.cl, never built alone): y[r] = W[r] .
// x for rows of W of ncols / 256 blocks of BLOCK_BYTES and x as Q8_K codes (quantize_q8_k.cl: 73 words
// a block), bit for bit the CPU's definition (src/quant/dot_ref.cpp): per block exact integer sums, then
// the block's float value, the blocks added in order from 0. One workgroup of 64 a row: in each block
// work-item t takes elements 4t..4t+3 and its integer parts go to local memory; then one work-item a
// block adds them (integers: any order is exact) and makes the block's value, and one adds the values
// in order. Blocks in chunks of CHUNK.
// The including file defines KERNEL (the kernel's name), BLOCK_BYTES, and (static)
//   int2 block_part(__global const uchar* blk, __global const uint* xb, uint t): work-item t's parts of
//     the block's integer sums (xb: the block of x's codes);
//   float block_value(__global const uchar* blk, float dx, int2 sums): the block's value from them.
#pragma OPENCL FP_CONTRACT OFF
#include "common.h"
#define WG 64
#define CHUNK 16

static int2 block_part(__global const uchar* blk, __global const uint* xb, uint t);
static float block_value(__global const uchar* blk, float dx, int2 sums);

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void KERNEL(__global const uchar* w, __global const uint* xq, __global float* y,
                                                                    uint ncols, uint row_bytes) {
  __local int2 parts[CHUNK][WG];
  __local float value[CHUNK];
  const uint row = __builtin_amdgcn_workgroup_id_x(), t = __builtin_amdgcn_workitem_id_x();
  __global const uchar* wr = w + (ulong)row * row_bytes;
  const uint nb = ncols / 256u;
  float s = 0.0f;
  for (uint b0 = 0; b0 < nb; b0 += CHUNK) {
    const uint n = nb - b0 < CHUNK ? nb - b0 : CHUNK;
    for (uint i = 0; i < n; ++i) parts[i][t] = block_part(wr + (b0 + i) * BLOCK_BYTES, xq + (b0 + i) * 73u, t);
    workgroup_barrier();
    if (t < n) {
      int2 sums = (int2)(0, 0);
      for (uint u = 0; u < WG; ++u) sums += parts[t][u];
      value[t] = block_value(wr + (b0 + t) * BLOCK_BYTES, as_float(xq[(b0 + t) * 73u]), sums);
    }
    workgroup_barrier();
    if (t == 0u) {
      for (uint i = 0; i < n; ++i) s += value[i];
    }
    workgroup_barrier();  // (the next chunk's parts overwrite these)
  }
  if (t == 0u) y[row] = s;
}
