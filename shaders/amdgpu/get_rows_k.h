// Rows of a K-quant matrix as floats (included by get_rows_q4_k.cl and get_rows_q6_k.cl, never built
// alone; the embedding's rows of a step's tokens): out[i] = row ids[i] of W, bit for bit the CPU's
// dequantizer (src/quant/dequantize.cpp). One workgroup of 64 a token, elements 4t..4t+3 of each block
// for work-item t. The including file defines KERNEL, BLOCK_BYTES and (static)
//   void dequantize_part(__global const uchar* blk, uint t, __global float* o): elements 4t..4t+3 of
//     the block into o[4t..4t+3].
#pragma OPENCL FP_CONTRACT OFF
#include "common.h"
#define WG 64

static void dequantize_part(__global const uchar* blk, uint t, __global float* o);

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void KERNEL(__global const uchar* w, __global const int* ids, __global float* out,
                                                                    uint ncols, uint row_bytes) {
  const uint tok = __builtin_amdgcn_workgroup_id_x(), t = __builtin_amdgcn_workitem_id_x();
  __global const uchar* wr = w + (ulong)(uint)ids[tok] * row_bytes;
  __global float* o = out + (ulong)tok * ncols;
  for (uint b = 0; b < ncols / 256u; ++b) dequantize_part(wr + b * BLOCK_BYTES, t, o + b * 256u);
}
