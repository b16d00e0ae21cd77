// Rows of a Q4_K matrix as floats (the embedding's rows of a step's tokens): out[i] = row ids[i] of W,
// bit for bit the CPU's dequantizer (src/quant/dequantize.cpp deq_q4_k: d * scale and dmin * min once
// a sub-block, then d_l * q - m_l). One workgroup of 64 a token, 4 elements a work-item a block.
#pragma OPENCL FP_CONTRACT OFF
#include "common.h"
#define WG 64

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void get_rows_q4_k(__global const uchar* w, __global const int* ids,
                                                                           __global float* out, uint ncols, uint row_bytes) {
  const uint tok = __builtin_amdgcn_workgroup_id_x(), t = __builtin_amdgcn_workitem_id_x();
  __global const uchar* wr = w + (ulong)(uint)ids[tok] * row_bytes;
  __global float* o = out + (ulong)tok * ncols;
  // Element e = 4t + k: chunk ch = e / 64 of 32 nibble bytes, low nibbles (sub-block 2 ch) for its
  // first 32 elements, high (2 ch + 1) for the next 32.
  const uint e = 4u * t, ch = e / 64u, hi = (e % 64u) / 32u, j = 2u * ch + hi;
  for (uint b = 0; b < ncols / 256u; ++b) {
    __global const uchar* blk = wr + b * 144u;
    const float d = f16_bits_to_float((uint)blk[0] | ((uint)blk[1] << 8)), dmin = f16_bits_to_float((uint)blk[2] | ((uint)blk[3] << 8));
    __global const uchar* sc = blk + 4;
    const uint s = j < 4u ? sc[j] & 63u : (sc[j + 4u] & 0xfu) | ((sc[j - 4u] >> 6) << 4);
    const uint m = j < 4u ? sc[j + 4u] & 63u : (sc[j + 4u] >> 4) | ((sc[j] >> 6) << 4);
    const float dl = d * (float)s, ml = dmin * (float)m;
    for (uint k = 0; k < 4u; ++k) {
      const uint q = (blk[16u + ch * 32u + e % 32u + k] >> (4u * hi)) & 0xfu;
      o[b * 256u + e + k] = dl * (float)q - ml;
    }
  }
}
