#version 450
//! variant f32 VEC=1
//! variant vec4 VEC=4
// Mixture-of-experts combine (graph Op::MoE's last step): out[t][i] = sum_k weights[t][k] * y[t][k][i],
// y holding the n_used experts' outputs of each token in slot order [n_tokens][n_used][width]. One
// invocation per VEC outputs (vec4: width % 4 == 0, the usual case, for 16-byte loads); the k weights
// of a token are the same for all its invocations (cached). Moves 4 * (n_used + 1) bytes per output.
// Bindings: 0 y, 1 weights [n_tokens][n_used], 2 out [n_tokens][width]. Grid: x * y workgroups of 256.
layout(local_size_x = 256) in;
#if VEC == 4
#define T vec4
#else
#define T float
#endif
layout(std430, binding = 0) readonly buffer Y { T y[]; };
layout(std430, binding = 1) readonly buffer Wt { float weights[]; };
layout(std430, binding = 2) writeonly buffer O { T o[]; };
layout(push_constant) uniform Params {
  uint width;   // in units of T
  uint n_used;
  uint n;       // n_tokens * width
} p;

void main() {
  const uint e = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * 256u + gl_LocalInvocationID.x;
  if (e >= p.n) return;
  const uint t = e / p.width, i = e - t * p.width;
  T acc = T(0.0);
  for (uint k = 0u; k < p.n_used; ++k) acc += weights[t * p.n_used + k] * y[(t * p.n_used + k) * p.width + i];
  o[e] = acc;
}
