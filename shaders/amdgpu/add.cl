// out[i] = a[i] + b[i] (the residual adds), a work-item an element.
#define WG 256

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void add(__global const float* a, __global const float* b, __global float* out, uint n) {
  const uint i = __builtin_amdgcn_workgroup_id_x() * WG + __builtin_amdgcn_workitem_id_x();
  if (i < n) out[i] = a[i] + b[i];
}
