// out[i] = silu(gate[i]) * up[i] = gate / (1 + e^-gate) * up, the FFN's activation (the CPU backend's
// swiglu: its vector forms' exponential may differ in the last bits). A work-item an element.
#define WG 256

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void swiglu(__global const float* gate, __global const float* up, __global float* out,
                                                                    uint n) {
  const uint i = __builtin_amdgcn_workgroup_id_x() * WG + __builtin_amdgcn_workitem_id_x();
  if (i < n) {
    const float g = gate[i];
    out[i] = g / (1.0f + __builtin_expf(-g)) * up[i];
  }
}
