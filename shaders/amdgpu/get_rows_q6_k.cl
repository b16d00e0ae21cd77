// Rows of a Q6_K matrix as floats (the embedding's rows of a step's tokens): out[i] = row ids[i] of W,
// bit for bit the CPU's dequantizer (src/quant/dequantize.cpp deq_q6_k: d * scale * (q - 32), left to
// right). One workgroup of 64 a token, 4 elements a work-item a block (one scale's 16).
#pragma OPENCL FP_CONTRACT OFF
#include "common.h"
#define WG 64

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void get_rows_q6_k(__global const uchar* w, __global const int* ids,
                                                                           __global float* out, uint ncols, uint row_bytes) {
  const uint tok = __builtin_amdgcn_workgroup_id_x(), t = __builtin_amdgcn_workitem_id_x();
  __global const uchar* wr = w + (ulong)(uint)ids[tok] * row_bytes;
  __global float* o = out + (ulong)tok * ncols;
  // Element e = 4t + k: half nn = e / 128, run kk = (e % 128) / 32, l = e % 32 (mul_mv_q6_k.cl).
  const uint e = 4u * t, nn = e / 128u, kk = (e % 128u) / 32u, l = e % 32u;
  for (uint b = 0; b < ncols / 256u; ++b) {
    __global const uchar* blk = wr + b * 210u;
    const float d = f16_bits_to_float((uint)blk[208] | ((uint)blk[209] << 8));
    const float scale = (float)(char)blk[192u + nn * 8u + 2u * kk + l / 16u];
    for (uint k = 0; k < 4u; ++k) {
      const int lo = (blk[nn * 64u + (kk & 1u) * 32u + l + k] >> (4u * (kk >> 1))) & 0xf;
      const int hi = (blk[128u + nn * 32u + l + k] >> (2u * kk)) & 3;
      o[b * 256u + e + k] = d * scale * (float)((lo | (hi << 4)) - 32);
    }
  }
}
