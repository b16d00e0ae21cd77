#version 450
//! variant f32 SUM_F32
//! variant f64 SUM_F64
// RMSNorm (graph Op::RmsNorm): y = x / sqrt(mean(x^2) + eps) * (w + offset), over groups of `group`
// floats (a whole row, or one head). One workgroup per group: each invocation sums the squares of a
// strided slice, each subgroup adds its invocations' sums, one invocation adds the subgroups' (two
// barriers: decode runs one workgroup per row, so the latency of the reduction is the kernel's time),
// then every invocation scales its slice. Reads the group twice and writes it once (12 bytes per
// element); w (group floats) is optional.
// SUM_F64 reproduces the CPU backend bit for bit: squares summed in double (exact products, a sum
// whose order no longer shows in its float value), scale = 1 / sqrt(float mean + eps) with the square
// root and the division rounded once, as IEEE float arithmetic rounds them. The quantized matrix
// products that follow round these values to 8-bit codes, and a value one ulp off can land on the
// other side of a rounding boundary; matching the CPU here keeps both backends on the same codes.
#extension GL_KHR_shader_subgroup_arithmetic : require
#if defined(SUM_F64)
#extension GL_ARB_gpu_shader_fp64 : require
#define ACC double
#else
#define ACC float
#endif
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer W { float w[]; };
layout(std430, binding = 2) writeonly buffer Y { float y[]; };
layout(push_constant) uniform Params {
  uint group;      // floats per normalised group
  uint has_weight; // 0: no weight (w is not read)
  float eps;
  float offset;    // added to every weight (1 for checkpoints that store w - 1)
} p;

shared ACC partial[256];  // one per subgroup (at most 256 subgroups of one invocation)
shared float group_scale;

void main() {
  const uint lid = gl_LocalInvocationID.x;
  const uint base = gl_WorkGroupID.x * p.group;
  ACC s = ACC(0);
  for (uint i = lid; i < p.group; i += 256) {
    const ACC v = ACC(x[base + i]);
    s += v * v;
  }
  s = subgroupAdd(s);
  if (subgroupElect()) partial[gl_SubgroupID] = s;
  barrier();
  if (lid == 0u) {
    ACC total = ACC(0);
    for (uint i = 0u; i < gl_NumSubgroups; ++i) total += partial[i];
#if defined(SUM_F64)
    const float mean = float(total / double(p.group)) + p.eps;
    const float root = float(sqrt(double(mean)));      // correctly rounded float square root
    group_scale = float(1.0lf / double(root));         // correctly rounded float reciprocal
#else
    group_scale = inversesqrt(total / float(p.group) + p.eps);
#endif
  }
  barrier();
  const float scale = group_scale;
  for (uint i = lid; i < p.group; i += 256) {
    const float wi = p.has_weight != 0 ? w[i] + p.offset : 1.0;
    y[base + i] = x[base + i] * scale * wi;
  }
}
