#version 450
// The bandwidth probe behind the roofline (Context::copy_bandwidth_gbs): copies n 16-byte words,
// each invocation striding over the buffer by the whole grid, so every byte is read once and written
// once with wide, coalesced accesses, as a well-made kernel would move them.
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer A { uvec4 a[]; };
layout(std430, binding = 1) writeonly buffer B { uvec4 b[]; };
layout(push_constant) uniform Params { uint n; } p;

void main() {
  const uint stride = gl_NumWorkGroups.x * 256u;
  for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride) b[i] = a[i];
}
