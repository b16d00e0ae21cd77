#version 450
// A per-head RMSNorm and the SwiGLU that reads it, in one dispatch (a gated DeltaNet's output, then its
// gate): y = x / sqrt(mean over the head(x^2) + eps) * (w + offset), o = silu(z) * y, and with
// q8k_stride > 0 o's Q8_K codes for the product after it (q8k.glsl's layout, rows q8k_stride words apart). One workgroup per
// block of 256 elements holding whole heads (group divides 256; n a multiple of 256). Each head's sum
// of squares is formed as rms_norm.comp forms a head's (each subgroup's sum over the head's elements,
// zeros elsewhere, then the subgroups' sums in order), and y, o and the codes as rms_norm.comp and
// eltwise.comp's SwiGLU form them, so the values are those of the two dispatches it replaces.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_arithmetic : require
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer W { float w[]; };
layout(std430, binding = 2) readonly buffer Z { float z[]; };
layout(std430, binding = 3) writeonly buffer Y { float y[]; };
layout(std430, binding = 4) writeonly buffer O { float o[]; };
layout(std430, binding = 5) writeonly buffer Q { uint q[]; };
#define Q8K_BLOCK256_WRITER
#include "q8k.glsl"
layout(push_constant) uniform Params {
  uint n;           // elements (rows x width)
  uint width;       // floats per row (a multiple of 256)
  uint group;       // floats per head (divides 256; heads x subgroup size at least 256)
  uint has_weight;  // 0: no weight (w is not read)
  float eps;
  float offset;     // added to every weight
  uint q8k_stride;  // words per quantized row; 0: no codes (q is not written)
} p;

shared float partial[256];  // head h, subgroup s: partial[h * gl_NumSubgroups + s]
shared float head_scale[256];

void main() {
  const uint lid = gl_LocalInvocationID.x, i = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * 256u + lid;
  if (i >= p.n) return;  // whole workgroups (n a multiple of 256)
  const uint heads = 256u / p.group, head = lid / p.group;
  const float xv = x[i];
  for (uint h = 0u; h < heads; ++h) {
    const float s = subgroupAdd(head == h ? xv * xv : 0.0);
    if (subgroupElect()) partial[h * gl_NumSubgroups + gl_SubgroupID] = s;
  }
  barrier();
  if (lid % p.group == 0u) {
    float total = 0.0;
    for (uint s = 0u; s < gl_NumSubgroups; ++s) total += partial[head * gl_NumSubgroups + s];
    head_scale[head] = inversesqrt(total / float(p.group) + p.eps);
  }
  barrier();
  const float wi = p.has_weight != 0u ? w[lid % p.group] + p.offset : 1.0;
  const float yv = x[i] * head_scale[head] * wi;
  y[i] = yv;
  const float g = z[i];
  const float v = g / (1.0 + exp(-g)) * yv;
  o[i] = v;
  if (p.q8k_stride == 0u) return;  // no codes (the same for every invocation)
  q8k_write_block256(v, lid, (i / p.width) * p.q8k_stride, p.width, i % p.width);  // (q8k.glsl)
}
