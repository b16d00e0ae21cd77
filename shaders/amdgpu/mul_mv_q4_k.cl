// ZINC_RT's first product kernel: y[r] = sum_c W[r][c] * x[c] for Q4_K rows of W (144-byte blocks of 256
// values, d and dmin halves, 12 bytes of 6-bit scales and mins, 128 bytes of nibbles; src/quant/blocks.h)
// and float activations. One workgroup of 64 a row; in each block work-item t takes elements 4t..4t+3
// (one 32-bit word of nibbles, one sub-block's scale and min), then the workgroup's sums are reduced
// through local memory in a fixed order. No device library: halves are decoded from their bits.
#define WG 64

float f16_bits_to_float(uint h) {
  const uint sign = (h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0u) {
    const float v = (float)m * 0x1p-24f;  // zero or subnormal
    return sign ? -v : v;
  }
  if (e == 31u) return as_float(sign | 0x7f800000u | (m << 13));
  return as_float(sign | ((e + 112u) << 23) | (m << 13));
}

uint block_byte(__global const uint* blk, uint off) { return (blk[off >> 2] >> ((off & 3u) * 8u)) & 0xffu; }

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void mul_mv_q4_k(__global const uint* w, __global const float* x,
                                                                         __global float* y, uint ncols, uint row_bytes) {
  __local float part[WG];
  const uint row = __builtin_amdgcn_workgroup_id_x(), t = __builtin_amdgcn_workitem_id_x();
  __global const uint* wr = w + (ulong)row * (row_bytes / 4u);
  // Element e = 4t + k of a block: chunk ch = e / 64 of 32 nibble bytes, low nibbles for its first 32
  // elements (sub-block 2 ch), high ones for the next 32 (sub-block 2 ch + 1).
  const uint e = 4u * t, ch = e / 64u, hi = (e % 64u) / 32u, j = 2u * ch + hi;
  const uint qword = 4u + (ch * 32u + e % 32u) / 4u;  // the word of nibbles (the block's words 4..35)
  float s = 0.0f;
  for (uint b = 0; b < ncols / 256u; ++b) {
    __global const uint* blk = wr + b * 36u;
    const float d = f16_bits_to_float(blk[0] & 0xffffu), dmin = f16_bits_to_float(blk[0] >> 16);
    // sub-block j's 6-bit scale and min (kquant_scale_min): the scale bytes start at byte 4
    uint sc, mn;
    if (j < 4u) {
      sc = block_byte(blk, 4u + j) & 63u;
      mn = block_byte(blk, 4u + j + 4u) & 63u;
    } else {
      sc = (block_byte(blk, 4u + j + 4u) & 0xfu) | ((block_byte(blk, 4u + j - 4u) >> 6) << 4);
      mn = (block_byte(blk, 4u + j + 4u) >> 4) | ((block_byte(blk, 4u + j) >> 6) << 4);
    }
    const uint q = (blk[qword] >> (4u * hi)) & 0x0f0f0f0fu;
    __global const float* xb = x + b * 256u + e;
    const float dot = xb[0] * (float)(q & 0xffu) + xb[1] * (float)((q >> 8) & 0xffu) + xb[2] * (float)((q >> 16) & 0xffu) +
                      xb[3] * (float)(q >> 24);
    const float xs = xb[0] + xb[1] + xb[2] + xb[3];
    s += d * (float)sc * dot - dmin * (float)mn * xs;
  }
  part[t] = s;
  for (uint step = WG / 2; step > 0; step /= 2) {
    __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
    __builtin_amdgcn_s_barrier();
    __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
    if (t < step) part[t] += part[t + step];
  }
  if (t == 0u) y[row] = part[0];
}
