// y[r] = W[r] . x for Q6_K rows of W (210-byte blocks of 256 values: 128 bytes of low nibbles ql, 64 of
// high bit pairs qh, 16 int8 scales of 16 values, the half d; src/quant/blocks.h) and x as Q8_K codes
// (quantize_q8_k.cl), bit for bit the CPU's definition (src/quant/dot_ref.cpp dot_q6_k): per block the
// exact integer sum of scale times (code - 32) times activation code, then d_x * d * sum, the blocks
// added in order from 0. As mul_mv_q4_k.cl: one workgroup of 64 a row, work-item t elements 4t..4t+3
// of each block (one scale's 16), the integer parts through local memory, blocks in chunks of CHUNK.
// Blocks are 2-byte aligned: bytes are read one at a time.
#pragma OPENCL FP_CONTRACT OFF
#include "common.h"
#define WG 64
#define CHUNK 16

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void mul_mv_q6_k(__global const uchar* w, __global const uint* xq,
                                                                         __global float* y, uint ncols, uint row_bytes) {
  __local int scaled[CHUNK][WG];
  __local float value[CHUNK];
  const uint row = __builtin_amdgcn_workgroup_id_x(), t = __builtin_amdgcn_workitem_id_x();
  __global const uchar* wr = w + (ulong)row * row_bytes;
  // Element e = 4t + k: half nn = e / 128, run kk = (e % 128) / 32, l = e % 32; its low nibble in
  // ql[nn * 64 + (kk & 1) * 32 + l] (high nibble for kk >= 2), its two high bits in qh[nn * 32 + l]
  // at 2 kk; scale nn * 8 + 2 kk + l / 16.
  const uint e = 4u * t, nn = e / 128u, kk = (e % 128u) / 32u, l = e % 32u;
  const uint ql = nn * 64u + (kk & 1u) * 32u + l, qh = 128u + nn * 32u + l, sc = 192u + nn * 8u + 2u * kk + l / 16u;
  const uint nb = ncols / 256u;
  float s = 0.0f;
  for (uint b0 = 0; b0 < nb; b0 += CHUNK) {
    const uint n = nb - b0 < CHUNK ? nb - b0 : CHUNK;
    for (uint i = 0; i < n; ++i) {
      __global const uchar* blk = wr + (b0 + i) * 210u;
      const uint c = xq[(b0 + i) * 73u + 1u + t];
      int dot = 0;
      for (uint k = 0; k < 4u; ++k) {
        const int lo = (blk[ql + k] >> (4u * (kk >> 1))) & 0xf, hi = (blk[qh + k] >> (2u * kk)) & 3;
        dot += ((lo | (hi << 4)) - 32) * (int)(char)((c >> (8u * k)) & 0xffu);
      }
      scaled[i][t] = (int)(char)blk[sc] * dot;
    }
    workgroup_barrier();
    if (t < n) {
      int sum = 0;
      for (uint u = 0; u < WG; ++u) sum += scaled[t][u];
      __global const uchar* blk = wr + (b0 + t) * 210u;
      const float dx = as_float(xq[(b0 + t) * 73u]);
      value[t] = dx * f16_bits_to_float((uint)blk[208] | ((uint)blk[209] << 8)) * (float)sum;
    }
    workgroup_barrier();
    if (t == 0u) {
      for (uint i = 0; i < n; ++i) s += value[i];
    }
    workgroup_barrier();  // (the next chunk's parts overwrite these)
  }
  if (t == 0u) y[row] = s;
}
