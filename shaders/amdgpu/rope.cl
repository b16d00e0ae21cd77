// Rotary position embedding of a step's heads, bit for bit the CPU backend's (src/backend/cpu/cpu_ops.cpp
// rope): pair i of each head (elements 2i and 2i + 1, or i and i + n_rot / 2 with neox) rotated by the
// token's (cos, sin) of pair i from cs (the host's table, n_rot floats a token: rope_cos_sin), the
// elements past n_rot copied. One workgroup of 64 a (head, token): grid (n_head, n_tokens).
#pragma OPENCL FP_CONTRACT OFF
#define WG 64

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void rope(__global const float* x, __global const float* cs, __global float* out,
                                                                  uint n_head, uint head_dim, uint n_rot, uint neox) {
  const uint h = __builtin_amdgcn_workgroup_id_x(), tok = __builtin_amdgcn_workgroup_id_y(), t = __builtin_amdgcn_workitem_id_x();
  const ulong at = ((ulong)tok * n_head + h) * head_dim;
  __global const float* xh = x + at;
  __global float* oh = out + at;
  __global const float* c = cs + (ulong)tok * n_rot;
  for (uint i = t; i < n_rot / 2u; i += WG) {
    const uint a = neox ? i : 2u * i, b = neox ? i + n_rot / 2u : 2u * i + 1u;
    const float co = c[2u * i], si = c[2u * i + 1u], x0 = xh[a], x1 = xh[b];
    oh[a] = x0 * co - x1 * si;
    oh[b] = x0 * si + x1 * co;
  }
  for (uint i = n_rot + t; i < head_dim; i += WG) oh[i] = xh[i];
}
