// ZINC_RT's first product kernel: y[r] = W[r] . x for Q4_K rows of W (144-byte blocks of 256 values: d
// and dmin halves, 12 bytes of 6-bit scales and mins, 128 bytes of nibbles; src/quant/blocks.h) and x
// as Q8_K codes (quantize_q8_k.cl), bit for bit the CPU's definition (src/quant/dot_ref.cpp dot_q45_k):
// per block the exact integer sums of scaled code products and of mins times code sums, then the
// block's float value d_x * (d * sum_scaled - dmin * sum_mins), the blocks added in order from 0.
// One workgroup of 64 a row: in each block work-item t takes elements 4t..4t+3 (a word of nibbles, a
// word of codes, one sub-block's scale), its integer parts go to local memory, and then one work-item
// a block adds them (integers: any order is exact) and one adds the blocks' values in order. Blocks in
// chunks of CHUNK.
#pragma OPENCL FP_CONTRACT OFF
#include "common.h"
#define WG 64
#define CHUNK 16

static uint block_byte(__global const uint* blk, uint off) { return (blk[off >> 2] >> ((off & 3u) * 8u)) & 0xffu; }

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void mul_mv_q4_k(__global const uint* w, __global const uint* xq,
                                                                         __global float* y, uint ncols, uint row_bytes) {
  __local int scaled[CHUNK][WG], mins[CHUNK][WG];
  __local float value[CHUNK];
  const uint row = __builtin_amdgcn_workgroup_id_x(), t = __builtin_amdgcn_workitem_id_x();
  __global const uint* wr = w + (ulong)row * (row_bytes / 4u);
  // Element e = 4t + k of a block: chunk ch = e / 64 of 32 nibble bytes, low nibbles for its first 32
  // elements (sub-block 2 ch), high ones for the next 32 (sub-block 2 ch + 1).
  const uint e = 4u * t, ch = e / 64u, hi = (e % 64u) / 32u, j = 2u * ch + hi;
  const uint qword = 4u + (ch * 32u + e % 32u) / 4u;  // the word of nibbles (the block's words 4..35)
  const uint nb = ncols / 256u;
  float s = 0.0f;
  for (uint b0 = 0; b0 < nb; b0 += CHUNK) {
    const uint n = nb - b0 < CHUNK ? nb - b0 : CHUNK;
    for (uint i = 0; i < n; ++i) {
      __global const uint* blk = wr + (b0 + i) * 36u;
      __global const uint* xb = xq + (b0 + i) * 73u;
      // sub-block j's 6-bit scale and min (kquant_scale_min): the scale bytes start at byte 4
      uint sc, mn;
      if (j < 4u) {
        sc = block_byte(blk, 4u + j) & 63u;
        mn = block_byte(blk, 4u + j + 4u) & 63u;
      } else {
        sc = (block_byte(blk, 4u + j + 4u) & 0xfu) | ((block_byte(blk, 4u + j - 4u) >> 6) << 4);
        mn = (block_byte(blk, 4u + j + 4u) >> 4) | ((block_byte(blk, 4u + j) >> 6) << 4);
      }
      const uint q = (blk[qword] >> (4u * hi)) & 0x0f0f0f0fu, c = xb[1u + t];
      int dot = 0;
      for (uint k = 0; k < 4u; ++k) dot += (int)((q >> (8u * k)) & 0xffu) * (int)(char)((c >> (8u * k)) & 0xffu);
      scaled[i][t] = (int)sc * dot;
      // the mins once a sub-block (its first work-item), against its two 16-code sums
      int m = 0;
      if (t % 8u == 0u) {
        const uint sw = xb[65u + j];  // bsums 2j (low half) and 2j + 1 (high half)
        m = (int)mn * ((int)(short)(sw & 0xffffu) + (int)(short)(sw >> 16));
      }
      mins[i][t] = m;
    }
    workgroup_barrier();
    if (t < n) {
      int ss = 0, sm = 0;
      for (uint u = 0; u < WG; ++u) {
        ss += scaled[t][u];
        sm += mins[t][u];
      }
      __global const uint* blk = wr + (b0 + t) * 36u;
      const float dx = as_float(xq[(b0 + t) * 73u]);
      value[t] = dx * (f16_bits_to_float(blk[0] & 0xffffu) * (float)ss - f16_bits_to_float(blk[0] >> 16) * (float)sm);
    }
    workgroup_barrier();
    if (t == 0u) {
      for (uint i = 0; i < n; ++i) s += value[i];
    }
    workgroup_barrier();  // (the next chunk's parts overwrite these)
  }
  if (t == 0u) y[row] = s;
}
