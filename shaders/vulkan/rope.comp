#version 450
// Rotary position embedding (graph Op::Rope) with the angles' cos and sin supplied per token by the
// host (the CPU backend's table, so both backends rotate by the same values): one invocation per
// element of a [n_tokens][n_head * head_dim] row block. Pairs are (2i, 2i+1) in the normal form,
// (i, i + n_rot/2) in the NeoX form; dims from n_rot on pass through. 8 bytes per element plus the
// table (n_rot floats per token).
#extension GL_GOOGLE_include_directive : require
#include "rope_pair.glsl"
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
  const RopePair q = rope_pair(d, p.n_rot, p.neox != 0u);
  const uint partner = e - d + q.partner;
  const float c = cs[t * p.n_rot + 2u * q.i], s = cs[t * p.n_rot + 2u * q.i + 1u];
  o[e] = q.first ? x[e] * c - x[partner] * s : x[partner] * s + x[e] * c;
}
