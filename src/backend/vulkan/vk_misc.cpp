#include "backend/vulkan/vk_misc.h"

#include <fmt/format.h>

#include <algorithm>

#include "backend/vulkan/vk_ops.h"
#include "backend/vulkan/vk_quant.h"
#include "core/error.h"

namespace zinc::backend::vk {

namespace {
// moe_route.comp's (and moe_router.comp's) flags.
uint32_t route_flags(bool topk_softmax, bool norm_topk, View bias, View expert_scale) {
  return (topk_softmax ? 1u : 0u) | (norm_topk ? 2u : 0u) | (bias.buffer ? 4u : 0u) | (expert_scale.buffer ? 8u : 0u);
}
}  // namespace

void moe_route(Context& ctx, Dispatcher& d, View logits, View bias, View expert_scale, View ids, View weights,
               uint32_t n_expert, uint32_t n_used, uint32_t n_tokens, bool topk_softmax, bool norm_topk,
               float logit_scale, const NormScale& given) {
  if (n_expert == 0 || n_expert > 256 || n_used == 0 || n_used > 16 || n_used > n_expert) {
    throw Error(fmt::format("Vulkan moe_route: {} of {} experts is outside the kernel's limits (n_expert <= 256, "
                            "n_used <= 16)", n_used, n_expert));
  }
  if (n_tokens == 0) return;
  if (given.partials.buffer && (given.blocks == 0 || view_bytes(given.partials) < size_t{4} * given.blocks * n_tokens)) {
    throw Error("Vulkan moe_route: the norm's partial sums do not cover every token");
  }
  const Kernel& k = ctx.pipeline("moe_route", 6, 32);
  struct {
    uint32_t n_expert, n_used, n_tokens, flags;
    float logit_scale;
    uint32_t norm_blocks, width;
    float norm_eps;
  } push{n_expert, n_used, n_tokens,
         route_flags(topk_softmax, norm_topk, bias, expert_scale) | (given.partials.buffer ? 32u : 0u),
         logit_scale, given.blocks, given.blocks * 256, given.eps};
  const View bindings[] = {logits, bias.buffer ? bias : logits, expert_scale.buffer ? expert_scale : logits, ids,
                           weights, given.partials.buffer ? given.partials : logits};
  uint32_t gx = 0, gy = 0;
  grid(ctx, n_tokens, &gx, &gy);
  d.dispatch(k, bindings, &push, gx, gy);
}

namespace {
struct RouterPush {  // moe_router.comp's push constants
  uint32_t n_expert, n_used, n_tokens, flags;
  float logit_scale;
  uint32_t d, norm_blocks;
  float norm_eps, norm_offset;
  uint32_t norm_has_w, x_q8k = 0, xstride = 0, add_base = 0;
};
}  // namespace

bool moe_router(Context& ctx, Dispatcher& d, View router, View x, View logits, View bias, View expert_scale, View ids,
                View weights, View count, uint32_t d_model, uint32_t n_expert, uint32_t n_used, uint32_t n_tokens,
                bool topk_softmax, bool norm_topk, float logit_scale, const NormScale& ns) {
  if (d_model == 0 || d_model % 4 != 0 || n_expert == 0 || n_expert > 256 || n_used == 0 || n_used > 16 ||
      n_used > n_expert || n_tokens > 65535) {  // (tokens in grid y: the limit every device has)
    return false;
  }
  if (n_tokens == 0) return true;
  if (ns.partials.buffer && (ns.blocks * 256 != d_model || ns.blocks > 256 || view_bytes(ns.partials) < size_t{4} * ns.blocks * n_tokens)) {
    throw Error("Vulkan moe_router: a norm left to it takes whole 256-value blocks and their sums for every token");
  }
  const Kernel& k = ctx.pipeline("moe_router", 10, sizeof(RouterPush));
  const RouterPush push{n_expert, n_used, n_tokens,
                        route_flags(topk_softmax, norm_topk, bias, expert_scale),
                        logit_scale, d_model, ns.partials.buffer ? ns.blocks : 0u, ns.eps, ns.offset,
                        ns.weights.buffer ? 1u : 0u};
  const View bindings[] = {logits, bias.buffer ? bias : logits, expert_scale.buffer ? expert_scale : logits, ids,
                           weights, router, x, count, ns.partials.buffer ? ns.partials : logits,
                           ns.weights.buffer ? ns.weights : router};
  d.dispatch(k, bindings, &push, (n_expert + 1) / 2, n_tokens);  // two experts a workgroup (the shader's RPW)
  return true;
}

void moe_router_product(Context& ctx, Dispatcher& d, View router, View x, View logits, uint32_t d_model, uint32_t n_expert,
                        uint32_t n_tokens) {
  if (d_model == 0 || d_model % 4 != 0 || n_expert == 0 || n_expert > 256 || n_tokens > 65535) {
    throw Error(fmt::format("Vulkan moe_router_product: {} experts of {} columns do not fit", n_expert, d_model));
  }
  if (n_tokens == 0) return;
  const Kernel& k = ctx.pipeline("moe_router", 10, sizeof(RouterPush));
  const RouterPush push{n_expert, 1, n_tokens, 64u, 1.0f, d_model, 0u, 0.0f, 0.0f, 0u};
  const View bindings[] = {logits, logits, logits, logits, logits, router, x, logits, logits, router};
  d.dispatch(k, bindings, &push, (n_expert + 1) / 2, n_tokens);
}

bool moe_router_split(Context& ctx, Dispatcher& d, View m, View xq, View base, View ids, View count, uint32_t d_in,
                      uint32_t n_expert, uint32_t n_used, uint32_t n_tokens, bool topk_softmax, float logit_scale) {
  if (d_in == 0 || d_in % 256 != 0 || n_expert == 0 || n_expert > 256 || n_used == 0 || n_used > 16 || n_used > n_expert ||
      n_tokens > 65535) {
    return false;
  }
  if (n_tokens == 0) return true;
  const size_t row_words = q8k_row_bytes(d_in) / 4;
  if (view_bytes(xq) < row_words * 4 * n_tokens || view_bytes(base) < size_t{4} * n_expert * n_tokens) {
    throw Error("Vulkan moe_router_split: the codes or the logits do not cover every token");
  }
  const Kernel& k = ctx.pipeline("moe_router", 10, sizeof(RouterPush));
  RouterPush push{n_expert, n_used, n_tokens, route_flags(topk_softmax, false, View{}, View{}) | 16u, logit_scale, d_in,
                  0u, 0.0f, 0.0f, 0u};
  push.x_q8k = 1;
  push.xstride = static_cast<uint32_t>(row_words);
  push.add_base = 1;
  const View bindings[] = {base, base, base, ids, base, m, xq, count, base, m};
  d.dispatch(k, bindings, &push, (n_expert + 1) / 2, n_tokens);
  return true;
}

void moe_combine(Context& ctx, Dispatcher& d, View y, View weights, View out, uint32_t width, uint32_t n_used,
                 uint32_t n_tokens) {
  if (n_tokens == 0 || width == 0) return;
  const bool vec4 = width % 4 == 0;
  const Kernel& k = ctx.pipeline(vec4 ? "moe_combine_vec4" : "moe_combine_f32", 3, 12);
  const uint32_t w = vec4 ? width / 4 : width, n = w * n_tokens;
  const uint32_t push[] = {w, n_used, n};
  const View bindings[] = {y, weights, out};
  uint32_t gx = 0, gy = 0;
  grid(ctx, (n + 255) / 256, &gx, &gy);
  d.dispatch(k, bindings, push, gx, gy);
}

void ssm_conv(Context& ctx, Dispatcher& d, View x, View w, View state, View out, uint32_t width, uint32_t kernel,
              uint32_t n_tokens, const Kept& kept) {
  if (kernel == 0) throw Error("Vulkan ssm_conv: a kernel of 0 taps");
  if (n_tokens == 0 || width == 0) return;
  const Kernel& k = ctx.pipeline("ssm_conv", 5, 20);
  // Blocks of at least kernel - 1 tokens (only block 0 then reads the state; see the shader).
  const uint32_t block = std::max(8u, kernel - 1);
  const uint32_t push[] = {width, kernel, n_tokens, block, kept.stride_bytes / 4};
  const View bindings[] = {x, w, state, out, kept.stride_bytes > 0 ? kept.view : state};
  d.dispatch(k, bindings, push, (width + 127) / 128, (n_tokens + block - 1) / block);
}

void delta_net(Context& ctx, Dispatcher& d, View q, View k, View v, View a, View b, View A, View dt_bias, View state,
               View out, uint32_t n_head_k, uint32_t n_head_v, uint32_t dk, uint32_t dv, bool tiled,
               uint32_t n_tokens, const Kept& kept, const DeltaNetRows& rows, const DeltaNormGlu* ng) {
  if (n_head_k == 0 || (!tiled && n_head_v % n_head_k != 0) || dk == 0 || dk > 1024 || dv == 0) {
    throw Error(fmt::format("Vulkan delta_net: {} v heads over {} q/k heads of {} x {} is not supported", n_head_v,
                            n_head_k, dk, dv));
  }
  if (n_tokens == 0) return;
  // Rows of the state each invocation holds in registers (8 row groups per workgroup).
  // The row layout as constants: the dense form compiles to the index arithmetic it always had (the
  // per-token loop is latency-bound: a prompt's steps slowed by 2% with them as push constants).
  const uint32_t spec[] = {(dk + 7) / 8, rows.qk_row, rows.v_row, rows.q_off, rows.k_off, rows.v_off};
  if (ng) {
    if (!delta_norm_glu_fits(ctx, n_head_v, dv) || n_tokens != 1 || kept.stride_bytes > 0) {
      throw Error(fmt::format("Vulkan delta_net: the norm and SwiGLU after it do not fit {} heads of {} in a one-token step", n_head_v, dv));
    }
    struct {
      uint32_t n_head_k, n_head_v, dk, dv, tiled, n_tokens, keep_stride, has_weight;
      float eps, offset;
      uint32_t q8k_stride;
    } push{n_head_k, n_head_v, dk, dv, tiled ? 1u : 0u, 1, 0, ng->w.buffer ? 1u : 0u, ng->eps, ng->offset,
           ng->xq.buffer ? static_cast<uint32_t>(q8k_row_bytes(n_head_v * dv) / 4) : 0u};
    if (q.buffer != k.buffer || q.buffer != v.buffer || q.offset != k.offset || q.offset != v.offset || rows.qk_row == 0) {
      throw Error("Vulkan delta_net: the norm's tail takes q, k and v as pieces of one tensor's rows");
    }
    const Kernel& kn = ctx.pipeline("delta_net_nglu", 12, sizeof(push), spec);
    const View bindings[] = {q, a, b, A, dt_bias, state, out, ng->count, ng->w.buffer ? ng->w : ng->z, ng->z, ng->out,
                             ng->xq.buffer ? ng->xq : ng->out};
    d.dispatch(kn, bindings, &push, dv / 32, n_head_v);
    return;
  }
  const Kernel& kn = ctx.pipeline("delta_net_plain", 10, 28, spec);
  const uint32_t push[] = {n_head_k, n_head_v, dk, dv, tiled ? 1u : 0u, n_tokens, kept.stride_bytes / 4};
  const View bindings[] = {q, k, v, a, b, A, dt_bias, state, out, kept.stride_bytes > 0 ? kept.view : state};
  d.dispatch(kn, bindings, push, (dv + 31) / 32, n_head_v);
}

bool delta_norm_glu_fits(const Context& ctx, uint32_t n_head_v, uint32_t dv) {
  return dv % 32 == 0 && rms_norm_glu_fits(ctx, n_head_v * dv, dv);
}

void copy_rows(Context& ctx, Dispatcher& d, View in, View out, uint32_t n_tokens, uint32_t in_row0, uint32_t in_stride,
               uint32_t in_offset, uint32_t group_stride, uint32_t n_groups, uint32_t piece, uint32_t out_stride,
               uint32_t out_offset) {
  if (n_tokens == 0 || n_groups == 0 || piece == 0) return;
  const bool vec4 = (in_stride | in_offset | group_stride | piece | out_stride | out_offset) % 4 == 0;
  const uint32_t vw = vec4 ? 4 : 1;
  const Kernel& k = ctx.pipeline(vec4 ? "copy_rows_vec4" : "copy_rows_f32", 2, 36);
  const uint32_t n = n_tokens * n_groups * (piece / vw);
  const uint32_t push[] = {n,           in_row0,  in_stride / vw,  in_offset / vw, group_stride / vw,
                           n_groups,    piece / vw, out_stride / vw, out_offset / vw};
  const View bindings[] = {in, out};
  uint32_t gx = 0, gy = 0;
  grid(ctx, (n + 255) / 256, &gx, &gy);
  d.dispatch(k, bindings, push, gx, gy);
}

void argmax(Context& ctx, Dispatcher& d, View x, View out, View scratch, uint32_t n) {
  const uint32_t groups = (n + 2047) / 2048;
  if (groups > ctx.features().max_groups_x) throw Error(fmt::format("Vulkan argmax: {} values are too many", n));
  if (n == 0) throw Error("Vulkan argmax: no values");
  const Kernel& partial = ctx.pipeline("argmax_partial", 2, 4);
  const Kernel& last = ctx.pipeline("argmax_final", 2, 4);
  const View first[] = {x, scratch}, second[] = {scratch, out};
  d.dispatch(partial, first, &n, groups);
  d.barrier();
  d.dispatch(last, second, &groups, 1);
}

}  // namespace zinc::backend::vk
