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
// {n_expert} (flag 8); 3 ids [n_tokens][n_used] uint; 4 weights [n_tokens][n_used] float; with flags
// & 32 (the slots given in ids by moe_router.comp's flags & 16, which ranked the logits without the
// norm's scale), 5 the norm's partial sums, the logits each multiplied by its scale first.
// Grid: n_tokens workgroups as x * y. Moves 4 * n_expert bytes in, 8 * n_used out per token.
#define WG_SIZE 256
#define MAX_EXPERT 256
#define MAX_USED 16
layout(local_size_x = WG_SIZE) in;
layout(std430, binding = 0) readonly buffer L { float logits[]; };
layout(std430, binding = 1) readonly buffer RB { float router_b[]; };
layout(std430, binding = 2) readonly buffer ES { float expert_scale[]; };
layout(std430, binding = 3) buffer I { uint ids[]; };
layout(std430, binding = 5) readonly buffer NP { float npart[]; };
layout(std430, binding = 4) writeonly buffer W { float weights[]; };
layout(push_constant) uniform Params {
  uint n_expert;  // <= 256
  uint n_used;    // <= 16, <= n_expert
  uint n_tokens;
  uint flags;     // 1: top-k then softmax; 2: renormalise by the top-k sum; 4: router bias; 8: expert_scale;
                  // 32: the slots given (moe_route.glsl)
  float logit_scale;
  uint norm_blocks;  // flags & 32: the norm's partial sums of h^2 a token (binding 5)
  uint d;            // flags & 32: the norm's width
  float norm_eps;
} p;

// flags & 32: the norm's scale 1 / sqrt(mean(h^2) + eps) of the token, from its partial sums in block
// order, as moe_router.comp and mul_mv_k.comp's norm_partials.glsl compute it.
float route_scale(uint t) {
  float total = 0.0;
  for (uint i = 0u; i < p.norm_blocks; ++i) total += npart[t * p.norm_blocks + i];
  precise const float mean = total / float(p.d) + p.norm_eps;
  return 1.0 / sqrt(mean);
}

#include "moe_route.glsl"

void main() {
  const uint t = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
  if (t >= p.n_tokens) return;  // whole workgroups only: the barriers in route_token stay uniform
  route_token(t);
}
