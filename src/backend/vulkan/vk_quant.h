// Launchers of the kernels that read GGUF weights in their stored type (shaders/vulkan/quant.glsl
// decodes every type the CPU backend does: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K..Q6_K,
// IQ4_NL, IQ4_XS, MXFP4). Each records one dispatch on a Dispatcher, whatever the sizes (no barrier;
// the caller puts those between ops).
//
// Common preconditions (each launcher throws zinc::Error where it can tell):
//  - w is the tensor's raw GGUF bytes; its buffer must extend to a multiple of 4 bytes past the
//    tensor's end (a word holding a row's last byte is read whole) and the tensor fits in 4 GiB
//    (byte offsets are 32-bit).
//  - ncols is a multiple of the type's block size, and of 4 (F32, F16, BF16).
//  - Views start at Features::offset_alignment; activations are float32 rows, packed.
#pragma once

#include <cstdint>
#include <string>

#include "backend/vulkan/vk_context.h"
#include "gguf/types.h"

namespace zinc::backend::vk {

// Whether the kernels below have a variant for this weight type.
bool has_quant_kernels(gguf::TensorType type);

// y[t][r] = W[r] . x[t] (+ bias[r]): W {ncols, nrows} (rows of ncols), x [n_tokens][ncols],
// y [n_tokens][nrows], bias nrows floats (bias.buffer == nullptr: none). Any n_tokens; the weight is
// read once per 8 tokens, so this is the decode path (prefill belongs to a GEMM).
// ns (float weights, mul_mv_norm_fits): x is the residual sum whose norm (NormScale) the product reads.
void mul_mv(Context& ctx, Dispatcher& d, gguf::TensorType type, View w, View x, View y, View bias, uint32_t ncols,
            uint32_t nrows, uint32_t n_tokens, const NormScale& ns = {});
bool mul_mv_norm_fits(gguf::TensorType type, uint32_t ncols);

// The 32-element formats the CPU's way (has_mul_mv_q8: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, MXFP4): x
// quantized into `xq` (mul_mv_q8_bytes per row) to the activation format the CPU pairs with the type
// (quant::dot_activation_type: Q8_0, or Q8_1 for Q4_1 and Q5_1), then per block the integer sum of the
// code products and the float expression of quant::dot_ref, so that each block's value is the CPU's
// bit for bit and the result equals the CPU backend's product up to the order blocks are added (the
// same greedy tokens). Any n_tokens; meant for decode. Both launchers record the quantization, a
// barrier and the product.
bool has_mul_mv_q8(gguf::TensorType type);
// Bytes of one row's activation codes, the same for both formats: per block of 32, Q8_0: 32 codes
// then d as a float; Q8_1: the CPU's BlockQ8_1 (halves d and s, then 32 codes).
size_t mul_mv_q8_bytes(uint32_t ncols);
void mul_mv_q8(Context& ctx, Dispatcher& d, gguf::TensorType type, View w, View x, View xq, View y, uint32_t ncols,
               uint32_t nrows, uint32_t n_tokens);
// The same for experts, laid out and selected as mul_mv_id's (xq: mul_mv_q8_bytes per x row, the x
// rows being n_tokens, or n_tokens * n_used with x_per_slot).
void mul_mv_q8_id(Context& ctx, Dispatcher& d, gguf::TensorType type, View w, View ids, View x, View xq, View y,
                  View bias, uint32_t ncols, uint32_t nrows, uint32_t n_expert, uint32_t n_used, uint32_t n_tokens,
                  bool x_per_slot);
// Their two halves, for codes that serve several products (q, k and v; gate and up): the activation
// format a type's products read (1: Q8_1, 0: Q8_0), rows of x quantized to it (no barrier after), and
// the products from such codes, plus bias[r] (an empty view: none; mul_mv_q8_id's bias for experts).
uint32_t q8_act_format(gguf::TensorType type);
void quantize_q8_act(Context& ctx, Dispatcher& d, gguf::TensorType type, View x, View xq, uint32_t ncols, uint32_t rows);
void mul_mv_q8_codes(Context& ctx, Dispatcher& d, gguf::TensorType type, View w, View xq, View y, View bias, uint32_t ncols,
                     uint32_t nrows, uint32_t n_tokens);
void mul_mv_q8_id_codes(Context& ctx, Dispatcher& d, gguf::TensorType type, View w, View ids, View xq, View y, View bias,
                        uint32_t ncols, uint32_t nrows, uint32_t n_expert, uint32_t n_used, uint32_t n_tokens,
                        bool x_per_slot);
// The down product of codes per slot (x_per_slot) with the combine folded in: y as mul_mv_q8_id_codes
// writes it, and out[t][r] = the sum over slots in order of weights[t][slot] * y[t][slot][r] (as
// moe_combine, each product rounded), by the last of a token's slots over each group of rows; count:
// mul_mv_q8_combine_counts words, zero (and left zero). False (nothing recorded) where the device has
// no packed integer dot product or ZINC_VULKAN_Q8_COMBINE=0.
size_t mul_mv_q8_combine_counts(uint32_t nrows, uint32_t n_tokens);
// A mixture's gate and up products of codes per token with their GLU (SwiGLU, or the clamped form
// where clamped, with alpha and limit) and the down product's codes folded in: y[pair][r] = the GLU of
// the two rows (gate's and up's biases added where given), and q_out the codes of y's rows in
// q8_format (rows mul_mv_q8_bytes(nrows) apart), by the last workgroup of each 32 rows; count:
// mul_mv_q8_glu_counts words, zero (and left zero). nrows a multiple of 32. False (nothing recorded)
// where the device has no packed integer dot product or ZINC_VULKAN_Q8_GLU=0.
size_t mul_mv_q8_glu_counts(uint32_t nrows, uint32_t n_pairs);
bool mul_mv_q8_id_glu(Context& ctx, Dispatcher& d, gguf::TensorType type, View wg, View wu, View ids, View xq, View y,
                      View q_out, View count, View gate_bias, View up_bias, uint32_t ncols, uint32_t nrows,
                      uint32_t n_expert, uint32_t n_used, uint32_t n_tokens, bool clamped, float alpha, float limit,
                      uint32_t q8_format);
// With rn (one token; mul_mv_q8_combine_row_norm_fits): the residual add and whole-row norm after
// the combined rows too, by the last workgroup to finish (as mul_mv_k_row_norm).
struct MulMvKRowNorm;
bool mul_mv_q8_combine_row_norm_fits(const Context& ctx, uint32_t nrows);
bool mul_mv_q8_id_combine(Context& ctx, Dispatcher& d, gguf::TensorType type, View w, View ids, View weights, View xq,
                          View y, View out, View count, View bias, uint32_t ncols, uint32_t nrows, uint32_t n_expert,
                          uint32_t n_used, uint32_t n_tokens, const MulMvKRowNorm* rn = nullptr);

// K-quant weights (Q4_K, Q5_K, Q6_K) the CPU's way: x quantized to Q8_K by quantize_q8k (the CPU's
// codes, scales and 16-code sums, q8k_row_bytes per row), then mul_mv_k's integer block sums with one
// float expression per block in the CPU's order: equal to the CPU backend's product up to the order
// blocks are added. Needs packed integer dot products and subgroups of 8 or more (has_mul_mv_k);
// ncols a multiple of 256. Any n_tokens; meant for decode (the weight is read once per 4 tokens).
bool has_mul_mv_k(const Context& ctx, gguf::TensorType type);
size_t q8k_row_bytes(uint32_t ncols);
// rows rows of x [rows][ncols] into xq (q8k_row_bytes each). No barrier after it.
void quantize_q8k(Context& ctx, Dispatcher& d, View x, View xq, uint32_t ncols, uint32_t rows);
// y[t][r] = W[r] . xq[t]: W {ncols, nrows}, xq n_tokens rows from quantize_q8k, y [n_tokens][nrows].
// ns (one token): xq holds the codes of a norm's unscaled row, each sum is scaled by its scale. bias
// (nrows floats, optional): added to each row's sum.
void mul_mv_k(Context& ctx, Dispatcher& d, gguf::TensorType type, View w, View xq, View y, uint32_t ncols,
              uint32_t nrows, uint32_t n_tokens, const NormScale& ns = {}, View bias = {});
// The same for K-quant experts, laid out and selected as mul_mv_id's; xq: quantize_q8k's rows of x (n_tokens
// rows, or n_tokens * n_used with x_per_slot).
void mul_mv_k_id(Context& ctx, Dispatcher& d, gguf::TensorType type, View w, View ids, View xq, View y, View bias,
                 uint32_t ncols, uint32_t nrows, uint32_t n_expert, uint32_t n_used, uint32_t n_tokens, bool x_per_slot);
// The gate and up products of experts, their SwiGLU and its codes in one dispatch: act[t][k][r] =
// silu(G_e . xq[t]) * (U_e . xq[t]) for e = ids[t][k] (G and U of one type, x shared by the slots, no
// bias), act [n_tokens][n_used][nrows] float, and act's Q8_K rows (quantize_q8k's) in xq_out, written
// by the last workgroup of each 256 rows (count: n_tokens * n_used * nrows / 256 uint32 counters,
// zero before and after). False (nothing recorded) where it does not apply: nrows not a multiple of
// 256, or a shape whose workgroups straddle blocks.
// Whether mul_mv_k_id_glu takes experts of `type` with rows of ncols and nrows of them.
bool mul_mv_k_id_glu_fits(const Context& ctx, gguf::TensorType type, uint32_t ncols, uint32_t nrows);
void mul_mv_k_id_glu(Context& ctx, Dispatcher& d, gguf::TensorType type, View gate, View up, View ids, View xq, View act,
                     View xq_out, View count, uint32_t ncols, uint32_t nrows, uint32_t n_expert, uint32_t n_used,
                     uint32_t n_tokens, const NormScale& ns = {});
// The down product and the combine in one dispatch: y[t][r] = sum over slots k, in order, of
// weights[t][k] * (W_ids[t][k] . xq[t][k] (+ bias)), xq per slot; y [n_tokens][nrows]. False (nothing
// recorded) for more than 32 slots (mul_mv_k_id and moe_combine then).
bool mul_mv_k_id_combine(Context& ctx, Dispatcher& d, gguf::TensorType type, View w, View ids, View weights, View xq,
                         View y, View bias, uint32_t ncols, uint32_t nrows, uint32_t n_expert, uint32_t n_used,
                         uint32_t n_tokens);

// Decode's product of one token (mul_mv_k; or, with ids, the experts' down product and combine as
// mul_mv_k_id_combine) with the residual add and the whole-row RMSNorm after it: h = product + res (res
// may be h itself) into h, and per 256 rows, by the last workgroup of each, the Q8_K codes of
// h * (w + offset) (norm_w empty: no weights) into xq_out and the sum of h^2 into partials[r / 256],
// for the products that read the norm with NormScale. count: nrows / 256 uint32 counters, zero before
// and after. Needs mul_mv_k_norm_fits (and, for the experts, their combine's conditions).
struct MulMvKNorm {
  View res, norm_w, xq_out, count, partials;
  float offset = 0;
};
bool mul_mv_k_norm_fits(const Context& ctx, gguf::TensorType type, uint32_t ncols, uint32_t nrows);
void mul_mv_k_norm(Context& ctx, Dispatcher& d, gguf::TensorType type, View w, View xq, View h, uint32_t ncols, uint32_t nrows,
                   const MulMvKNorm& n, const struct GatedTail* gated = nullptr);
bool mul_mv_k_id_combine_norm_fits(const Context& ctx, gguf::TensorType type, uint32_t ncols, uint32_t nrows, uint32_t n_used);
void mul_mv_k_id_combine_norm(Context& ctx, Dispatcher& d, gguf::TensorType type, View w, View ids, View weights, View xq,
                              View h, uint32_t ncols, uint32_t nrows, uint32_t n_expert, uint32_t n_used, const MulMvKNorm& n,
                              const struct GatedTail* gated = nullptr);
// A shared expert's down product (mul_mv_k_norm) and the experts' combined down product
// (mul_mv_k_id_combine_norm), recorded side by side with the same counters, each writing only its
// own part (h above) and the last workgroup of each 256-row block, of either, doing the gated add
// sum = res + (experts' + shared * sigmoid(gate)) as rms_norm_row's gated add does, writing it to
// `sum`, then the norm's codes and partial sums as above. partner: the other's part; gate: one value
// a token; arrivals: both dispatches' workgroups a block (mul_mv_k_norm_groups +
// mul_mv_k_id_combine_norm_groups); shared: this dispatch is the shared expert's. One token.
struct GatedTail {
  View partner, gate, sum;
  uint32_t arrivals = 0;
  bool shared = false;
};
uint32_t mul_mv_k_norm_groups(gguf::TensorType type, uint32_t ncols, uint32_t nrows);
uint32_t mul_mv_k_id_combine_norm_groups(uint32_t ncols, uint32_t n_used);

// Decode's q or k product (one token) with rope_heads's work on its heads done by the last workgroup
// of each head, in place in y: the per-head norm where `norm` (weights norm_w where given), the
// rotation by cs (the token's [n_rot] cos/sin pairs) and, where `store`, the rotated row's append to
// k_cache at the step header's n_past (step). count: n_head counters from count_base, zero before and
// after. The same bits as mul_mv_k then rope_heads. Needs mul_mv_k_tail_fits.
struct MulMvKRope {
  View cs, norm_w, k_cache, step, count;
  uint32_t head_dim = 0, n_rot = 0, count_base = 0;
  bool neox = false, norm = false, store = false, f32_cache = false;
  float eps = 0, offset = 0;
};
// Whether decode's product of `type` with rows of ncols and nrows of them (heads of head_dim, at most
// 128) takes the rotation after it (mul_mv_k_rope) or the cache append (mul_mv_k_vstore).
bool mul_mv_k_tail_fits(const Context& ctx, gguf::TensorType type, uint32_t ncols, uint32_t nrows, uint32_t head_dim);
void mul_mv_k_rope(Context& ctx, Dispatcher& d, gguf::TensorType type, View w, View xq, View y, uint32_t ncols,
                   uint32_t nrows, const MulMvKRope& r, const NormScale& ns = {});
// Decode's v product (one token) appending its row to v_cache at the step header's n_past, as
// rope_heads stores v (halves rounded to nearest even, or floats).
void mul_mv_k_vstore(Context& ctx, Dispatcher& d, gguf::TensorType type, View w, View xq, View y, View v_cache, View step,
                     bool f32_cache, uint32_t ncols, uint32_t nrows, const NormScale& ns = {});
// The same two tails for the 32-element formats' products of one token (mul_mv_q8_codes's, xq the
// codes; bias added before the tail where given): the same bits as mul_mv_q8_codes then rope_heads
// (or the cache append). mul_mv_q8_tail_fits says where they apply: the packed dot product, heads of
// at most 128 that a workgroup's rows divide.
bool mul_mv_q8_tail_fits(const Context& ctx, gguf::TensorType type, uint32_t ncols, uint32_t nrows, uint32_t head_dim);
void mul_mv_q8_rope(Context& ctx, Dispatcher& d, gguf::TensorType type, View w, View xq, View y, View bias, uint32_t ncols,
                    uint32_t nrows, const MulMvKRope& r);
void mul_mv_q8_vstore(Context& ctx, Dispatcher& d, gguf::TensorType type, View w, View xq, View y, View bias, View v_cache,
                      View step, bool f32_cache, uint32_t ncols, uint32_t nrows);

// Decode's product of one token (its bias added) followed by a residual add and a whole-row RMSNorm,
// both done by the last of its workgroups to finish (rms_norm_row's f64_add form on the row, the same
// bits): sum = y + res, the norm's output, and where q8 is given its 32-element formats' activation
// codes in q8_format (as rms_norm_row writes them). count: one counter, zero before and after. For
// widths the K-quant norm tail (mul_mv_k_norm) does not take; needs mul_mv_k_row_norm_fits.
struct MulMvKRowNorm {
  View res, sum, y, norm_w, q8, count;
  float eps = 0, offset = 0;
  uint32_t q8_format = 0;
};
bool mul_mv_k_row_norm_fits(const Context& ctx, gguf::TensorType type, uint32_t ncols, uint32_t nrows);
// With route (mul_mv_k_row_route_fits, mul_mv_q8_row_route_fits): also the routing of a mixture whose
// F32 router R (n_expert rows, bias optional) reads the norm, in the same dispatch: fold holds, per
// expert, M[e] = (R_w W)[e] (ncols floats) then R_w[e] (nrows), then c = R_w bias (n_expert floats;
// zeros without a bias), R_w = R diag(w + offset) (router_fold_matrices); logits, ids and weights as
// moe_route writes them (the logits those of R times the norm's output, up to the order of sums). No
// expert scale.
struct RowRoute {
  View fold, logits, bias, ids, weights;
  uint32_t n_expert = 0, n_used = 0;
  bool topk_softmax = false, norm_topk = false;
  float logit_scale = 1;
};
bool mul_mv_k_row_route_fits(const Context& ctx, gguf::TensorType type, uint32_t ncols, uint32_t nrows, uint32_t n_expert,
                             uint32_t n_used);
// Decode-sized steps (n_tokens <= kMvMaxTokens, a counter a token), each row's arithmetic that of a
// one-token step.
void mul_mv_k_row_norm(Context& ctx, Dispatcher& d, gguf::TensorType type, View w, View xq, View y, View bias, uint32_t ncols,
                       uint32_t nrows, uint32_t n_tokens, const MulMvKRowNorm& n, const RowRoute* route = nullptr);
// The same for the 32-element formats' product on activation codes (mul_mv_q8_codes' xq): gpt-oss's
// Q8_0 o in files with MXFP4 experts. Needs mul_mv_q8_row_norm_fits (the packed dot product).
bool mul_mv_q8_row_norm_fits(const Context& ctx, gguf::TensorType type, uint32_t ncols, uint32_t nrows);
bool mul_mv_q8_row_route_fits(const Context& ctx, gguf::TensorType type, uint32_t ncols, uint32_t nrows, uint32_t n_expert,
                              uint32_t n_used);
void mul_mv_q8_row_norm(Context& ctx, Dispatcher& d, gguf::TensorType type, View w, View xq, View y, View bias, uint32_t ncols,
                        uint32_t nrows, uint32_t n_tokens, const MulMvKRowNorm& n, const RowRoute* route = nullptr);

// Decode's product of one token followed by the short causal convolution that is its one reader
// (graph Op::SsmConv, ssm_conv's work on each row's channel, the same bits): y = silu(conv(state,
// product)) with conv_w [nrows][taps] floats, and state ([taps - 1][nrows] floats) shifted by the
// product's row. The product itself is written nowhere.
void mul_mv_k_conv(Context& ctx, Dispatcher& d, gguf::TensorType type, View w, View xq, View conv_w, View state, View y,
                   uint32_t ncols, uint32_t nrows, uint32_t taps, const NormScale& ns = {});

// Mixture of experts: W {ncols, nrows, n_expert} (expert e's rows from byte e * row_size * nrows),
// ids [n_tokens][n_used] uint32 expert indices (clamped to n_expert - 1), y [n_tokens][n_used][nrows]:
// y[t][k] = W_ids[t][k] . x_(t,k) (+ bias[ids[t][k]]), x_(t,k) = x[t] ([n_tokens][ncols], gate and up)
// or, with x_per_slot, x[t][k] ([n_tokens][n_used][ncols], down); bias {nrows, n_expert} floats or
// none. One workgroup per (token, slot) and group of rows.
void mul_mv_id(Context& ctx, Dispatcher& d, gguf::TensorType type, View w, View ids, View x, View y, View bias,
               uint32_t ncols, uint32_t nrows, uint32_t n_expert, uint32_t n_used, uint32_t n_tokens, bool x_per_slot);

// The suffix of `type`'s shader variants (vk_weight_types.def) and the bytes of a row of ncols; throws
// zinc::Error, naming op, where no kernel reads the type or ncols is not whole units of it.
const char* weight_variant(const char* op, gguf::TensorType type, uint32_t ncols, uint32_t* row_bytes);

// Why the kernels cannot read rows of ncols values of `type` ("" when they can): every kernel that
// reads a weight as stored (get_rows, the products) takes whole units of its type.
std::string rows_unsupported(gguf::TensorType type, int64_t ncols);

// out[t] = dequant(W[ids[t]]) * scale: W {ncols, n_rows}, ids n_tokens uint32 (not range-checked),
// out [n_tokens][ncols] float32.
void get_rows(Context& ctx, Dispatcher& d, gguf::TensorType type, View w, View ids, View out, uint32_t ncols,
              uint32_t n_tokens, float scale);

}  // namespace zinc::backend::vk
