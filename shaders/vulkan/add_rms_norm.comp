#version 450
//! variant f32 SUM_F32
//! variant f64 SUM_F64
// A residual addition and the RMSNorm of its result in one dispatch (the graph's Add followed by a
// whole-row RmsNorm of that sum, at every layer boundary): s = a + b is written (the residual stream
// goes on), and y = s / sqrt(mean(s^2) + eps) * (w + offset). One workgroup per row; the sum of
// squares is reduced as in rms_norm.comp (SUM_F64: the CPU's double sum, bit for bit). Saves a
// dispatch and a pass over the row: reads a and b once, writes s and y (16 bytes per element).
#extension GL_KHR_shader_subgroup_arithmetic : require
#if defined(SUM_F64)
#extension GL_ARB_gpu_shader_fp64 : require
#define ACC double
#else
#define ACC float
#endif
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 1) readonly buffer B { float b[]; };
layout(std430, binding = 2) buffer S { float s[]; };
layout(std430, binding = 3) readonly buffer W { float w[]; };
layout(std430, binding = 4) writeonly buffer Y { float y[]; };
layout(push_constant) uniform Params {
  uint width;
  uint has_weight;  // 0: no weight (w is not read)
  float eps;
  float offset;
} p;

shared ACC partial[256];
shared float row_scale;

void main() {
  const uint lid = gl_LocalInvocationID.x;
  const uint base = gl_WorkGroupID.x * p.width;
  ACC acc = ACC(0);
  for (uint i = lid; i < p.width; i += 256) {
    const float v = a[base + i] + b[base + i];
    s[base + i] = v;
    acc += ACC(v) * ACC(v);
  }
  acc = subgroupAdd(acc);
  if (subgroupElect()) partial[gl_SubgroupID] = acc;
  barrier();
  if (lid == 0u) {
    ACC total = ACC(0);
    for (uint i = 0u; i < gl_NumSubgroups; ++i) total += partial[i];
#if defined(SUM_F64)
    const float mean = float(total / double(p.width)) + p.eps;
    const float root = float(sqrt(double(mean)));
    row_scale = float(1.0lf / double(root));
#else
    row_scale = inversesqrt(total / float(p.width) + p.eps);
#endif
  }
  barrier();
  const float scale = row_scale;
  for (uint i = lid; i < p.width; i += 256) {
    const float wi = p.has_weight != 0 ? w[i] + p.offset : 1.0;
    y[base + i] = s[base + i] * scale * wi;  // this invocation's own write above
  }
}
