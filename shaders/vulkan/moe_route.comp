#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_control_flow_attributes : enable
// Mixture-of-experts routing (graph Op::MoE, CpuExecutable::moe), after the router's mat-vec: per token,
// l = logits * logit_scale (+ router bias), then either
//   softmax-top-k (SoftmaxTopK): p = softmax(l) over all experts, the k largest p, or
//   top-k-softmax (TopKSoftmax): the k largest l, then a softmax over those k only;
// optionally divided by the sum of the k weights (norm_topk), then times expert_scale[e]. Slots are in
// selection order: larger value first, equal values by lower expert index (the CPU's partial_sort).
// One workgroup of 256 per token; invocation i holds expert i and ranks it against every expert (the
// same shared words read by the whole workgroup at once); the experts of ranks below k are the slots.
// Bindings: 0 logits [n_tokens][n_expert] float; 1 router bias {n_expert} (flag 4); 2 expert_scale
// {n_expert} (flag 8); 3 ids [n_tokens][n_used] uint; 4 weights [n_tokens][n_used] float.
// Grid: n_tokens workgroups as x * y. Moves 4 * n_expert bytes in, 8 * n_used out per token.
#define WG_SIZE 256
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

shared uint keys[MAX_EXPERT];
shared uint sel_e[MAX_USED];
shared float sel_v[MAX_USED];

void main() {
  const uint t = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
  if (t >= p.n_tokens) return;  // whole workgroups only: the barriers below stay uniform
  const uint lid = gl_LocalInvocationID.x;
  const bool topk_first = (p.flags & 1u) != 0u;
  const bool live = lid < p.n_expert;

  // Invocation lid's expert: its scaled, biased logit; with softmax first, its probability.
  float v = uintBitsToFloat(0xff800000u);  // -inf: no expert
  if (live) {
    v = logits[t * p.n_expert + lid] * p.logit_scale;
    if ((p.flags & 4u) != 0u) v += router_b[lid];
  }
  if (!topk_first) {
    const float mx = wg_max(v);
    const float x = live ? exp(v - mx) : 0.0;
    v = x / wg_sum(x);
  }

  // Each expert's rank: the experts ahead of it (a larger value, or an equal one at a lower index),
  // counted by its invocation against all of them, 16 keys a step (unrolled, every invocation reading
  // the same words); ranks below k are the slots. Keys past n_expert are 0, below every expert's.
  keys[lid] = live ? order_key(v) : 0u;
  barrier();
  if (live) {
    const uint ke = keys[lid];
    uint rank = 0u;
    for (uint o = 0u; o < p.n_expert; o += 16u) {
      [[unroll]] for (uint c = 0u; c < 16u; ++c) {
        const uint ko = keys[o + c];
        rank += (ko > ke || (ko == ke && o + c < lid)) ? 1u : 0u;
      }
    }
    if (rank < p.n_used) {
      sel_e[rank] = lid;
      sel_v[rank] = v;
    }
  }
  barrier();

  // Invocation r < k writes slot r; each computes the sums over the k slots itself, in slot order
  // (the same arithmetic in every invocation, no arrays of its own).
  if (lid >= p.n_used) return;
  const float top_l = sel_v[0];
  float sum = 0.0;
  if (topk_first) {
    for (uint i = 0u; i < p.n_used; ++i) sum += exp(sel_v[i] - top_l);
  }
  float top = 0.0;
  for (uint i = 0u; i < p.n_used; ++i) top += topk_first ? exp(sel_v[i] - top_l) / sum : sel_v[i];
  const uint e = sel_e[lid];
  float wt = topk_first ? exp(sel_v[lid] - top_l) / sum : sel_v[lid];
  if ((p.flags & 2u) != 0u) wt /= top;
  if ((p.flags & 8u) != 0u) wt *= expert_scale[e];
  ids[t * p.n_used + lid] = e;
  weights[t * p.n_used + lid] = wt;
}
