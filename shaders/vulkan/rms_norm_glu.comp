#version 450
// A per-head RMSNorm and the SwiGLU that reads it, in one dispatch (a gated DeltaNet's output, then its
// gate): y = x / sqrt(mean over the head(x^2) + eps) * (w + offset), o = silu(z) * y, and with
// q8k_stride > 0 o's Q8_K codes for the product after it (q8k.glsl's layout, rows q8k_stride words apart). One workgroup per
// block of 256 elements holding whole heads (group divides 256; n a multiple of 256), the block's work
// in norm_glu.glsl (shared with delta_net.comp's NORM_GLU tail). Each head's sum of squares is formed
// as rms_norm.comp forms a head's (each subgroup's sum over the head's elements, zeros elsewhere, then
// the subgroups' sums in order), and y, o and the codes as rms_norm.comp and eltwise.comp's SwiGLU
// form them, so the values are those of the two dispatches it replaces.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_arithmetic : require
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer W { float w[]; };
layout(std430, binding = 2) readonly buffer Z { float z[]; };
layout(std430, binding = 3) writeonly buffer Y { float y[]; };
layout(std430, binding = 4) writeonly buffer O { float o[]; };
layout(std430, binding = 5) writeonly buffer Q { uint q[]; };
#define Q8K_BLOCK256_WRITER
#include "q8k.glsl"
layout(push_constant) uniform Params {
  uint n;           // elements (rows x width)
  uint width;       // floats per row (a multiple of 256)
  uint group;       // floats per head (divides 256; heads x subgroup size at least 256)
  uint has_weight;  // 0: no weight (w is not read)
  float eps;
  float offset;     // added to every weight
  uint q8k_stride;  // words per quantized row; 0: no codes (q is not written)
} p;

#define NG_X(i) x[i]
#define NG_W(i) w[i]
#define NG_Z(i) z[i]
#define NG_Y(i, v) y[i] = v
#define NG_O(i, v) o[i] = v
#include "norm_glu.glsl"

void main() {
  const uint lid = gl_LocalInvocationID.x, i = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * 256u + lid;
  if (i >= p.n) return;  // whole workgroups (n a multiple of 256)
  norm_glu_block(lid, i, p.group, p.has_weight != 0u, p.eps, p.offset, p.width, p.q8k_stride);
}
