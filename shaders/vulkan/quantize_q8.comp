#version 450
//! variant 0 ACT_Q8_0
//! variant 1 ACT_Q8_1
// Activations quantized as the CPU backend quantizes them before its integer dot products (quant/dot.h:
// Q4_0, Q5_0, Q8_0, IQ4_NL and MXFP4 weights pair with Q8_0 activations, Q4_1 and Q5_1 with Q8_1): per
// block of 32 floats d = max|x| / 127, codes round(x / d) clamped to ±127 (halves away from zero), d
// kept as the fp16 the CPU stores; Q8_1 also keeps s = d * (the sum of the codes) as an fp16, from
// the unrounded d, as quant::quantize_activation does. The products (mul_mv_q8.comp) then sum the same
// integers the CPU sums, so both backends pick the same greedy tokens. Output per block, 36 bytes:
//   ACT_Q8_0: 8 words of codes (little-endian int8), then the float value of d;
//   ACT_Q8_1: the CPU's BlockQ8_1 bytes: halves d and s (one word), then 8 words of codes.
// One invocation per block; 36 bytes written per 128 read.
#extension GL_GOOGLE_include_directive : require
#include "div_rn.glsl"
#include "f16_rne.glsl"
#include "q8_act.glsl"
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Q { uint q[]; };
layout(push_constant) uniform Params { uint n_blocks; } p;

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
#if defined(ACT_Q8_1)
  const uint codes = b * 9u + 1u;
#else
  const uint codes = b * 9u;
#endif
  int sum = 0;
  for (uint w = 0u; w < 8u; ++w) q[codes + w] = q8_pack4(vec4(v[4u * w], v[4u * w + 1u], v[4u * w + 2u], v[4u * w + 3u]), id, sum);
#if defined(ACT_Q8_1)
  precise const float ds = d * float(sum);  // exact sum; one rounding, as the CPU's float product
  q[b * 9u] = half_rne(d) | (half_rne(ds) << 16);
#else
  q[b * 9u + 8u] = floatBitsToUint(unpackHalf2x16(half_rne(d)).x);
#endif
}
