#version 450
// Float to f16 (packHalf2x16: two halves per uint, the even element in the low half), for kernels that
// take an operand in f16 (the tensor-core matrix product's activations). One invocation per 4
// elements; n4 = elements / 4. Moves 6 bytes per element. Values beyond the f16 range become
// infinity: the caller decides whether its activations fit.
// Bindings: 0 x (vec4 view), 1 out (uvec2 view). Grid: ceil(n4 / 256) workgroups, split into y.
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer Xbuf { vec4 x[]; };
layout(std430, binding = 1) writeonly buffer Obuf { uvec2 o[]; };
layout(push_constant) uniform Params { uint n4; } p;

void main() {
  const uint i = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * 256u + gl_LocalInvocationID.x;
  if (i >= p.n4) return;
  const vec4 v = x[i];
  o[i] = uvec2(packHalf2x16(v.xy), packHalf2x16(v.zw));
}
