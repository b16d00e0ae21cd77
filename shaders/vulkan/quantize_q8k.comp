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
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer X { vec4 x4[]; };
layout(std430, binding = 1) writeonly buffer Q { uint q[]; };
layout(push_constant) uniform Params {
  uint ncols;   // a multiple of 256
  uint stride;  // words per quantized row
} p;

#define Q8K_BLOCK_WRITER
#include "q8k.glsl"

void main() {
  const uint b = gl_WorkGroupID.x, row = gl_WorkGroupID.y;
  q8k_write_block(x4[(row * p.ncols + b * 256u) / 4u + gl_LocalInvocationID.x], gl_LocalInvocationID.x, row * p.stride,
                  p.ncols, b);
}
