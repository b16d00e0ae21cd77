// ZINC_RT's activation quantizer: each block of 256 floats of x becomes a Q8_K block of out (float d,
// 256 int8 codes, 16 int16 sums of 16 codes: 73 words; src/quant/blocks.h) exactly as the CPU backend's
// quantizer makes it (src/quant/quantize.cpp q_q8_k, src/quant/rounding.h): d = max|x| / 127 (NaN
// skipped), codes x * (1 / d) clamped to [-127, 127] and rounded to nearest even. One workgroup of 64
// a block, 4 elements a work-item. Built with correctly rounded division and without contraction, so
// that every float operation is the CPU's.
#pragma OPENCL FP_CONTRACT OFF
#include "common.h"
#define WG 64

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void quantize_q8_k(__global const float* x, __global uint* out) {
  __local uint amax_part[WG];
  __local int sums[WG];
  const uint blk = __builtin_amdgcn_workgroup_id_x(), t = __builtin_amdgcn_workitem_id_x();
  __global const float* xb = x + (ulong)blk * 256u + 4u * t;
  float v[4];
  uint m = 0u;
  for (uint k = 0; k < 4u; ++k) {
    v[k] = xb[k];
    uint b = as_uint(v[k]) & 0x7fffffffu;
    b = b > 0x7f800000u ? 0u : b;  // NaN
    m = m < b ? b : m;
  }
  amax_part[t] = m;
  for (uint step = WG / 2; step > 0; step /= 2) {
    workgroup_barrier();
    if (t < step) amax_part[t] = amax_part[t] < amax_part[t + step] ? amax_part[t + step] : amax_part[t];
  }
  workgroup_barrier();
  const float d = as_float(amax_part[0]) / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  uint word = 0u;
  int sum = 0;
  for (uint k = 0; k < 4u; ++k) {
    float c = v[k] * id;
    c = c < -127.0f ? -127.0f : c;  // (NaN: as the CPU's std::max(-127, NaN), -127)
    c = c == c ? c : -127.0f;
    c = c > 127.0f ? 127.0f : c;
    c = (c + 12582912.0f) - 12582912.0f;
    const int q = (int)c;
    sum += q;
    word |= ((uint)q & 0xffu) << (8u * k);
  }
  __global uint* ob = out + (ulong)blk * 73u;
  ob[1u + t] = word;
  sums[t] = sum;
  workgroup_barrier();
  if (t == 0u) ob[0] = as_uint(d);
  if (t < 8u) {  // the sums of groups 2t and 2t + 1, each 4 work-items' codes, as one word of two int16
    const int lo = sums[8u * t] + sums[8u * t + 1u] + sums[8u * t + 2u] + sums[8u * t + 3u];
    const int hi = sums[8u * t + 4u] + sums[8u * t + 5u] + sums[8u * t + 6u] + sums[8u * t + 7u];
    ob[65u + t] = ((uint)lo & 0xffffu) | ((uint)hi << 16);
  }
}
