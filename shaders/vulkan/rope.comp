#version 450
// Rotary position embedding (graph Op::Rope) with the angles' cos and sin supplied per token by the
// host (the CPU backend's table, so both backends rotate by the same values): one invocation per
// element of a [n_tokens][n_head * head_dim] row block. Pairs are (2i, 2i+1) in the normal form,
// (i, i + n_rot/2) in the NeoX form; dims from n_rot on pass through. 8 bytes per element plus the
// table (n_rot floats per token).
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer CS { float cs[]; };  // [n_tokens][n_rot]: cos, sin per pair
layout(std430, binding = 2) writeonly buffer O { float o[]; };
layout(push_constant) uniform Params {
  uint width;     // n_head * head_dim
  uint head_dim;
  uint n_rot;
  uint neox;      // 1: NeoX pairs
  uint n;         // width * n_tokens
} p;

void main() {
  const uint e = gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 256u + gl_GlobalInvocationID.x;
  if (e >= p.n) return;
  const uint t = e / p.width, d = (e % p.width) % p.head_dim;
  if (d >= p.n_rot) {
    o[e] = x[e];
    return;
  }
  const uint half_rot = p.n_rot / 2u;
  uint i, partner;
  bool first;
  if (p.neox != 0u) {
    first = d < half_rot;
    i = first ? d : d - half_rot;
    partner = first ? e + half_rot : e - half_rot;
  } else {
    first = (d & 1u) == 0u;
    i = d >> 1;
    partner = first ? e + 1u : e - 1u;
  }
  const float c = cs[t * p.n_rot + 2u * i], s = cs[t * p.n_rot + 2u * i + 1u];
  o[e] = first ? x[e] * c - x[partner] * s : x[partner] * s + x[e] * c;
}
