#include "backend/vulkan/vk_ops.h"

#include <fmt/format.h>

#include <array>

#include "backend/vulkan/vk_quant.h"
#include "core/error.h"
#include "core/knobs.h"

namespace zinc::backend::vk {

namespace {

constexpr uint32_t kRowChunks = 16;  // rms_norm_row: 4-float chunks per invocation, at most

}  // namespace

bool rms_norm_row_fits(uint32_t width) { return width > 0 && width % 4 == 0 && width <= kRowChunks * 4 * 256; }

bool rms_norm_row_q8_fits(const Context& ctx, uint32_t width) {
  return rms_norm_row_fits(width) && width % 32 == 0 && ctx.features().subgroup_size >= 8;
}

bool rms_norm_row_factored_fits(const Context& ctx, uint32_t width) {
  const uint32_t sg = ctx.features().subgroup_size;
  return rms_norm_row_fits(width) && width % 256 == 0 && sg >= 4 && sg <= 64 && 64 % sg == 0;
}

void rms_norm_row(Context& ctx, Dispatcher& d, View x, View b, View sum, View w, View y, View xq, uint32_t width,
                  uint32_t n_tokens, float eps, float offset, View q8, uint32_t q8_format, View partials, const RowGate& gate) {
  if (partials.buffer && (!b.buffer || !xq.buffer || !rms_norm_row_factored_fits(ctx, width) ||
                          view_bytes(partials) < size_t{4} * (width / 256) * n_tokens)) {
    throw Error(fmt::format("Vulkan rms_norm_row: no factored form for rows of {} here", width));
  }
  if (!rms_norm_row_fits(width)) throw Error(fmt::format("Vulkan rms_norm_row: rows of {} floats do not fit", width));
  if (xq.buffer && (width % 256 != 0 || ctx.features().subgroup_size < 4)) {
    throw Error(fmt::format("Vulkan rms_norm_row: no Q8_K output for rows of {} on this device", width));
  }
  if (q8.buffer && (xq.buffer || !rms_norm_row_q8_fits(ctx, width) || q8_format > 1)) {
    throw Error(fmt::format("Vulkan rms_norm_row: no activation codes (format {}) for rows of {} here", q8_format, width));
  }
  if (gate.a.buffer && (!b.buffer || !gate.g.buffer)) {
    throw Error("Vulkan rms_norm_row: a gated add needs the row it is added to and its gate");
  }
  if (n_tokens == 0) return;
  const bool exact = ctx.features().fp64;
  std::string name = exact ? "rms_norm_row_f64" : "rms_norm_row_f32";
  if (b.buffer) name += gate.a.buffer ? "_gadd" : "_add";
  // One 4-float chunk per invocation where the row allows (4096 floats: 1024 invocations), so the
  // serial steps between the barriers are one chunk long. ZINC_VULKAN_NORM_WG (64..1024) for measurements.
  const uint32_t most = std::min<uint32_t>(1024, ctx.features().max_invocations);
  uint32_t wgs = 64;
  while (wgs * 2 <= most && wgs * 4 < width) wgs *= 2;
  const uint32_t asked = knob_u32("ZINC_VULKAN_NORM_WG", wgs, 64, most);
  for (wgs = 64; wgs * 2 <= asked;) wgs *= 2;
  while (wgs * 2 <= most && (width / 4 + wgs - 1) / wgs > kRowChunks) wgs *= 2;
  const uint32_t spec[] = {(width / 4 + wgs - 1) / wgs, wgs};
  struct {
    uint32_t width, has_weight;
    float eps, offset;
    uint32_t q8k_stride, q8_words, q8_format, factored, gate_row;
  } push{width,
         w.buffer ? 1u : 0u,
         eps,
         offset,
         xq.buffer ? static_cast<uint32_t>(q8k_row_bytes(width) / 4) : 0u,
         q8.buffer ? static_cast<uint32_t>(mul_mv_q8_bytes(width) / 4) : 0u,
         q8_format,
         partials.buffer ? 1u : 0u,
         gate.per_row ? 1u : 0u};
  const size_t n_bind = gate.a.buffer ? 9 : b.buffer ? 7 : 4;
  const Kernel& k = ctx.pipeline(name, n_bind, sizeof(push), spec);
  const View any = x;  // unused bindings
  const View codes = xq.buffer ? xq : q8.buffer ? q8 : y;
  const std::array<View, 9> bindings{x, w.buffer ? w : any, y, codes, b.buffer ? b : any, sum.buffer ? sum : y,
                                     partials.buffer ? partials : y, gate.a, gate.g};
  d.dispatch(k, std::span<const View>(bindings.data(), n_bind), &push, n_tokens);
}

void rms_norm(Context& ctx, Dispatcher& d, View x, View w, View y, uint32_t width, uint32_t group, uint32_t n_tokens,
              float eps, float offset) {
  if (group == width && rms_norm_row_fits(width)) {
    rms_norm_row(ctx, d, x, View{}, View{}, w, y, View{}, width, n_tokens, eps, offset);
    return;
  }
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

bool rms_norm_glu_fits(const Context& ctx, uint32_t width, uint32_t group) {
  const uint32_t sg = ctx.features().subgroup_size;
  return group > 0 && group < width && width % 256 == 0 && 256 % group == 0 && sg >= 4 && group * sg >= 256;
}

void rms_norm_glu(Context& ctx, Dispatcher& d, View x, View w, View z, View y, View out, View xq, uint32_t width,
                  uint32_t group, uint32_t n_tokens, float eps, float offset) {
  if (!rms_norm_glu_fits(ctx, width, group)) {
    throw Error(fmt::format("Vulkan rms_norm_glu: heads of {} in rows of {} do not fit this device", group, width));
  }
  struct {
    uint32_t n, width, group, has_weight;
    float eps, offset;
    uint32_t q8k_stride;
  } push{width * n_tokens, width, group, w.buffer ? 1u : 0u, eps, offset, xq.buffer ? static_cast<uint32_t>(q8k_row_bytes(width) / 4) : 0u};
  const Kernel& k = ctx.pipeline("rms_norm_glu", 6, sizeof(push));
  const View bindings[] = {x, w.buffer ? w : x, z, y, out, xq.buffer ? xq : out};
  uint32_t gx = 0, gy = 0;
  grid(ctx, push.n / 256, &gx, &gy);
  d.dispatch(k, bindings, &push, gx, gy);
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

namespace {

// eltwise.comp's push constants, and one dispatch of it over n_tokens rows of a_width.
struct EltwisePush {
  uint32_t n, a_width, b_width, b_row_stride;
  float p0, p1;
  uint32_t q8k_stride, q8_words = 0, q8_format = 0;
};

void dispatch_eltwise(Context& ctx, Dispatcher& d, const Kernel& k, std::span<const View> bindings, const EltwisePush& push) {
  uint32_t gx = 0, gy = 0;
  grid(ctx, (push.n + 255) / 256, &gx, &gy);
  d.dispatch(k, bindings, &push, gx, gy);
}

}  // namespace

bool eltwise_q8_fits(const Context& ctx, uint32_t a_width) { return a_width % 32 == 0 && ctx.features().subgroup_size >= 8; }

void eltwise(Context& ctx, Dispatcher& d, Eltwise op, View a, View b, View out, uint32_t a_width, uint32_t b_width,
             uint32_t n_tokens, bool b_shared, float p0, float p1, View xq, View q8, uint32_t q8_format) {
  static constexpr const char* kNames[] = {"eltwise_add",         "eltwise_mul",     "eltwise_swiglu",
                                           "eltwise_geglu",       "eltwise_sigmoid_mul", "eltwise_softcap",
                                           "eltwise_swiglu_clamped"};
  if (xq.buffer && (a_width % 256 != 0 || ctx.features().subgroup_size < 4)) {
    throw Error(fmt::format("Vulkan eltwise: no Q8_K codes for rows of {} on this device", a_width));
  }
  if (q8.buffer && (xq.buffer || !eltwise_q8_fits(ctx, a_width) || q8_format > 1)) {
    throw Error(fmt::format("Vulkan eltwise: no activation codes (format {}) for rows of {} here", q8_format, a_width));
  }
  const Kernel& k = ctx.pipeline(kNames[static_cast<int>(op)], 4, sizeof(EltwisePush));
  const View bindings[] = {a, b.buffer ? b : a, out, xq.buffer ? xq : q8.buffer ? q8 : out};
  dispatch_eltwise(ctx, d, k, bindings,
                   {a_width * n_tokens, a_width, b_width, b_shared ? 0u : b_width, p0, p1,
                    xq.buffer ? static_cast<uint32_t>(q8k_row_bytes(a_width) / 4) : 0u,
                    q8.buffer ? static_cast<uint32_t>(mul_mv_q8_bytes(a_width) / 4) : 0u, q8_format});
}

void sigmoid_mul_add(Context& ctx, Dispatcher& d, View a, View b, View c, View out, View sum, uint32_t a_width,
                     uint32_t b_width, uint32_t n_tokens) {
  const Kernel& k = ctx.pipeline("eltwise_sigmoid_mul_add", 6, sizeof(EltwisePush));
  const View bindings[] = {a, b, out, out, c, sum};
  dispatch_eltwise(ctx, d, k, bindings, {a_width * n_tokens, a_width, b_width, b_width, 0, 0, 0});
}

}  // namespace zinc::backend::vk
