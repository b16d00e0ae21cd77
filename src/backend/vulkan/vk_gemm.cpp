#include "backend/vulkan/vk_gemm.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <vector>

#include "backend/vulkan/vk_quant.h"
#include "core/error.h"
#include "core/knobs.h"

namespace zinc::backend::vk {

namespace {

// Output tile (W rows x tokens) of each kernel; the shaders hold the same constants.
constexpr uint32_t kTiledRows = 64, kTiledTokens = 64;
constexpr uint32_t kCoopTokens = 128;
// mul_mm_q_coopmat's narrow tiles, for experts with few tokens each: 256 rows x 32 tokens, the eight
// subgroups along the rows (an expert's 128-token tile mostly zeros, and half as many rows a step).
constexpr uint32_t kNarrowRows = 256, kNarrowTokens = 32;

// mul_mm_q_coopmat's W rows per tile: 128, or 64 where 128-row tiles would number under 128 (on an H100,
// 512 tokens of a 1024-row weight: 45 TFLOPS with 64 rows, 21 with 128; of a 4096-row one 76 and 88).
// ZINC_VULKAN_MM_BM (64 or 128) forces one, for measurements.
uint32_t coop_rows(uint32_t nrows, uint32_t n_tokens) {
  const uint32_t tiles = ((nrows + 127) / 128) * ((n_tokens + kCoopTokens - 1) / kCoopTokens);
  return knob_u32("ZINC_VULKAN_MM_BM", tiles < 128 ? 64 : 128, 64, 128) == 64 ? 64 : 128;
}

// mul_mm_q_coopmat's shared memory with `rows` W rows and `tokens` tokens per tile: two buffers of W's
// and X's 80-byte rows, 1 KiB per subgroup (8 at most) of accumulators on their way out, which holds
// the 16-entry codebook of the types that decode through one (quant.glsl's HAS_CODEBOOK) until then;
// the narrow tiles' accumulators go through the W buffers, and their codebook takes 64 bytes of its own.
// (The codebook in its own 64 bytes took the wide 128-row tiles past 48 KiB: MXFP4 experts ran 64-row
// tiles.)
size_t coop_shared_bytes(uint32_t rows, uint32_t tokens, gguf::TensorType type) {
  const bool codebook = type == gguf::TensorType::IQ4_NL || type == gguf::TensorType::IQ4_XS ||
                        type == gguf::TensorType::MXFP4;
  const bool wide = tokens == kCoopTokens;
  return size_t{2} * rows * 80 + size_t{2} * tokens * 80 + (wide ? 8192 : 0) + (codebook && !wide ? 64 : 0);
}

// mul_mm_q_coopmat's K-steps of 32 a pass: 2 (the two buffers filled together, two steps' loads in
// flight against a step's multiplies) for the K-quants, 1 (double-buffered, one step ahead) for the
// rest. On an H200, 512-token prompts, 1 -> 2 for the K-quants: qwen3-8b 6,930 -> 7,976 tok/s,
// qwen3-30b-a3b 9,162 -> ~10,030, qwen3.6-35b-a3b 4,990 -> ~5,160; gpt-oss-20b (Q5_0 and Q8_0 experts
// and projections) loses ~5% with 2 for every type. ZINC_VULKAN_MM_STEPS (1 or 2) forces one, for
// measurements.
uint32_t coop_steps(gguf::TensorType type) {
  const bool kquant = type == gguf::TensorType::Q2_K || type == gguf::TensorType::Q3_K ||
                      type == gguf::TensorType::Q4_K || type == gguf::TensorType::Q5_K || type == gguf::TensorType::Q6_K;
  return knob_u32("ZINC_VULKAN_MM_STEPS", kquant ? 2 : 1, 1, 2) == 1 ? 1 : 2;
}

// Whether the driver lists the shape mul_mm_q_coopmat uses (16x16x16, f16 A and B, f32 C and D, one
// subgroup: NVIDIA does; the query guards against a driver that does not) and has the Vulkan memory
// model that glslang declares for GL_KHR_memory_scope_semantics (Context::create enables it wherever
// it is present). Asked once per device.
bool driver_has_coopmat(const Context& ctx) {
  static std::mutex mutex;
  static std::map<VkPhysicalDevice, bool> known;
  const std::lock_guard<std::mutex> lock(mutex);
  const VkPhysicalDevice dev = ctx.physical_device();
  if (auto it = known.find(dev); it != known.end()) return it->second;
  VkPhysicalDeviceVulkan12Features f12{};
  f12.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES;
  VkPhysicalDeviceFeatures2 f2{};
  f2.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
  f2.pNext = &f12;
  vkGetPhysicalDeviceFeatures2(dev, &f2);
  bool found = false;
  if (f12.vulkanMemoryModel && vkGetPhysicalDeviceCooperativeMatrixPropertiesNV != nullptr) {
    uint32_t n = 0;
    vkGetPhysicalDeviceCooperativeMatrixPropertiesNV(dev, &n, nullptr);
    std::vector<VkCooperativeMatrixPropertiesNV> props(n);
    for (auto& p : props) p.sType = VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_NV;
    vkGetPhysicalDeviceCooperativeMatrixPropertiesNV(dev, &n, props.data());
    for (uint32_t i = 0; i < n; ++i) {
      const auto& p = props[i];
      found = found || (p.MSize == 16 && p.NSize == 16 && p.KSize == 16 && p.AType == VK_COMPONENT_TYPE_FLOAT16_NV &&
                        p.BType == VK_COMPONENT_TYPE_FLOAT16_NV && p.CType == VK_COMPONENT_TYPE_FLOAT32_NV &&
                        p.DType == VK_COMPONENT_TYPE_FLOAT32_NV && p.scope == VK_SCOPE_SUBGROUP_NV);
    }
  }
  known.emplace(dev, found);
  return found;
}

bool coopmat_usable(const Context& ctx) {
  const Features& f = ctx.features();
  return f.coopmat_nv && f.subgroup_size == 32 && f.shared_memory >= coop_shared_bytes(128, kCoopTokens, gguf::TensorType::F16) &&
         driver_has_coopmat(ctx);
}

void check_shape(uint32_t ncols, uint32_t nrows, uint32_t y_stride, uint32_t y_offset) {
  if (ncols % 32 != 0) throw Error(fmt::format("Vulkan mul_mm_q: {} columns is not a multiple of 32", ncols));
  if (uint64_t{y_offset} + nrows > y_stride) {
    throw Error(fmt::format("Vulkan mul_mm_q: rows [{}, {}) do not fit in output rows of {}", y_offset,
                            uint64_t{y_offset} + nrows, y_stride));
  }
}

void require_coopmat(const Context& ctx) {
  if (!coopmat_usable(ctx)) {
    throw Error(fmt::format("Vulkan mul_mm_q: {} has no usable NV cooperative matrix", ctx.device_name()));
  }
}

void check_scratch(const View& s, uint32_t ncols, uint32_t n_tokens) {
  const size_t scratch = mul_mm_scratch_bytes(ncols, n_tokens);
  if (view_bytes(s) < scratch) {
    throw Error(fmt::format("Vulkan mul_mm_convert_x: the f16 view holds fewer than the {} bytes needed", scratch));
  }
}

}  // namespace

MulMmKernel mul_mm_kernel(const Context& ctx) {
  return coopmat_usable(ctx) ? MulMmKernel::CoopMatNV : MulMmKernel::Tiled;
}

const char* mul_mm_kernel_name(MulMmKernel k) {
  return k == MulMmKernel::CoopMatNV ? "mul_mm_q_coopmat (NV cooperative matrix, f16 x f16 -> f32)"
                                     : "mul_mm_q (tiled, float)";
}

size_t mul_mm_scratch_bytes(uint32_t ncols, uint32_t n_tokens) { return size_t{ncols} * n_tokens * 2; }

void mul_mm_convert_x(Context& ctx, Dispatcher& d, View x, View x_f16, uint32_t ncols, uint32_t n_tokens) {
  if (ncols % 4 != 0) throw Error(fmt::format("Vulkan mul_mm_convert_x: {} columns is not a multiple of 4", ncols));
  check_scratch(x_f16, ncols, n_tokens);
  const uint32_t n4 = ncols / 4 * n_tokens;
  if (n4 == 0) return;
  uint32_t cx = 0, cy = 0;
  grid(ctx, (n4 + 255) / 256, &cx, &cy);
  const View convert[] = {x, x_f16};
  d.dispatch(ctx.pipeline("cvt_f16", 2, 4), convert, &n4, cx, cy);
}

namespace {

// mm_q.glsl's push constants.
struct MulMmQPush {
  uint32_t ncols, nrows, n_tokens, y_stride, y_offset, token_tiles, tiles, row_bytes, n_expert, n_used, x_per_slot,
      has_bias, list_offset;
};

uint32_t tile_tokens(MulMmKernel k) { return k == MulMmKernel::CoopMatNV ? kCoopTokens : kTiledTokens; }

// Experts' tiles: the narrow ones where a step's slots average at most ZINC_VULKAN_MOE_NARROW (default
// 24) an expert on the tensor-core kernel. On an H200, 512-token prompts: qwen3.6-35b-a3b (256 experts,
// 8 a token: 16 tokens an expert) 3,646 -> 4,979 tok/s (4,554 with 128-row narrow tiles); qwen3-30b-a3b
// (32 an expert) 9,209 -> 7,419; gpt-oss-20b (64) 6,249 -> 4,135.
bool narrow_experts(MulMmKernel k, uint32_t slots, uint32_t n_expert) {
  return k == MulMmKernel::CoopMatNV && slots <= uint64_t{knob_u32("ZINC_VULKAN_MOE_NARROW", 24, 0, 1u << 16)} * n_expert;
}
uint32_t expert_tile_tokens(MulMmKernel k, uint32_t slots, uint32_t n_expert) {
  return narrow_experts(k, slots, n_expert) ? kNarrowTokens : tile_tokens(k);
}

// The most tiles moe_sort makes of n_slots entries: every expert's last tile may be partial.
uint32_t route_tiles(uint32_t n_slots, uint32_t n_expert, uint32_t tokens_per_tile) {
  return (n_slots + tokens_per_tile - 1) / tokens_per_tile + std::min(n_expert, n_slots);
}

// Records mul_mm_q(_coopmat) for `push` (its shape and mode filled in; the tiles here), the coopmat
// kernel's narrow tiles with `narrow`.
void record_mm_q(Context& ctx, Dispatcher& d, MulMmKernel kernel, const char* op, gguf::TensorType type, View w, View x,
                 View y, View route, View bias, MulMmQPush push, uint32_t n_matrices, bool narrow = false) {
  const char* variant = weight_variant(op, type, push.ncols, &push.row_bytes);
  if (push.ncols % 32 != 0) throw Error(fmt::format("Vulkan {}: {} columns is not a multiple of 32", op, push.ncols));
  if (uint64_t{push.row_bytes} * push.nrows * n_matrices > (uint64_t{1} << 32)) {
    throw Error(fmt::format("Vulkan {}: a weight over the kernels' 4 GiB", op));
  }
  const bool coop = kernel == MulMmKernel::CoopMatNV;
  if (coop) require_coopmat(ctx);
  uint32_t rows = coop ? (narrow ? knob_u32("ZINC_VULKAN_MOE_NARROW_BM", kNarrowRows, 128, 256) / 128 * 128
                                 : coop_rows(push.nrows, push.n_tokens))
                      : kTiledRows;
  const uint32_t tokens = narrow ? kNarrowTokens : kCoopTokens;
  if (coop && coop_shared_bytes(rows, tokens, type) > ctx.features().shared_memory) rows = narrow ? 128 : 64;
  push.has_bias = bias.buffer ? 1 : 0;
  push.tiles = push.token_tiles * ((push.nrows + rows - 1) / rows);
  uint32_t gx = 0, gy = 0;
  grid(ctx, push.tiles, &gx, &gy);
  const View bindings[] = {w, x, y, route.buffer ? route : x, bias.buffer ? bias : x};
  if (coop) {
    const uint32_t warps = narrow || knob_u32("ZINC_VULKAN_MM_WARPS", 8, 4, 8) != 4 ? 8 : 4;
    const uint32_t spec[] = {rows, warps * 32, coop_steps(type)};
    d.dispatch(ctx.pipeline(std::string(narrow ? "mul_mm_q_coopmat_narrow_" : "mul_mm_q_coopmat_") + variant, 5,
                            sizeof(MulMmQPush), spec),
               bindings, &push, gx, gy);
  } else {
    d.dispatch(ctx.pipeline(std::string("mul_mm_q_") + variant, 5, sizeof(MulMmQPush)), bindings, &push, gx, gy);
  }
}

}  // namespace

void mul_mm_q(Context& ctx, Dispatcher& d, MulMmKernel kernel, gguf::TensorType type, View w, View x, View y,
              View bias, uint32_t ncols, uint32_t nrows, uint32_t n_tokens, uint32_t y_stride, uint32_t y_offset) {
  check_shape(ncols, nrows, y_stride, y_offset);
  if (n_tokens == 0 || nrows == 0 || ncols == 0) return;
  MulMmQPush push{};
  push.ncols = ncols;
  push.nrows = nrows;
  push.n_tokens = n_tokens;
  push.y_stride = y_stride;
  push.y_offset = y_offset;
  push.token_tiles = (n_tokens + tile_tokens(kernel) - 1) / tile_tokens(kernel);
  record_mm_q(ctx, d, kernel, "mul_mm_q", type, w, x, y, View{}, bias, push, 1);
}

size_t moe_route_bytes(uint32_t n_tokens, uint32_t n_used, uint32_t n_expert) {
  const uint32_t slots = n_tokens * n_used;
  // The smaller tile makes the most tiles.
  const uint32_t tiles = route_tiles(slots, n_expert, std::min({kTiledTokens, kCoopTokens, kNarrowTokens}));
  return (size_t{1} + 3 * size_t{tiles} + slots) * 4;
}

void moe_sort(Context& ctx, Dispatcher& d, MulMmKernel kernel, View ids, View route, uint32_t n_tokens, uint32_t n_used,
              uint32_t n_expert) {
  if (n_expert == 0 || n_expert > kMoeSortMaxExperts) {
    throw Error(fmt::format("Vulkan moe_sort: {} experts is outside the kernel's 1..{}", n_expert, kMoeSortMaxExperts));
  }
  const uint32_t slots = n_tokens * n_used;
  if (slots == 0) return;
  const uint32_t tokens = expert_tile_tokens(kernel, slots, n_expert);
  const uint32_t push[] = {slots, n_expert, tokens, 1 + 3 * route_tiles(slots, n_expert, tokens)};
  const View bindings[] = {ids, route};
  d.dispatch(ctx.pipeline("moe_sort", 2, sizeof(push)), bindings, push, 1, 1);
}

void mul_mm_q_id(Context& ctx, Dispatcher& d, MulMmKernel kernel, gguf::TensorType type, View w, View route, View x,
                 View y, View bias, uint32_t ncols, uint32_t nrows, uint32_t n_expert, uint32_t n_used,
                 uint32_t n_tokens, bool x_per_slot) {
  const uint32_t slots = n_tokens * n_used;
  if (slots == 0 || nrows == 0 || ncols == 0) return;
  if (n_expert == 0 || n_expert > kMoeSortMaxExperts) {
    throw Error(fmt::format("Vulkan mul_mm_q_id: {} experts is outside the kernel's 1..{}", n_expert, kMoeSortMaxExperts));
  }
  MulMmQPush push{};
  push.ncols = ncols;
  push.nrows = nrows;
  push.n_tokens = slots;
  push.y_stride = nrows;
  const bool narrow = narrow_experts(kernel, slots, n_expert);  // the tiles moe_sort made (expert_tile_tokens)
  push.token_tiles = route_tiles(slots, n_expert, narrow ? kNarrowTokens : tile_tokens(kernel));
  push.n_expert = n_expert;
  push.n_used = n_used;
  push.x_per_slot = x_per_slot ? 1 : 0;
  push.list_offset = 1 + 3 * push.token_tiles;
  record_mm_q(ctx, d, kernel, "mul_mm_q_id", type, w, x, y, route, bias, push, n_expert, narrow);
}

}  // namespace zinc::backend::vk
