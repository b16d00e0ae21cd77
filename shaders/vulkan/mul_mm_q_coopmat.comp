#version 450
//! variants-by-type all
//! variants-by-type all narrow_ NARROW
// Matrix-matrix product for prefill on tensor cores (VK_NV_cooperative_matrix, 16 x 16 x 16 f16 inputs,
// f32 accumulation) on weights in their stored type: a dense product or each expert over its tokens
// (mm_q.glsl says which rows meet which). W is decoded as it is staged (quant.glsl's unit_load, each
// value rounded to f16 as packHalf2x16 rounds it); X comes in f16 (cvt_f16.comp), Y float. As a
// matrix product Y_tile = X_tile (tokens x K) * W_tile^T. A workgroup of NW = 4 or 8 subgroups of 32
// owns a BM-row (128 or 64) x 128-token tile (experts' tiles of 64 tokens measured slower on an
// H200: 5854 against 6418 tok/s over 512 tokens of a 30B-A3B); subgroup s owns rows BM/2 (s % 2)..
// and tokens TW (s / 2).. (TW = 256 / NW) as TW/16 x BM/32 accumulators. Per K-step of 32 slots every invocation
// fetches and decodes the next step's units of W and its uvec4 of X into registers before the current
// step's multiplies and stores them to the other half of a double-buffered shared tile after them
// (one barrier per step; S = 2, the K-quants: the next two steps into registers, then both halves
// after a barrier, two barriers a pass); F16 weights are copied 8 halves at a time as stored. Shared rows carry 16 bytes of skew (80-byte stride). Ragged tiles read
// zeros; the accumulators go through a per-subgroup 16 x 16 shared tile to Y with bounds checks.
// Requires subgroups of 32, 48 KiB of shared memory (128-row tiles; 38 KiB with 64) and the Vulkan memory model.
// NARROW (variants narrow_*, experts with few tokens each): BM-row (256 or 128) x 32-token tiles, the
// NW = 8 subgroups along the rows (subgroup s: rows BM/8 s.., all 32 tokens), so that a step decodes
// twice the rows of the 128-token tile for a sixteenth of its multiplies; the accumulators leave
// through the W buffers (free after the last step), 45 KiB in all.
// Bindings: 0 W (raw blocks), 1 X f16 (uvec4 view: row t at t * ncols / 8), 2 Y, 3 route (moe_sort's;
// any buffer for a dense product), 4 bias (floats; any buffer without). Grid: p.tiles workgroups.
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_NV_cooperative_matrix : require

layout(local_size_x_id = 1) in;
layout(constant_id = 1) const uint WGS = 128;  // invocations: 4 subgroups of 32, or 8

#if !defined(NARROW)
// The accumulators' way out to Y, [subgroup][16][16], used after the last step only: until then its
// first 16 floats hold quant.glsl's codebook (IQ4, MXFP4), so that those types' 128-row tiles fit
// 48 KiB like the others'.
shared float cs[(WGS / 32u) * 256u];
#define CODEBOOK_AT cs
#endif
#include "quant.glsl"

layout(std430, binding = 1) readonly buffer Xbuf { uvec4 x[]; };
layout(std430, binding = 2) writeonly buffer Ybuf { float y[]; };
layout(std430, binding = 3) readonly buffer Rbuf { uint route[]; };
layout(std430, binding = 4) readonly buffer Bbuf { float bias[]; };

#include "mm_q.glsl"

layout(constant_id = 0) const uint BM = 128;   // W rows per tile: 128 or 64
const uint NW = WGS / 32u;       // subgroups
#if defined(NARROW)
const uint BN = 32;              // tokens per tile
const uint WR = NW;              // subgroups along the rows
#else
const uint BN = 128;             // tokens per tile
const uint WR = 2;
#endif
const uint BK = 32;              // slots per K-step
layout(constant_id = 2) const uint S = 2;  // K-steps a pass: 1 (double-buffered) or 2 (see main)
const uint ROW = BK / 8u + 1u;   // uvec4 per shared row: 32 halves and one uvec4 of skew
const uint WSTAGE = BM * ROW;    // uvec4 of W per buffer
const uint XSTAGE = BN * ROW;    // uvec4 of X per buffer
const uint TW = BN / (NW / WR);  // tokens per subgroup: 64 (4 subgroups) or 32 (8; NARROW)
const uint TB = TW / 16u;        // 16-token accumulator blocks per subgroup
const uint RB = BM / WR / 16u;   // 16-row accumulator blocks per subgroup (BM / WR rows)
const uint PASS = WGS / 4u;      // X rows one pass of loads covers (four invocations per row)
#if defined(NARROW)
const uint XL = 1;               // uvec4 of X each invocation loads per step (the first BN / 4 invocations)
#else
const uint XL = BN / PASS;       // uvec4 of X each invocation loads per step
#endif
#if defined(TYPE_F16)
const uint WI = (BM * 4u + WGS - 1u) / WGS;   // uvec4 of W each invocation copies per step
#else
const uint WI = (BM * UPS + WGS - 1u) / WGS;  // units of W each invocation decodes per step
#endif
// The 32-element formats whose blocks are not word-aligned (quant.glsl's SPAN_UNITS) give an
// invocation WI consecutive units of one row's block, decoded as a span (a Q5_0 block half in 5 word
// loads rather than 10), where a row's units split evenly; the other types (and shapes) take items
// lid + WGS m, neighbouring invocations on neighbouring units.
#if defined(SPAN_UNITS)
const bool SPAN = UPS % WI == 0u;
#else
const bool SPAN = false;
#endif
// Item m (a unit, or F16's uvec4) of this invocation's share of a step's W tile.
uint witem(uint m) { return SPAN ? gl_LocalInvocationIndex * WI + m : gl_LocalInvocationIndex + WGS * m; }

shared uvec4 ws[2u * WSTAGE];    // [buffer][W row][slot / 8]
shared uvec4 xs[2u * XSTAGE];    // [buffer][token][slot / 8]

#define MAT16 fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define MAT32 fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>

uint lrow() { return gl_LocalInvocationIndex / 4u; }

// Per invocation: the tile, this invocation's X rows (row `start`, zeroed, past the tile's entries) and
// the registers a step's W and X are fetched into.
uint r0, e, start, count, wbase, lid, lq, kv;
uint xrow[XL];
bool xok[XL];
#if defined(TYPE_F16)
uvec4 wreg[S][WI];
#else
uvec2 wreg[S][WI][UR];
#endif
uvec4 xreg[S][XL];
uint sg_r, sg_t;     // the subgroup's part of the tile: W rows from sg_r, tokens from sg_t
MAT32 acc[TB][RB];  // [token block][row block]

// Step kt's W (decoded to f16) and X into registers. No branch: rows past the weight's end read the
// tile's first row and are zeroed, so that a step's loads, the previous step's multiplies and the
// decoding make one block the compiler schedules as a whole (the loads in flight during the
// multiplies). On an H200 this took qwen3-8b's 512-token prompt from 5,905 to 7,101 tok/s. (Loads
// issued two steps ahead, decoded a step later, measured slower: 7,005; two steps fetched and decoded
// together before two steps' multiplies, S = 2, measured faster for the K-quants: 6,930 -> 7,976.)
void fetch(uint kt0, uint sb) {
  // Two steps a pass: a step past the end (an odd number of steps) is zeros. One: never past the end
  // (the same zeroing there cost gpt-oss-20b's 512-token prompt 5% on an H200).
  const bool live = S == 1u || kt0 < p.ncols / BK;
  const uint kt = live ? kt0 : 0u;
#if defined(TYPE_F16)
  [[unroll]] for (uint m = 0u; m < WI; ++m) {
    const uint i = lid + WGS * m, row = i / 4u;
    const bool ok = live && i < BM * 4u && r0 + row < p.nrows;
    const uvec4 v = w4[(wbase + (ok ? r0 + row : r0) * p.row_bytes) / 16u + kt * 4u + i % 4u];
    wreg[sb][m] = ok ? v : uvec4(0u);
  }
#else
#if defined(SPAN_UNITS)
  if (SPAN) {
    const uint i = witem(0u), row = i / UPS, j0 = i % UPS;
    const bool ok = live && i < BM * UPS && r0 + row < p.nrows;
    const uint o = wbase + (ok ? r0 + row : r0) * p.row_bytes + kt * BLOCK_BYTES;  // a step is a block
    float d;
    uint qh;
    block_head(o, d, qh);
    // The span's chunks: cw[n] and cw[n + 1] funnel-shifted by t; the last word read is the one holding
    // the span's last byte.
    const uint NC = WI * UB / 4u, off = o + QS_AT + UB * j0, ib = off >> 2, t = (off & 3u) << 3;
    uint cw[WI * UB / 4u + 1u];
    [[unroll]] for (uint n = 0u; n < NC; ++n) cw[n] = w[ib + n];
    cw[NC] = w[ib + NC - uint(t == 0u)];
    [[unroll]] for (uint m = 0u; m < WI; ++m) {
      const uint n = m * UB / 4u;
      const uint c0 = (cw[n] >> t) | ((cw[n + 1u] << 1) << (31u - t));
#if defined(TYPE_Q8_0)
      const uint c1 = (cw[n + 1u] >> t) | ((cw[n + 2u] << 1) << (31u - t));
#else
      const uint c1 = 0u;
#endif
      vec4 q[UR];
      float a[UR];
      unit_from(j0 + m, c0, c1, d, qh, q, a);
      [[unroll]] for (uint k = 0u; k < UR; ++k) {
        const vec4 v = q[k] * a[k];
        wreg[sb][m][k] = ok ? uvec2(packHalf2x16(v.xy), packHalf2x16(v.zw)) : uvec2(0u);
      }
    }
  } else
#endif
  {
    [[unroll]] for (uint m = 0u; m < WI; ++m) {
      const uint i = witem(m), row = i / UPS, u = kt * UPS + i % UPS;
      const bool ok = live && i < BM * UPS && r0 + row < p.nrows;
      vec4 q[UR];
      float a[UR], b[UR];
      unit_load(wbase + (ok ? r0 + row : r0) * p.row_bytes, u, q, a, b);
      [[unroll]] for (uint k = 0u; k < UR; ++k) {
        const vec4 v = unit_run(q, a, b, k);
        wreg[sb][m][k] = ok ? uvec2(packHalf2x16(v.xy), packHalf2x16(v.zw)) : uvec2(0u);
      }
    }
  }
#endif
  [[unroll]] for (uint i = 0u; i < XL; ++i) {
    const uvec4 v = x[xrow[i] * kv + kstep_run(kt, lq) / 8u];
    xreg[sb][i] = xok[i] && live ? v : uvec4(0u);
  }
}

// Register set sb (step kt's) into shared buffer buf.
void stage(uint kt, uint sb, uint buf) {
  const uint wb = buf * WSTAGE, xb = buf * XSTAGE;
#if defined(TYPE_F16)
  [[unroll]] for (uint m = 0u; m < WI; ++m) {
    const uint i = lid + WGS * m;
    if (i < BM * 4u) ws[wb + (i / 4u) * ROW + i % 4u] = wreg[sb][m];
  }
#else
  [[unroll]] for (uint m = 0u; m < WI; ++m) {
    const uint i = witem(m), row = i / UPS, u = kt * UPS + i % UPS;
    if (i < BM * UPS) {
      [[unroll]] for (uint k = 0u; k < UR; ++k) {
        const uint slot = kstep_slot(kt, u, k), at = wb + row * ROW + slot / 8u;
        if ((slot & 4u) == 0u) {
          ws[at].xy = wreg[sb][m][k];
        } else {
          ws[at].zw = wreg[sb][m][k];
        }
      }
    }
  }
#endif
#if defined(NARROW)
  if (lrow() < BN) xs[xb + lrow() * ROW + lq] = xreg[sb][0];
#else
  [[unroll]] for (uint i = 0u; i < XL; ++i) xs[xb + (lrow() + PASS * i) * ROW + lq] = xreg[sb][i];
#endif
}

// The multiplies of the step in shared buffer buf.
void multiply(uint buf) {
  const uint wb = buf * WSTAGE, xb = buf * XSTAGE;
  [[unroll]] for (uint kk = 0u; kk < BK / 16u; ++kk) {
    MAT16 a[TB];
    [[unroll]] for (uint i = 0u; i < TB; ++i) {
      coopMatLoadNV(a[i], xs, xb + (sg_t + 16u * i) * ROW + 2u * kk, ROW, false);
    }
    [[unroll]] for (uint j = 0u; j < RB; ++j) {
      MAT16 b;
      coopMatLoadNV(b, ws, wb + (sg_r + 16u * j) * ROW + 2u * kk, ROW, true);
      [[unroll]] for (uint i = 0u; i < TB; ++i) acc[i][j] = coopMatMulAddNV(a[i], b, acc[i][j]);
    }
  }
}

void main() {
  quant_init();
  if (!mm_tile(BM, BN, r0, e, start, count)) return;
  lid = gl_LocalInvocationIndex;
  const uint sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
  sg_r = (sg % WR) * (BM / WR);
  sg_t = (sg / WR) * TW;
  wbase = e * p.nrows * p.row_bytes;

  // X roles: rows lid / 4 + PASS i, run lid % 4 (one uvec4: 8 halves).
  lq = lid % 4u;
  kv = p.ncols / 8u;
  [[unroll]] for (uint i = 0u; i < XL; ++i) {
    const uint row = lrow() + PASS * i;
#if defined(NARROW)
    xok[i] = row < count && row < BN;
#else
    xok[i] = row < count;
#endif
    xrow[i] = mm_x_row(start, xok[i] ? row : 0u);
  }
  // W roles: items witem(m): row item / UPS, the step's unit item % UPS; UR runs of 4 halves each
  // (F16: row item / 4, uvec4 item % 4 of the step's 64 bytes).
  [[unroll]] for (uint i = 0u; i < TB; ++i) {
    [[unroll]] for (uint j = 0u; j < RB; ++j) acc[i][j] = MAT32(0.0);
  }

  const uint nk = p.ncols / BK;
  if (S == 1u) {
    // Step kt's tiles are in buffer kt % 2. Each pass fetches step kt + 1 (the last step again past
    // the end: stored to the buffer nobody reads any more), multiplies step kt, stores the fetched
    // step to the other buffer (last read by step kt - 1's multiplies, before the previous barrier):
    // one barrier a step, a warp's stores beside another's multiplies.
    fetch(0u, 0u);
    stage(0u, 0u, 0u);
    barrier();
    for (uint kt = 0u; kt < nk; ++kt) {
      fetch(min(kt + 1u, nk - 1u), 0u);
      multiply(kt % 2u);
      stage(kt + 1u, 0u, (kt + 1u) % 2u);
      barrier();
    }
  } else {
    // A pass multiplies the two steps in the buffers while the next two steps' loads are in flight
    // (fetched into registers before the multiplies, decoded after them), then, once every subgroup
    // is done reading, stores them: twice the loads in flight against a step's multiplies.
    [[unroll]] for (uint sb = 0u; sb < S; ++sb) fetch(sb, sb);
    [[unroll]] for (uint sb = 0u; sb < S; ++sb) stage(sb, sb, sb);
    barrier();
    for (uint kt = 0u; kt < nk; kt += S) {
      [[unroll]] for (uint sb = 0u; sb < S; ++sb) fetch(kt + S + sb, sb);
      [[unroll]] for (uint sb = 0u; sb < S; ++sb) multiply(sb);
      barrier();
      [[unroll]] for (uint sb = 0u; sb < S; ++sb) stage(kt + S + sb, sb, sb);
      barrier();
    }
  }

  if (sg_t >= count) return;  // a subgroup whose tokens all lie past the tile's
#if defined(NARROW)
  const uint c0 = sg * 64u;  // uvec4 of the W buffers (the last pass's barrier passed)
#define CS(el) uintBitsToFloat(ws[c0 + (el) / 4u][(el) % 4u])
#else
  const uint c0 = sg * 256u;
#define CS(el) cs[c0 + (el)]
#endif
  [[unroll]] for (uint i = 0u; i < TB; ++i) {
    [[unroll]] for (uint j = 0u; j < RB; ++j) {
#if defined(NARROW)
      coopMatStoreNV(acc[i][j], ws, c0, 4u, false);
#else
      coopMatStoreNV(acc[i][j], cs, c0, 16u, false);
#endif
      subgroupMemoryBarrierShared();
      subgroupBarrier();
      // Lane l writes element (e / 16, e % 16) for e = l + 32 u: 16 neighbouring lanes, one row of Y.
      [[unroll]] for (uint u = 0u; u < 8u; ++u) {
        const uint el = lane + 32u * u;
        const uint t = sg_t + 16u * i + el / 16u, r = r0 + sg_r + 16u * j + el % 16u;
        if (t < count && r < p.nrows) {
          y[mm_y_at(start, t, r)] = CS(el) + (p.has_bias != 0u ? bias[e * p.nrows + r] : 0.0);
        }
      }
      subgroupBarrier();
    }
  }
}
