// ZINC_RT's first ZINC kernel (the ladder's kernel rung, and every norm of a decode step):
// out = x / sqrt(mean(x^2) + eps) * w for each row of `width` floats (a whole row, or one head of a
// per-head norm), one workgroup of 256 a row, bit for bit the CPU backend's rms_norm: the squares
// summed in double in eight running sums (work-item k < 8 keeps sum k, over elements i = k mod 8 in
// order; the tail past the last whole eight goes to sum 0), combined in the CPU's order, the mean
// divided in double, then the float square root and division, both correctly rounded. (A square of a
// float is exact in double, so a fused multiply-add gives what a multiply then an add gives.)
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#pragma OPENCL FP_CONTRACT OFF
#include "common.h"
#define WG 256
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void rms_norm(__global const float* x, __global const float* w,
                                                                      __global float* out, uint width, float eps) {
  __local double part[8];
  const uint row = __builtin_amdgcn_workgroup_id_x(), t = __builtin_amdgcn_workitem_id_x();
  __global const float* xr = x + (ulong)row * width;
  if (t < 8u) {
    const uint whole = width / 8u * 8u;
    double s = 0.0;
    for (uint i = t; i < whole; i += 8u) s += (double)xr[i] * (double)xr[i];
    if (t == 0u)
      for (uint i = whole; i < width; ++i) s += (double)xr[i] * (double)xr[i];
    part[t] = s;
  }
  workgroup_barrier();
  const double sum = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
  const float scale = 1.0f / __builtin_sqrtf((float)(sum / (double)width) + eps);
  __global float* o = out + (ulong)row * width;
  for (uint i = t; i < width; i += WG) o[i] = xr[i] * scale * w[i];
}
