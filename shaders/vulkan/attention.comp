#version 450
//! variant f32 TYPE_F32
//! variant f16 TYPE_F16
//! variant q8_0 TYPE_Q8_0
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// Causal attention over one layer's KV cache (graph Op::Attention; CpuExecutable::attention is the
// reference): for query row (token t, head h), pos = n_past + t attends cache rows [lo, pos], lo =
// pos - window + 1 (>= 0) with a sliding window, else 0; kv head h / (n_head / n_head_kv); score =
// (q . k) * scale, then cap * tanh(score / cap) with a softcap; softmax (a head's sink, when given,
// is one more logit whose value row is zero); out = sum p_j v_j. One kernel for decode and prefill,
// FlashAttention-2's online softmax with flash-decoding's split of the key range (Dao 2023;
// Dao, Haziza, Massa, Sizov 2023):
//   - A workgroup takes NR query rows that read the same kv head (the GQA group's heads of one or more
//     tokens: rows i = t * G + g of kv head hk, G = n_head / n_head_kv), so a cache row is read once per
//     kv head, not once per q head, and one split of the union of those rows' key ranges (every
//     n_split-th tile of it). Split count
//     and grid are fixed at record time; n_past comes from the step buffer, so each workgroup derives
//     its key range at run time and loops over as many tiles as there are.
//   - Per tile of TK keys: the K tile is staged in shared memory as floats, DC head dims at a time;
//     the scores (NR x TK) are register tiles of RS rows x KS keys per invocation; each row's max is
//     a subgroup reduction across the NKT invocations that share the row (through shared memory only
//     where a subgroup is narrower than NKT); p = exp(s - m) goes to shared memory (4 keys a vec4),
//     and each score invocation adds its own p to its part of the row's l (the parts added once,
//     after the last tile); then each invocation scales and accumulates RV rows x CV dims of the
//     output with V read straight from the cache (consecutive invocations read consecutive dims of a
//     row; an F16 cache's halves held packed until used), VB rows of V at a time, the first VB issued
//     as soon as the tile's block table is known (they travel while the scores are computed). For a
//     decode step of qwen3-30b-a3b's heads on an H100 that is 170 registers (234 with V as floats and
//     l added by every output invocation; ZINC_VULKAN_PIPELINE_STATS prints them).
//   - One split: the workgroup writes out (applying the sink and 1 / l), and with q8k_stride > 0 also
//     its rows as Q8_K codes (q8k.glsl's layout, rows q8k_stride words apart) for the product that
//     reads them: its rows are then whole consecutive heads of one token, NR * HD a multiple of 256
//     and subgroups of at most 64 (the launcher checks), two blocks at a time by groups of 64
//     invocations, through Qs. That is quantize_q8k's arithmetic on the same floats without a
//     dispatch of its own (3.1 us a layer on an H100). With q8_words > 0 it writes the 32-element
//     formats' codes of its rows instead (q8_act.glsl, as attention_reduce.comp's merge writes them;
//     heads of a multiple of 32, subgroups of 8 or more): eight invocations a block of 32, through Qs.
//     Several: it writes (m, l) and the unnormalised acc per row to scratch and attention_reduce.comp
//     merges the splits.
//   - One split by the key count (one_keys > 0, decode-sized steps whose workgroups' rows are one
//     token's): a workgroup whose key range [k_lo, k_end) is at most one_keys keys long computes its
//     rows as one split does (split 0 walks every tile; the others write nothing) and writes out, and
//     (m, -1) as split 0's (m, l): the merge then takes out as it is. So a row is the same bits whatever
//     the split count it was recorded with, and a launcher that knows every row's range is that short
//     records one split and no merge.
// Bytes moved per workgroup: its key range of K and V once (kv head slice, cache type), the q rows,
// and the out or scratch rows. The score-row to invocation mapping is taken in subgroup order
// (gl_SubgroupID, gl_SubgroupInvocationID), so the reductions are right for any subgroup size, given
// full subgroups (128 is a multiple of every subgroup size).
// Bindings: 0 q [n_tokens][n_head * HD] floats; 1 K cache, 2 V cache: rows of kv_width in the cache
// type (TYPE_F32, TYPE_F16 packed halves, TYPE_Q8_0 GGUF blocks), position i of the sequence in row
// cache_row(i) (kv_rows.glsl); 3 sinks [n_head] floats; 4 step (the part's header: word 0 n_past, and
// its block table); 5 out [n_tokens][n_head * HD]; 6 scratch: (m, l) [n_split][n_tokens * n_head]
// then acc [n_split][n_tokens * n_head][HD]; 7 codes (q8k_stride or q8_words > 0).
// Grid: (n_split, ceil(n_tokens * G / NR), n_head_kv).
layout(local_size_x = 128) in;

layout(constant_id = 0) const uint HD = 128;  // head_dim, a multiple of 4, at most 512
layout(constant_id = 1) const uint NR = 4;    // query rows per workgroup (power of two)
layout(constant_id = 2) const uint TK = 32;   // keys per tile
layout(constant_id = 3) const uint DC = 128;  // head dims of K staged at once (divides HD, multiple of 4)
layout(constant_id = 4) const uint NKT = 32;  // invocations sharing a score row (power of two, divides 128)
layout(constant_id = 5) const uint CV = 4;    // output dims per invocation (1, 2 or 4; divides HD)
layout(constant_id = 6) const uint NVR = 4;   // output row groups (NVR * HD / CV <= 128)
layout(constant_id = 7) const uint VB = 8;    // V rows loaded at once (divides TK)
const uint NRT = 128 / NKT;                   // score row groups
const uint RS = NR / NRT;                     // score rows per invocation
const uint KS = TK / NKT;                     // score keys per invocation
const uint NVD = HD / CV;                     // output dim groups
const uint RV = NR / NVR;                     // output rows per invocation
const uint KSTRIDE = DC / 4 + 1;              // vec4s per staged K row (padded against bank conflicts)
const uint PSTRIDE4 = TK / 4u + 1u;           // vec4s per row of Ps (padded against bank conflicts)
const uint NKL = (TK * DC / 4u + 127u) / 128u;  // K loads per invocation per chunk

layout(std430, binding = 0) readonly buffer Q { vec4 q4[]; };
#if defined(TYPE_F32)
layout(std430, binding = 1) readonly buffer KC4 { vec4 kc4[]; };
layout(std430, binding = 1) readonly buffer KC2 { vec2 kc2[]; };
layout(std430, binding = 1) readonly buffer KC1 { float kc1[]; };
layout(std430, binding = 2) readonly buffer VC4 { vec4 vc4[]; };
layout(std430, binding = 2) readonly buffer VC2 { vec2 vc2[]; };
layout(std430, binding = 2) readonly buffer VC1 { float vc1[]; };
#elif defined(TYPE_F16)
layout(std430, binding = 1) readonly buffer KC2 { uvec2 kc2[]; };  // 4 halves
layout(std430, binding = 1) readonly buffer KC1 { uint kc1[]; };   // 2 halves
layout(std430, binding = 2) readonly buffer VC2 { uvec2 vc2[]; };
layout(std430, binding = 2) readonly buffer VC1 { uint vc1[]; };
#elif defined(TYPE_Q8_0)
layout(std430, binding = 1) readonly buffer KC1 { uint kc1[]; };
layout(std430, binding = 2) readonly buffer VC1 { uint vc1[]; };
#else
#error "define one TYPE_*"
#endif
layout(std430, binding = 3) readonly buffer Sinks { float sinks[]; };
layout(std430, binding = 4) readonly buffer Step { uint step[]; };
#include "kv_rows.glsl"
layout(std430, binding = 5) writeonly buffer Out { float o[]; };
layout(std430, binding = 6) writeonly buffer Scratch { float sc[]; };
layout(std430, binding = 6) writeonly buffer Scratch2 { vec2 sc2[]; };
layout(push_constant) uniform Params {
  uint n_tokens;
  uint n_head;
  uint n_head_kv;
  uint kv_width;   // elements per cache row (n_head_kv * HD)
  uint row_bytes;  // TYPE_Q8_0: bytes per cache row
  uint window;     // sliding window (0: full causal)
  uint n_split;
  uint has_sinks;
  float scale;
  float softcap;   // 0: none
  uint q8k_stride; // words per row of Q8_K codes (one split); 0: none
  uint one_keys;   // with n_split > 1: a workgroup of at most this many keys computes its rows as one split (0: none)
  uint q8_words;   // words per row of the 32-element formats' codes (one split); 0: none
  uint q8_format;  // their format: 0 ACT_Q8_0, 1 ACT_Q8_1
} p;
layout(std430, binding = 7) writeonly buffer Codes { uint q[]; };
#define Q8K_BLOCK_WRITER
#include "q8k.glsl"
#include "f16_rne.glsl"
#define Q8_ACT_WRITER
#include "q8_act.glsl"

shared vec4 Qs[NR * HD / 4];     // the rows' q, times scale
shared vec4 Ks[TK * KSTRIDE];    // K tile, DC dims
shared vec4 Ps[NR * PSTRIDE4];   // p of the tile, 4 keys a vec4 (read as such)
shared float Alpha[NR];          // exp(m_old - m_new) of the tile
shared float Mfin[NR], Lfin[NR];
shared float Red[RS * 128];      // per-subgroup row maxima, where a subgroup is narrower than NKT

const float MASKED = -1.0e38;    // a score outside the row's range (and m before any key)

// Cache element loads: CV (or 4) consecutive elements of row `row` from column `col` (a multiple of
// the count), as floats.
#if defined(TYPE_F32)
vec4 load4(bool v, uint row, uint col) {
  const uint e = row * p.kv_width + col;
  return v ? vc4[e >> 2] : kc4[e >> 2];
}
vec2 load2(bool v, uint row, uint col) {
  const uint e = row * p.kv_width + col;
  return v ? vc2[e >> 1] : kc2[e >> 1];
}
float load1(bool v, uint row, uint col) {
  const uint e = row * p.kv_width + col;
  return v ? vc1[e] : kc1[e];
}
#elif defined(TYPE_F16)
vec4 load4(bool v, uint row, uint col) {
  const uint e = row * p.kv_width + col;
  const uvec2 u = v ? vc2[e >> 2] : kc2[e >> 2];
  return vec4(unpackHalf2x16(u.x), unpackHalf2x16(u.y));
}
vec2 load2(bool v, uint row, uint col) {
  const uint e = row * p.kv_width + col;
  return unpackHalf2x16(v ? vc1[e >> 1] : kc1[e >> 1]);
}
float load1(bool v, uint row, uint col) {
  const uint e = row * p.kv_width + col;
  return unpackHalf2x16((v ? vc1[e >> 1] : kc1[e >> 1]) >> ((e & 1u) * 16u)).x;
}
#elif defined(TYPE_Q8_0)
// 34-byte blocks (fp16 d, 32 int8 codes); every block starts at an even byte.
uint word(bool v, uint i) { return v ? vc1[i] : kc1[i]; }
float block_d(bool v, uint row, uint col) {
  const uint off = row * p.row_bytes + (col >> 5) * 34u;
  return unpackHalf2x16(word(v, off >> 2) >> ((off & 2u) * 8u)).x;
}
uint code_off(uint row, uint col) { return row * p.row_bytes + (col >> 5) * 34u + 2u + (col & 31u); }
vec4 load4(bool v, uint row, uint col) {
  const uint off = code_off(row, col);  // even
  const uint w0 = word(v, off >> 2);
  const int c = int((off & 2u) == 0u ? w0 : (w0 >> 16) | (word(v, (off >> 2) + 1u) << 16));
  return block_d(v, row, col) *
         vec4(bitfieldExtract(c, 0, 8), bitfieldExtract(c, 8, 8), bitfieldExtract(c, 16, 8), bitfieldExtract(c, 24, 8));
}
vec2 load2(bool v, uint row, uint col) {
  const uint off = code_off(row, col);  // even
  const int c = int(word(v, off >> 2) >> ((off & 2u) * 8u));
  return block_d(v, row, col) * vec2(bitfieldExtract(c, 0, 8), bitfieldExtract(c, 8, 8));
}
float load1(bool v, uint row, uint col) {
  const uint off = code_off(row, col);
  return block_d(v, row, col) * float(bitfieldExtract(int(word(v, off >> 2) >> ((off & 3u) * 8u)), 0, 8));
}
#endif

// CV elements of V row `row` from column col as they are held until used (VRaw; v_float gives the
// floats, the first CV of the vec4 meaningful): an F16 cache's halves stay packed, half the registers
// of floats (VB rows of them are in flight an invocation).
#if defined(TYPE_F16)
#define VRaw uvec2
VRaw load_v(uint row, uint col) {
  const uint e = row * p.kv_width + col;
  if (CV == 4u) return vc2[e >> 2];
  if (CV == 2u) return uvec2(vc1[e >> 1], 0u);
  return uvec2(vc1[e >> 1] >> ((e & 1u) * 16u), 0u);
}
vec4 v_float(VRaw r) { return vec4(unpackHalf2x16(r.x), unpackHalf2x16(r.y)); }
#else
#define VRaw vec4
VRaw load_v(uint row, uint col) {
  if (CV == 4u) return load4(true, row, col);
  if (CV == 2u) return vec4(load2(true, row, col), 0.0, 0.0);
  return vec4(load1(true, row, col), 0.0, 0.0, 0.0);
}
vec4 v_float(VRaw r) { return r; }
#endif

// The invocation's RS score rows (row group rt), each reduced across the NKT invocations that hold it:
// the maximum, or with `sum` the sum (subgroups in order). Through Red where a subgroup is narrower
// than NKT: a barrier then, which every invocation reaches (NKT and the subgroup size are uniform).
void rows_reduce(inout float v[RS], uint rt, bool sum) {
  for (uint a = 0u; a < RS; ++a) {
    if (NKT >= gl_SubgroupSize) {
      v[a] = sum ? subgroupAdd(v[a]) : subgroupMax(v[a]);
    } else {
      for (uint off = 1u; off < NKT; off <<= 1) {
        const float o = subgroupShuffleXor(v[a], off);
        v[a] = sum ? v[a] + o : max(v[a], o);
      }
    }
  }
  if (NKT > gl_SubgroupSize) {
    const uint per = NKT / gl_SubgroupSize;
    if (gl_SubgroupInvocationID == 0u) {
      for (uint a = 0u; a < RS; ++a) Red[a * 128u + gl_SubgroupID] = v[a];
    }
    barrier();
    for (uint a = 0u; a < RS; ++a) {
      float r = Red[a * 128u + rt * per];
      for (uint i = 1u; i < per; ++i) r = sum ? r + Red[a * 128u + rt * per + i] : max(r, Red[a * 128u + rt * per + i]);
      v[a] = r;
    }
  }
}

// tanh without exp overflow for large |x|.
float tanh_safe(float x) {
  const float e = exp(-2.0 * abs(x));
  return sign(x) * (1.0 - e) / (1.0 + e);
}

// Key ranges start at a block's first key (keys before a row's own first are masked), so a tile of TK
// keys from key0 lies in NTB = TK / KV_BLOCK blocks; tb holds their table entries, entry t as
// table * KV_BLOCK - t * KV_BLOCK, so that key key0 + kk of the tile (kk < TK) is cache row tb[t] + kk,
// t = kk / KV_BLOCK (with one block per tile, tb[0] + kk: the address is the contiguous cache's plus a
// per-tile offset). Keys past k_end are clamped to the range's last key (written; their p is 0).
const uint NTB = TK / KV_BLOCK;
uint tile_row(uint tb[NTB], uint kk) {
  uint r = tb[0] + kk;
  for (uint t = 1u; t < NTB; ++t) r = kk >= t * KV_BLOCK ? tb[t] + kk : r;
  return r;
}

// First cache row visible at position pos.
uint first_key(uint pos) { return window_start(pos, p.window); }

// The rows' Q8_K codes from their outputs in Qs (row r's at Qs[r * HD / 4..]; every invocation calls
// it): block j of the workgroup's NR * HD consecutive outputs (from element e0 of token t's row) is
// Qs[64 j, 64 j + 64), taken by the group of 64 invocations j % 2 (by role, the index in subgroup
// order).
void write_codes(uint role, uint row0, uint hk, uint G) {
  barrier();
  const uint grp = role / 64u, l64 = role % 64u;
  const uint t = row0 / G, e0 = (hk * G + row0 % G) * HD, nb = NR * HD / 256u;
  for (uint j0 = 0u; j0 < nb; j0 += 2u) {
    if (j0 > 0u) barrier();  // q8k_part_max's readers of the blocks before
    const uint j = j0 + grp;
    q8k_write_block(j < nb ? Qs[j * 64u + l64] : vec4(0.0), l64, t * p.q8k_stride, p.n_head * HD, e0 / 256u + j, j < nb);
  }
}

// The rows' 32-element formats' codes (q8_act.glsl) from their outputs in Qs (as write_codes): block
// b of the workgroup's NR * HD outputs is Qs[8 b, 8 b + 8), taken by the eight invocations b % 16 of
// a pass (by role), and lands in its token's row at its head's place. Heads of a multiple of 32: no
// block straddles two rows.
void write_q8_codes(uint role, uint row0, uint hk, uint G, uint n_rows) {
  barrier();
  const uint nb = NR * HD / 32u, j = role % 8u;
  for (uint b0 = 0u; b0 < nb; b0 += 16u) {  // (uniform: every invocation takes part in the shuffles)
    const uint b = b0 + role / 8u, gi = row0 + b * 32u / HD;
    const bool live = b < nb && gi < n_rows;
    const uint e = (hk * G + gi % G) * HD + b * 32u % HD;  // the block's first element in its token's row
    q8_act_write(live ? Qs[b * 8u + j] : vec4(0.0), j, (gi / G) * p.q8_words + (e / 32u) * 9u, p.q8_format, live);
  }
}

void main() {
  const uint tid = gl_LocalInvocationIndex;
  const uint split = gl_WorkGroupID.x, blk = gl_WorkGroupID.y, hk = gl_WorkGroupID.z;
  const uint G = p.n_head / p.n_head_kv;
  const uint n_rows = p.n_tokens * G;    // query rows of this kv head
  const uint rows_all = p.n_tokens * p.n_head;
  const uint row0 = blk * NR;
  // The rows' q, times scale, loaded before n_past is known (they do not depend on it): their round
  // trip overlaps n_past's, and they go to Qs after the empty-split test.
  const uint NQL = (NR * HD / 4u + 127u) / 128u;
  vec4 ql[NQL];
  [[unroll]] for (uint m = 0u; m < NQL; ++m) {
    const uint i = tid + 128u * m, r = i / (HD / 4u), c = i % (HD / 4u), gi = row0 + r;
    ql[m] = i < NR * HD / 4u && gi < n_rows ? q4[((gi / G) * p.n_head + hk * G + gi % G) * (HD / 4u) + c] * p.scale : vec4(0.0);
  }
  const uint n_past = step[0];

  // The union of the rows' key ranges from the first key's block on [k_lo, k_end), in tiles of TK keys,
  // and this split's part of it: tiles split, split + n_split, ... (interleaved, the splits' shares
  // differ by at most a tile: on an H200 qwen3-30b-a3b tg64 at 16,384 positions 206.7 -> 211.0 tok/s
  // against runs of ceil(tiles / n_split) tiles each, qwen3-8b 209.9 -> 212.5; at 4,096 +0.2 / +0.7%).
  const uint last_row = min(row0 + NR, n_rows) - 1u;
  const uint k_end = n_past + last_row / G + 1u;  // exclusive
  const uint k_lo = first_key(n_past + row0 / G) / KV_BLOCK * KV_BLOCK;
  const bool one = p.n_split > 1u && p.one_keys != 0u && k_end - k_lo <= p.one_keys;  // uniform
  if (one && split > 0u) return;
  const uint nsp = one ? 1u : p.n_split;
  const uint k_begin = k_lo + split * TK;
  if (k_begin >= k_end) {
    // An empty split (short sequence): l = 0 tells the reduction to skip it.
    for (uint r = tid; r < NR; r += 128u) {
      const uint gi = row0 + r;
      if (gi < n_rows) sc2[split * rows_all + (gi / G) * p.n_head + hk * G + gi % G] = vec2(MASKED, 0.0);
    }
    return;
  }

  // Score role: RS rows (rt * RS + a) x KS keys (kt + b * NKT), rows' invocations adjacent in a subgroup.
  const uint role = gl_SubgroupID * gl_SubgroupSize + gl_SubgroupInvocationID;
  const uint kt = role % NKT, rt = role / NKT;
  // Output role: RV rows (rg * RV + a) x CV dims (dg * CV + c).
  const uint dg = tid % NVD, rg = tid / NVD;
  const bool v_on = rg < NVR;

  [[unroll]] for (uint m = 0u; m < NQL; ++m) {
    if (tid + 128u * m < NR * HD / 4u) Qs[tid + 128u * m] = ql[m];
  }

  int lo[RS], hi[RS];  // the score rows' visible keys (hi = -1: a padding row)
  // m_run: the rows' running maxima; l_part: the sum of p over this invocation's keys of them (at
  // m_run), added over the row's NKT invocations after the last tile: the output invocations only
  // scale and add V.
  float m_run[RS], l_part[RS];
  for (uint a = 0u; a < RS; ++a) {
    const uint gi = row0 + rt * RS + a;
    const uint pos = n_past + gi / G;
    hi[a] = gi < n_rows ? int(pos) : -1;
    lo[a] = int(first_key(pos));
    m_run[a] = MASKED;
    l_part[a] = 0.0;
  }
  float acc[RV * CV];
  for (uint i = 0u; i < RV * CV; ++i) acc[i] = 0.0;

  for (uint key0 = k_begin; key0 < k_end; key0 += nsp * TK) {
    // The tile's NTB blocks (key0 is a block's first key): table entries read once per tile.
    uint tb[NTB];
    for (uint i = 0u; i < NTB; ++i) tb[i] = (step[4u + min(key0 / KV_BLOCK + i, (k_end - 1u) / KV_BLOCK)] - i) * KV_BLOCK;
    // The first VB of this invocation's V rows of the tile, in flight from here (keys past k_end have
    // p = 0 and read the range's last row).
    const uint col = hk * HD + dg * CV;
    VRaw v[VB];
    [[unroll]] for (uint k = 0u; k < VB; ++k) {
      v[k] = v_on ? load_v(tile_row(tb, min(key0 + k, k_end - 1u) - key0), col) : VRaw(0);
    }
    float s[RS * KS];
    for (uint i = 0u; i < RS * KS; ++i) s[i] = 0.0;
    for (uint c0 = 0u; c0 < HD; c0 += DC) {
      if (c0 > 0u) barrier();  // the previous chunk's readers are done
      // Keys past k_end read the last row of the range instead (in the cache, written) and are masked.
      // Every load of the chunk is issued before the first store (one memory round trip, not NKL).
      vec4 kl[NKL];
      [[unroll]] for (uint m = 0u; m < NKL; ++m) {
        const uint i = min(tid + 128u * m, TK * DC / 4u - 1u), j = i / (DC / 4u), c = i % (DC / 4u);
        kl[m] = load4(false, tile_row(tb, min(key0 + j, k_end - 1u) - key0), hk * HD + c0 + 4u * c);
      }
      [[unroll]] for (uint m = 0u; m < NKL; ++m) {
        const uint i = tid + 128u * m;
        if (i < TK * DC / 4u) Ks[(i / (DC / 4u)) * KSTRIDE + i % (DC / 4u)] = kl[m];
      }
      barrier();
      for (uint d4 = 0u; d4 < DC / 4u; ++d4) {
        vec4 qv[RS];
        for (uint a = 0u; a < RS; ++a) qv[a] = Qs[(rt * RS + a) * (HD / 4u) + c0 / 4u + d4];
        for (uint b = 0u; b < KS; ++b) {
          const vec4 kv = Ks[(kt + b * NKT) * KSTRIDE + d4];
          for (uint a = 0u; a < RS; ++a) s[a * KS + b] += dot(qv[a], kv);
        }
      }
    }

    // Mask and cap; each row's tile maximum across the NKT invocations that hold the row.
    float mx[RS];
    for (uint a = 0u; a < RS; ++a) {
      mx[a] = MASKED;
      for (uint b = 0u; b < KS; ++b) {
        const int key = int(key0 + kt + b * NKT);
        float x = s[a * KS + b];
        if (p.softcap > 0.0) x = p.softcap * tanh_safe(x / p.softcap);
        x = key < int(k_end) && key >= lo[a] && key <= hi[a] ? x : MASKED;
        s[a * KS + b] = x;
        mx[a] = max(mx[a], x);
      }
    }
    rows_reduce(mx, rt, false);
    for (uint a = 0u; a < RS; ++a) {
      const uint r = rt * RS + a;
      const float m_new = max(m_run[a], mx[a]), al = exp(m_run[a] - m_new);
      if (kt == 0u) Alpha[r] = al;
      m_run[a] = m_new;
      float l = l_part[a] * al;
      for (uint b = 0u; b < KS; ++b) {
        const float x = s[a * KS + b];
        const uint key = kt + b * NKT;
        const float pj = x == MASKED ? 0.0 : exp(x - m_new);
        Ps[r * PSTRIDE4 + key / 4u][key % 4u] = pj;
        l += pj;
      }
      l_part[a] = l;
    }
    barrier();

    if (v_on) {
      for (uint a = 0u; a < RV; ++a) {
        const float al = Alpha[rg * RV + a];
        for (uint c = 0u; c < CV; ++c) acc[a * CV + c] *= al;
      }
      // The tile's keys VB at a time (the first VB loaded above), each batch's loads issued before
      // any is used.
      [[unroll]] for (uint j0 = 0u; j0 < TK; j0 += VB) {
        if (j0 > 0u) {
          [[unroll]] for (uint k = 0u; k < VB; ++k) v[k] = load_v(tile_row(tb, min(key0 + j0 + k, k_end - 1u) - key0), col);
        }
        [[unroll]] for (uint k4 = 0u; k4 < VB / 4u; ++k4) {
          vec4 pj[RV];
          for (uint a = 0u; a < RV; ++a) pj[a] = Ps[(rg * RV + a) * PSTRIDE4 + j0 / 4u + k4];
          [[unroll]] for (uint k = 0u; k < 4u; ++k) {
            const vec4 vf = v_float(v[4u * k4 + k]);
            for (uint a = 0u; a < RV; ++a) {
              for (uint c = 0u; c < CV; ++c) acc[a * CV + c] += pj[a][k] * vf[c];
            }
          }
        }
      }
    }
  }

  // Each row's l: its NKT invocations' parts added (Red's last readers passed the tile's last barrier).
  rows_reduce(l_part, rt, true);
  if (kt == 0u) {
    for (uint a = 0u; a < RS; ++a) {
      Mfin[rt * RS + a] = m_run[a];
      Lfin[rt * RS + a] = l_part[a];
    }
  }
  barrier();
  for (uint a = 0u; a < RV && v_on; ++a) {
    const uint r = rg * RV + a, gi = row0 + r;
    if (gi >= n_rows) continue;
    const uint h = hk * G + gi % G, orow = (gi / G) * p.n_head + h;
    if (nsp == 1u) {
      float m = Mfin[r], l = Lfin[r], f = 1.0;
      if (one && dg == 0u) sc2[orow] = vec2(m, -1.0);  // split 0's: out is written
      if (p.has_sinks != 0u) {
        const float sink = sinks[h], m2 = max(m, sink);
        f = exp(m - m2);
        l = l * f + exp(sink - m2);
      }
      f /= l;
      for (uint c = 0u; c < CV; ++c) {
        const float x = acc[a * CV + c] * f;
        const uint e = r * HD + dg * CV + c;
        o[orow * HD + dg * CV + c] = x;
        if (p.q8k_stride != 0u || p.q8_words != 0u) Qs[e / 4u][e % 4u] = x;  // (Qs's last readers passed the barrier above)
      }
    } else {
      const uint sr = split * rows_all + orow;
      if (dg == 0u) sc2[sr] = vec2(Mfin[r], Lfin[r]);
      const uint base = 2u * p.n_split * rows_all + sr * HD + dg * CV;
      for (uint c = 0u; c < CV; ++c) sc[base + c] = acc[a * CV + c];
    }
  }
  if (nsp == 1u && p.q8k_stride != 0u) write_codes(role, row0, hk, G);  // uniform
  if (nsp == 1u && p.q8_words != 0u) write_q8_codes(role, row0, hk, G, n_rows);  // uniform
}
