#version 450
//! variant f32 VEC=1
//! variant vec4 VEC=4
// Strided row copy for the graph's Split, Concat and SelectLast:
//   out[t * out_stride + out_offset + g * piece + i] = in[(t + in_row0) * in_stride + in_offset + g * group_stride + i]
// for t < n_tokens, g < n_groups, i < piece. One invocation per VEC floats (vec4 when every stride,
// offset and piece is a multiple of 4: 16-byte loads and stores; all sizes below are then in vec4s).
// Moves 8 bytes per float. Bindings: 0 in, 1 out. Grid: x * y workgroups of 256 over n elements.
layout(local_size_x = 256) in;
#if VEC == 4
#define T vec4
#else
#define T float
#endif
layout(std430, binding = 0) readonly buffer I { T src[]; };
layout(std430, binding = 1) writeonly buffer O { T dst[]; };
layout(push_constant) uniform Params {
  uint n;  // n_tokens * n_groups * piece
  uint in_row0;
  uint in_stride;
  uint in_offset;
  uint group_stride;
  uint n_groups;
  uint piece;
  uint out_stride;
  uint out_offset;
} p;

void main() {
  const uint e = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * 256u + gl_LocalInvocationID.x;
  if (e >= p.n) return;
  const uint i = e % p.piece, tg = e / p.piece;
  const uint g = tg % p.n_groups, t = tg / p.n_groups;
  dst[t * p.out_stride + p.out_offset + g * p.piece + i] =
      src[(t + p.in_row0) * p.in_stride + p.in_offset + g * p.group_stride + i];
}
