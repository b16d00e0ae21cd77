// The Q8_0 product the CPU's way (quantized activations, integer block sums) against the CPU backend's
// own matrix product: equal up to float summation order, which is what keeps greedy decoding on the
// GPU on the CPU's tokens.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "backend/vulkan/vk_quant.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "quant/matmul.h"
#include "quant/quant.h"
#include "vk_test_util.h"

namespace zinc::backend::vk {
namespace {

class VulkanQ8 : public VulkanTest {};

TEST_F(VulkanQ8, ProductEqualsTheCpusQuantizedProduct) {
  Context* ctx = ctx_.get();
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  ThreadPool pool(1);
  for (const uint32_t ncols : {64u, 1024u}) {
    const uint32_t nrows = 70, ntok = 7;
    const size_t rs = quant::row_size(gguf::TensorType::Q8_0, ncols);
    std::vector<uint8_t> wq(rs * nrows + 16);
    std::vector<float> row(ncols), x(static_cast<size_t>(ncols) * ntok), want(static_cast<size_t>(nrows) * ntok);
    for (uint32_t r = 0; r < nrows; ++r) {
      for (auto& v : row) v = nd(rng);
      quant::quantize_row(gguf::TensorType::Q8_0, row.data(), wq.data() + r * rs, ncols);
    }
    for (auto& v : x) v = nd(rng) * (1 + (&v - x.data()) % 7);
    quant::matmul(gguf::TensorType::Q8_0, wq.data(), nrows, ncols, x.data(), ntok, want.data(), pool);
    Buffer bw = ctx->device_buffer(wq.size()), bx = ctx->device_buffer(x.size() * 4),
           bq = ctx->device_buffer(mul_mv_q8_bytes(ncols) * ntok), by = ctx->device_buffer(want.size() * 4);
    ctx->upload(bw, 0, wq.data(), wq.size());
    ctx->upload(bx, 0, x.data(), x.size() * 4);
    mul_mv_q8(*ctx, ctx->immediate(), View{&bw}, View{&bx}, View{&bq}, View{&by}, ncols, nrows, ntok);
    std::vector<float> got(want.size());
    ctx->download(by, 0, got.data(), got.size() * 4);
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - want[i]) / (1 + std::fabs(want[i])));
    EXPECT_LT(worst, 3e-5) << ncols << " columns";
    for (Buffer* b : {&bw, &bx, &bq, &by}) ctx->release(*b);
  }
}

}  // namespace
}  // namespace zinc::backend::vk
