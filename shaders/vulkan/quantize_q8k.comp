#version 450
// Activations quantized as the CPU backend quantizes them for its K-quant dot products (quant/dot.h:
// Q2_K..Q6_K and IQ4_XS pair with Q8_K): per block of 256 floats d = max|x| / 127 (NaN skipped),
// codes round(x / d) to nearest even, clamped to ±127, and the sum of each 16 codes. mul_mv_k then
// sums the same integers the CPU sums.
//
// Layout of a quantized row (q8k.glsl, `stride` words apart): ncols / 4 words of codes (int8,
// little-endian), ncols / 16 words of 16-code sums (int32), ncols / 256 words of d (float). One
// workgroup of 64 per block (grid x: blocks of a row, y: rows), 4 floats per invocation.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#include "div_rn.glsl"
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
  // max |x| over the block as bits (non-negative floats order as their bits), NaN as 0.
  uvec4 bits = floatBitsToUint(v) & 0x7fffffffu;
  bits = mix(bits, uvec4(0u), greaterThan(bits, uvec4(0x7f800000u)));
  uint m = subgroupMax(max(max(bits.x, bits.y), max(bits.z, bits.w)));
  if (subgroupElect()) part_max[gl_SubgroupID] = m;
  barrier();
  for (uint i = 0u; i < gl_NumSubgroups; ++i) m = max(m, part_max[i]);
  const float d = div_rn(uintBitsToFloat(m), 127.0);
  const float id = d != 0.0 ? div_rn(1.0, d) : 0.0;
  precise const vec4 scaled = v * id;  // rounded before the code is (no fused multiply-add)
  const ivec4 c = ivec4(roundEven(clamp(scaled, vec4(-127.0), vec4(127.0))));
  const uint base = row * p.stride;
  q[base + b * 64u + lid] = (uint(c.x) & 0xffu) | ((uint(c.y) & 0xffu) << 8) | ((uint(c.z) & 0xffu) << 16) | (uint(c.w) << 24);
  int s = c.x + c.y + c.z + c.w;  // 16 codes: 4 invocations
  s += subgroupShuffleXor(s, 1u);
  s += subgroupShuffleXor(s, 2u);
  if ((lid & 3u) == 0u) q[base + p.ncols / 4u + b * 16u + lid / 4u] = uint(s);
  if (lid == 0u) q[base + p.ncols / 4u + p.ncols / 16u + b] = floatBitsToUint(d);
}
