// ZINC_RT's first ZINC kernel (the ladder's kernel rung): out = x / sqrt(mean(x^2) + eps) * w for each
// row of `width` floats, one workgroup of 256 per row, the sum of squares reduced through local memory
// in a fixed order (the CPU backend's rms_norm is the oracle, within float rounding).
#define WG 256
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void rms_norm(__global const float* x, __global const float* w,
                                                                      __global float* out, uint width, float eps) {
  __local float part[WG];
  const uint row = __builtin_amdgcn_workgroup_id_x(), t = __builtin_amdgcn_workitem_id_x();
  __global const float* xr = x + (ulong)row * width;
  float s = 0.0f;
  for (uint i = t; i < width; i += WG) s += xr[i] * xr[i];
  part[t] = s;
  for (uint step = WG / 2; step > 0; step /= 2) {
    __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
    __builtin_amdgcn_s_barrier();
    __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
    if (t < step) part[t] += part[t + step];
  }
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
  const float scale = 1.0f / __builtin_sqrtf(part[0] / (float)width + eps);
  __global float* o = out + (ulong)row * width;
  for (uint i = t; i < width; i += WG) o[i] = xr[i] * scale * w[i];
}
