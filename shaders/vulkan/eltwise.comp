#version 450
//! variant add OP_ADD
//! variant mul OP_MUL
//! variant swiglu OP_SWIGLU
//! variant geglu OP_GEGLU
//! variant sigmoid_mul OP_SIGMOID_MUL
//! variant softcap OP_SOFTCAP
//! variant swiglu_clamped OP_SWIGLU_CLAMPED
// Element-wise ops (one variant per OP_* define): out[i] = f(a[i], b[i]) over n elements, one
// invocation per element. b is read as b[(i / a_width) * b_row_stride + i % b_width] so a one-column b
// (b_width = 1) broadcasts one value per row (the per-token gates) and b_row_stride = 0 one row of b to
// every row (biases, scale vectors). Moves 12 bytes per element.
//   OP_ADD a + b   OP_MUL a * b   OP_SWIGLU silu(a) * b   OP_GEGLU gelu_tanh(a) * b
//   OP_SIGMOID_MUL a * sigmoid(b)   OP_SOFTCAP cap * tanh(a / cap)   OP_SWIGLU_CLAMPED (GPT-OSS)
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 1) readonly buffer B { float b[]; };
layout(std430, binding = 2) writeonly buffer O { float o[]; };
layout(push_constant) uniform Params {
  uint n;
  uint a_width;
  uint b_width;
  uint b_row_stride;  // floats between rows of b: b_width, or 0 when every row of a reads the same b row
  float p0;  // OP_SOFTCAP: cap; OP_SWIGLU_CLAMPED: alpha
  float p1;  // OP_SWIGLU_CLAMPED: limit
} p;

void main() {
  const uint i = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * 256u + gl_LocalInvocationID.x;
  if (i >= p.n) return;
  const float x = a[i];
#if !defined(OP_SOFTCAP)
  const float y = b[(i / p.a_width) * p.b_row_stride + (p.b_width == 1u ? 0u : i % p.a_width)];
#endif
#if defined(OP_ADD)
  o[i] = x + y;
#elif defined(OP_MUL)
  o[i] = x * y;
#elif defined(OP_SWIGLU)
  o[i] = x / (1.0 + exp(-x)) * y;
#elif defined(OP_GEGLU)
  o[i] = 0.5 * x * (1.0 + tanh(0.79788456080286535588 * x * (1.0 + 0.044715 * x * x))) * y;
#elif defined(OP_SIGMOID_MUL)
  o[i] = x / (1.0 + exp(-y));
#elif defined(OP_SOFTCAP)
  o[i] = p.p0 * tanh(x / p.p0);
#elif defined(OP_SWIGLU_CLAMPED)
  const float g = min(x, p.p1), u = clamp(y, -p.p1, p.p1);
  o[i] = g / (1.0 + exp(-p.p0 * g)) * (u + 1.0);
#else
#error "define one OP_*"
#endif
}
