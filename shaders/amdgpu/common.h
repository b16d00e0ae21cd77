// Shared by ZINC_RT's kernels (included, never built alone). Static: each kernel file its own copy
// (the host build links the files together). No device library: everything here is built from the
// AMDGPU builtins and plain arithmetic.

// An IEEE half's value from its 16 bits (exact: every half is a float).
static float f16_bits_to_float(uint h) {
  const uint sign = (h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0u) {
    const float v = (float)m * 0x1p-24f;  // zero or subnormal
    return sign ? -v : v;
  }
  if (e == 31u) return as_float(sign | 0x7f800000u | (m << 13));
  return as_float(sign | ((e + 112u) << 23) | (m << 13));
}

// Every work-item of the workgroup here, and its local-memory writes seen by the others.
static void workgroup_barrier(void) {
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}
