#include "backend/vulkan/vk_quant.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <array>
#include <string>

#include "core/error.h"
#include "core/knobs.h"
#include "quant/quant.h"

namespace zinc::backend::vk {

namespace {

using gguf::TensorType;

// A weight type's kernels (vk_weight_types.def, the one list the shader variants are built from): the
// variants' suffix, the elements one invocation decodes at a time (UE in quant.glsl), which ncols must
// be a multiple of, and the families of kernels beyond the generic ones.
enum Kernels : uint8_t { NONE, Q8_0ACT, Q8_1ACT, KDOT };
struct QuantType {
  TensorType type;
  const char* name;
  uint32_t unit;
  Kernels kernels;
};

constexpr QuantType kTypes[] = {
#define ZINC_VK_WEIGHT(e, n, unit, kernels) {TensorType::e, #n, unit, kernels},
#include "backend/vulkan/vk_weight_types.def"
#undef ZINC_VK_WEIGHT
};

constexpr uint64_t kMaxBytes = uint64_t{1} << 32;  // shaders address the weight in 32-bit bytes

const QuantType* find_type(TensorType type) {
  for (const QuantType& t : kTypes) {
    if (t.type == type) return &t;
  }
  return nullptr;
}

// The type's kernels and the bytes of a row of ncols, checking what the shaders assume.
const QuantType& checked(const char* op, TensorType type, uint32_t ncols, uint32_t* row_bytes) {
  const QuantType* t = find_type(type);
  if (!t) throw Error(fmt::format("Vulkan {}: no kernel for weights of type {}", op, gguf::tensor_type_name(type)));
  if (ncols % t->unit != 0 || ncols % quant::block_size(type) != 0) {
    throw Error(fmt::format("Vulkan {}: {} columns of {} are not a multiple of {}", op, ncols,
                            gguf::tensor_type_name(type), std::max<int64_t>(t->unit, quant::block_size(type))));
  }
  *row_bytes = static_cast<uint32_t>(quant::row_size(type, ncols));
  return *t;
}

}  // namespace

const char* weight_variant(const char* op, TensorType type, uint32_t ncols, uint32_t* row_bytes) {
  return checked(op, type, ncols, row_bytes).name;
}

std::string rows_unsupported(TensorType type, int64_t ncols) {
  const QuantType* t = find_type(type);
  if (!t) return fmt::format("no Vulkan kernel reads weights of type {}", gguf::tensor_type_name(type));
  const int64_t unit = std::max<int64_t>(t->unit, quant::block_size(type));
  if (ncols % unit != 0) {
    return fmt::format("its rows of {} {} values are not a multiple of {} (the Vulkan kernels' unit)", ncols,
                       gguf::tensor_type_name(type), unit);
  }
  return "";
}

namespace {

void check_bytes(const char* op, uint64_t bytes) {
  if (bytes > kMaxBytes) {
    throw Error(fmt::format("Vulkan {}: a weight of {} bytes is over the kernels' 4 GiB", op, bytes));
  }
}

// mul_mv's shape: WG invocations, ROWS rows and NTOK tokens per workgroup (its specialization
// constants). Enough invocations to cover a row's units once (up to 128, four subgroups of 32 on
// NVIDIA); token groups of up to 8, balanced (9 tokens: 5 + 4); two rows per workgroup share their x
// loads, four where there are rows enough to still fill the device and the tokens are few (registers).
struct MulMvShape {
  uint32_t wg, rows, ntok;
};

MulMvShape mul_mv_shape(uint32_t nunits, uint32_t nrows, uint32_t n_tokens) {
  MulMvShape s{};
  s.wg = nunits <= 32 ? 32 : nunits <= 64 ? 64 : 128;
  const uint32_t groups = (n_tokens + 7) / 8;
  s.ntok = std::max(1u, (n_tokens + groups - 1) / std::max(groups, 1u));
  s.rows = nrows >= 8192 && s.ntok <= 2 ? 4 : nrows >= 32 ? 2 : 1;
  // Few rows (a router's 128 of 2048 floats): one row per workgroup of up to 256 invocations, so the
  // rows spread over more of the device (H200: 8.5 -> 7 us). The workgroup's size sets the order of a
  // row's sums, so it follows the shape alone, never the tokens: each token's row of a step of several
  // is then bit for bit its one-token product (a speculative step's verifying rows, a batch's rows).
  if (nrows < 1024) {
    if (s.ntok <= 2) s.rows = 1;
    if (nunits >= 256) s.wg = 256;
  }
  // Tuning knobs for measurements on a device: ZINC_VULKAN_MV_WG (32, 64, 128, 256), ZINC_VULKAN_MV_ROWS (1..8).
  s.wg = knob_u32("ZINC_VULKAN_MV_WG", s.wg, 32, 256);
  s.rows = knob_u32("ZINC_VULKAN_MV_ROWS", s.rows, 1, 8);
  return s;
}

struct MulMvPush {
  uint32_t ncols, nrows, row_bytes, n_tokens, has_bias, n_used, n_expert, expert_stride, x_per_slot;
};

}  // namespace

bool has_quant_kernels(gguf::TensorType type) { return find_type(type) != nullptr; }

bool mul_mv_norm_fits(gguf::TensorType type, uint32_t ncols) {
  return (type == TensorType::F32 || type == TensorType::F16 || type == TensorType::BF16) && ncols % 256 == 0;
}

void mul_mv(Context& ctx, Dispatcher& d, gguf::TensorType type, View w, View x, View y, View bias, uint32_t ncols,
            uint32_t nrows, uint32_t n_tokens, const NormScale& ns) {
  uint32_t row_bytes = 0;
  const QuantType& t = checked("mul_mv", type, ncols, &row_bytes);
  if (nrows == 0 || n_tokens == 0 || ncols == 0) return;
  check_bytes("mul_mv", uint64_t{row_bytes} * nrows);
  const MulMvShape s = mul_mv_shape(ncols / t.unit, nrows, n_tokens);
  const uint32_t spec[] = {s.wg, s.rows, s.ntok};
  if (ns.partials.buffer) {
    if (!mul_mv_norm_fits(type, ncols) || ns.blocks * 256 != ncols || view_bytes(ns.partials) < size_t{4} * ns.blocks * n_tokens) {
      throw Error(fmt::format("Vulkan mul_mv: no norm left to a product of {} with rows of {}", t.name, ncols));
    }
    struct {
      MulMvPush base;
      uint32_t norm_blocks;
      float norm_eps, norm_offset;
      uint32_t norm_has_w;
    } push{{ncols, nrows, row_bytes, n_tokens, bias.buffer ? 1u : 0u, 0, 0, 0, 0}, ns.blocks, ns.eps, ns.offset,
           ns.weights.buffer ? 1u : 0u};
    const Kernel& k = ctx.pipeline(std::string("mul_mv_nrm_") + t.name, 7, sizeof(push), spec);
    const View bindings[] = {w, x, y, bias.buffer ? bias : x, x, ns.partials, ns.weights.buffer ? ns.weights : x};
    uint32_t gx = 0, gy = 0;
    grid(ctx, (nrows + s.rows - 1) / s.rows, &gx, &gy);
    d.dispatch(k, bindings, &push, gx, gy, std::min((n_tokens + s.ntok - 1) / s.ntok, kMaxGroupsYZ));
    return;
  }
  const Kernel& k = ctx.pipeline(std::string("mul_mv_") + t.name, 4, sizeof(MulMvPush), spec);
  const MulMvPush push{ncols, nrows, row_bytes, n_tokens, bias.buffer ? 1u : 0u, 0, 0, 0, 0};
  const View bindings[] = {w, x, y, bias.buffer ? bias : x};
  uint32_t gx = 0, gy = 0;
  grid(ctx, (nrows + s.rows - 1) / s.rows, &gx, &gy);
  d.dispatch(k, bindings, &push, gx, gy, std::min((n_tokens + s.ntok - 1) / s.ntok, kMaxGroupsYZ));
}

void mul_mv_id(Context& ctx, Dispatcher& d, gguf::TensorType type, View w, View ids, View x, View y, View bias,
               uint32_t ncols, uint32_t nrows, uint32_t n_expert, uint32_t n_used, uint32_t n_tokens, bool x_per_slot) {
  uint32_t row_bytes = 0;
  const QuantType& t = checked("mul_mv_id", type, ncols, &row_bytes);
  if (nrows == 0 || n_tokens == 0 || ncols == 0 || n_used == 0) return;
  if (n_expert == 0) throw Error("Vulkan mul_mv_id: no experts");
  check_bytes("mul_mv_id", uint64_t{row_bytes} * nrows * n_expert);
  const MulMvShape s = mul_mv_shape(ncols / t.unit, nrows, 1);
  const uint32_t spec[] = {s.wg, s.rows, 1};
  const Kernel& k = ctx.pipeline(std::string("mul_mv_id_") + t.name, 5, sizeof(MulMvPush), spec);
  const MulMvPush push{ncols,  nrows,    row_bytes,           n_tokens, bias.buffer ? 1u : 0u,
                       n_used, n_expert, row_bytes * nrows, x_per_slot ? 1u : 0u};
  const View bindings[] = {w, x, y, bias.buffer ? bias : x, ids};
  uint32_t gx = 0, gy = 0;
  grid(ctx, (nrows + s.rows - 1) / s.rows, &gx, &gy);
  d.dispatch(k, bindings, &push, gx, gy, std::min(n_tokens * n_used, kMaxGroupsYZ));
}

void get_rows(Context& ctx, Dispatcher& d, gguf::TensorType type, View w, View ids, View out, uint32_t ncols,
              uint32_t n_tokens, float scale) {
  uint32_t row_bytes = 0;
  const QuantType& t = checked("get_rows", type, ncols, &row_bytes);
  if (n_tokens == 0 || ncols == 0) return;
  const Kernel& k = ctx.pipeline(std::string("get_rows_") + t.name, 3, 16);
  const uint32_t n = n_tokens * (ncols / t.unit);
  struct {
    uint32_t ncols, row_bytes, n;
    float scale;
  } push{ncols, row_bytes, n, scale};
  const View bindings[] = {w, ids, out};
  uint32_t gx = 0, gy = 0;
  grid(ctx, (n + 63) / 64, &gx, &gy);
  d.dispatch(k, bindings, &push, gx, gy);
}

namespace {

// The variants of mul_mv_q8.comp (mul_mv_q8_mat_NAME, mul_mv_q8_id_NAME; dmat_, did_ with the packed
// integer dot product where the device has it): the types that pair with
// Q8_0 activation codes (quantize_q8_0) or with Q8_1 (quantize_q8_1).
const QuantType* q8_find(TensorType type) {
  const QuantType* t = find_type(type);
  return t && (t->kernels == Q8_0ACT || t->kernels == Q8_1ACT) ? t : nullptr;
}

const QuantType& q8_type(const char* op, TensorType type, uint32_t ncols) {
  const QuantType* t = q8_find(type);
  if (!t) throw Error(fmt::format("Vulkan {}: no kernel for weights of type {}", op, gguf::tensor_type_name(type)));
  if (ncols % 32 != 0) throw Error(fmt::format("Vulkan {}: {} columns is not a multiple of 32", op, ncols));
  return *t;
}

// Quantizes `rows` activation rows of ncols floats into the type's activation blocks
// (quantize_q8.comp); the caller puts the barrier after it.
void quantize_q8(Context& ctx, Dispatcher& d, const QuantType& t, View x, View xq, uint32_t ncols, uint32_t rows) {
  const uint32_t blocks = ncols / 32 * rows;
  const uint32_t groups = (blocks + 63) / 64, max_x = ctx.features().max_groups_x;
  const uint32_t gy = (groups + max_x - 1) / max_x;
  d.dispatch(ctx.pipeline(t.kernels == Q8_1ACT ? "quantize_q8_1" : "quantize_q8_0", 2, 4), std::array<View, 2>{x, xq}, &blocks,
             (groups + gy - 1) / gy, gy);
}

struct MulMvQ8Push {
  uint32_t nblocks, nrows, row_bytes, n_used, n_expert, expert_stride, x_per_slot, has_bias;
};

// The packed dot product's variants (and the fused ones, which have no other) where the device has
// it, unless ZINC_VULKAN_Q8_DOT=0 (the kernel tests run both).
bool q8_dot(const Context& ctx) { return ctx.features().int_dot && knob_u32("ZINC_VULKAN_Q8_DOT", 1, 0, 1) == 1; }
const char* q8_variant(const Context& ctx, bool id) {
  return id ? (q8_dot(ctx) ? "mul_mv_q8_did_" : "mul_mv_q8_id_") : (q8_dot(ctx) ? "mul_mv_q8_dmat_" : "mul_mv_q8_mat_");
}

// Rows per workgroup of mul_mv_q8.comp (its 128 invocations split among them): 4 unless
// ZINC_VULKAN_Q8_ROWS says otherwise (1, 2, 4 or 8). On an H200, gpt-oss-20b's decode (Q5_0 experts,
// Q8_0 projections) made 302.0 / 304.9 / 306.5 / 302.8 tok/s with 1 / 2 / 4 / 8 (two rounds each).
uint32_t q8_rows() {
  uint32_t r = 1;
  while (r * 2 <= knob_u32("ZINC_VULKAN_Q8_ROWS", 4, 1, 8)) r *= 2;
  return r;
}

// The views a row norm tail (MulMvKRowNorm) writes and reads, for rows of width nrows.
void check_row_norm(const char* op, const MulMvKRowNorm& n, uint32_t nrows) {
  if (!n.res.buffer || !n.sum.buffer || !n.y.buffer || view_bytes(n.count) < 4 ||
      (n.q8.buffer && (view_bytes(n.q8) < mul_mv_q8_bytes(nrows) || n.q8_format > 1))) {
    throw Error(fmt::format("Vulkan {}: the residual, sum, output, codes or counter are missing or short", op));
  }
}

// A mul_mv_q8.comp kernel over nrows rows (q8_rows() a workgroup, the groups past x in y) and z
// tokens or (token, slot) pairs.
template <size_t N, typename Push>
void dispatch_q8(Context& ctx, Dispatcher& d, const std::string& kernel, const std::array<View, N>& bindings, const Push& push,
                 uint32_t nrows, uint32_t z) {
  const uint32_t spec[] = {q8_rows()}, groups = (nrows + spec[0] - 1) / spec[0];
  const uint32_t max_x = ctx.features().max_groups_x, ry = (groups + max_x - 1) / max_x;
  d.dispatch(ctx.pipeline(kernel, N, sizeof(push), spec), bindings, &push, (groups + ry - 1) / ry, ry, z);
}

}  // namespace

bool has_mul_mv_q8(gguf::TensorType type) { return q8_find(type) != nullptr; }

size_t mul_mv_q8_bytes(uint32_t ncols) { return static_cast<size_t>(ncols / 32) * 36; }

uint32_t q8_act_format(gguf::TensorType type) { return q8_type("q8_act_format", type, 32).kernels == Q8_1ACT ? 1u : 0u; }

void quantize_q8_act(Context& ctx, Dispatcher& d, gguf::TensorType type, View x, View xq, uint32_t ncols, uint32_t rows) {
  const QuantType& t = q8_type("quantize_q8_act", type, ncols);
  if (rows == 0 || ncols == 0) return;
  quantize_q8(ctx, d, t, x, xq, ncols, rows);
}

void mul_mv_q8_codes(Context& ctx, Dispatcher& d, gguf::TensorType type, View w, View xq, View y, View bias, uint32_t ncols,
                     uint32_t nrows, uint32_t n_tokens) {
  const QuantType& t = q8_type("mul_mv_q8", type, ncols);
  if (nrows == 0 || n_tokens == 0 || ncols == 0) return;
  if (n_tokens > kMaxGroupsYZ) throw Error(fmt::format("Vulkan mul_mv_q8: {} tokens at once is over {}", n_tokens, kMaxGroupsYZ));
  const auto row_bytes = static_cast<uint32_t>(quant::row_size(type, ncols));
  check_bytes("mul_mv_q8", uint64_t{row_bytes} * nrows);
  const MulMvQ8Push push{ncols / 32, nrows, row_bytes, 0, 0, 0, 0, bias.buffer ? 1u : 0u};
  dispatch_q8(ctx, d, std::string(q8_variant(ctx, false)) + t.name, std::array<View, 5>{w, xq, y, y, bias.buffer ? bias : y},
              push, nrows, n_tokens);
}

void mul_mv_q8(Context& ctx, Dispatcher& d, gguf::TensorType type, View w, View x, View xq, View y, uint32_t ncols,
               uint32_t nrows, uint32_t n_tokens) {
  if (nrows == 0 || n_tokens == 0 || ncols == 0) return;
  quantize_q8_act(ctx, d, type, x, xq, ncols, n_tokens);
  d.barrier();
  mul_mv_q8_codes(ctx, d, type, w, xq, y, View{}, ncols, nrows, n_tokens);
}

namespace {
// The checks and launch every expert variant of mul_mv_q8.comp shares (op names it in errors): kernel
// `kernel` + the type's name with `bindings` and push constants `push` over nrows rows of row_bytes
// and every (token, slot) pair.
template <size_t N, typename Push>
bool launch_q8_id(Context& ctx, Dispatcher& d, const char* op, const char* kernel, gguf::TensorType type,
                  const std::array<View, N>& bindings, const Push& push, uint32_t row_bytes, uint32_t nrows, uint32_t n_expert,
                  uint32_t pairs) {
  const QuantType& t = *q8_find(type);
  if (n_expert == 0) throw Error(fmt::format("Vulkan {}: no experts", op));
  if (pairs > kMaxGroupsYZ) throw Error(fmt::format("Vulkan {}: too many (token, expert) pairs for one step", op));
  check_bytes(op, uint64_t{row_bytes} * nrows * n_expert);
  dispatch_q8(ctx, d, std::string(kernel) + t.name, bindings, push, nrows, pairs);
  return true;
}
}  // namespace

void mul_mv_q8_id_codes(Context& ctx, Dispatcher& d, gguf::TensorType type, View w, View ids, View xq, View y, View bias,
                        uint32_t ncols, uint32_t nrows, uint32_t n_expert, uint32_t n_used, uint32_t n_tokens,
                        bool x_per_slot) {
  q8_type("mul_mv_q8_id", type, ncols);
  if (nrows == 0 || n_tokens == 0 || ncols == 0 || n_used == 0) return;
  const auto row_bytes = static_cast<uint32_t>(quant::row_size(type, ncols));
  const MulMvQ8Push push{ncols / 32, nrows, row_bytes, n_used, n_expert, row_bytes * nrows, x_per_slot ? 1u : 0u,
                         bias.buffer ? 1u : 0u};
  launch_q8_id(ctx, d, "mul_mv_q8_id", q8_variant(ctx, true), type, std::array<View, 5>{w, xq, y, ids, bias.buffer ? bias : y},
               push, row_bytes, nrows, n_expert, n_tokens * n_used);
}

size_t mul_mv_q8_combine_counts(uint32_t nrows, uint32_t n_tokens) {
  return size_t{n_tokens} * ((nrows + q8_rows() - 1) / q8_rows());
}

bool mul_mv_q8_id_combine(Context& ctx, Dispatcher& d, gguf::TensorType type, View w, View ids, View weights, View xq,
                          View y, View out, View count, View bias, uint32_t ncols, uint32_t nrows, uint32_t n_expert,
                          uint32_t n_used, uint32_t n_tokens, const MulMvKRowNorm* rn) {
  q8_type("mul_mv_q8_id_combine", type, ncols);
  if (!q8_dot(ctx) || knob_u32("ZINC_VULKAN_Q8_COMBINE", 1, 0, 1) == 0) return false;
  if (nrows == 0 || n_tokens == 0 || ncols == 0 || n_used == 0) return true;
  if (view_bytes(count) < 4 * mul_mv_q8_combine_counts(nrows, n_tokens)) {
    throw Error("Vulkan mul_mv_q8_id_combine: the counters are short");
  }
  const auto row_bytes = static_cast<uint32_t>(quant::row_size(type, ncols));
  const MulMvQ8Push push{ncols / 32, nrows, row_bytes, n_used, n_expert, row_bytes * nrows, 1u, bias.buffer ? 1u : 0u};
  if (!rn) {
    return launch_q8_id(ctx, d, "mul_mv_q8_id_combine", "mul_mv_q8_didc_", type,
                        std::array<View, 8>{w, xq, y, ids, bias.buffer ? bias : y, weights, count, out}, push, row_bytes, nrows,
                        n_expert, n_tokens * n_used);
  }
  if (n_tokens != 1 || !mul_mv_q8_combine_row_norm_fits(ctx, nrows)) {
    throw Error(fmt::format("Vulkan mul_mv_q8_id_combine: no row norm after {} rows of {} tokens here", nrows, n_tokens));
  }
  check_row_norm("mul_mv_q8_id_combine", *rn, nrows);
  const struct {
    MulMvQ8Push base;
    float eps, offset;
    uint32_t has_w, out_stride, q8_format, arrivals;
  } rpush{push, rn->eps, rn->offset, rn->norm_w.buffer ? 1u : 0u,
          rn->q8.buffer ? static_cast<uint32_t>(mul_mv_q8_bytes(nrows) / 4) : 0u, rn->q8_format,
          (nrows + q8_rows() - 1) / q8_rows()};
  return launch_q8_id(ctx, d, "mul_mv_q8_id_combine", "mul_mv_q8_didcr_", type,
                      std::array<View, 14>{w, xq, y, ids, bias.buffer ? bias : y, weights, count, out, rn->res, rn->sum, rn->y,
                                           rn->q8.buffer ? rn->q8 : out, rn->count, rn->norm_w.buffer ? rn->norm_w : out},
                      rpush, row_bytes, nrows, n_expert, n_used);
}

bool mul_mv_q8_row_norm_fits(const Context& ctx, gguf::TensorType type, uint32_t ncols, uint32_t nrows) {
  return has_mul_mv_q8(type) && ncols > 0 && ncols % 32 == 0 && q8_dot(ctx) && nrows > 0 && nrows % 32 == 0 &&
         ctx.features().fp64 && ctx.features().subgroup_size >= 8 && ctx.features().max_bindings >= 14;
}

namespace {
// moe_route.comp's flags for a folded router (no expert scale).
uint32_t route_flags(const RowRoute& r) {
  return (r.topk_softmax ? 1u : 0u) | (r.norm_topk ? 2u : 0u) | (r.bias.buffer ? 4u : 0u);
}

// A RowRoute's views for rows of nrows from ncols columns and n_tokens tokens.
void check_row_route(const char* op, const RowRoute& r, uint32_t ncols, uint32_t nrows, uint32_t n_tokens) {
  if (view_bytes(r.fold) < size_t{4} * r.n_expert * (ncols + nrows + 1) ||
      view_bytes(r.logits) < size_t{4} * r.n_expert * n_tokens || view_bytes(r.ids) < size_t{4} * r.n_used * n_tokens ||
      view_bytes(r.weights) < size_t{4} * r.n_used * n_tokens) {
    throw Error(fmt::format("Vulkan {}: the router's fold, logits, ids or weights are short", op));
  }
}

// The checks a row norm tail's launch shares (op names it; fits, route_fits: the kernels take the shapes
// and the routing where route is given). False: nothing to launch (no tokens).
bool check_row_norm_launch(const char* op, bool fits, bool route_fits, uint32_t ncols, uint32_t nrows, uint32_t n_tokens,
                           const MulMvKRowNorm& n, const RowRoute* route) {
  if (!fits) throw Error(fmt::format("Vulkan {}: {} rows of {} do not fit this device", op, nrows, ncols));
  if (n_tokens == 0) return false;
  if (n_tokens > kMvMaxTokens || view_bytes(n.count) < size_t{4} * n_tokens) {
    throw Error(fmt::format("Vulkan {}: {} tokens over its limit or its counters", op, n_tokens));
  }
  check_row_norm(op, n, nrows);
  if (!route) return true;
  check_row_route(op, *route, ncols, nrows, n_tokens);
  if (!route_fits) throw Error(fmt::format("Vulkan {}: no routing of {} of {} experts here", op, route->n_used, route->n_expert));
  return true;
}
}  // namespace

bool mul_mv_q8_row_route_fits(const Context& ctx, gguf::TensorType type, uint32_t ncols, uint32_t nrows, uint32_t n_expert,
                              uint32_t n_used) {
  return mul_mv_q8_row_norm_fits(ctx, type, ncols, nrows) && n_expert > 0 && n_expert <= 128 && n_used > 0 && n_used <= 16 &&
         n_used <= n_expert && ctx.features().max_bindings >= 15 && knob_u32("ZINC_VULKAN_ROW_ROUTE", 1, 0, 1) == 1;
}

void mul_mv_q8_row_norm(Context& ctx, Dispatcher& d, gguf::TensorType type, View w, View xq, View y, View bias, uint32_t ncols,
                        uint32_t nrows, uint32_t n_tokens, const MulMvKRowNorm& n, const RowRoute* route) {
  if (!check_row_norm_launch("mul_mv_q8_row_norm", mul_mv_q8_row_norm_fits(ctx, type, ncols, nrows),
                             !route || mul_mv_q8_row_route_fits(ctx, type, ncols, nrows, route->n_expert, route->n_used), ncols,
                             nrows, n_tokens, n, route)) {
    return;
  }
  const QuantType& t = *q8_find(type);
  const auto row_bytes = static_cast<uint32_t>(quant::row_size(type, ncols));
  check_bytes("mul_mv_q8_row_norm", uint64_t{row_bytes} * nrows);
  const uint32_t o_groups = (nrows + q8_rows() - 1) / q8_rows();
  const MulMvQ8Push base{ncols / 32, nrows, row_bytes, route ? route->n_used : 0u, route ? route->n_expert : 0u, 0, 0,
                         bias.buffer ? 1u : 0u};
  struct RowNormPush {
    MulMvQ8Push base;
    float eps, offset;
    uint32_t has_w, out_stride, q8_format, arrivals;
  };
  const RowNormPush rn{base,
                       n.eps,
                       n.offset,
                       n.norm_w.buffer ? 1u : 0u,
                       n.q8.buffer ? static_cast<uint32_t>(mul_mv_q8_bytes(nrows) / 4) : 0u,
                       n.q8_format,
                       o_groups + (route ? route->n_expert : 0u)};
  if (!route) {
    dispatch_q8(ctx, d, std::string("mul_mv_q8_drn_") + t.name,
                std::array<View, 14>{w, xq, y, y, bias.buffer ? bias : y, y, y, y, n.res, n.sum, n.y, n.q8.buffer ? n.q8 : y,
                                     n.count, n.norm_w.buffer ? n.norm_w : y},
                rn, nrows, n_tokens);
    return;
  }
  const RowRoute& r = *route;
  const struct {
    RowNormPush rn;
    uint32_t o_groups, flags;
    float logit_scale;
  } push{rn, o_groups, route_flags(r), r.logit_scale};
  // The product's groups of rows, then one workgroup an expert (q8_rows() rows each: the grid's count).
  dispatch_q8(ctx, d, std::string("mul_mv_q8_drnr_") + t.name,
              std::array<View, 15>{w, xq, y, r.fold, bias.buffer ? bias : y, r.logits, r.bias.buffer ? r.bias : r.logits, r.ids,
                                   n.res, n.sum, n.y, n.q8.buffer ? n.q8 : y, n.count, n.norm_w.buffer ? n.norm_w : y, r.weights},
              push, (o_groups + r.n_expert) * q8_rows(), n_tokens);
}

bool mul_mv_q8_combine_row_norm_fits(const Context& ctx, uint32_t nrows) {
  const Features& f = ctx.features();
  return q8_dot(ctx) && knob_u32("ZINC_VULKAN_Q8_COMBINE", 1, 0, 1) == 1 && nrows > 0 && nrows % 32 == 0 && f.fp64 &&
         f.subgroup_size >= 8 && f.max_bindings >= 14;
}

size_t mul_mv_q8_glu_counts(uint32_t nrows, uint32_t n_pairs) { return size_t{n_pairs} * (nrows / 32); }

bool mul_mv_q8_id_glu(Context& ctx, Dispatcher& d, gguf::TensorType type, View wg, View wu, View ids, View xq, View y,
                      View q_out, View count, View gate_bias, View up_bias, uint32_t ncols, uint32_t nrows,
                      uint32_t n_expert, uint32_t n_used, uint32_t n_tokens, bool clamped, float alpha, float limit,
                      uint32_t q8_format) {
  q8_type("mul_mv_q8_id_glu", type, ncols);
  if (!q8_dot(ctx) || ctx.features().subgroup_size < 8 || knob_u32("ZINC_VULKAN_Q8_GLU", 1, 0, 1) == 0) return false;
  if (nrows % 32 != 0) throw Error(fmt::format("Vulkan mul_mv_q8_id_glu: {} rows is not a multiple of 32", nrows));
  if (nrows == 0 || n_tokens == 0 || ncols == 0 || n_used == 0) return true;
  if (view_bytes(count) < 4 * mul_mv_q8_glu_counts(nrows, n_tokens * n_used) ||
      view_bytes(q_out) < mul_mv_q8_bytes(nrows) * n_tokens * n_used) {
    throw Error("Vulkan mul_mv_q8_id_glu: the counters or the codes are short");
  }
  const auto row_bytes = static_cast<uint32_t>(quant::row_size(type, ncols));
  struct {
    MulMvQ8Push base;
    uint32_t clamped;
    float alpha, limit;
    uint32_t out_words, out_format;
  } push{{ncols / 32, nrows, row_bytes, n_used, n_expert, row_bytes * nrows, 0u,
          (gate_bias.buffer ? 1u : 0u) | (up_bias.buffer ? 2u : 0u)},
         clamped ? 1u : 0u, alpha, limit, static_cast<uint32_t>(mul_mv_q8_bytes(nrows) / 4), q8_format};
  return launch_q8_id(ctx, d, "mul_mv_q8_id_glu", "mul_mv_q8_didg_", type,
                      std::array<View, 9>{wg, xq, y, ids, gate_bias.buffer ? gate_bias : y, wu, count, q_out,
                                          up_bias.buffer ? up_bias : y},
                      push, row_bytes, nrows, n_expert, n_tokens * n_used);
}

void mul_mv_q8_id(Context& ctx, Dispatcher& d, gguf::TensorType type, View w, View ids, View x, View xq, View y,
                  View bias, uint32_t ncols, uint32_t nrows, uint32_t n_expert, uint32_t n_used, uint32_t n_tokens,
                  bool x_per_slot) {
  if (nrows == 0 || n_tokens == 0 || ncols == 0 || n_used == 0) return;
  quantize_q8_act(ctx, d, type, x, xq, ncols, x_per_slot ? n_tokens * n_used : n_tokens);
  d.barrier();
  mul_mv_q8_id_codes(ctx, d, type, w, ids, xq, y, bias, ncols, nrows, n_expert, n_used, n_tokens, x_per_slot);
}

namespace {

// The variants of mul_mv_k.comp (mul_mv_k_NAME, mul_mv_k_id_NAME), nullptr for a type without them.
const char* mul_mv_k_variant(TensorType type) {
  const QuantType* t = find_type(type);
  return t && t->kernels == KDOT ? t->name : nullptr;
}

struct MulMvKPush {
  uint32_t ncols, nrows, row_bytes, n_tokens, xstride, n_used, n_expert, expert_stride, x_per_slot, has_bias;
  uint32_t out_stride = 0;  // mul_mv_k_id_glu, mul_mv_k_norm: words per row of their codes
  uint32_t norm_blocks = 0;  // the norm's partial sums the products scale by (NormScale); 0: none
  float norm_eps = 0, norm_offset = 0;
  uint32_t norm_has_w = 0;   // mul_mv_k_norm: whether the norm has weights
};
// Every variant but the norm's producers binds the partial sums at 9; 10 bindings in all.
constexpr uint32_t kMvkBindings = 10;

// The push constants and binding 9 of a product that reads a norm's unscaled codes (ns), or none.
void set_norm_scale(MulMvKPush& push, const NormScale& ns, uint32_t ncols, uint32_t n_tokens) {
  if (!ns.partials.buffer) return;
  if (ns.blocks * 256 != ncols || view_bytes(ns.partials) < size_t{4} * ns.blocks * n_tokens) {
    throw Error("Vulkan mul_mv_k: a norm left to the product takes whole 256-value blocks and their sums for every token");
  }
  push.norm_blocks = ns.blocks;
  push.norm_eps = ns.eps;
}
View norm_partials(const NormScale& ns, View any) { return ns.partials.buffer ? ns.partials : any; }

// mul_mv_k's shape, the fastest measured on an H200 (VulkanKQuant.Throughput and .TokensThroughput).
// 64 invocations, 8 blocks a step, for any tokens: the workgroup's size (its blocks a step, and its
// groups) sets the order of a row's sums, so each token's row of a step of several is bit for bit its
// one-token product (a speculative step's verifying rows, a batch's rows); rows and tokens per
// workgroup do not change it. (16 blocks a step for one token's smaller matrices, as before, measured
// the same: qwen3-8b tg128 311.4 / 314.2 against 313.1 / 313.3, qwen3-30b-a3b 293.8 / 293.6 against
// 293.8 / 293.9; and 8 sequences of qwen3-8b decoding together 3% faster with 8. Experts' products, one
// (token, expert) pair a grid step, had measured 64 faster already: qwen3-30b-a3b 288.2 against 284.8
// tok/s with 128.) One token: four rows
// sharing the activation loads for big Q4_K / Q5_K matrices and Q6_K output heads, two for the rest.
// Several tokens (the steps of many sequences): up to 8 tokens per pass over the weights (split
// evenly over the passes), and four rows for Q4_K / Q5_K matrices of fewer than 8192 rows, two for the
// rest (12288 x 4096 Q4_K at 8 tokens: 34.7 us, against 39.2 us with the big one-token shape, 4 tokens
// a pass).
// Knobs for measuring on a device: ZINC_VULKAN_MVK_WG (64..256), ZINC_VULKAN_MVK_ROWS (1..8),
// ZINC_VULKAN_MVK_TOKENS (1..16).
// Rows of fewer blocks than the workgroup takes a step (an expert's down product of 768 columns:
// 3 blocks) split the workgroup into groups of their own rows, each group as many blocks a step as
// the row has, rounded up to a power of two (ZINC_VULKAN_MVK_GROUPS: 1 keeps one group).
struct MvkShape {
  uint32_t wg, rows, ntok, groups;
};
// Blocks a step for a group of invocations on rows of nb blocks: nb rounded up to a power of two, at
// most `most`.
uint32_t blocks_per_group(uint32_t nb, uint32_t most) {
  uint32_t per_group = 1;
  while (per_group < nb && per_group * 2 <= most) per_group *= 2;
  return per_group;
}
// wg > 0: that workgroup size instead of ZINC_VULKAN_MVK_WG's (the experts' own knob, glu_shape).
MvkShape mul_mv_k_shape(TensorType type, uint32_t nrows, uint32_t ncols, uint32_t n_tokens, uint32_t wg = 0) {
  const bool q6 = type == TensorType::Q6_K;
  const bool one = n_tokens == 1;
  const bool four_rows = one ? (q6 ? nrows >= 32768u : nrows >= 4096u) : !q6 && nrows < 8192u;
  MvkShape s{};
  s.wg = wg > 0 ? wg : knob_u32("ZINC_VULKAN_MVK_WG", 64, 64, 256) / 8 * 8;
  s.rows = knob_u32("ZINC_VULKAN_MVK_ROWS", four_rows ? 4 : 2, 1, 8);
  const uint32_t per_pass = std::min(n_tokens, knob_u32("ZINC_VULKAN_MVK_TOKENS", 8, 1, 16));
  const uint32_t passes = (n_tokens + per_pass - 1) / per_pass;
  s.ntok = (n_tokens + passes - 1) / passes;
  const uint32_t slots = s.wg / 8;
  s.groups = slots / blocks_per_group(ncols / 256, slots);
  if (const uint32_t g = knob_u32("ZINC_VULKAN_MVK_GROUPS", 0, 0, 32); g > 0) {
    s.groups = 1;
    while (s.groups * 2 <= g && slots % (s.groups * 2) == 0) s.groups *= 2;
  }
  return s;
}

uint32_t checked_k_row_bytes(const Context& ctx, const char* op, TensorType type, uint32_t ncols) {
  if (!has_mul_mv_k(ctx, type)) {
    throw Error(fmt::format("Vulkan {}: no integer-dot kernel for {} on this device", op, gguf::tensor_type_name(type)));
  }
  if (ncols % 256 != 0) throw Error(fmt::format("Vulkan {}: {} columns is not a multiple of 256", op, ncols));
  return static_cast<uint32_t>(quant::row_size(type, ncols));
}

}  // namespace

bool has_mul_mv_k(const Context& ctx, gguf::TensorType type) {
  return mul_mv_k_variant(type) != nullptr && ctx.features().int_dot && ctx.features().subgroup_size >= 8;
}

size_t q8k_row_bytes(uint32_t ncols) {
  // Codes, 16-code sums and block scales, in words; rows 16-byte aligned (the kernel loads uvec4s).
  const size_t words = ncols / 4 + ncols / 16 + ncols / 256;
  return (words + 3) / 4 * 16;
}

void quantize_q8k(Context& ctx, Dispatcher& d, View x, View xq, uint32_t ncols, uint32_t rows) {
  if (ncols % 256 != 0) throw Error(fmt::format("Vulkan quantize_q8k: {} columns is not a multiple of 256", ncols));
  if (rows == 0 || ncols == 0) return;
  if (rows > kMaxGroupsYZ) throw Error(fmt::format("Vulkan quantize_q8k: {} rows at once is over {}", rows, kMaxGroupsYZ));
  const uint32_t push[] = {ncols, static_cast<uint32_t>(q8k_row_bytes(ncols) / 4)};
  d.dispatch(ctx.pipeline("quantize_q8k", 2, sizeof(push)), std::array<View, 2>{x, xq}, push, ncols / 256, rows);
}

void mul_mv_k(Context& ctx, Dispatcher& d, gguf::TensorType type, View w, View xq, View y, uint32_t ncols,
              uint32_t nrows, uint32_t n_tokens, const NormScale& ns, View bias) {
  const uint32_t row_bytes = checked_k_row_bytes(ctx, "mul_mv_k", type, ncols);
  if (nrows == 0 || n_tokens == 0) return;
  check_bytes("mul_mv_k", uint64_t{row_bytes} * nrows);
  const MvkShape s = mul_mv_k_shape(type, nrows, ncols, n_tokens);
  const uint32_t spec[] = {s.wg, s.rows, s.ntok, s.groups};
  MulMvKPush push{ncols, nrows, row_bytes, n_tokens, static_cast<uint32_t>(q8k_row_bytes(ncols) / 4), 0, 0, 0, 0,
                  bias.buffer ? 1u : 0u};
  set_norm_scale(push, ns, ncols, n_tokens);
  const Kernel& k = ctx.pipeline(std::string("mul_mv_k_") + mul_mv_k_variant(type), kMvkBindings, sizeof(push), spec);
  uint32_t gx = 0, gy = 0;
  grid(ctx, (nrows + s.rows * s.groups - 1) / (s.rows * s.groups), &gx, &gy);
  d.dispatch(k, std::array<View, kMvkBindings>{w, xq, y, y, bias.buffer ? bias : y, y, y, y, y, norm_partials(ns, y)}, &push, gx, gy,
             std::min((n_tokens + s.ntok - 1) / s.ntok, kMaxGroupsYZ));
}

bool mul_mv_k_row_norm_fits(const Context& ctx, gguf::TensorType type, uint32_t ncols, uint32_t nrows) {
  const Features& f = ctx.features();
  return has_mul_mv_k(ctx, type) && ncols % 256 == 0 && nrows > 0 && nrows % 32 == 0 && f.fp64 && f.subgroup_size >= 8 &&
         f.max_bindings >= 11;
}

bool mul_mv_k_row_route_fits(const Context& ctx, gguf::TensorType type, uint32_t ncols, uint32_t nrows, uint32_t n_expert,
                             uint32_t n_used) {
  return mul_mv_k_row_norm_fits(ctx, type, ncols, nrows) && n_expert > 0 && n_used > 0 && n_used <= 16 && n_used <= n_expert &&
         n_expert <= mul_mv_k_shape(type, nrows, ncols, 1).wg && ctx.features().max_bindings >= 16 &&
         knob_u32("ZINC_VULKAN_ROW_ROUTE", 1, 0, 1) == 1;
}

void mul_mv_k_row_norm(Context& ctx, Dispatcher& d, gguf::TensorType type, View w, View xq, View y, View bias, uint32_t ncols,
                       uint32_t nrows, uint32_t n_tokens, const MulMvKRowNorm& n, const RowRoute* route) {
  if (!check_row_norm_launch("mul_mv_k_row_norm", mul_mv_k_row_norm_fits(ctx, type, ncols, nrows),
                             !route || mul_mv_k_row_route_fits(ctx, type, ncols, nrows, route->n_expert, route->n_used), ncols,
                             nrows, n_tokens, n, route)) {
    return;
  }
  const uint32_t row_bytes = checked_k_row_bytes(ctx, "mul_mv_k_row_norm", type, ncols);
  check_bytes("mul_mv_k_row_norm", uint64_t{row_bytes} * nrows);
  const MvkShape s = mul_mv_k_shape(type, nrows, ncols, 1);  // (a token a workgroup: each row a one-token step's)
  const uint32_t spec[] = {s.wg, s.rows, 1, s.groups}, groups = (nrows + s.rows * s.groups - 1) / (s.rows * s.groups);
  const uint32_t ne = route ? route->n_expert : 0u;
  struct {
    MulMvKPush base;
    uint32_t q8_format, arrivals, o_groups, flags;
    float logit_scale;
  } push{MulMvKPush{ncols, nrows, row_bytes, n_tokens, static_cast<uint32_t>(q8k_row_bytes(ncols) / 4), route ? route->n_used : 0u,
                    ne, 0, 0, bias.buffer ? 1u : 0u},
         n.q8_format, groups + ne, groups, route ? route_flags(*route) : 0u, route ? route->logit_scale : 1.0f};
  push.base.out_stride = n.q8.buffer ? static_cast<uint32_t>(mul_mv_q8_bytes(nrows) / 4) : 0u;
  push.base.norm_eps = n.eps;
  push.base.norm_offset = n.offset;
  push.base.norm_has_w = n.norm_w.buffer ? 1u : 0u;
  uint32_t gx = 0, gy = 0;
  grid(ctx, groups + ne, &gx, &gy);
  const std::array<View, 11> views{w, xq, y, n.res, bias.buffer ? bias : y, n.sum, n.y, n.q8.buffer ? n.q8 : y, n.count, y,
                                   n.norm_w.buffer ? n.norm_w : y};
  const std::string variant = mul_mv_k_variant(type);
  if (!route) {
    const size_t size = sizeof(push) - 3 * sizeof(uint32_t);  // (art_ reads no routing constants)
    d.dispatch(ctx.pipeline("mul_mv_k_art_" + variant, 11, size, spec), views, &push, gx, gy, n_tokens);
    return;
  }
  const RowRoute& r = *route;
  const std::array<View, 16> all{views[0], views[1], views[2], views[3], views[4], views[5], views[6], views[7], views[8],
                                 views[9], views[10], r.fold, r.logits, r.bias.buffer ? r.bias : r.logits, r.ids, r.weights};
  d.dispatch(ctx.pipeline("mul_mv_k_artr_" + variant, 16, sizeof(push), spec), all, &push, gx, gy, n_tokens);
}

bool mul_mv_k_norm_fits(const Context& ctx, gguf::TensorType type, uint32_t ncols, uint32_t nrows) {
  if (!has_mul_mv_k(ctx, type) || ncols % 256 != 0 || nrows == 0 || nrows % 256 != 0) return false;
  const MvkShape s = mul_mv_k_shape(type, nrows, ncols, 1);
  return s.wg >= 64 && 256 % (s.rows * s.groups) == 0;
}

namespace {
void check_norm(const char* op, const MulMvKNorm& n, uint32_t nrows) {
  if (!n.res.buffer || !n.xq_out.buffer || !n.partials.buffer || view_bytes(n.count) < size_t{4} * (nrows / 256) ||
      view_bytes(n.partials) < size_t{4} * (nrows / 256) || view_bytes(n.xq_out) < q8k_row_bytes(nrows)) {
    throw Error(fmt::format("Vulkan {}: the residual, codes, counters or partial sums are missing or short", op));
  }
}

// The push constants of a gated tail's kernels (mul_mv_k.comp's MUL_MV_GTAIL), and their bindings'
// count: the norm's 12 then the partner's part, the gate and the sum.
struct MulMvKGatedPush {
  MulMvKPush base;
  uint32_t tail_count = 0, own_shared = 0;
};
constexpr uint32_t kGatedBindings = 15;
// A norm tail's product (kernel mul_mv_k_PREFIX_TYPE, its 12 bindings), or with a gated tail the
// gated variant (mul_mv_k_GATED_TYPE: those and the other part, the gate and the sum).
void dispatch_norm(Context& ctx, Dispatcher& d, const char* op, const char* prefix, const char* gated_prefix, gguf::TensorType type,
                   std::span<const uint32_t> spec, const MulMvKPush& push, uint32_t gx, uint32_t gy,
                   const std::array<View, 12>& b, uint32_t nrows, const GatedTail* gated) {
  if (!gated) {
    const Kernel& k = ctx.pipeline(std::string("mul_mv_k_") + prefix + mul_mv_k_variant(type), 12, sizeof(push), spec);
    d.dispatch(k, b, &push, gx, gy, 1);
    return;
  }
  const GatedTail& g = *gated;
  if (!g.partner.buffer || !g.gate.buffer || !g.sum.buffer || view_bytes(g.partner) < size_t{4} * nrows ||
      view_bytes(g.sum) < size_t{4} * nrows || view_bytes(g.gate) < 4 || g.arrivals == 0) {
    throw Error(fmt::format("Vulkan {}: the gated tail's other part, gate, sum or count is missing or short", op));
  }
  const MulMvKGatedPush gp{push, g.arrivals, g.shared ? 1u : 0u};
  const Kernel& k = ctx.pipeline(std::string("mul_mv_k_") + gated_prefix + mul_mv_k_variant(type), kGatedBindings, sizeof(gp), spec);
  std::array<View, kGatedBindings> all{};
  std::copy(b.begin(), b.end(), all.begin());
  all[12] = g.partner;
  all[13] = g.gate;
  all[14] = g.sum;
  d.dispatch(k, all, &gp, gx, gy, 1);
}
}  // namespace

uint32_t mul_mv_k_norm_groups(gguf::TensorType type, uint32_t ncols, uint32_t nrows) {
  const MvkShape s = mul_mv_k_shape(type, nrows, ncols, 1);
  return 256 / (s.rows * s.groups);
}

void mul_mv_k_norm(Context& ctx, Dispatcher& d, gguf::TensorType type, View w, View xq, View h, uint32_t ncols, uint32_t nrows,
                   const MulMvKNorm& n, const GatedTail* gated) {
  if (!mul_mv_k_norm_fits(ctx, type, ncols, nrows)) {
    throw Error(fmt::format("Vulkan mul_mv_k_norm: {} rows of {} do not fit", nrows, ncols));
  }
  check_norm("mul_mv_k_norm", n, nrows);
  const uint32_t row_bytes = checked_k_row_bytes(ctx, "mul_mv_k_norm", type, ncols);
  check_bytes("mul_mv_k_norm", uint64_t{row_bytes} * nrows);
  const MvkShape s = mul_mv_k_shape(type, nrows, ncols, 1);
  const uint32_t spec[] = {s.wg, s.rows, 1, s.groups};
  MulMvKPush push{ncols, nrows, row_bytes, 1, static_cast<uint32_t>(q8k_row_bytes(ncols) / 4), 0, 0, 0, 0, 0};
  push.out_stride = static_cast<uint32_t>(q8k_row_bytes(nrows) / 4);
  push.norm_offset = n.offset;
  push.norm_has_w = n.norm_w.buffer ? 1u : 0u;
  uint32_t gx = 0, gy = 0;
  grid(ctx, nrows / (s.rows * s.groups), &gx, &gy);
  dispatch_norm(ctx, d, "mul_mv_k_norm", "nrm_", "gnrm_", type, spec, push, gx, gy,
                {w, xq, h, h, h, h, h, n.xq_out, n.count, n.partials, n.res, n.norm_w.buffer ? n.norm_w : h}, nrows, gated);
}

namespace {
// The push constants both kinds of product's rotation and cache tails read (mv_tails.glsl).
struct RopeTailPush {
  uint32_t head_dim, n_rot, flags, count_base;
  float eps, offset;
};

RopeTailPush rope_tail_push(const MulMvKRope& r) {
  return RopeTailPush{r.head_dim, r.n_rot,
                      (r.neox ? 1u : 0u) | (r.norm ? 2u : 0u) | (r.norm && r.norm_w.buffer ? 4u : 0u) | (r.store ? 8u : 0u) |
                          (r.f32_cache ? 16u : 0u),
                      r.count_base, r.eps, r.offset};
}

void check_rope_tail(const char* op, const MulMvKRope& r, uint32_t nrows) {
  if (r.n_rot > r.head_dim || r.n_rot % 2 != 0) throw Error(fmt::format("Vulkan {}: the rotated dims do not fit the head", op));
  if (r.head_dim == 0 || view_bytes(r.count) < size_t{4} * (r.count_base + nrows / r.head_dim)) {
    throw Error(fmt::format("Vulkan {}: too few counters", op));
  }
}
}  // namespace

bool mul_mv_k_tail_fits(const Context& ctx, gguf::TensorType type, uint32_t ncols, uint32_t nrows, uint32_t head_dim) {
  if (!has_mul_mv_k(ctx, type) || ncols % 256 != 0 || head_dim == 0 || head_dim > 128 || head_dim % 2 != 0 ||
      nrows % head_dim != 0 || ctx.features().subgroup_size > 64 || 64 % ctx.features().subgroup_size != 0) {
    return false;
  }
  // The one-token shape (eight rows a workgroup instead measured slower on an H200: bench/README).
  const MvkShape s = mul_mv_k_shape(type, nrows, ncols, 1);
  const uint32_t rows = s.rows * s.groups;  // a workgroup's rows
  return s.wg >= 64 && rows % 2 == 0 && head_dim % rows == 0;
}

namespace {
struct MulMvKTailPush {
  MulMvKPush base;
  RopeTailPush tail;
};

void mul_mv_k_tail(Context& ctx, Dispatcher& d, const char* variant, gguf::TensorType type, const std::array<View, 9>& views,
                   uint32_t ncols, uint32_t nrows, uint32_t head_dim, const MulMvKTailPush& tail, const NormScale& ns) {
  if (!mul_mv_k_tail_fits(ctx, type, ncols, nrows, head_dim)) {
    throw Error(fmt::format("Vulkan mul_mv_k_{}: {} rows of {} ({} a head) do not fit", variant, nrows, ncols, head_dim));
  }
  const uint32_t row_bytes = checked_k_row_bytes(ctx, "mul_mv_k tail", type, ncols);
  check_bytes("mul_mv_k tail", uint64_t{row_bytes} * nrows);
  const MvkShape s = mul_mv_k_shape(type, nrows, ncols, 1);
  const uint32_t spec[] = {s.wg, s.rows, 1, s.groups};
  MulMvKTailPush push = tail;
  push.base = MulMvKPush{ncols, nrows, row_bytes, 1, static_cast<uint32_t>(q8k_row_bytes(ncols) / 4), 0, 0, 0, 0, 0};
  set_norm_scale(push.base, ns, ncols, 1);
  const Kernel& k = ctx.pipeline(std::string("mul_mv_k_") + variant + mul_mv_k_variant(type), kMvkBindings, sizeof(push), spec);
  uint32_t gx = 0, gy = 0;
  grid(ctx, nrows / (s.rows * s.groups), &gx, &gy);
  std::array<View, kMvkBindings> all{};
  std::copy(views.begin(), views.end(), all.begin());
  all[9] = norm_partials(ns, views[2]);
  d.dispatch(k, all, &push, gx, gy, 1);
}
}  // namespace

void mul_mv_k_rope(Context& ctx, Dispatcher& d, gguf::TensorType type, View w, View xq, View y, uint32_t ncols,
                   uint32_t nrows, const MulMvKRope& r, const NormScale& ns) {
  check_rope_tail("mul_mv_k_rope", r, nrows);
  MulMvKTailPush push{};
  push.tail = rope_tail_push(r);
  mul_mv_k_tail(ctx, d, "rope_", type,
                {w, xq, y, r.cs, r.norm_w.buffer ? r.norm_w : r.cs, y, r.store ? r.k_cache : y, r.count, r.store ? r.step : r.cs},
                ncols, nrows, r.head_dim, push, ns);
}

void mul_mv_k_vstore(Context& ctx, Dispatcher& d, gguf::TensorType type, View w, View xq, View y, View v_cache, View step,
                     bool f32_cache, uint32_t ncols, uint32_t nrows, const NormScale& ns) {
  MulMvKTailPush push{};
  push.tail.flags = 8u | (f32_cache ? 16u : 0u);
  // (Any head size the rows' workgroups divide: the append is per workgroup.)
  const MvkShape s = mul_mv_k_shape(type, nrows, ncols, 1);
  mul_mv_k_tail(ctx, d, "vst_", type, {w, xq, y, step, step, y, v_cache, step, step}, ncols, nrows, s.rows * s.groups, push, ns);
}

bool mul_mv_q8_tail_fits(const Context& ctx, gguf::TensorType type, uint32_t ncols, uint32_t nrows, uint32_t head_dim) {
  const uint32_t rows = q8_rows(), sg = ctx.features().subgroup_size;
  return q8_dot(ctx) && has_mul_mv_q8(type) && ncols % 32 == 0 && head_dim > 0 && head_dim <= 128 && head_dim % 2 == 0 &&
         nrows % head_dim == 0 && rows % 2 == 0 && head_dim % rows == 0 && sg > 0 && sg <= 64 && 64 % sg == 0;
}

namespace {
void mul_mv_q8_tail(Context& ctx, Dispatcher& d, const char* variant, gguf::TensorType type, const std::array<View, 9>& views,
                    uint32_t ncols, uint32_t nrows, uint32_t head_dim, RopeTailPush tail, bool has_bias) {
  if (!mul_mv_q8_tail_fits(ctx, type, ncols, nrows, head_dim)) {
    throw Error(fmt::format("Vulkan mul_mv_q8_{}: {} rows of {} ({} a head) do not fit", variant, nrows, ncols, head_dim));
  }
  const QuantType& t = *q8_find(type);
  const auto row_bytes = static_cast<uint32_t>(quant::row_size(type, ncols));
  check_bytes("mul_mv_q8 tail", uint64_t{row_bytes} * nrows);
  const struct {
    MulMvQ8Push base;
    RopeTailPush tail;
  } push{{ncols / 32, nrows, row_bytes, 0, 0, 0, 0, has_bias ? 1u : 0u}, tail};
  dispatch_q8(ctx, d, std::string("mul_mv_q8_") + variant + t.name, views, push, nrows, 1);
}
}  // namespace

void mul_mv_q8_rope(Context& ctx, Dispatcher& d, gguf::TensorType type, View w, View xq, View y, View bias, uint32_t ncols,
                    uint32_t nrows, const MulMvKRope& r) {
  check_rope_tail("mul_mv_q8_rope", r, nrows);
  mul_mv_q8_tail(ctx, d, "drope_", type,
                 {w, xq, y, r.cs, bias.buffer ? bias : y, r.norm_w.buffer ? r.norm_w : r.cs, r.store ? r.k_cache : y, r.count,
                  r.store ? r.step : r.cs},
                 ncols, nrows, r.head_dim, rope_tail_push(r), bias.buffer != nullptr);
}

void mul_mv_q8_vstore(Context& ctx, Dispatcher& d, gguf::TensorType type, View w, View xq, View y, View bias, View v_cache,
                      View step, bool f32_cache, uint32_t ncols, uint32_t nrows) {
  RopeTailPush tail{};
  tail.flags = 8u | (f32_cache ? 16u : 0u);
  // (Any head size the rows' workgroups divide: the append is per workgroup.)
  mul_mv_q8_tail(ctx, d, "dvst_", type, {w, xq, y, step, bias.buffer ? bias : y, step, v_cache, step, step}, ncols, nrows,
                 q8_rows(), tail, bias.buffer != nullptr);
}

void mul_mv_k_conv(Context& ctx, Dispatcher& d, gguf::TensorType type, View w, View xq, View conv_w, View state, View y,
                   uint32_t ncols, uint32_t nrows, uint32_t taps, const NormScale& ns) {
  const uint32_t row_bytes = checked_k_row_bytes(ctx, "mul_mv_k_conv", type, ncols);
  if (taps == 0) throw Error("Vulkan mul_mv_k_conv: a convolution of 0 taps");
  if (nrows == 0) return;
  check_bytes("mul_mv_k_conv", uint64_t{row_bytes} * nrows);
  const MvkShape s = mul_mv_k_shape(type, nrows, ncols, 1);
  const uint32_t spec[] = {s.wg, s.rows, 1, s.groups};
  struct {
    MulMvKPush base;
    uint32_t taps;
  } push{MulMvKPush{ncols, nrows, row_bytes, 1, static_cast<uint32_t>(q8k_row_bytes(ncols) / 4), 0, 0, 0, 0, 0}, taps};
  set_norm_scale(push.base, ns, ncols, 1);
  const Kernel& k = ctx.pipeline(std::string("mul_mv_k_cnv_") + mul_mv_k_variant(type), kMvkBindings, sizeof(push), spec);
  uint32_t gx = 0, gy = 0;
  grid(ctx, (nrows + s.rows * s.groups - 1) / (s.rows * s.groups), &gx, &gy);
  d.dispatch(k, std::array<View, kMvkBindings>{w, xq, y, conv_w, state, y, y, y, y, norm_partials(ns, y)}, &push, gx, gy, 1);
}

void mul_mv_k_id(Context& ctx, Dispatcher& d, gguf::TensorType type, View w, View ids, View xq, View y, View bias,
                 uint32_t ncols, uint32_t nrows, uint32_t n_expert, uint32_t n_used, uint32_t n_tokens, bool x_per_slot) {
  const uint32_t row_bytes = checked_k_row_bytes(ctx, "mul_mv_k_id", type, ncols);
  if (nrows == 0 || n_tokens == 0 || n_used == 0) return;
  if (n_expert == 0) throw Error("Vulkan mul_mv_k_id: no experts");
  if (uint64_t{n_tokens} * n_used > kMaxGroupsYZ) throw Error("Vulkan mul_mv_k_id: too many (token, expert) pairs for one step");
  check_bytes("mul_mv_k_id", uint64_t{row_bytes} * nrows * n_expert);
  // One (token, expert) pair per z: the shape of one token.
  const MvkShape s = mul_mv_k_shape(type, nrows, ncols, 1);
  const uint32_t spec[] = {s.wg, s.rows, 1, s.groups};
  const MulMvKPush push{ncols, nrows, row_bytes, n_tokens, static_cast<uint32_t>(q8k_row_bytes(ncols) / 4), n_used,
                        n_expert, row_bytes * nrows, x_per_slot ? 1u : 0u, bias.buffer ? 1u : 0u};
  const Kernel& k = ctx.pipeline(std::string("mul_mv_k_id_") + mul_mv_k_variant(type), kMvkBindings, sizeof(push), spec);
  uint32_t gx = 0, gy = 0;
  grid(ctx, (nrows + s.rows * s.groups - 1) / (s.rows * s.groups), &gx, &gy);
  d.dispatch(k, std::array<View, kMvkBindings>{w, xq, y, ids, bias.buffer ? bias : y, y, y, y, y, y}, &push, gx, gy,
             n_tokens * n_used);
}

namespace {
// mul_mv_k_id_glu's shape: the gate and up products' alone, each workgroup as many rows of each (on
// an H200, qwen3-30b-a3b's decode: 287.5 tok/s, against 285.5 with half the rows of each). For
// measuring on a device, ZINC_VULKAN_MVK_EXPERT_WG (64..256) and ZINC_VULKAN_MVK_EXPERT_ROWS (1..8)
// set it apart from the dense products' (64 invocations take two rows of gate and two of up, where
// the CUDA backend gives a warp of 32 lanes as many; fewer than 64 would leave the last workgroup's
// codes of a 256-row block, 4 values an invocation, half written).
MvkShape glu_shape(TensorType type, uint32_t nrows, uint32_t ncols) {
  const uint32_t wg = knob_u32("ZINC_VULKAN_MVK_EXPERT_WG", 0, 0, 256) / 8 * 8;
  MvkShape s = mul_mv_k_shape(type, nrows, ncols, 1, wg >= 64 ? wg : 0);
  s.rows = knob_u32("ZINC_VULKAN_MVK_EXPERT_ROWS", s.rows, 1, 8);
  return s;
}
}  // namespace

bool mul_mv_k_id_glu_fits(const Context& ctx, gguf::TensorType type, uint32_t ncols, uint32_t nrows) {
  if (!has_mul_mv_k(ctx, type) || ncols % 256 != 0 || nrows == 0 || nrows % 256 != 0) return false;
  const MvkShape s = glu_shape(type, nrows, ncols);
  return 256 % (s.rows * s.groups) == 0;  // no workgroup straddles two blocks of the activation
}

void mul_mv_k_id_glu(Context& ctx, Dispatcher& d, gguf::TensorType type, View gate, View up, View ids, View xq, View act,
                     View xq_out, View count, uint32_t ncols, uint32_t nrows, uint32_t n_expert, uint32_t n_used,
                     uint32_t n_tokens, const NormScale& ns) {
  if (!mul_mv_k_id_glu_fits(ctx, type, ncols, nrows)) {
    throw Error(fmt::format("Vulkan mul_mv_k_id_glu: experts of {} rows of {} do not fit", nrows, ncols));
  }
  const uint32_t row_bytes = checked_k_row_bytes(ctx, "mul_mv_k_id_glu", type, ncols);
  const MvkShape s = glu_shape(type, nrows, ncols);
  if (n_tokens == 0 || n_used == 0) return;
  if (n_expert == 0) throw Error("Vulkan mul_mv_k_id_glu: no experts");
  if (uint64_t{n_tokens} * n_used > kMaxGroupsYZ) throw Error("Vulkan mul_mv_k_id_glu: too many (token, expert) pairs for one step");
  if (count.bytes < size_t{4} * n_tokens * n_used * (nrows / 256)) throw Error("Vulkan mul_mv_k_id_glu: too few counters");
  check_bytes("mul_mv_k_id_glu", uint64_t{row_bytes} * nrows * n_expert);
  const uint32_t spec[] = {s.wg, s.rows, 1, s.groups};
  MulMvKPush push{ncols, nrows, row_bytes, n_tokens, static_cast<uint32_t>(q8k_row_bytes(ncols) / 4), n_used,
                  n_expert, row_bytes * nrows, 0u, 0u};
  push.out_stride = static_cast<uint32_t>(q8k_row_bytes(nrows) / 4);
  set_norm_scale(push, ns, ncols, n_tokens);
  const Kernel& k = ctx.pipeline(std::string("mul_mv_k_idg_") + mul_mv_k_variant(type), kMvkBindings, sizeof(push), spec);
  uint32_t gx = 0, gy = 0;
  grid(ctx, nrows / (s.rows * s.groups), &gx, &gy);
  d.dispatch(k, std::array<View, kMvkBindings>{gate, xq, act, ids, act, act, up, xq_out, count, norm_partials(ns, act)}, &push,
             gx, gy, n_tokens * n_used);
}

namespace {
// The combined down product's shape: one group of invocations per slot, each as many blocks a step as
// a row has (up to a power of two), 256 invocations at most.
struct CombineShape {
  uint32_t wg, rows;
};
CombineShape combine_shape(uint32_t ncols, uint32_t n_used) {
  return {8 * n_used * blocks_per_group(ncols / 256, 256 / (8 * n_used)), knob_u32("ZINC_VULKAN_MVK_COMBINE_ROWS", 2, 1, 8)};
}
}  // namespace

bool mul_mv_k_id_combine(Context& ctx, Dispatcher& d, gguf::TensorType type, View w, View ids, View weights, View xq,
                         View y, View bias, uint32_t ncols, uint32_t nrows, uint32_t n_expert, uint32_t n_used,
                         uint32_t n_tokens) {
  const uint32_t row_bytes = checked_k_row_bytes(ctx, "mul_mv_k_id_combine", type, ncols);
  if (n_used == 0 || n_used > 32) return false;  // a group of 8 invocations or more per slot
  if (nrows == 0 || n_tokens == 0) return true;
  if (n_expert == 0) throw Error("Vulkan mul_mv_k_id_combine: no experts");
  if (n_tokens > kMaxGroupsYZ) throw Error("Vulkan mul_mv_k_id_combine: too many tokens for one step");
  check_bytes("mul_mv_k_id_combine", uint64_t{row_bytes} * nrows * n_expert);
  const CombineShape cs = combine_shape(ncols, n_used);
  const uint32_t spec[] = {cs.wg, cs.rows, 1, n_used};
  const MulMvKPush push{ncols, nrows, row_bytes, n_tokens, static_cast<uint32_t>(q8k_row_bytes(ncols) / 4), n_used,
                        n_expert, row_bytes * nrows, 1u, bias.buffer ? 1u : 0u};
  const Kernel& k = ctx.pipeline(std::string("mul_mv_k_idc_") + mul_mv_k_variant(type), kMvkBindings, sizeof(push), spec);
  uint32_t gx = 0, gy = 0;
  grid(ctx, (nrows + cs.rows - 1) / cs.rows, &gx, &gy);
  d.dispatch(k, std::array<View, kMvkBindings>{w, xq, y, ids, bias.buffer ? bias : y, weights, y, y, y, y}, &push, gx, gy,
             n_tokens);
  return true;
}

bool mul_mv_k_id_combine_norm_fits(const Context& ctx, gguf::TensorType type, uint32_t ncols, uint32_t nrows, uint32_t n_used) {
  if (!has_mul_mv_k(ctx, type) || ncols % 256 != 0 || nrows == 0 || nrows % 256 != 0 || n_used == 0 || n_used > 32) return false;
  const CombineShape cs = combine_shape(ncols, n_used);
  return cs.wg >= 64 && 256 % cs.rows == 0;
}

uint32_t mul_mv_k_id_combine_norm_groups(uint32_t ncols, uint32_t n_used) { return 256 / combine_shape(ncols, n_used).rows; }

void mul_mv_k_id_combine_norm(Context& ctx, Dispatcher& d, gguf::TensorType type, View w, View ids, View weights, View xq,
                              View h, uint32_t ncols, uint32_t nrows, uint32_t n_expert, uint32_t n_used, const MulMvKNorm& n,
                              const GatedTail* gated) {
  if (!mul_mv_k_id_combine_norm_fits(ctx, type, ncols, nrows, n_used)) {
    throw Error(fmt::format("Vulkan mul_mv_k_id_combine_norm: {} experts' {} rows of {} do not fit", n_used, nrows, ncols));
  }
  if (n_expert == 0) throw Error("Vulkan mul_mv_k_id_combine_norm: no experts");
  check_norm("mul_mv_k_id_combine_norm", n, nrows);
  const uint32_t row_bytes = checked_k_row_bytes(ctx, "mul_mv_k_id_combine_norm", type, ncols);
  check_bytes("mul_mv_k_id_combine_norm", uint64_t{row_bytes} * nrows * n_expert);
  const CombineShape cs = combine_shape(ncols, n_used);
  const uint32_t spec[] = {cs.wg, cs.rows, 1, n_used};
  MulMvKPush push{ncols, nrows, row_bytes, 1, static_cast<uint32_t>(q8k_row_bytes(ncols) / 4), n_used,
                  n_expert, row_bytes * nrows, 1u, 0u};
  push.out_stride = static_cast<uint32_t>(q8k_row_bytes(nrows) / 4);
  push.norm_offset = n.offset;
  push.norm_has_w = n.norm_w.buffer ? 1u : 0u;
  uint32_t gx = 0, gy = 0;
  grid(ctx, nrows / cs.rows, &gx, &gy);
  dispatch_norm(ctx, d, "mul_mv_k_id_combine_norm", "idcn_", "idcg_", type, spec, push, gx, gy,
                {w, xq, h, ids, h, weights, h, n.xq_out, n.count, n.partials, n.res, n.norm_w.buffer ? n.norm_w : h}, nrows, gated);
}

}  // namespace zinc::backend::vk
