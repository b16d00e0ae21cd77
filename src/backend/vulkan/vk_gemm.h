// Launchers of the matrix-matrix products for prefill (graph Op::MatMul with many tokens, and the
// experts of such steps), on weights in their stored type. Two kernels: a tensor-core one
// (VK_NV_cooperative_matrix, X and the decoded weights rounded to f16) where the device has it, and a
// portable shared-memory tiling in float everywhere else.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/vulkan/vk_context.h"
#include "gguf/types.h"

namespace zinc::backend::vk {

enum class MulMmKernel {
  Tiled,      // mul_mm_q: any device; float products and sums of the decoded weights
  CoopMatNV,  // mul_mm_q_coopmat: VK_NV_cooperative_matrix with 16x16x16 f16 -> f32 and subgroups of
              // 32; X and the decoded weights rounded to f16 (relative error 2^-11 per element;
              // |x| > 65504 overflows)
};

// The kernel the products take on this device: CoopMatNV where Features::coopmat_nv (not disabled with
// ZINC_VULKAN_NO_COOPMAT), subgroups of 32, 44 KiB of shared memory, the Vulkan memory model and the
// driver lists the 16x16x16 f16 -> f32 shape; otherwise Tiled.
MulMmKernel mul_mm_kernel(const Context& ctx);
const char* mul_mm_kernel_name(MulMmKernel k);

// Bytes of X in f16 (n_tokens * ncols * 2): what the tensor-core kernel reads.
size_t mul_mm_scratch_bytes(uint32_t ncols, uint32_t n_tokens);

// X rounded to f16 into x_f16 (mul_mm_scratch_bytes; ncols a multiple of 4) for CoopMatNV products,
// which may read it after a barrier (any number of them).
void mul_mm_convert_x(Context& ctx, Dispatcher& d, View x, View x_f16, uint32_t ncols, uint32_t n_tokens);

// Products on weights in their stored type (every type of vk_weight_types.def; no f16 copy of the
// weight): each weight unit is decoded as the kernel stages its tile (mul_mm_q.comp,
// mul_mm_q_coopmat.comp). The Tiled kernel multiplies float X by the decoded floats; CoopMatNV rounds
// both to f16 (packHalf2x16's rounding of the decoded float) and takes X already in f16
// (mul_mm_convert_x). ncols a multiple of 32 and of the type's block; views at offset_alignment.
//
// Dense: Y[t * y_stride + y_offset + r] = W[r] . X[t] (+ bias[r]) for t < n_tokens, r < nrows.
void mul_mm_q(Context& ctx, Dispatcher& d, MulMmKernel kernel, gguf::TensorType type, View w, View x, View y,
              View bias, uint32_t ncols, uint32_t nrows, uint32_t n_tokens, uint32_t y_stride, uint32_t y_offset);

// Experts, for steps of many tokens: the routing's ids [n_tokens][n_used] (uint32, clamped to
// n_expert - 1) grouped by expert into `route` (moe_route_bytes), then each expert's weight read
// once per tile of its tokens. A barrier between moe_sort and the products; several products may
// read one route. n_expert <= kMoeSortMaxExperts.
inline constexpr uint32_t kMoeSortMaxExperts = 512;  // moe_sort's shared counters
size_t moe_route_bytes(uint32_t n_tokens, uint32_t n_used, uint32_t n_expert);
void moe_sort(Context& ctx, Dispatcher& d, MulMmKernel kernel, View ids, View route, uint32_t n_tokens, uint32_t n_used,
              uint32_t n_expert);
// y[t][j] = W_ids[t][j] . x_(t,j) (+ bias[ids[t][j]]), laid out as mul_mv_id's (W {ncols, nrows,
// n_expert}; x_(t,j) = x[t], or x[t][j] with x_per_slot; y [n_tokens][n_used][nrows]; bias {nrows,
// n_expert} or none), with the route moe_sort made for the same ids and kernel.
void mul_mm_q_id(Context& ctx, Dispatcher& d, MulMmKernel kernel, gguf::TensorType type, View w, View route, View x,
                 View y, View bias, uint32_t ncols, uint32_t nrows, uint32_t n_expert, uint32_t n_used,
                 uint32_t n_tokens, bool x_per_slot);

}  // namespace zinc::backend::vk
