#version 450
//! variant plain ROPE_PLAIN
//! variant norm NORM
//! variant store_f16 STORE_F16
//! variant store_f32 STORE_F32
//! variant norm_store_f16 NORM,STORE_F16
//! variant norm_store_f32 NORM,STORE_F32
// Rotary embedding of whole heads, with the ops around it that decode would otherwise dispatch one
// after the other (each a wait for the one before):
//  - NORM: the per-head RMSNorm before the rotation (q and k norms of Qwen3 and Gemma): the head's
//    squares summed in float as rms_norm.comp's float variant does, y = x * scale * (w + offset);
//  - STORE_F16 / STORE_F32: the KV-cache append of kv_store.comp for the rotated k and the step's v
//    (positions n_past + t, at cache_row(n_past + t): kv_rows.glsl; halves rounded to nearest even).
// The rotation is rope.comp's (the host's cos/sin table per token, normal or NeoX pairs, dims from
// n_rot on pass through). One workgroup of 64 per (head, token); the head is staged in shared memory
// (head_dim up to 512).
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "f16_rne.glsl"
#include "rope_pair.glsl"
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer CS { float cs[]; };  // [n_tokens][n_rot]: cos, sin per pair
layout(std430, binding = 2) writeonly buffer O { float o[]; };
layout(std430, binding = 3) readonly buffer W { float w[]; };  // NORM: head_dim weights
layout(std430, binding = 4) readonly buffer V { float v[]; };  // STORE: the step's v rows
#if defined(STORE_F32)
layout(std430, binding = 5) writeonly buffer KC { float kc[]; };
layout(std430, binding = 6) writeonly buffer VC { float vc[]; };
#else
layout(std430, binding = 5) writeonly buffer KC { uint kc[]; };
layout(std430, binding = 6) writeonly buffer VC { uint vc[]; };
#endif
layout(std430, binding = 7) readonly buffer Step { uint step[]; };  // word 0: n_past; the block table
#if defined(STORE_F16) || defined(STORE_F32)
#include "kv_rows.glsl"
#endif
layout(push_constant) uniform Params {
  uint head_dim;
  uint n_rot;
  uint neox;        // 1: NeoX pairs
  uint has_weight;  // NORM: 0 without a weight
  float eps;
  float offset;
} p;

shared float head[512];
shared float rotated[512];
shared float partial[64];

void main() {
  const uint lid = gl_LocalInvocationID.x, h = gl_WorkGroupID.x, t = gl_WorkGroupID.y;
  const uint width = gl_NumWorkGroups.x * p.head_dim, base = t * width + h * p.head_dim;
  float s = 0.0;
  for (uint e = lid; e < p.head_dim; e += 64u) {
    const float xe = x[base + e];
    head[e] = xe;
    s += xe * xe;
  }
#if defined(NORM)
  s = subgroupAdd(s);
  if (subgroupElect()) partial[gl_SubgroupID] = s;
  barrier();
  float total = 0.0;
  for (uint i = 0u; i < gl_NumSubgroups; ++i) total += partial[i];
  const float scale = inversesqrt(total / float(p.head_dim) + p.eps);
  for (uint e = lid; e < p.head_dim; e += 64u) {
    const float we = p.has_weight != 0u ? w[e] + p.offset : 1.0;
    head[e] = head[e] * scale * we;
  }
#endif
  barrier();
  for (uint d = lid; d < p.head_dim; d += 64u) {
    float r = head[d];
    if (d < p.n_rot) {
      const RopePair q = rope_pair(d, p.n_rot, p.neox != 0u);
      const float c = cs[t * p.n_rot + 2u * q.i], sn = cs[t * p.n_rot + 2u * q.i + 1u];
      r = q.first ? head[d] * c - head[q.partner] * sn : head[q.partner] * sn + head[d] * c;
    }
    o[base + d] = r;
    rotated[d] = r;
  }
#if defined(STORE_F16) || defined(STORE_F32)
  barrier();
  const uint row = cache_row(step[0] + t) * width + h * p.head_dim;  // the cache row's first element of this head
#if defined(STORE_F32)
  for (uint d = lid; d < p.head_dim; d += 64u) {
    kc[row + d] = rotated[d];
    vc[row + d] = v[base + d];
  }
#else
  for (uint j = lid; j < p.head_dim / 2u; j += 64u) {
    kc[row / 2u + j] = pack_half2_rne(vec2(rotated[2u * j], rotated[2u * j + 1u]));
    vc[row / 2u + j] = pack_half2_rne(vec2(v[base + 2u * j], v[base + 2u * j + 1u]));
  }
#endif
#endif
}
