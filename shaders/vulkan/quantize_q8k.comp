#version 450
// Activations quantized as the CPU backend quantizes them for its K-quant dot products (quant/dot.h:
// Q2_K..Q6_K and IQ4_XS pair with Q8_K): per block of 256 floats d = max|x| / 127 (NaN skipped),
// codes round(x / d) to nearest even, clamped to ±127, and the sum of each 16 codes. mul_mv_k then
// sums the same integers the CPU sums.
//
// Rows in q8k.glsl's layout, `stride` words apart. One workgroup of 64 per block (grid x: blocks of a
// row, y: rows), 4 floats per invocation.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#include "q8k.glsl"
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer X { vec4 x4[]; };
layout(std430, binding = 1) writeonly buffer Q { uint q[]; };
layout(push_constant) uniform Params {
  uint ncols;   // a multiple of 256
  uint stride;  // words per quantized row
} p;

shared uint part_max[64];

void main() {
  const uint lid = gl_LocalInvocationID.x, b = gl_WorkGroupID.x, row = gl_WorkGroupID.y;
  const vec4 v = x4[(row * p.ncols + b * 256u) / 4u + lid];
  uint m = subgroupMax(max(max(q8k_abs_bits(v.x), q8k_abs_bits(v.y)), max(q8k_abs_bits(v.z), q8k_abs_bits(v.w))));
  if (subgroupElect()) part_max[gl_SubgroupID] = m;
  barrier();
  for (uint i = 0u; i < gl_NumSubgroups; ++i) m = max(m, part_max[i]);
  float id;
  const float d = q8k_scale(m, id);
  const ivec4 c = ivec4(q8k_code(v.x, id), q8k_code(v.y, id), q8k_code(v.z, id), q8k_code(v.w, id));
  const uint base = row * p.stride;
  q[base + b * 64u + lid] = q8k_pack(c);
  int s = c.x + c.y + c.z + c.w;  // 16 codes: 4 invocations
  s += subgroupShuffleXor(s, 1u);
  s += subgroupShuffleXor(s, 2u);
  if ((lid & 3u) == 0u) q[base + p.ncols / 4u + b * 16u + lid / 4u] = uint(s);
  if (lid == 0u) q[base + p.ncols / 4u + p.ncols / 16u + b] = floatBitsToUint(d);
}
