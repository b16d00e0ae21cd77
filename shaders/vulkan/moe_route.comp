#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
// Mixture-of-experts routing (graph Op::MoE, CpuExecutable::moe), after the router's mat-vec: per token,
// l = logits * logit_scale (+ router bias), then either
//   softmax-top-k (SoftmaxTopK): p = softmax(l) over all experts, the k largest p, or
//   top-k-softmax (TopKSoftmax): the k largest l, then a softmax over those k only;
// optionally divided by the sum of the k weights (norm_topk), then times expert_scale[e]. Slots are in
// selection order: larger value first, equal values by lower expert index (the CPU's partial_sort).
// One workgroup of 64 per token; invocation i holds experts i, i + 64, ... in shared memory. Each of the
// k rounds picks the best remaining expert with one workgroup reduction (workgroup_select.glsl).
// Bindings: 0 logits [n_tokens][n_expert] float; 1 router bias {n_expert} (flag 4); 2 expert_scale
// {n_expert} (flag 8); 3 ids [n_tokens][n_used] uint; 4 weights [n_tokens][n_used] float.
// Grid: n_tokens workgroups as x * y. Moves 4 * n_expert bytes in, 8 * n_used out per token.
#define WG_SIZE 64
#define MAX_EXPERT 256
#define MAX_USED 16
layout(local_size_x = WG_SIZE) in;
layout(std430, binding = 0) readonly buffer L { float logits[]; };
layout(std430, binding = 1) readonly buffer RB { float router_b[]; };
layout(std430, binding = 2) readonly buffer ES { float expert_scale[]; };
layout(std430, binding = 3) writeonly buffer I { uint ids[]; };
layout(std430, binding = 4) writeonly buffer W { float weights[]; };
layout(push_constant) uniform Params {
  uint n_expert;  // <= 256
  uint n_used;    // <= 16, <= n_expert
  uint n_tokens;
  uint flags;     // 1: top-k then softmax; 2: renormalise by the top-k sum; 4: router bias; 8: expert_scale
  float logit_scale;
} p;

#include "workgroup_select.glsl"

shared float vals[MAX_EXPERT];

void main() {
  const uint t = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
  if (t >= p.n_tokens) return;  // whole workgroups only: the barriers below stay uniform
  const uint lid = gl_LocalInvocationID.x;
  const bool topk_first = (p.flags & 1u) != 0u;
  const uint slots = (p.n_expert + WG_SIZE - 1u) / WG_SIZE;

  // Scaled, biased logits; with softmax first, turned into probabilities.
  float mx = uintBitsToFloat(0xff800000u);  // -inf
  for (uint s = 0u; s < slots; ++s) {
    const uint e = lid + s * WG_SIZE;
    if (e < p.n_expert) {
      float l = logits[t * p.n_expert + e] * p.logit_scale;
      if ((p.flags & 4u) != 0u) l += router_b[e];
      vals[e] = l;
      mx = max(mx, l);
    }
  }
  if (!topk_first) {
    mx = wg_max(mx);
    float sum = 0.0;
    for (uint s = 0u; s < slots; ++s) {
      const uint e = lid + s * WG_SIZE;
      if (e < p.n_expert) {
        const float x = exp(vals[e] - mx);
        vals[e] = x;
        sum += x;
      }
    }
    sum = wg_sum(sum);
    for (uint s = 0u; s < slots; ++s) {
      const uint e = lid + s * WG_SIZE;
      if (e < p.n_expert) vals[e] /= sum;
    }
  }
  barrier();

  // k rounds of "best remaining expert"; each invocation remembers which of its own it gave away.
  uint taken = 0u;
  uint sel[MAX_USED];
  float w[MAX_USED];
  for (uint r = 0u; r < p.n_used; ++r) {
    uint key = 0u, idx = 0xffffffffu;
    for (uint s = 0u; s < slots; ++s) {
      const uint e = lid + s * WG_SIZE;
      if (e < p.n_expert && (taken & (1u << s)) == 0u) {
        const uint ks = order_key(vals[e]);
        if (ks > key) {  // slots ascend in expert index, so ties keep the lower one
          key = ks;
          idx = e;
        }
      }
    }
    const uvec2 best = wg_best(key, idx);
    if (best.y % WG_SIZE == lid) taken |= 1u << (best.y / WG_SIZE);
    sel[r] = best.y;
    w[r] = vals[best.y];
  }

  // Every invocation holds the same k slots; the first writes them.
  if (lid != 0u) return;
  if (topk_first) {
    const float top_l = w[0];
    float sum = 0.0;
    for (uint i = 0u; i < p.n_used; ++i) {
      w[i] = exp(w[i] - top_l);
      sum += w[i];
    }
    for (uint i = 0u; i < p.n_used; ++i) w[i] /= sum;
  }
  float top = 0.0;
  for (uint i = 0u; i < p.n_used; ++i) top += w[i];
  for (uint i = 0u; i < p.n_used; ++i) {
    float wt = (p.flags & 2u) != 0u ? w[i] / top : w[i];
    if ((p.flags & 8u) != 0u) wt *= expert_scale[sel[i]];
    ids[t * p.n_used + i] = sel[i];
    weights[t * p.n_used + i] = wt;
  }
}
