#version 450
//! variant rows ROWS_OUT
//! variant q8k Q8K_OUT
// The merge of flash-decoding's splits (after attention.comp with n_split > 1): for each query row
// (token t, head h) the splits' (m_s, l_s, acc_s) combine as M = max(m_s, sink), L = sum l_s e^(m_s - M)
// (+ e^(sink - M)), out = sum acc_s e^(m_s - M) / L. Splits with l = 0 saw no key and are skipped
// (their acc is never read). Reads (n_split * 2 + live splits * head_dim) floats per row and writes
// head_dim (a multiple of 4).
//  - rows: one workgroup per row, 4 head dims per invocation. Grid: x * y >= n_rows.
//  - q8k: one workgroup of 64 per 256 outputs of a token (the heads they span, or part of one head),
//    4 dims per invocation, which also writes the token's outputs as Q8_K codes (q8k.glsl) for the
//    K-quant product that reads them: the decode step's quantization done without a dispatch of its
//    own. Needs n_head * head_dim a multiple of 256. Grid: (n_head * head_dim / 256, n_tokens).
// Bindings: 0 scratch: (m, l) [n_split][n_rows] then acc [n_split][n_rows][head_dim]; 1 sinks [n_head];
// 2 out [n_rows][head_dim] (= [n_tokens][n_head * head_dim]); q8k: 3 codes, rows q8k_stride words apart.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#if defined(Q8K_OUT)
layout(local_size_x = 64) in;
#else
layout(local_size_x = 128) in;
#endif
layout(std430, binding = 0) readonly buffer Scratch { float sc[]; };
layout(std430, binding = 0) readonly buffer Scratch2 { vec2 sc2[]; };
layout(std430, binding = 1) readonly buffer Sinks { float sinks[]; };
layout(std430, binding = 2) writeonly buffer Out { vec4 o4[]; };
layout(push_constant) uniform Params {
  uint n_split;
  uint n_rows;      // n_tokens * n_head
  uint n_head;
  uint head_dim;
  uint has_sinks;
  uint q8k_stride;  // q8k: words per quantized row
} p;
#if defined(Q8K_OUT)
layout(std430, binding = 3) writeonly buffer Q { uint q[]; };
#define Q8K_BLOCK_WRITER
#include "q8k.glsl"
#endif

// M and 1 / L of a row.
vec2 row_scale(uint row) {
  float m = -1.0e38;
  for (uint s = 0u; s < p.n_split; ++s) {
    const vec2 ml = sc2[s * p.n_rows + row];
    if (ml.y > 0.0) m = max(m, ml.x);
  }
  float sink_w = 0.0;
  if (p.has_sinks != 0u) {
    const float sink = sinks[row % p.n_head], m2 = max(m, sink);
    sink_w = exp(sink - m2);
    m = m2;
  }
  float l = sink_w;
  for (uint s = 0u; s < p.n_split; ++s) {
    const vec2 ml = sc2[s * p.n_rows + row];
    if (ml.y > 0.0) l += ml.y * exp(ml.x - m);
  }
  return vec2(m, 1.0 / l);
}

// Output dims d..d+3 of a row, given its row_scale.
vec4 merged(uint row, uint d, vec2 ms) {
  const uint acc0 = 2u * p.n_split * p.n_rows;
  vec4 a = vec4(0.0);
  for (uint s = 0u; s < p.n_split; ++s) {
    const vec2 ml = sc2[s * p.n_rows + row];
    if (ml.y > 0.0) {
      const uint at = acc0 + (s * p.n_rows + row) * p.head_dim + d;
      a += vec4(sc[at], sc[at + 1u], sc[at + 2u], sc[at + 3u]) * exp(ml.x - ms.x);
    }
  }
  return a * ms.y;
}

void main() {
#if defined(Q8K_OUT)
  const uint lid = gl_LocalInvocationID.x, b = gl_WorkGroupID.x, t = gl_WorkGroupID.y;
  const uint width = p.n_head * p.head_dim, e = b * 256u + lid * 4u;  // e: the first of 4 dims in the token's row
  const uint row = t * p.n_head + e / p.head_dim, d = e % p.head_dim;
  const vec2 ms = row_scale(row);
  const vec4 v = merged(row, d, ms);
  const uint at = t * width + e;
  o4[at / 4u] = v;
  q8k_write_block(v, lid, t * p.q8k_stride, width, b);
#else
  const uint row = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
  if (row >= p.n_rows) return;
  const vec2 ms = row_scale(row);
  for (uint d = gl_LocalInvocationID.x * 4u; d < p.head_dim; d += 512u) {
    const vec4 v = merged(row, d, ms);
    o4[(row * p.head_dim + d) / 4u] = v;
  }
#endif
}
