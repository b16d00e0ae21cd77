#include "backend/vulkan/vk_ops.h"

#include "core/error.h"

namespace zinc::backend::vk {

namespace {

// Splits a 1-D grid of `groups` workgroups into x * y within the device's per-dimension limit.
void grid(const Context& ctx, uint32_t groups, uint32_t* gx, uint32_t* gy) {
  const uint32_t max_x = ctx.features().max_groups_x;
  *gy = (groups + max_x - 1) / max_x;
  *gx = (groups + *gy - 1) / *gy;
}

}  // namespace

void rms_norm(Context& ctx, Dispatcher& d, View x, View w, View y, uint32_t width, uint32_t group, uint32_t n_tokens,
              float eps, float offset) {
  // Whole rows feed the quantized matrix products, whose 8-bit codes need the CPU's exact values; a
  // per-head norm (q and k before rotation) does not, and the float sum is the quicker one.
  const bool exact = ctx.features().fp64 && group == width;
  const Kernel& k = ctx.pipeline(exact ? "rms_norm_f64" : "rms_norm_f32", 3, 16);
  struct {
    uint32_t group, has_weight;
    float eps, offset;
  } push{group, w.buffer ? 1u : 0u, eps, offset};
  const View bindings[] = {x, w.buffer ? w : x, y};
  d.dispatch(k, bindings, &push, n_tokens * (width / group));
}

void rope(Context& ctx, Dispatcher& d, View x, View cs, View y, uint32_t n_head, uint32_t head_dim, uint32_t n_rot,
          bool neox, uint32_t n_tokens) {
  const Kernel& k = ctx.pipeline("rope", 3, 20);
  const uint32_t width = n_head * head_dim, n = width * n_tokens;
  const uint32_t push[] = {width, head_dim, n_rot, neox ? 1u : 0u, n};
  const View bindings[] = {x, cs, y};
  uint32_t gx = 0, gy = 0;
  grid(ctx, (n + 255) / 256, &gx, &gy);
  d.dispatch(k, bindings, push, gx, gy);
}

void eltwise(Context& ctx, Dispatcher& d, Eltwise op, View a, View b, View out, uint32_t a_width, uint32_t b_width,
             uint32_t n_tokens, bool b_shared, float p0, float p1) {
  static constexpr const char* kNames[] = {"eltwise_add",         "eltwise_mul",     "eltwise_swiglu",
                                           "eltwise_geglu",       "eltwise_sigmoid_mul", "eltwise_softcap",
                                           "eltwise_swiglu_clamped"};
  const Kernel& k = ctx.pipeline(kNames[static_cast<int>(op)], 3, 24);
  const uint32_t n = a_width * n_tokens;
  struct {
    uint32_t n, a_width, b_width, b_row_stride;
    float p0, p1;
  } push{n, a_width, b_width, b_shared ? 0u : b_width, p0, p1};
  const View bindings[] = {a, b.buffer ? b : a, out};
  uint32_t gx = 0, gy = 0;
  grid(ctx, (n + 255) / 256, &gx, &gy);
  d.dispatch(k, bindings, &push, gx, gy);
}

}  // namespace zinc::backend::vk
