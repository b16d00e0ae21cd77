#version 450
// RMSNorm (graph Op::RmsNorm): y = x / sqrt(mean(x^2) + eps) * (w + offset), over groups of `group`
// floats (a whole row, or one head). One workgroup per group: each invocation sums the squares of a
// strided slice, a shared-memory tree adds the 256 partial sums, then every invocation scales its
// slice. Reads the group twice and writes it once (12 bytes per element); w (group floats) is
// optional.
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

shared float partial[256];

void main() {
  const uint lid = gl_LocalInvocationID.x;
  const uint base = gl_WorkGroupID.x * p.group;
  float s = 0.0;
  for (uint i = lid; i < p.group; i += 256) {
    const float v = x[base + i];
    s += v * v;
  }
  partial[lid] = s;
  barrier();
  for (uint stride = 128; stride > 0; stride >>= 1) {
    if (lid < stride) partial[lid] += partial[lid + stride];
    barrier();
  }
  const float scale = inversesqrt(partial[0] / float(p.group) + p.eps);
  for (uint i = lid; i < p.group; i += 256) {
    const float wi = p.has_weight != 0 ? w[i] + p.offset : 1.0;
    y[base + i] = x[base + i] * scale * wi;
  }
}
