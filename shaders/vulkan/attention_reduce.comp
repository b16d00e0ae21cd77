#version 450
//! variant rows ROWS_OUT
//! variant q8k Q8K_OUT
// The merge of flash-decoding's splits (after attention.comp with n_split > 1): for each query row
// (token t, head h) the splits' (m_s, l_s, acc_s) combine as M = max(m_s, sink), L = sum l_s e^(m_s - M)
// (+ e^(sink - M)), out = sum acc_s e^(m_s - M) / L. Splits with l = 0 saw no key and are skipped
// (their acc, never written, is read and not used). Reads n_split * (4 + head_dim) floats per row and
// writes head_dim (a multiple of 4). Each invocation merges its share of the splits in one pass
// (splits_merge), then the groups' parts are brought to the row's M and added in group order
// (groups_merge). A row whose split 0 has l < 0 was computed whole by attention.comp (its one_keys),
// which wrote out: it is read back, not merged (its codes are still written here). A token's rows are
// all merged or all read back.
//  - rows: one workgroup per row, head_dim / 4 invocations a group (4 dims each), 128 / that groups
//    over the splits. Grid: x * y >= n_rows.
//  - q8k: one workgroup per 256 outputs of a token (the heads they span, or part of one head): NG
//    groups of 64 (4 or 8) take every NG-th split each, 4 dims per invocation (NG times the loads in
//    flight of one group over all splits: 17.4 -> 8.1 us a layer for 64 splits of 32 query rows on an
//    H200 with 4, two passes over the splits then); the first group also writes
//    the token's outputs as Q8_K codes (q8k.glsl) for the K-quant product that reads them: the decode
//    step's quantization done without a dispatch of its own. Needs n_head * head_dim a multiple of 256. Grid: (n_head * head_dim / 256, n_tokens).
//  - rows with q8_words > 0 (head_dim a multiple of 32, subgroups of 8 or more): the
//    token's outputs also as the 32-element formats' activation codes (q8_act.glsl, format q8_format,
//    rows q8_words words apart) for the product that reads them: eight invocations a block.
// With tk > 0 (decode-sized steps whose attention blocks are one token's rows) a token's splits past
// its tiles (those attention.comp left empty: split s takes tiles s, s + n_split, ...) are not read:
// its position from the step buffer, its key range from its first key's cache block, as there. The
// same sums, since an empty split adds nothing.
// Bindings: 0 scratch: (m, l) [n_split][n_rows] then acc [n_split][n_rows][head_dim]; 1 sinks [n_head];
// 2 out [n_rows][head_dim] (= [n_tokens][n_head * head_dim]); 3 codes (q8k: rows q8k_stride words
// apart); 4 step (the part's header: word 0 n_past).
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#if defined(Q8K_OUT)
// NG split groups of 64 (the launcher: 8 where subgroups of 8 or more keep q8k_write_block's maxima
// within its 64 slots and 512 invocations fit, else 4).
layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 256;
const uint NG = WG / 64u;
shared float part_m[NG * 64u], part_l[NG * 64u];
shared vec4 part_a[NG * 64u];
#else
layout(local_size_x = 128) in;
shared float part_m[128], part_l[128];
shared vec4 part_a[128];
#endif
layout(std430, binding = 0) readonly buffer Scratch { float sc[]; };
layout(std430, binding = 0) readonly buffer Scratch2 { vec2 sc2[]; };
layout(std430, binding = 1) readonly buffer Sinks { float sinks[]; };
layout(std430, binding = 2) buffer Out { vec4 o4[]; };
layout(push_constant) uniform Params {
  uint n_split;
  uint n_rows;      // n_tokens * n_head
  uint n_head;
  uint head_dim;
  uint has_sinks;
  uint q8k_stride;  // q8k: words per quantized row
  uint q8_words;    // rows: words per row of activation codes; 0: none
  uint q8_format;
  uint tk;      // attention.comp's keys per tile where a token's empty splits are skipped; 0: all read
  uint window;  // sliding window (0: full causal)
} p;
layout(std430, binding = 4) readonly buffer Step { uint step[]; };
#include "kv_rows.glsl"
layout(std430, binding = 3) writeonly buffer Q { uint q[]; };
#if defined(Q8K_OUT)
#define Q8K_BLOCK_WRITER
#include "q8k.glsl"
#else
#include "div_rn.glsl"
#include "f16_rne.glsl"
#define Q8_ACT_WRITER
#include "q8_act.glsl"
#endif

// The splits are read CH at a time, every load of a chunk issued before any is used: a loop of one
// split per iteration waits out a memory round trip per split and pass (21 us per layer for 64 splits
// at 4,096 positions on an H200, where the attention itself took 32).
const uint CH = 8u;

// The splits first, first + step, ... of a row in one pass: the largest m of those that saw keys (m
// stays -1e38 where none did), and their l and acc (dims d..d+3) weighted by e^(m_s - m), added in
// split order to l and a. Each chunk's largest m is taken before its splits are added, and what was
// added before it rescaled by e^(m_old - m_new) where it grows (one memory round trip a chunk).
// Splits [ns, n_split) are empty and not read.
void splits_merge(uint row, uint d, uint first, uint step, uint ns, out float m, out float l, out vec4 a) {
  const uint acc0 = 2u * p.n_split * p.n_rows;
  m = -1.0e38;
  l = 0.0;
  a = vec4(0.0);
  for (uint s0 = first; s0 < ns; s0 += CH * step) {
    vec2 ml[CH];
    vec4 x[CH];  // an empty split's acc was never written: read, never used
    [[unroll]] for (uint k = 0u; k < CH; ++k) {
      const uint s = min(s0 + k * step, ns - 1u), at = acc0 + (s * p.n_rows + row) * p.head_dim + d;
      ml[k] = s0 + k * step < ns ? sc2[s * p.n_rows + row] : vec2(0.0);
      x[k] = vec4(sc[at], sc[at + 1u], sc[at + 2u], sc[at + 3u]);
    }
    float cm = m;
    [[unroll]] for (uint k = 0u; k < CH; ++k) {
      if (ml[k].y > 0.0) cm = max(cm, ml[k].x);
    }
    if (cm > m) {
      const float f = exp(m - cm);
      l *= f;
      a *= f;
      m = cm;
    }
    [[unroll]] for (uint k = 0u; k < CH; ++k) {
      if (ml[k].y > 0.0) {
        const float w = exp(ml[k].x - m);
        l += ml[k].y * w;
        a += x[k] * w;
      }
    }
  }
}

// The splits of token t's rows that saw keys: all but those past its tiles (with tk > 0).
uint active_splits(uint t) {
  if (p.tk == 0u) return p.n_split;
  const uint pos = step[0] + t, keys = pos + 1u - window_start(pos, p.window) / KV_BLOCK * KV_BLOCK;
  return min(p.n_split, (keys + p.tk - 1u) / p.tk);
}

// The sink's weight e^(sink - M) where the row has one (M raised to it), else 0.
float sink_weight(uint row, inout float m) {
  if (p.has_sinks == 0u) return 0.0;
  const float sink = sinks[row % p.n_head], m2 = max(m, sink);
  m = m2;
  return exp(sink - m2);
}

// The row's merge by ng groups of `width` invocations (group g, index `own` in it; lid its index in the
// workgroup, its slot of part_*): each group's splits merged (splits_merge; groups past ng none), their
// parts brought to the row's M (the sink's weight in group 0's) and added in group order. Group 0's
// invocations get the sums l and a; the others 0. Every invocation calls it (barriers).
void groups_merge(uint row, uint d, uint g, uint ng, uint width, uint own, uint lid, uint ns, out float l, out vec4 a) {
  float mg = -1.0e38;
  l = 0.0;
  a = vec4(0.0);
  if (g < ng) splits_merge(row, d, g, ng, ns, mg, l, a);
  part_m[lid] = mg;
  barrier();
  float m = part_m[own];
  for (uint i = 1u; i < ng; ++i) m = max(m, part_m[i * width + own]);
  const float sink_l = sink_weight(row, m);
  const float f = exp(mg - m);
  part_l[lid] = l * f + (g == 0u ? sink_l : 0.0);
  part_a[lid] = a * f;
  barrier();
  l = 0.0;
  a = vec4(0.0);
  if (g != 0u) return;
  l = part_l[own];
  a = part_a[own];
  for (uint i = 1u; i < ng; ++i) {
    l += part_l[i * width + own];
    a += part_a[i * width + own];
  }
}

void main() {
#if defined(Q8K_OUT)
  const uint lid = gl_LocalInvocationID.x, own = lid % 64u, g = lid / 64u, b = gl_WorkGroupID.x, t = gl_WorkGroupID.y;
  const uint width = p.n_head * p.head_dim, e = b * 256u + own * 4u;  // e: the first of 4 dims in the token's row
  const uint row = t * p.n_head + e / p.head_dim, d = e % p.head_dim;
  vec4 v = vec4(0.0);
  if (sc2[row].y < 0.0) {  // uniform: the token's rows were computed whole
    if (g == 0u) v = o4[(t * width + e) / 4u];
  } else {
    float l;
    vec4 a;
    groups_merge(row, d, g, NG, 64u, own, lid, active_splits(t), l, a);
    if (g == 0u) {
      v = a * (1.0 / l);
      o4[(t * width + e) / 4u] = v;
    }
  }
  q8k_write_block(v, own, t * p.q8k_stride, width, b, g == 0u);
#else
  const uint row = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
  if (row >= p.n_rows) return;
  // ND invocations a group, 4 dims each; the groups take every NGR-th split and add their parts in
  // group order through shared memory (the invocations past NGR groups only join the codes' shuffles).
  const uint nd = p.head_dim / 4u, ngr = 128u / nd;
  const uint lid = gl_LocalInvocationID.x, own = lid % nd, g = lid / nd, d = own * 4u;
  vec4 v = vec4(0.0);
  if (sc2[row].y < 0.0) {  // uniform: computed whole
    if (g == 0u) v = o4[(row * p.head_dim + d) / 4u];
  } else {
    float l;
    vec4 a;
    groups_merge(row, d, g, ngr, nd, own, lid, active_splits(row / p.n_head), l, a);
    if (g == 0u) {
      v = a * (1.0 / l);
      o4[(row * p.head_dim + d) / 4u] = v;
    }
  }
  if (p.q8_words != 0u) {  // uniform (every invocation: the codes' shuffles need the whole subgroup)
    const uint e = (row % p.n_head) * p.head_dim + d;  // the first of v's dims in the token's row
    q8_act_write(v, own % 8u, (row / p.n_head) * p.q8_words + (e / 32u) * 9u, p.q8_format, g == 0u);
  }
#endif
}
