// The mixture-of-experts router split from the norm it reads, for decode-sized steps: where a
// product o = W_o a is added to the residual r and the sum's whole-row RMSNorm x = s (w + offset) h
// is what a bias-free F32 router reads, its logits are s z with z = R_w r + M a, R_w = R diag(w +
// offset) and M = R_w W_o. z needs nothing o writes, so the experts (the top k of z, the same as of
// s z for any s > 0) are chosen beside o's product instead of after it, and the weights once the
// norm's scale is known (vk_misc.h: moe_router_split, moe_route's `given`). R_w and M are made from
// the file's weights at load (F32: n_expert * (d + d_in) floats a layer).
#pragma once

#include <cstddef>
#include <vector>

#include "graph/graph.h"

namespace zinc::backend::vk {

// One such site: the product o (a node index), the MoE node reading the norm of o's sum, the
// residual r added to o, and the norm node; o's bias (a weight: with_biases only) or -1, and whether
// the router has a bias.
struct RouterSite {
  size_t o = 0, norm = 0, moe = 0;
  graph::TensorId r = -1;
  graph::TensorId o_bias = -1;
  bool router_bias = false;
};

// Every site of g, in node order: a MoE node with an F32 router, no router bias and no input of its
// own for the router, at most 256 experts and 16 used, reading a whole-row RmsNorm of an Add of a
// bias-free MatMul's output and another activation, the widths matching. with_biases: also where the
// router and the MatMul have biases (the fold below; no split: the bias makes the choice depend on s).
std::vector<RouterSite> router_sites(const graph::Graph& g, bool with_biases = false);

// R_w [n_expert][d] and M [n_expert][d_in] from R [n_expert][d], the norm's weights w [d] (nullptr: a
// norm without weights, w + offset taken as 1) and W_o [d][d_in] (dequantized); F32 sums, in order.
void router_split_matrices(const float* r, const float* w, float offset, const float* wo, size_t n_expert, size_t d,
                           size_t d_in, float* rw, float* m);

// The router folded into o's dispatch with its norm (RowRoute in vk_quant.h, mul_mv_q8's drnr_): per
// expert M[e] (d_in floats) then R_w[e] (d), then c = R_w bias (n_expert; bias nullptr: zeros), from
// router_split_matrices' R_w and M. fold: n_expert * (d_in + d + 1) floats.
void router_fold_matrices(const float* r, const float* w, float offset, const float* wo, const float* bias, size_t n_expert,
                          size_t d, size_t d_in, float* fold);

}  // namespace zinc::backend::vk
