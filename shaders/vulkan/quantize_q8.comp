#version 450
// Activations quantized as the CPU backend quantizes them before its integer dot products (quant/dot.h:
// weights of the Q8_0 family pair with Q8_0 activations): per block of 32 floats d = max|x| / 127,
// codes round(x / d) clamped to ±127 (halves away from zero), d kept as the fp16 the CPU stores. The
// product with Q8_0 weights then sums the same integers the CPU sums, so both backends pick the same
// greedy tokens. Output per block: 8 words of codes (little-endian int8) and the float value of d.
// One invocation per block; 36 bytes written per 128 read.
#extension GL_GOOGLE_include_directive : require
#include "div_rn.glsl"
#include "f16_rne.glsl"
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Q { uint q[]; };
layout(push_constant) uniform Params { uint n_blocks; } p;

int code(precise float v) {
  v = clamp(v, -127.0, 127.0);
  precise const float t = trunc(v), f = v - t;
  return int(t + (f >= 0.5 ? 1.0 : 0.0) - (f <= -0.5 ? 1.0 : 0.0));
}

void main() {
  const uint b = gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 64u + gl_GlobalInvocationID.x;
  if (b >= p.n_blocks) return;
  float v[32];
  float amax = 0.0;
  for (uint j = 0u; j < 32u; ++j) {
    v[j] = x[b * 32u + j];
    amax = max(amax, abs(v[j]));
  }
  const float d = div_rn(amax, 127.0);
  const float id = d != 0.0 ? div_rn(1.0, d) : 0.0;
  for (uint w = 0u; w < 8u; ++w) {
    uint packed = 0u;
    for (uint k = 0u; k < 4u; ++k) {
      precise const float scaled = v[4u * w + k] * id;  // rounded before code() (no fused multiply-add)
      packed |= (uint(code(scaled)) & 0xffu) << (8u * k);
    }
    q[b * 9u + w] = packed;
  }
  q[b * 9u + 8u] = floatBitsToUint(unpackHalf2x16(half_rne(d)).x);
}
