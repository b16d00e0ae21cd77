#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_control_flow_attributes : enable
// Mixture-of-experts router and routing in one dispatch, for decode-sized steps: the router's F32
// mat-vec logits[t][e] = R[e] . x[t] (as mul_mv.comp's F32 variant, its own order of sums), then, by
// the last of the token's workgroups to finish, the routing of moe_route.comp (moe_route.glsl) from
// those logits. One dependent dispatch (and the barrier before it) fewer per MoE layer than mul_mv
// then moe_route.
//
// Grid: x = ceil(n_expert / RPW) workgroups of 256 per token, y = tokens. A workgroup takes RPW
// experts' rows: its invocations in RPW groups of 128, one row each, 4 floats a step (UNROLL steps'
// loads at once); each group's sums added per subgroup and the subgroups' sums in shared memory, in
// order. One invocation of a workgroup writes its logits, makes them visible (coherent buffer,
// memoryBarrierBuffer) and counts the workgroup in count[t]; the one that brings the count to the
// token's workgroups resets it to 0 (for the next dispatch) and routes.
// Bindings 0..4 as moe_route.comp (logits coherent here: written by the workgroups of this dispatch,
// read by one of them); 5 R [n_expert][d] F32; 6 x [n_tokens][d] F32; 7 count [n_tokens] uint, zero
// before the dispatch and after it; with norm_blocks > 0 (x the residual sum h whose whole-row RMSNorm
// the router reads, left to it by the product before: mul_mv_k.comp's MUL_MV_NORM, or rms_norm_row's
// factored form), 8 that norm's partial sums of h^2 (norm_blocks floats a token) and 9 its weights: x = h * (w + offset) and
// each logit times 1 / sqrt(sum / d + norm_eps), the norm's scale taken out of the sum.
// x_q8k = 1: x is Q8_K rows (q8k.glsl's layout, xstride words a token; d a multiple of 256), each
// value its code times its block's d. add_base = 1: each logit is the sum plus the value logits held
// before the dispatch (another product's part, written before it). flags & 16 (the router split from
// the norm, moe_router_split in vk_misc.h): the experts are ranked by logit * logit_scale alone (no
// softmax: the order of the norm-scaled probabilities for any positive scale) and only their ids are
// written; moe_route.comp's flags & 32 later gives them their weights. flags & 64: the logits alone
// (no count, no routing; bindings 0..4 and 7 then any).
// Preconditions: d a multiple of 4, n_expert <= 256, n_used <= 16.
#define WG_SIZE 256
#define MAX_EXPERT 256
#define MAX_USED 16
#define RPW 2u      // experts per workgroup
#define GSIZE 128u  // invocations per expert
#define UNROLL 4u   // loads issued together per invocation
layout(local_size_x = WG_SIZE) in;
layout(std430, binding = 0) coherent buffer L { float logits[]; };
layout(std430, binding = 1) readonly buffer RB { float router_b[]; };
layout(std430, binding = 2) readonly buffer ES { float expert_scale[]; };
layout(std430, binding = 3) buffer I { uint ids[]; };
layout(std430, binding = 4) writeonly buffer W { float weights[]; };
layout(std430, binding = 5) readonly restrict buffer R { vec4 r4[]; };
layout(std430, binding = 6) readonly restrict buffer X { vec4 x4[]; };
layout(std430, binding = 6) readonly restrict buffer XQ { uint xq[]; };
layout(std430, binding = 7) coherent buffer C { uint count[]; };
layout(std430, binding = 8) readonly restrict buffer NP { float npart[]; };
layout(std430, binding = 9) readonly restrict buffer NW { vec4 nw4[]; };
layout(push_constant) uniform Params {
  uint n_expert;  // <= 256
  uint n_used;    // <= 16, <= n_expert
  uint n_tokens;
  uint flags;     // as moe_route.comp
  float logit_scale;
  uint d;         // the router's columns, a multiple of 4
  uint norm_blocks;  // 0: x is the router's input as it is
  float norm_eps;
  float norm_offset;
  uint norm_has_w;
  uint x_q8k;     // 1: x as Q8_K rows, xstride words apart
  uint xstride;
  uint add_base;  // 1: each logit adds the value logits held before
} p;

float route_scale(uint t) { return 1.0; }  // (flags & 32 is moe_route.comp's)
#include "moe_route.glsl"

shared float red[RPW * WG_SIZE];  // per (expert, subgroup): sized for subgroups of one invocation
shared bool last;
shared float np_sh[WG_SIZE];  // a norm's partial sums (norm_blocks <= WG_SIZE: d <= 65,536)

void main() {
  const uint t = gl_WorkGroupID.y, lid = gl_LocalInvocationID.x, grp = lid / GSIZE;
  const uint e0 = gl_WorkGroupID.x * RPW, e = min(e0 + grp, p.n_expert - 1u);
  const uint d4 = p.d / 4u;
  // UNROLL steps' loads issued before their sums (a 2,048-wide row: one such pass).
  float acc = 0.0;
  // A norm's partial sums loaded now, one an invocation, and added in block order by the invocation
  // that writes the logits (no wait for them before the router's first loads).
  const float npv = lid < p.norm_blocks ? npart[t * p.norm_blocks + lid] : 0.0;
  const bool weighted = p.norm_blocks != 0u && p.norm_has_w != 0u;
  for (uint c0 = lid % GSIZE; c0 < d4; c0 += GSIZE * UNROLL) {
    vec4 rv[UNROLL], xv[UNROLL];
    [[unroll]] for (uint u = 0u; u < UNROLL; ++u) {
      const uint c = min(c0 + u * GSIZE, d4 - 1u);
      rv[u] = r4[e * d4 + c];
      if (p.x_q8k != 0u) {
        const int w = int(xq[t * p.xstride + c]);
        const float dq = uintBitsToFloat(xq[t * p.xstride + d4 + d4 / 4u + c / 64u]);
        xv[u] = vec4((w << 24) >> 24, (w << 16) >> 24, (w << 8) >> 24, w >> 24) * dq;
      } else {
        xv[u] = x4[t * d4 + c];
      }
      if (weighted) xv[u] *= nw4[c] + p.norm_offset;
    }
    [[unroll]] for (uint u = 0u; u < UNROLL; ++u) {
      if (c0 + u * GSIZE < d4) acc += dot(rv[u], xv[u]);
    }
  }
  // Each group's sums: added per subgroup with the other groups' as zeros (any subgroup size).
  [[unroll]] for (uint g = 0u; g < RPW; ++g) {
    const float s = subgroupAdd(grp == g ? acc : 0.0);
    if (subgroupElect()) red[g * WG_SIZE + gl_SubgroupID] = s;
  }
  if (lid < p.norm_blocks) np_sh[lid] = npv;
  barrier();
  // One invocation writes the workgroup's logits, makes them visible and counts the workgroup.
  if (lid == 0u) {
    float ns = 1.0;
    if (p.norm_blocks != 0u) {
      float total = 0.0;
      for (uint i = 0u; i < p.norm_blocks; ++i) total += np_sh[i];
      precise const float mean = total / float(p.d) + p.norm_eps;
      ns = 1.0 / sqrt(mean);
    }
    for (uint g = 0u; g < RPW && e0 + g < p.n_expert; ++g) {
      float s = 0.0;
      for (uint sg = 0u; sg < gl_NumSubgroups; ++sg) s += red[g * WG_SIZE + sg];
      const uint at = t * p.n_expert + e0 + g;
      logits[at] = p.add_base != 0u ? logits[at] + s * ns : s * ns;
    }
    if ((p.flags & 64u) != 0u) {
      last = false;  // the product alone
    } else {
      memoryBarrierBuffer();
      last = atomicAdd(count[t], 1u) == gl_NumWorkGroups.x - 1u;
      if (last) count[t] = 0u;
    }
  }
  barrier();
  if (!last) return;  // uniform: the workgroup's shared flag
  memoryBarrierBuffer();
  route_token(t);
}
