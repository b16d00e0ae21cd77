#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_NV_cooperative_matrix : require
// Causal attention of a prompt's rows on tensor cores (VK_NV_cooperative_matrix, 16 x 16 x 16 f16
// inputs, f32 accumulation) over an F16 cache: what attention.comp computes (its definition, bindings
// and push constants; one split), FlashAttention-2's online softmax over key tiles of 64 (Dao 2023).
// A workgroup of 8 subgroups of 32 takes BQ = 64 query rows of one kv head (rows i = t * G + g, the
// GQA group's heads of consecutive tokens, as attention.comp numbers them) and the union of their key
// ranges, tile by tile (each K and V tile staged once for 64 rows: half the cache reads of 32):
//   - K's tile (64 keys x HD halves, rows found through the block table; loaded into registers during
//     the previous tile's PV) is staged in shared memory;
//     S = Q K^T (64 x 64) with q (times scale) rounded to f16 and held as each subgroup's A fragments;
//     subgroup s owns rows 16 (s % 4).. and keys 32 (s / 4)..
//   - S goes to shared memory; four invocations per row mask it (the row's range, a softcap), take the
//     row's maximum (shuffles), rescale their running sum, and write p = exp(s - m) as f16; V's tile
//     (loaded during S) replaces K's.
//   - PV = P V (64 x HD; subgroup s: rows 16 (s % 4).., dims HD/2 (s / 4)..) goes through shared
//     memory as floats one half of the dims at a time (the half S's floats fit), each added to the
//     HD/8 output floats of that half an invocation keeps for its row, after they are scaled by
//     exp(m_old - m_new).
// Requires subgroups of 32 and about 43 KiB of shared memory (HD 128; NVIDIA's Vulkan driver allows
// 48). Error against attention.comp:
// q and p rounded to f16 (2^-11 relative each; K and V are the cache's halves).
// Bindings: 0 q (floats), 1 K cache, 2 V cache (uvec4 views of the F16 rows), 3 sinks, 4 step, 5 out,
// 6 unused. Grid: (1, ceil(n_tokens * G / 64), n_head_kv).
layout(local_size_x = 256) in;

layout(constant_id = 0) const uint HD = 128;  // head_dim: 64 or 128

layout(std430, binding = 0) readonly buffer Q { vec4 q4[]; };
layout(std430, binding = 1) readonly buffer KC { uvec4 kc[]; };
layout(std430, binding = 2) readonly buffer VC { uvec4 vc[]; };
layout(std430, binding = 3) readonly buffer Sinks { float sinks[]; };
layout(std430, binding = 4) readonly buffer Step { uint step[]; };
#include "kv_rows.glsl"
layout(std430, binding = 5) writeonly buffer Out { float o[]; };
layout(push_constant) uniform Params {
  uint n_tokens;
  uint n_head;
  uint n_head_kv;
  uint kv_width;   // elements per cache row (n_head_kv * HD)
  uint row_bytes;
  uint window;     // sliding window (0: full causal)
  uint n_split;
  uint has_sinks;
  float scale;
  float softcap;   // 0: none
} p;

const uint BQ = 64;              // query rows per workgroup
const uint BK = 64;              // keys per tile
const uint KROW = HD / 8u + 1u;  // uvec4 per staged K/V row: HD halves and 16 bytes of skew
const uint FROW = BK + 4u;       // floats per row of S, then of half of PV's dims
const uint PROW = BK / 8u + 1u;  // uvec4 per row of P
const uint DPT = HD / 4u;        // output dims per invocation: HD / 8 of each half
const float MASKED = -1.0e38;

shared uvec4 kvs[BK * KROW];     // the K tile, then the V tile (first: q in f16; BQ = BK rows)
shared float fs[BQ * FROW];      // S, then PV
shared uvec4 ps[BQ * PROW];      // p in f16
shared float alpha_s[BQ];

#define MAT16 fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define MAT32 fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>

float tanh_safe(float x) {
  const float e = exp(-2.0 * abs(x));
  return sign(x) * (1.0 - e) / (1.0 + e);
}

uint first_key(uint pos) { return p.window > 0u && pos + 1u > p.window ? pos + 1u - p.window : 0u; }

// Each invocation's part of a tile's staging: NI uvec4 of K (then V) rows, at cache offsets `at`.
const uint NI = BK * (HD / 8u) / 256u;
uint at[NI];
uvec4 kvreg[NI];

// Issues the loads of key rows [key0, key0 + 64) (clamped to k_end - 1) of kv head hk: their cache
// offsets (through the block table) into `at`, K's rows into kvreg.
void fetch_k(uint key0, uint k_end, uint hk) {
  const uint tid = gl_LocalInvocationIndex, per_row = HD / 8u;
  [[unroll]] for (uint n = 0u; n < NI; ++n) {
    const uint i = tid + 256u * n, j = i / per_row, c = i % per_row;
    const uint row = cache_row(min(key0 + j, k_end - 1u));
    at[n] = (row * p.kv_width + hk * HD) / 8u + c;
    kvreg[n] = kc[at[n]];
  }
}
// Issues the loads of the same rows of V.
void fetch_v() {
  [[unroll]] for (uint n = 0u; n < NI; ++n) kvreg[n] = vc[at[n]];
}
// The fetched rows into kvs.
void stage() {
  const uint tid = gl_LocalInvocationIndex, per_row = HD / 8u;
  [[unroll]] for (uint n = 0u; n < NI; ++n) {
    const uint i = tid + 256u * n;
    kvs[(i / per_row) * KROW + i % per_row] = kvreg[n];
  }
}

void main() {
  const uint tid = gl_LocalInvocationIndex;
  const uint sg = gl_SubgroupID;
  const uint blk = gl_WorkGroupID.y, hk = gl_WorkGroupID.z;
  const uint G = p.n_head / p.n_head_kv;
  const uint n_rows = p.n_tokens * G;
  const uint row0 = blk * BQ;
  const uint n_past = step[0];
  const uint last_row = min(row0 + BQ, n_rows) - 1u;
  const uint k_hi = n_past + last_row / G + 1u;  // exclusive
  const uint k_lo = first_key(n_past + row0 / G) / KV_BLOCK * KV_BLOCK;

  // q rows in f16 (times scale) through kvs into each subgroup's A fragments: rows 16 (sg % 4)..
  for (uint i = tid; i < BQ * (HD / 8u); i += 256u) {
    const uint r = i / (HD / 8u), c = i % (HD / 8u), gi = row0 + r;
    uvec4 h = uvec4(0u);
    if (gi < n_rows) {
      const uint at = ((gi / G) * p.n_head + hk * G + gi % G) * (HD / 4u) + 2u * c;
      const vec4 a = q4[at] * p.scale, b = q4[at + 1u] * p.scale;
      h = uvec4(packHalf2x16(a.xy), packHalf2x16(a.zw), packHalf2x16(b.xy), packHalf2x16(b.zw));
    }
    kvs[r * KROW + c] = h;
  }
  barrier();
  const uint sr = (sg % 4u) * 16u;  // the subgroup's rows (S and PV)
  MAT16 qf[HD / 16u];
  [[unroll]] for (uint d = 0u; d < HD / 16u; ++d) coopMatLoadNV(qf[d], kvs, sr * KROW + 2u * d, KROW, false);
  barrier();

  // Softmax role: row r = tid / 4, keys 16 (tid % 4).. of S; output dims HD/8 (tid % 4).. of each
  // half (acc[i]: dim i of the first half's, then of the second's).
  const uint r = tid / 4u, quarter = tid % 4u, gi = row0 + r;
  const uint pos = n_past + gi / G;
  const int hi = gi < n_rows ? int(pos) : -1;
  const int lo = int(first_key(pos));
  float m_run = MASKED, l_run = 0.0;
  float acc[DPT];
  [[unroll]] for (uint i = 0u; i < DPT; ++i) acc[i] = 0.0;

  // A tile's K rows were fetched during the previous tile's PV (the first before the loop), its V rows
  // are fetched during its S and staged after the softmax has read S: each load has a phase of
  // multiplies to land in.
  fetch_k(k_lo, k_hi, hk);
  for (uint key0 = k_lo; key0 < k_hi; key0 += BK) {
    stage();
    fetch_v();
    barrier();
    // S: subgroup sg, rows sr.., keys 32 (sg / 4)..: two 16 x 16 accumulators.
    {
      const uint sk = (sg / 4u) * 32u;
      MAT32 s0 = MAT32(0.0), s1 = MAT32(0.0);
      [[unroll]] for (uint d = 0u; d < HD / 16u; ++d) {
        MAT16 k0, k1;
        coopMatLoadNV(k0, kvs, sk * KROW + 2u * d, KROW, true);
        coopMatLoadNV(k1, kvs, (sk + 16u) * KROW + 2u * d, KROW, true);
        s0 = coopMatMulAddNV(qf[d], k0, s0);
        s1 = coopMatMulAddNV(qf[d], k1, s1);
      }
      coopMatStoreNV(s0, fs, sr * FROW + sk, FROW, false);
      coopMatStoreNV(s1, fs, sr * FROW + sk + 16u, FROW, false);
    }
    barrier();
    float sv[16];
    float mx = MASKED;
    [[unroll]] for (uint j = 0u; j < 16u; ++j) {
      const int key = int(key0 + 16u * quarter + j);
      float x = fs[r * FROW + 16u * quarter + j];
      if (p.softcap > 0.0) x = p.softcap * tanh_safe(x / p.softcap);
      x = key < int(k_hi) && key >= lo && key <= hi ? x : MASKED;
      sv[j] = x;
      mx = max(mx, x);
    }
    mx = max(mx, subgroupShuffleXor(mx, 1u));
    mx = max(mx, subgroupShuffleXor(mx, 2u));
    const float m_new = max(m_run, mx);
    const float al = exp(m_run - m_new);
    m_run = m_new;
    float ls = 0.0;
    uint packed[8];
    [[unroll]] for (uint j = 0u; j < 16u; j += 2u) {
      const float a = sv[j] == MASKED ? 0.0 : exp(sv[j] - m_new);
      const float b = sv[j + 1u] == MASKED ? 0.0 : exp(sv[j + 1u] - m_new);
      ls += a + b;
      packed[j / 2u] = packHalf2x16(vec2(a, b));
    }
    ps[r * PROW + 2u * quarter] = uvec4(packed[0], packed[1], packed[2], packed[3]);
    ps[r * PROW + 2u * quarter + 1u] = uvec4(packed[4], packed[5], packed[6], packed[7]);
    ls += subgroupShuffleXor(ls, 1u);
    ls += subgroupShuffleXor(ls, 2u);
    l_run = l_run * al + ls;
    if (quarter == 0u) alpha_s[r] = al;
    // V's tile replaces K's (every S multiply finished before the last barrier); the next tile's K rows
    // are fetched (the last row again past the end).
    stage();
    fetch_k(key0 + BK, k_hi, hk);
    barrier();
    // PV: subgroup sg, rows sr.., dims HD/2 (sg / 4)..; the first half's subgroups store theirs, the
    // invocations add it, then the second half's.
    const uint half_ = sg / 4u, sd = half_ * (HD / 2u);
    MAT32 pv[HD / 32u];
    [[unroll]] for (uint b = 0u; b < HD / 32u; ++b) pv[b] = MAT32(0.0);
    [[unroll]] for (uint kk = 0u; kk < BK / 16u; ++kk) {
      MAT16 pa;
      coopMatLoadNV(pa, ps, sr * PROW + 2u * kk, PROW, false);
      [[unroll]] for (uint b = 0u; b < HD / 32u; ++b) {
        MAT16 vb;
        coopMatLoadNV(vb, kvs, (16u * kk) * KROW + (sd + 16u * b) / 8u, KROW, false);
        pv[b] = coopMatMulAddNV(pa, vb, pv[b]);
      }
    }
    const float a_r = alpha_s[r];
    [[unroll]] for (uint h = 0u; h < 2u; ++h) {
      if (half_ == h) {
        [[unroll]] for (uint b = 0u; b < HD / 32u; ++b) coopMatStoreNV(pv[b], fs, sr * FROW + 16u * b, FROW, false);
      }
      barrier();
      [[unroll]] for (uint i = 0u; i < HD / 8u; ++i) {
        const uint j = h * (HD / 8u) + i;
        acc[j] = acc[j] * a_r + fs[r * FROW + quarter * (HD / 8u) + i];
      }
      if (h == 0u) barrier();  // the second half's stores wait; the next S's wait at the loop's top
    }
  }

  if (gi >= n_rows) return;
  const uint h = hk * G + gi % G, orow = (gi / G) * p.n_head + h;
  float l = l_run, f = 1.0;
  if (p.has_sinks != 0u) {
    const float sink = sinks[h], m2 = max(m_run, sink);
    f = exp(m_run - m2);
    l = l * f + exp(sink - m2);
  }
  f /= l;
  [[unroll]] for (uint i = 0u; i < DPT; ++i) {
    o[orow * HD + (i / (HD / 8u)) * (HD / 2u) + quarter * (HD / 8u) + i % (HD / 8u)] = acc[i] * f;
  }
}
