#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_NV_cooperative_matrix : require
// Matrix-matrix product for prefill on tensor cores (VK_NV_cooperative_matrix, 16 x 16 x 16 f16
// inputs, f32 accumulation): Y[t * y_stride + y_offset + r] = sum_c W[r][c] * X[t][c], W and X in f16
// (two halves per uint, the even column low; X converted by cvt_f16.comp), Y float. As a matrix
// product Y_tile = X_tile (tokens x K, row-major) * W_tile^T (K x rows: W's rows read column-major).
// A workgroup of NW = 4 or 8 subgroups of 32 owns a BM-row x 128-token tile of Y (BM 128, or 64 where
// 128-row tiles would leave the device's multiprocessors short of workgroups); subgroup s owns rows
// BM/2 (s % 2).. and tokens TW (s / 2).. (TW = 256 / NW) as TW/16 x BM/32 accumulators. The K loop steps by 32: every
// invocation fetches the next step's 4 uvec4 of W and 4 of X into registers before the current
// step's multiplies and stores them to the other half of a double-buffered shared tile after them, so
// one barrier per step suffices and the global loads overlap the math. Shared rows carry 16 bytes of
// skew (80-byte stride) so the fragment loads hit every bank once. Ragged tiles read zero rows; the
// accumulators go through a per-subgroup 16 x 16 shared tile to Y with bounds checks.
// Requires subgroups of 32 (NVIDIA), 44 KiB of shared memory (34 KiB with BM 64) and the Vulkan memory model (which
// glslang declares for GL_KHR_memory_scope_semantics). Reads W once per 128 tokens and X
// once per BM rows (f16: 2 bytes an element); writes n_tokens * nrows floats.
// Bindings: 0 W (uvec4 view: row r at r * ncols / 8), 1 X f16 (uvec4 view, same layout), 2 Y.
// Grid: see mul_mm.glsl.
layout(local_size_x_id = 1) in;
layout(std430, binding = 0) readonly buffer Wbuf { uvec4 w[]; };
layout(std430, binding = 1) readonly buffer Xbuf { uvec4 x[]; };
layout(std430, binding = 2) writeonly buffer Ybuf { float y[]; };

#include "mul_mm.glsl"

layout(constant_id = 0) const uint BM = 128;   // W rows per tile: 128 or 64
layout(constant_id = 1) const uint WGS = 128;  // invocations: 4 subgroups of 32, or 8
const uint NW = WGS / 32u;       // subgroups
const uint BN = 128;             // tokens per tile
const uint BK = 32;              // columns per K-step (ncols is a multiple of 32: no ragged K)
const uint ROW = BK / 8u + 1u;   // uvec4 per shared row: 32 halves and one uvec4 of skew
const uint WSTAGE = BM * ROW;    // uvec4 of W per buffer
const uint XSTAGE = BN * ROW;    // uvec4 of X per buffer
const uint TW = BN / (NW / 2u);  // tokens per subgroup: 64 (4 subgroups) or 32 (8)
const uint TB = TW / 16u;        // 16-token accumulator blocks per subgroup
const uint RB = BM / 32u;        // 16-row accumulator blocks per subgroup (BM / 2 rows)
const uint PASS = WGS / 4u;      // rows one pass of loads covers (four invocations per row)
const uint WL = BM / PASS;       // uvec4 of W each invocation loads per step
const uint XL = BN / PASS;       // and of X

shared uvec4 ws[2u * WSTAGE];    // [buffer][W row][k]
shared uvec4 xs[2u * XSTAGE];    // [buffer][token][k]
shared float cs[NW * 256u];      // [subgroup][16][16]: accumulators on their way to Y

#define MAT16 fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define MAT32 fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>

void main() {
  uint r0, t0;
  if (!tile_origin(BM, BN, r0, t0)) return;
  const uint lid = gl_LocalInvocationIndex;
  const uint sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
  const uint sg_r = (sg % 2u) * (BM / 2u), sg_t = (sg / 2u) * TW;  // the subgroup's part, tile-relative

  // Loading roles: BM (W) and 128 (X) rows x 4 uvec4 per step, WL and XL per invocation: row
  // lid / 4 + PASS i, uvec4 lid % 4 (four neighbours read one row's 64 contiguous bytes).
  const uint lrow = lid / 4u, lq = lid % 4u, kv = p.ncols / 8u;
  uvec4 wreg[WL], xreg[XL];

  MAT32 acc[TB][RB];  // [token block][row block]
  [[unroll]] for (uint i = 0u; i < TB; ++i) {
    [[unroll]] for (uint j = 0u; j < RB; ++j) acc[i][j] = MAT32(0.0);
  }
  // A subgroup whose tokens all lie past n_tokens (the last token tile) skips the multiplies.
  const bool sg_works = t0 + sg_t < p.n_tokens;

  const uint nk = p.ncols / BK;
  for (uint kt = 0u; kt <= nk; ++kt) {
    // Step kt: fetch step kt's tiles (kt < nk), multiply step kt - 1's (kt > 0) from buffer
    // (kt - 1) % 2, store the fetched tiles to buffer kt % 2. Buffer kt % 2 was last read by the
    // multiplies of step kt - 2, which every invocation finished before the previous barrier.
    if (kt < nk) {
      const uint kq = kt * (BK / 8u) + lq;
      [[unroll]] for (uint i = 0u; i < WL; ++i) {
        const uint row = lrow + PASS * i;
        wreg[i] = r0 + row < p.nrows ? w[(r0 + row) * kv + kq] : uvec4(0u);
      }
      [[unroll]] for (uint i = 0u; i < XL; ++i) {
        const uint row = lrow + PASS * i;
        xreg[i] = t0 + row < p.n_tokens ? x[(t0 + row) * kv + kq] : uvec4(0u);
      }
    }
    if (kt > 0u && sg_works) {
      const uint wbase = ((kt - 1u) % 2u) * WSTAGE, xbase = ((kt - 1u) % 2u) * XSTAGE;
      [[unroll]] for (uint kk = 0u; kk < BK / 16u; ++kk) {
        MAT16 a[TB];
        [[unroll]] for (uint i = 0u; i < TB; ++i) {
          coopMatLoadNV(a[i], xs, xbase + (sg_t + 16u * i) * ROW + 2u * kk, ROW, false);
        }
        [[unroll]] for (uint j = 0u; j < RB; ++j) {
          MAT16 b;
          coopMatLoadNV(b, ws, wbase + (sg_r + 16u * j) * ROW + 2u * kk, ROW, true);
          [[unroll]] for (uint i = 0u; i < TB; ++i) acc[i][j] = coopMatMulAddNV(a[i], b, acc[i][j]);
        }
      }
    }
    if (kt < nk) {
      const uint wbase = (kt % 2u) * WSTAGE, xbase = (kt % 2u) * XSTAGE;
      [[unroll]] for (uint i = 0u; i < WL; ++i) ws[wbase + (lrow + PASS * i) * ROW + lq] = wreg[i];
      [[unroll]] for (uint i = 0u; i < XL; ++i) xs[xbase + (lrow + PASS * i) * ROW + lq] = xreg[i];
    }
    barrier();
  }

  if (!sg_works) return;
  const uint c0 = sg * 256u;
  [[unroll]] for (uint i = 0u; i < TB; ++i) {
    [[unroll]] for (uint j = 0u; j < RB; ++j) {
      coopMatStoreNV(acc[i][j], cs, c0, 16u, false);
      subgroupMemoryBarrierShared();
      subgroupBarrier();
      // Lane l writes element (e / 16, e % 16) for e = l + 32 u: 16 neighbouring lanes, one row of Y.
      [[unroll]] for (uint u = 0u; u < 8u; ++u) {
        const uint e = lane + 32u * u;
        const uint t = t0 + sg_t + 16u * i + e / 16u, r = r0 + sg_r + 16u * j + e % 16u;
        if (t < p.n_tokens && r < p.nrows) y[t * p.y_stride + p.y_offset + r] = cs[c0 + e];
      }
      subgroupBarrier();
    }
  }
}
