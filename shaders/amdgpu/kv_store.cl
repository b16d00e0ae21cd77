// A decode step's key and value rows into a layer's cache: row *pos of kc and vc (width halves a row)
// becomes k and v rounded to half (nearest even, as the CPU backend's F16 cache holds them). The
// position is read from the step's parameters, so the packets never change from token to token.
#include "common.h"
#define WG 256

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void kv_store(__global const float* k, __global const float* v, __global ushort* kc,
                                                                      __global ushort* vc, __global const int* pos, uint width) {
  const uint i = __builtin_amdgcn_workgroup_id_x() * WG + __builtin_amdgcn_workitem_id_x();
  if (i >= width) return;
  const ulong at = (ulong)(uint)*pos * width + i;
  kc[at] = float_to_f16_bits(k[i]);
  vc[at] = float_to_f16_bits(v[i]);
}
