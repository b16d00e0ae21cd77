#version 450
//! variant add OP_ADD
//! variant mul OP_MUL
//! variant swiglu OP_SWIGLU
//! variant geglu OP_GEGLU
//! variant sigmoid_mul OP_SIGMOID_MUL
//! variant sigmoid_mul_add OP_SIGMOID_MUL,ADD_AFTER
//! variant softcap OP_SOFTCAP
//! variant swiglu_clamped OP_SWIGLU_CLAMPED
// Element-wise ops (one variant per OP_* define): out[i] = f(a[i], b[i]) over n elements, one
// invocation per element. b is read as b[(i / a_width) * b_row_stride + i % b_width] so a one-column b
// (b_width = 1) broadcasts one value per row (the per-token gates) and b_row_stride = 0 one row of b to
// every row (biases, scale vectors). Moves 12 bytes per element.
//   OP_ADD a + b   OP_MUL a * b   OP_SWIGLU silu(a) * b   OP_GEGLU gelu_tanh(a) * b
//   OP_SIGMOID_MUL a * sigmoid(b)   OP_SOFTCAP cap * tanh(a / cap)   OP_SWIGLU_CLAMPED (GPT-OSS)
//
// ADD_AFTER (with OP_SIGMOID_MUL): the add that follows too, s[i] = c[i] + out[i] (bindings 4 c, 5
// s), the same two roundings as two dispatches (a shared expert's gated output added to the experts').
//
// With q8k_stride > 0 the result is also quantized to Q8_K (q8k.glsl's layout, rows q8k_stride words
// apart in q) for the K-quant product that reads it (the down projection after a GLU): a workgroup is
// then one block of 256, so a_width and n must be multiples of 256. With q8_words > 0 it is also
// quantized as quantize_q8.comp quantizes the 32-element formats' activations (q8_format 0: ACT_Q8_0,
// 1: ACT_Q8_1; rows q8_words words apart in q, the same bytes; q8_act.glsl): a workgroup's 256
// values go through shared memory to 64 invocations, 4 of a block's 32 each. a_width a multiple of 32;
// subgroups of 8 or more.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_shuffle : require
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 1) readonly buffer B { float b[]; };
layout(std430, binding = 2) writeonly buffer O { float o[]; };
layout(std430, binding = 3) writeonly buffer Q { uint q[]; };
#define Q8K_BLOCK256_WRITER
#include "q8k.glsl"
#include "f16_rne.glsl"
#define Q8_ACT_WRITER
#include "q8_act.glsl"
shared float vals[256];
#if defined(ADD_AFTER)
layout(std430, binding = 4) readonly buffer C { float c[]; };
layout(std430, binding = 5) writeonly buffer S { float s[]; };
#endif
layout(push_constant) uniform Params {
  uint n;
  uint a_width;
  uint b_width;
  uint b_row_stride;  // floats between rows of b: b_width, or 0 when every row of a reads the same b row
  float p0;  // OP_SOFTCAP: cap; OP_SWIGLU_CLAMPED: alpha
  float p1;  // OP_SWIGLU_CLAMPED: limit
  uint q8k_stride;  // words per quantized row; 0: no codes (q is not written)
  uint q8_words;    // words per row of 32-element activation codes; 0: none
  uint q8_format;
} p;

float value(uint i) {
  const float x = a[i];
#if !defined(OP_SOFTCAP)
  const float y = b[(i / p.a_width) * p.b_row_stride + (p.b_width == 1u ? 0u : i % p.a_width)];
#endif
#if defined(OP_ADD)
  return x + y;
#elif defined(OP_MUL)
  return x * y;
#elif defined(OP_SWIGLU)
  return x / (1.0 + exp(-x)) * y;
#elif defined(OP_GEGLU)
  return 0.5 * x * (1.0 + tanh(0.79788456080286535588 * x * (1.0 + 0.044715 * x * x))) * y;
#elif defined(OP_SIGMOID_MUL)
  precise const float r = x / (1.0 + exp(-y));  // (precise: rms_norm_row.comp's gated add rounds it alike)
  return r;
#elif defined(OP_SOFTCAP)
  return p.p0 * tanh(x / p.p0);
#elif defined(OP_SWIGLU_CLAMPED)
  const float g = min(x, p.p1), u = clamp(y, -p.p1, p.p1);
  return g / (1.0 + exp(-p.p0 * g)) * (u + 1.0);
#else
#error "define one OP_*"
#endif
}

void main() {
  const uint lid = gl_LocalInvocationID.x, i = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * 256u + lid;
  if (p.q8_words != 0u) {  // uniform
    float v = 0.0;
    if (i < p.n) {
      v = value(i);
      o[i] = v;
    }
    vals[lid] = v;
    barrier();
    // Invocation lid < 64: word lid % 8 of block lid / 8 of the workgroup's eight.
    const uint l = lid % 64u, e = i - lid + 4u * l;  // its first element
    const vec4 x = vec4(vals[4u * l], vals[4u * l + 1u], vals[4u * l + 2u], vals[4u * l + 3u]);
    q8_act_write(x, l % 8u, (e / p.a_width) * p.q8_words + (e % p.a_width) / 32u * 9u, p.q8_format, lid < 64u && e < p.n);
    return;
  }
  if (p.q8k_stride == 0u) {
    if (i < p.n) {
      const float v = value(i);
      o[i] = v;
#if defined(ADD_AFTER)
      precise const float t = c[i] + v;
      s[i] = t;
#endif
    }
    return;
  }
  // One block per workgroup (q8k.glsl).
  if (i >= p.n) return;  // whole workgroups (n a multiple of 256)
  const float v = value(i);
  o[i] = v;
  q8k_write_block256(v, lid, (i / p.a_width) * p.q8k_stride, p.a_width, i % p.a_width);
}
