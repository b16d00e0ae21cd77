#version 450
//! variants-by-type all
// Row lookup (graph Op::GetRows: the token embedding): out[t] = dequant(W[ids[t]]) * scale for
// n_tokens ids, out float32 rows [n_tokens][ncols], packed; a variant per weight type (quant.glsl).
// One invocation per unit (4 to 16 elements) of an output row, 64 per workgroup over a grid of
// ceil(n_tokens * ncols / unit / 64) workgroups, split in y past the device's limit.
// Bindings: 0 W (raw blocks), 1 ids (uint), 2 out. Moves each looked-up row once and writes 4 bytes
// per element.
#extension GL_GOOGLE_include_directive : require

layout(local_size_x = 64) in;

#include "quant.glsl"

layout(std430, binding = 1) readonly restrict buffer Ibuf { uint ids[]; };
layout(std430, binding = 2) writeonly restrict buffer Obuf { vec4 o4[]; };
layout(push_constant) uniform Params {
  uint ncols;
  uint row_bytes;  // bytes per stored row
  uint n;          // n_tokens * ncols / UE units
  float scale;
} p;

void main() {
  quant_init();
  const uint g = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * 64u + gl_LocalInvocationID.x;
  if (g >= p.n) return;
  const uint nunits = p.ncols / UE;
  const uint t = g / nunits, u = g - t * nunits;
  vec4 q[UR];
  float a[UR], b[UR];
  unit_load(ids[t] * p.row_bytes, u, q, a, b);
  const uint ob = t * (p.ncols / 4u);
  [[unroll]] for (uint k = 0u; k < UR; ++k) {
#if defined(HAS_B)
    o4[ob + (unit_col(u, k) >> 2)] = (q[k] * a[k] + b[k]) * p.scale;
#else
    o4[ob + (unit_col(u, k) >> 2)] = q[k] * a[k] * p.scale;
#endif
  }
}
