// Launchers of the simple kernels (normalisation, rotation, element-wise): each records one op's
// dispatches on a Dispatcher (a recording the executor replays, or Context::immediate() in tests).
// Activations are float rows [n_tokens][width], packed; views start at Features::offset_alignment.
#pragma once

#include <cstdint>

#include "backend/vulkan/vk_context.h"

namespace zinc::backend::vk {

// y = x / sqrt(mean(x^2) + eps) * (w + offset) over groups of `group` floats; w (group floats) may be
// an empty view (no weight). Whole rows (group == width) are normalised bit for bit as the CPU does
// where the device has doubles.
void rms_norm(Context& ctx, Dispatcher& d, View x, View w, View y, uint32_t width, uint32_t group, uint32_t n_tokens,
              float eps, float offset);

// Whole rows, each in one pass held in registers (rms_norm_row.comp): what rms_norm does for
// group == width when rms_norm_row_fits, plus two fusions. With b: x + b is normalised and written to
// `sum` as well (the residual add before a norm); with xq: y is also quantized to Q8_K as quantize_q8k
// does (width a multiple of 256, rows q8k_row_bytes apart; needs has_mul_mv_k's device). Rows of y
// may alias rows of x or b at the same offset, nothing else.
bool rms_norm_row_fits(uint32_t width);
// With q8 (and no xq): y also as the 32-element formats' activation codes in q8_format
// (q8_act_format), the bytes quantize_q8_act writes (rows mul_mv_q8_bytes apart), where
// rms_norm_row_q8_fits.
bool rms_norm_row_q8_fits(const Context& ctx, uint32_t width);
// With partials (b and xq given; rms_norm_row_factored_fits): the factored form, the norm left to the
// K-quant kernels that read it (NormScale) as mul_mv_k_norm leaves it in a one-token step: y is not
// written, xq gets the codes of the unscaled weighted sum (x + b) * (w + offset) and partials each
// row's width / 256 sums of squares of x + b, in that kernel's order.
// With a gate (b given, no partials): x + (b + gate.a * sigmoid(gate.g)) in place of x + b, each sum
// rounded as sigmoid_mul_add's (a shared expert's gated output added to the experts', then to the
// residual); gate.g holds one value per row where per_row, else rows like a. Rows of y and sum may not
// share memory with gate.a or gate.g other than row for row at the same offset (per_row: not at all).
struct RowGate {
  View a, g;
  bool per_row = false;
};
void rms_norm_row(Context& ctx, Dispatcher& d, View x, View b, View sum, View w, View y, View xq, uint32_t width,
                  uint32_t n_tokens, float eps, float offset, View q8 = {}, uint32_t q8_format = 0, View partials = {},
                  const RowGate& gate = {});
bool rms_norm_row_factored_fits(const Context& ctx, uint32_t width);

// A per-head norm (rms_norm with group < width) and the SwiGLU that reads it, in one dispatch
// (rms_norm_glu.comp): y as rms_norm writes it, out = silu(z) * y, and with xq out's Q8_K codes (rows
// q8k_row_bytes apart): the values of rms_norm, then eltwise SwiGLU. Fits where width is a
// multiple of 256, group divides 256 and group times the subgroup size is at least 256 (rms_norm_glu_fits).
// out may alias x or z at the same offset, nothing else.
bool rms_norm_glu_fits(const Context& ctx, uint32_t width, uint32_t group);
void rms_norm_glu(Context& ctx, Dispatcher& d, View x, View w, View z, View y, View out, View xq, uint32_t width,
                  uint32_t group, uint32_t n_tokens, float eps, float offset);

// Rotary embedding with the angles' (cos, sin) table cs [n_tokens][n_rot] from the host.
void rope(Context& ctx, Dispatcher& d, View x, View cs, View y, uint32_t n_head, uint32_t head_dim, uint32_t n_rot,
          bool neox, uint32_t n_tokens);

enum class Eltwise { Add, Mul, SwiGLU, GeGLU, SigmoidMul, Softcap, SwiGLUClamped };

// out[i] = f(a[i], b[...]) over n_tokens rows of a_width: b has rows of b_width (a_width, or 1 for a
// value per row), and with b_shared one row of b serves every row of a (a bias or scale vector).
// p0, p1: Softcap's cap; SwiGLUClamped's alpha and limit. With xq, out is also quantized to Q8_K as
// quantize_q8k does (a_width a multiple of 256; has_mul_mv_k's device); with q8 (and no xq), as
// quantize_q8_act does in format q8_format (q8_act_format; rows mul_mv_q8_bytes apart), where
// eltwise_q8_fits.
bool eltwise_q8_fits(const Context& ctx, uint32_t a_width);
void eltwise(Context& ctx, Dispatcher& d, Eltwise op, View a, View b, View out, uint32_t a_width, uint32_t b_width,
             uint32_t n_tokens, bool b_shared = false, float p0 = 0, float p1 = 0, View xq = View{}, View q8 = View{},
             uint32_t q8_format = 0);
// SigmoidMul, then the add after it in the same dispatch: out = a * sigmoid(b), sum = c + out.
void sigmoid_mul_add(Context& ctx, Dispatcher& d, View a, View b, View c, View out, View sum, uint32_t a_width,
                     uint32_t b_width, uint32_t n_tokens);

}  // namespace zinc::backend::vk
