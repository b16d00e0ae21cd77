#version 450
//! variants-by-type all
// Matrix-matrix product for prefill on weights in their stored type, portable to any Vulkan 1.2
// device: a dense product or each expert over its tokens (mm_q.glsl says which rows meet which).
// W decoded to float as it is staged (quant.glsl's unit_load: the values mul_mv multiplies by), X and
// Y float, float sums. A workgroup of 16 x 16 invocations owns a 64-row x 64-token tile of Y; per
// K-step of 32 elements (the units of mm_q.glsl's step) it stages W's 64 x 32 and X's 64 x 32 tile
// in shared memory as floats, and each invocation keeps a 4 x 4 block of accumulators (rows lx + 16 i,
// tokens ly + 16 j). Ragged edges read zeros and are not written. Reads W once per token tile and X
// once per row tile; writes the tile's outputs.
// Bindings: 0 W (raw blocks), 1 X (vec4 view), 2 Y, 3 route (moe_sort's; any buffer for a dense
// product), 4 bias (floats; any buffer without). Grid: p.tiles workgroups, split into y.
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require

layout(local_size_x = 256) in;

#include "quant.glsl"

layout(std430, binding = 1) readonly buffer Xbuf { vec4 x[]; };
layout(std430, binding = 2) writeonly buffer Ybuf { float y[]; };
layout(std430, binding = 3) readonly buffer Rbuf { uint route[]; };
layout(std430, binding = 4) readonly buffer Bbuf { float bias[]; };

#include "mm_q.glsl"

const uint BM = 64;      // W rows per tile
const uint BN = 64;      // tokens per tile
const uint BK = 32;      // slots per K-step
const uint S = BM + 1;   // shared row stride (one word of skew against bank conflicts on the stores)
const uint WI = (BM * UPS + 255u) / 256u;  // units of W each invocation decodes per step

shared float ws[BK * S];  // [slot][row]
shared float xs[BK * S];  // [slot][token]

void main() {
  quant_init();
  uint r0, e, start, count;
  if (!mm_tile(BM, BN, r0, e, start, count)) return;
  const uint lid = gl_LocalInvocationIndex;
  const uint lx = lid % 16u, ly = lid / 16u;
  const uint wbase = e * p.nrows * p.row_bytes;
  // X roles: two vec4 each per step, item i = lid + 256 m: token i / 8, run (i % 8) / 2, half i % 2.
  uint xrow[2];
  [[unroll]] for (uint m = 0u; m < 2u; ++m) {
    const uint tok = (lid + 256u * m) / 8u;
    xrow[m] = tok < count ? mm_x_row(start, tok) : 0xffffffffu;
  }

  float acc[4][4];
  [[unroll]] for (uint i = 0u; i < 4u; ++i) {
    [[unroll]] for (uint j = 0u; j < 4u; ++j) acc[i][j] = 0.0;
  }
  const uint nk = p.ncols / BK;
  for (uint kt = 0u; kt < nk; ++kt) {
    [[unroll]] for (uint m = 0u; m < WI; ++m) {
      const uint i = lid + 256u * m;
      if (i < BM * UPS) {
        const uint row = i / UPS, u = kt * UPS + i % UPS;
        vec4 q[UR];
        float a[UR], b[UR];
        const bool live = r0 + row < p.nrows;
        if (live) unit_load(wbase + (r0 + row) * p.row_bytes, u, q, a, b);
        [[unroll]] for (uint k = 0u; k < UR; ++k) {
          const vec4 v = live ? unit_run(q, a, b, k) : vec4(0.0);
          const uint slot = kstep_slot(kt, u, k);
          [[unroll]] for (uint c = 0u; c < 4u; ++c) ws[(slot + c) * S + row] = v[c];
        }
      }
    }
    [[unroll]] for (uint m = 0u; m < 2u; ++m) {
      const uint i = lid + 256u * m, tok = i / 8u, run = (i % 8u) / 2u, half_ = i % 2u;
      const vec4 v = xrow[m] != 0xffffffffu ? x[(xrow[m] * p.ncols + kstep_run(kt, run) + 4u * half_) / 4u] : vec4(0.0);
      [[unroll]] for (uint c = 0u; c < 4u; ++c) xs[(8u * run + 4u * half_ + c) * S + tok] = v[c];
    }
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
    const uint t = ly + 16u * j;
    if (t >= count) continue;
    [[unroll]] for (uint i = 0u; i < 4u; ++i) {
      const uint r = r0 + lx + 16u * i;
      if (r < p.nrows) y[mm_y_at(start, t, r)] = acc[i][j] + (p.has_bias != 0u ? bias[e * p.nrows + r] : 0.0);
    }
  }
}
