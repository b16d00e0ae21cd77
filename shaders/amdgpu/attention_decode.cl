// One token's causal attention over a layer's F16 cache (rows 0 .. *n_kv - 1, the step's own row
// stored first by kv_store): out[h] = softmax(scale * q[h] . K) V for query head h, which reads KV head
// h / (n_head / n_head_kv). One workgroup of 128 a head, keys in chunks of 128 (a key a work-item:
// its score, a sum over the head in order), the chunk's maximum and sum reduced through local memory,
// the running sums rescaled when the maximum grows; work-item t keeps output elements t and t + 128
// (head_dim at most 256). The number of keys is read from the step's parameters.
#pragma OPENCL FP_CONTRACT OFF
#include "common.h"
#define WG 128

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void attention_decode(__global const float* q, __global const ushort* kc,
                                                                              __global const ushort* vc, __global float* out,
                                                                              __global const int* n_kv, uint n_head, uint n_head_kv,
                                                                              uint head_dim, uint kv_width, float scale) {
  __local float qs[2 * WG];
  __local float p[WG];
  __local float red[WG];
  const uint h = __builtin_amdgcn_workgroup_id_x(), t = __builtin_amdgcn_workitem_id_x();
  const uint kv_off = h / (n_head / n_head_kv) * head_dim;
  for (uint i = t; i < head_dim; i += WG) qs[i] = q[(ulong)h * head_dim + i];
  workgroup_barrier();
  const uint n = (uint)*n_kv;
  float m = -INFINITY, l = 0.0f, acc0 = 0.0f, acc1 = 0.0f;
  for (uint c = 0; c < n; c += WG) {
    const uint j = c + t;
    float s = -INFINITY;
    if (j < n) {
      __global const ushort* kr = kc + (ulong)j * kv_width + kv_off;
      float d = 0.0f;
      for (uint i = 0; i < head_dim; ++i) d += qs[i] * f16_bits_to_float(kr[i]);
      s = d * scale;
    }
    red[t] = s;
    for (uint step = WG / 2; step > 0; step /= 2) {
      workgroup_barrier();
      if (t < step) red[t] = __builtin_fmaxf(red[t], red[t + step]);
    }
    workgroup_barrier();
    const float mn = __builtin_fmaxf(m, red[0]);  // (key c is always there: the chunk's maximum is finite)
    const float alpha = __builtin_expf(m - mn);
    const float pj = j < n ? __builtin_expf(s - mn) : 0.0f;
    workgroup_barrier();  // (every work-item has read red[0])
    p[t] = pj;
    red[t] = pj;
    for (uint step = WG / 2; step > 0; step /= 2) {
      workgroup_barrier();
      if (t < step) red[t] += red[t + step];
    }
    workgroup_barrier();
    l = l * alpha + red[0];
    acc0 *= alpha;
    acc1 *= alpha;
    const uint in_chunk = n - c < WG ? n - c : WG;
    for (uint jj = 0; jj < in_chunk; ++jj) {
      __global const ushort* vr = vc + (ulong)(c + jj) * kv_width + kv_off;
      if (t < head_dim) acc0 += p[jj] * f16_bits_to_float(vr[t]);
      if (t + WG < head_dim) acc1 += p[jj] * f16_bits_to_float(vr[t + WG]);
    }
    m = mn;
    workgroup_barrier();  // (p and red are rewritten by the next chunk)
  }
  __global float* o = out + (ulong)h * head_dim;
  if (t < head_dim) o[t] = acc0 / l;
  if (t + WG < head_dim) o[t + WG] = acc1 / l;
}
