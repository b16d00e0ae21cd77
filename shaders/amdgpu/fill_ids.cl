// ZINC_RT's trivial dispatch (the ladder's dispatch rung): element i of out becomes 3 i + 1 for i < n.
// Workgroups of 64; ids from the AMDGPU builtins (no device library: the code object stands alone).
#define WG 64
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void fill_ids(__global uint* out, uint n) {
  const uint i = __builtin_amdgcn_workgroup_id_x() * WG + __builtin_amdgcn_workitem_id_x();
  if (i < n) out[i] = i * 3u + 1u;
}
