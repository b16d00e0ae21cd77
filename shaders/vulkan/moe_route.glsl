// Routing of one token from its router logits (moe_route.comp, and moe_router.comp's last workgroup):
// the includer defines WG_SIZE (256), MAX_EXPERT (256) and MAX_USED (16), the bindings logits,
// router_b, expert_scale, ids and weights, and push constants p.n_expert, p.n_used, p.flags and
// p.logit_scale (moe_route.comp's header says what they mean), and route_scale(t), a positive factor
// of the token's logits (its norm's scale, or 1). Every invocation of the workgroup calls route_token
// together (it has barriers). flags & 16: the slots only, ranked by the scaled logits as they are (no
// softmax), their ids written and no weights. flags & 32: the slots read from ids (written by such a
// dispatch), their weights computed as without the flag.

#include "workgroup_select.glsl"

shared uint keys[MAX_EXPERT];
shared uint sel_e[MAX_USED];
shared float sel_v[MAX_USED];
shared float vals[MAX_EXPERT];

void route_token(uint t) {
  const uint lid = gl_LocalInvocationID.x;
  const bool topk_first = (p.flags & 1u) != 0u;
  const bool live = lid < p.n_expert;

  // Invocation lid's expert: its scaled, biased logit; with softmax first, its probability.
  const bool slots_only = (p.flags & 16u) != 0u, slots_given = (p.flags & 32u) != 0u;
  float v = uintBitsToFloat(0xff800000u);  // -inf: no expert
  if (live) {
    v = logits[t * p.n_expert + lid] * p.logit_scale;
    if (slots_given) v *= route_scale(t);
    if ((p.flags & 4u) != 0u) v += router_b[lid];
  }
  if (!topk_first && !slots_only) {
    const float mx = wg_max(v);
    const float x = live ? exp(v - mx) : 0.0;
    v = x / wg_sum(x);
  }
  if (slots_given) {
    // The slots as written: each one's expert and value.
    if (live) vals[lid] = v;
    barrier();
    if (lid < p.n_used) {
      const uint e = min(ids[t * p.n_used + lid], p.n_expert - 1u);
      sel_e[lid] = e;
      sel_v[lid] = vals[e];
    }
    barrier();
  } else {
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
  }
  if (slots_only) {
    if (lid < p.n_used) ids[t * p.n_used + lid] = sel_e[lid];
    return;
  }

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
  if (!slots_given) ids[t * p.n_used + lid] = e;
  weights[t * p.n_used + lid] = wt;
}
