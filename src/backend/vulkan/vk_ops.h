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

// Rotary embedding with the angles' (cos, sin) table cs [n_tokens][n_rot] from the host.
void rope(Context& ctx, Dispatcher& d, View x, View cs, View y, uint32_t n_head, uint32_t head_dim, uint32_t n_rot,
          bool neox, uint32_t n_tokens);

enum class Eltwise { Add, Mul, SwiGLU, GeGLU, SigmoidMul, Softcap, SwiGLUClamped };

// out[i] = f(a[i], b[...]) over n_tokens rows of a_width: b has rows of b_width (a_width, or 1 for a
// value per row), and with b_shared one row of b serves every row of a (a bias or scale vector).
// p0, p1: Softcap's cap; SwiGLUClamped's alpha and limit.
void eltwise(Context& ctx, Dispatcher& d, Eltwise op, View a, View b, View out, uint32_t a_width, uint32_t b_width,
             uint32_t n_tokens, bool b_shared = false, float p0 = 0, float p1 = 0);

}  // namespace zinc::backend::vk
