// Launchers of the remaining graph ops' kernels: mixture-of-experts routing and combining, the
// recurrent ops of linear-attention layers (short convolution, gated delta rule), strided row copies
// (Split, Concat, SelectLast) and greedy argmax. Each records one op's dispatches on a Dispatcher and
// leaves the barrier after the op to the caller. Activations are float rows [n_tokens][width], packed;
// views start at Features::offset_alignment; outputs never alias inputs. Small weights (router bias,
// expert scale, conv taps, A, dt_bias) are F32. The CPU backend (cpu_backend.cpp, cpu_ops.h) is the
// reference for every one of them. moe_route, moe_router and argmax use subgroup arithmetic in
// compute shaders (subgroupSupportedOperations BASIC | ARITHMETIC: every desktop driver and lavapipe)
// and are correct for any subgroup size the driver picks; the others use none.
#pragma once

#include <cstdint>

#include "backend/vulkan/vk_context.h"

namespace zinc::backend::vk {

// MoE routing from the router's logits [n_tokens][n_expert] (before logit_scale and bias):
// ids [n_tokens][n_used] uint32 and weights [n_tokens][n_used] float in selection order (larger first,
// ties by lower expert index), as CpuExecutable::moe: l = logits * logit_scale + bias, then
// softmax-then-top-k (topk_softmax false) or top-k-then-softmax (true), then / top-k sum when
// norm_topk, then * expert_scale[e]. bias and expert_scale ({n_expert} F32) may be empty views.
// n_expert <= 256, n_used <= 16 (throws otherwise).
// given (ns.partials set: the router split from its norm, moe_router_split): the slots are those in
// ids already, and each logit is first multiplied by the token's norm scale 1 / sqrt(sum / width + eps)
// (ns: its partial sums of h^2, blocks a token); only the weights are written.
void moe_route(Context& ctx, Dispatcher& d, View logits, View bias, View expert_scale, View ids, View weights,
               uint32_t n_expert, uint32_t n_used, uint32_t n_tokens, bool topk_softmax, bool norm_topk,
               float logit_scale, const NormScale& given = {});

// The router's product and the routing in one dispatch (decode-sized steps): logits = R x for R
// [n_expert][d] F32 and x [n_tokens][d], then moe_route's ids and weights from them, by the last of a
// token's workgroups (count: n_tokens uint32 counters, zero before and after). False (nothing
// recorded) where it does not apply: d not a multiple of 4, or moe_route's limits. ns (one token): x is
// the residual sum whose norm (NormScale) the router reads.
bool moe_router(Context& ctx, Dispatcher& d, View router, View x, View logits, View bias, View expert_scale, View ids,
                View weights, View count, uint32_t d_model, uint32_t n_expert, uint32_t n_used, uint32_t n_tokens,
                bool topk_softmax, bool norm_topk, float logit_scale, const NormScale& ns = {});

// The router split from the norm it reads (decode-sized steps, routers without a bias), for a
// product o = W_o a before the residual add h = o + r and the whole-row norm x = s * (w + offset) * h
// the router reads: its logits are s * z, z = R_w r + M a with R_w = R diag(w + offset) and M = R_w
// W_o (both F32, made at load). With `base` holding R_w r (a product recorded beside an earlier
// dispatch), this adds M a, a the Q8_K rows o reads (xq, d_in columns a row), and ranks the experts by
// z * logit_scale: the slots of the norm-scaled logits for any scale s > 0. ids only; moe_route's
// `given` form then writes the weights once s is known. count as moe_router's. False (nothing
// recorded) where it does not apply: d_in not a multiple of 256, or moe_route's limits.
// logits = R x alone, as moe_router computes them (its arithmetic for any n_tokens): R [n_expert][d] F32,
// x [n_tokens][d], d a multiple of 4, n_expert <= 256 (throws otherwise).
void moe_router_product(Context& ctx, Dispatcher& d, View router, View x, View logits, uint32_t d_model, uint32_t n_expert,
                        uint32_t n_tokens);
bool moe_router_split(Context& ctx, Dispatcher& d, View m, View xq, View base, View ids, View count, uint32_t d_in,
                      uint32_t n_expert, uint32_t n_used, uint32_t n_tokens, bool topk_softmax, float logit_scale);

// out[t][i] = sum_k weights[t][k] * y[t][k][i]; y [n_tokens][n_used][width], out [n_tokens][width].
void moe_combine(Context& ctx, Dispatcher& d, View y, View weights, View out, uint32_t width, uint32_t n_used,
                 uint32_t n_tokens);

// Where a recurrent op also writes the state after each token (a speculative step's, to go back to):
// token t's at view.offset + t * stride_bytes. stride_bytes 0: nowhere.
struct Kept {
  View view{};
  uint32_t stride_bytes = 0;
};

// Op::SsmConv: out = silu(causal depthwise conv of (state, x) with w [width][kernel]), state float
// [kernel - 1][width] updated in place (cpu::ssm_conv). One dispatch; out must not alias x.
void ssm_conv(Context& ctx, Dispatcher& d, View x, View w, View state, View out, uint32_t width, uint32_t kernel,
              uint32_t n_tokens, const Kept& kept = {});

// Op::DeltaNet: the gates (beta = sigmoid(b), g = A softplus(a + dt_bias)) and the gated delta rule
// token by token, state [n_head_v][dk][dv] float updated in place (cpu::gated_delta_rule's layout).
// q, k [n_tokens][n_head_k * dk]; v, out [n_tokens][n_head_v * dv]; a, b [n_tokens][n_head_v]; A,
// dt_bias {n_head_v} F32. v head h reads q/k head h % n_head_k when tiled, else h / (n_head_v / n_head_k).
// One dispatch of ceil(dv / 32) * n_head_v workgroups of 256; dk <= 1024 (throws otherwise).
// `rows`: q, k and v read as pieces of wider rows (a split the dispatch does itself): q[t * qk_row +
// q_off + ...], k[t * qk_row + k_off + ...], v[t * v_row + v_off + ...] in floats (rows 0: dense).
struct DeltaNetRows {
  uint32_t qk_row = 0, v_row = 0, q_off = 0, k_off = 0, v_off = 0;
};
// With ng (a one-token step, q, k and v pieces of one tensor's rows): the per-head RMSNorm of out
// (heads of dv, weights w or none) and the SwiGLU silu(z) * norm after it, as rms_norm_glu does them
// (the same bits), by the last workgroup of each 256-element block (count: a zero counter a block,
// zero again after); out the SwiGLU's output, xq its Q8_K codes where given. The norm's own output is
// not written. Needs delta_norm_glu_fits.
struct DeltaNormGlu {
  View w, z, out, xq, count;
  float eps = 0, offset = 0;
};
bool delta_norm_glu_fits(const Context& ctx, uint32_t n_head_v, uint32_t dv);
void delta_net(Context& ctx, Dispatcher& d, View q, View k, View v, View a, View b, View A, View dt_bias, View state,
               View out, uint32_t n_head_k, uint32_t n_head_v, uint32_t dk, uint32_t dv, bool tiled,
               uint32_t n_tokens, const Kept& kept = {}, const DeltaNetRows& rows = {}, const DeltaNormGlu* ng = nullptr);

// out[t * out_stride + out_offset + g * piece + i] = in[(t + in_row0) * in_stride + in_offset + g * group_stride + i]
// for t < n_tokens, g < n_groups, i < piece (all in floats). Split: one call; Concat: one call per
// part (n_groups 1); SelectLast: in_row0 = the last row, n_tokens 1.
void copy_rows(Context& ctx, Dispatcher& d, View in, View out, uint32_t n_tokens, uint32_t in_row0, uint32_t in_stride,
               uint32_t in_offset, uint32_t group_stride, uint32_t n_groups, uint32_t piece, uint32_t out_stride,
               uint32_t out_offset);

// Bytes of scratch argmax needs for n floats.
inline size_t argmax_scratch_bytes(uint32_t n) { return 8 * ((size_t{n} + 2047) / 2048); }

// out[0] (uint32) = the index of the largest of x[0, n), as the CPU's greedy sampler picks it: the
// lowest of equal maxima, NaN never; 0xffffffff when none is above -inf (where Sampler::sample throws:
// nothing to draw). Two dispatches with a barrier
// between them; scratch: argmax_scratch_bytes(n) bytes (8 per 2048 floats).
void argmax(Context& ctx, Dispatcher& d, View x, View out, View scratch, uint32_t n);

}  // namespace zinc::backend::vk
