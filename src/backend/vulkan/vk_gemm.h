// Launcher of the matrix-matrix product for prefill (graph Op::MatMul with many tokens) on f16
// weights: Y[t * y_stride + y_offset + r] = sum_c W[r][c] * X[t][c] for t < n_tokens, r < nrows,
// c < ncols. Two kernels: a tensor-core one (VK_NV_cooperative_matrix, X rounded to f16 first) where
// the device has it, and a portable shared-memory tiling in float everywhere else.
//
// Layouts: W [nrows][ncols] f16, two halves per uint with the even column low (a GGUF F16 tensor's
// bytes, or the dequantizer's output); X float [n_tokens][ncols], packed; Y float rows of y_stride,
// of which this call writes columns [y_offset, y_offset + nrows) of rows [0, n_tokens) (a weight's
// output in slabs of rows: y_offset = the slab's first row, y_stride = the whole weight's rows).
// Preconditions: ncols a multiple of 32; views at Features::offset_alignment; y_offset + nrows <=
// y_stride.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/vulkan/vk_context.h"

namespace zinc::backend::vk {

enum class MulMmKernel {
  Tiled,      // mul_mm: any device; float products and sums (W's halves are exact in float)
  CoopMatNV,  // mul_mm_coopmat: VK_NV_cooperative_matrix with 16x16x16 f16 -> f32 and subgroups of
              // 32; X rounded to f16 (relative error 2^-11 per element; |x| > 65504 overflows)
};

// The kernel mul_mm picks on this device: CoopMatNV where Features::coopmat_nv (not disabled with
// ZINC_VULKAN_NO_COOPMAT), subgroups of 32, 44 KiB of shared memory, the Vulkan memory model and the
// driver lists the 16x16x16 f16 -> f32 shape; otherwise Tiled.
MulMmKernel mul_mm_kernel(const Context& ctx);
const char* mul_mm_kernel_name(MulMmKernel k);

// Bytes of x_f16_scratch that mul_mm needs for these sizes: X in f16 (n_tokens * ncols * 2) for
// CoopMatNV; Tiled does not touch it (the executor may allocate it once for its largest matmul).
size_t mul_mm_scratch_bytes(uint32_t ncols, uint32_t n_tokens);

// Records the product with the kernel mul_mm_kernel(ctx) picks: CoopMatNV records two dispatches (X
// to f16 into x_f16_scratch, a barrier, the product), Tiled one (x_f16_scratch may be an empty view).
// Two mul_mm calls recorded without a barrier between them need separate scratch views.
void mul_mm(Context& ctx, Dispatcher& d, View w_f16, View x, View y, uint32_t ncols, uint32_t nrows, uint32_t n_tokens,
            uint32_t y_stride, uint32_t y_offset, View x_f16_scratch);
// The same with the kernel named (tests, benchmarks); throws where the device lacks it.
void mul_mm(Context& ctx, Dispatcher& d, MulMmKernel kernel, View w_f16, View x, View y, uint32_t ncols, uint32_t nrows,
            uint32_t n_tokens, uint32_t y_stride, uint32_t y_offset, View x_f16_scratch);

// The two halves of CoopMatNV's mul_mm, for a caller that multiplies one X by several weights: X
// rounded to f16 into x_f16 (mul_mm_scratch_bytes; ncols a multiple of 4), then, after a barrier, any
// number of products reading it. mul_mm_f16 throws where the device has no CoopMatNV.
void mul_mm_convert_x(Context& ctx, Dispatcher& d, View x, View x_f16, uint32_t ncols, uint32_t n_tokens);
void mul_mm_f16(Context& ctx, Dispatcher& d, View w_f16, View x_f16, View y, uint32_t ncols, uint32_t nrows,
                uint32_t n_tokens, uint32_t y_stride, uint32_t y_offset);

}  // namespace zinc::backend::vk
