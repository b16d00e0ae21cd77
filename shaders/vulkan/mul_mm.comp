#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// Matrix-matrix product for prefill (graph Op::MatMul with many tokens), portable to any Vulkan 1.2
// device: Y[t * y_stride + y_offset + r] = sum_c W[r][c] * X[t][c], W in f16 (two halves per uint,
// the even column in the low half: a GGUF F16 tensor, or the dequantizer's output), X and Y float,
// accumulated in float. Classic shared-memory tiling: a workgroup of 16 x 16 invocations owns a
// 64-row x 64-token tile of Y; per K-step of 16 it stages W's 64 x 16 and X's 64 x 16 tile in shared
// memory as float (W with 128-bit loads of 8 halves, X with vec4 loads) and each invocation keeps a
// 4 x 4 block of accumulators (rows lx + 16 i, tokens ly + 16 j: neighbouring invocations read
// neighbouring shared words and write neighbouring Y columns). Ragged edges read zeros and are not
// written. Reads W once per token tile (2 * nrows * ncols * ceil(n_tokens / 64) bytes) and X once per
// row tile; writes n_tokens * nrows floats.
// Bindings: 0 W (uvec4 view: row r at r * ncols / 8), 1 X (vec4 view), 2 Y. Grid: see mul_mm.glsl.
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer Wbuf { uvec4 w[]; };
layout(std430, binding = 1) readonly buffer Xbuf { vec4 x[]; };
layout(std430, binding = 2) writeonly buffer Ybuf { float y[]; };

#include "mul_mm.glsl"

const uint BM = 64;      // W rows per tile
const uint BN = 64;      // tokens per tile
const uint BK = 16;      // columns per K-step
const uint S = BM + 1;   // shared row stride (one word of skew against bank conflicts on the stores)

shared float ws[BK * S];  // [k][row]
shared float xs[BK * S];  // [k][token]

void main() {
  uint r0, t0;
  if (!tile_origin(BM, BN, r0, t0)) return;
  const uint lid = gl_LocalInvocationIndex;
  const uint lx = lid % 16u, ly = lid / 16u;
  // Loading roles: invocations 0..127 take one uvec4 (8 halves) of W's tile each (row lid / 2, half
  // lid % 2 of the 16 columns), all 256 one vec4 of X's (token lid / 4, quarter lid % 4).
  const uint wrow = lid / 2u, whalf = lid % 2u, xtok = lid / 4u, xq = lid % 4u;
  const bool w_loads = lid < 128u && r0 + wrow < p.nrows;
  const bool x_loads = t0 + xtok < p.n_tokens;
  const uint w_at = (r0 + wrow) * (p.ncols / 8u) + whalf;
  const uint x_at = (t0 + xtok) * (p.ncols / 4u) + xq;

  float acc[4][4];
  [[unroll]] for (uint i = 0u; i < 4u; ++i) {
    [[unroll]] for (uint j = 0u; j < 4u; ++j) acc[i][j] = 0.0;
  }
  for (uint k0 = 0u; k0 < p.ncols; k0 += BK) {
    if (lid < 128u) {
      const uvec4 q = w_loads ? w[w_at + k0 / 8u] : uvec4(0u);
      [[unroll]] for (uint c = 0u; c < 4u; ++c) {
        const vec2 h = unpackHalf2x16(q[c]);
        ws[(whalf * 8u + 2u * c) * S + wrow] = h.x;
        ws[(whalf * 8u + 2u * c + 1u) * S + wrow] = h.y;
      }
    }
    const vec4 v = x_loads ? x[x_at + k0 / 4u] : vec4(0.0);
    [[unroll]] for (uint c = 0u; c < 4u; ++c) xs[(xq * 4u + c) * S + xtok] = v[c];
    barrier();
    [[unroll]] for (uint k = 0u; k < BK; ++k) {
      float a[4], b[4];
      [[unroll]] for (uint i = 0u; i < 4u; ++i) a[i] = ws[k * S + lx + 16u * i];
      [[unroll]] for (uint j = 0u; j < 4u; ++j) b[j] = xs[k * S + ly + 16u * j];
      [[unroll]] for (uint i = 0u; i < 4u; ++i) {
        [[unroll]] for (uint j = 0u; j < 4u; ++j) acc[i][j] = fma(a[i], b[j], acc[i][j]);
      }
    }
    barrier();
  }
  [[unroll]] for (uint j = 0u; j < 4u; ++j) {
    const uint t = t0 + ly + 16u * j;
    if (t >= p.n_tokens) continue;
    [[unroll]] for (uint i = 0u; i < 4u; ++i) {
      const uint r = r0 + lx + 16u * i;
      if (r < p.nrows) y[t * p.y_stride + p.y_offset + r] = acc[i][j];
    }
  }
}
