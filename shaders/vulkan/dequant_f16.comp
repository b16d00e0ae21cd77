#version 450
//! variants-by-type all
// Weight rows to half precision for the prefill GEMM: out[r][c] = dequant(W[row0 + r])[c] for rows
// [row0, row0 + nrows), as IEEE halves packed two per uint (packHalf2x16: column 2i in the low half,
// 2i + 1 in the high half), rows of ncols / 2 uints, packed, so neither side needs 16-bit storage. A
// variant per weight type (quant.glsl). One invocation per unit (4 to 16 elements), 64 per workgroup
// over a grid of ceil(nrows * ncols / unit / 64) workgroups, split in y past the device's limit.
// Bindings: 0 W (raw blocks), 1 out. Reads the rows once and writes 2 bytes per element.
#extension GL_GOOGLE_include_directive : require

layout(local_size_x = 64) in;

#include "quant.glsl"

layout(std430, binding = 1) writeonly restrict buffer Obuf { uvec2 o2[]; };
layout(push_constant) uniform Params {
  uint ncols;
  uint row_bytes;  // bytes per stored row
  uint row0;
  uint n;          // nrows * ncols / UE units
} p;

void main() {
  quant_init();
  const uint g = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * 64u + gl_LocalInvocationID.x;
  if (g >= p.n) return;
  const uint nunits = p.ncols / UE;
  const uint r = g / nunits, u = g - r * nunits;
  vec4 q[UR];
  float a[UR], b[UR];
  unit_load((p.row0 + r) * p.row_bytes, u, q, a, b);
  const uint ob = r * (p.ncols / 4u);
  [[unroll]] for (uint k = 0u; k < UR; ++k) {
#if defined(HAS_B)
    const vec4 v = q[k] * a[k] + b[k];
#else
    const vec4 v = q[k] * a[k];
#endif
    o2[ob + (unit_col(u, k) >> 2)] = uvec2(packHalf2x16(v.xy), packHalf2x16(v.zw));
  }
}
