// The Q8_0 product the CPU's way (quantized activations, integer block sums) against the CPU backend's
// own matrix product: equal up to float summation order, which is what keeps greedy decoding on the
// GPU on the CPU's tokens.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <array>
#include <cstring>
#include <random>
#include <string>

#include "backend/cpu/cpu_ops.h"
#include "backend/vulkan/vk_ops.h"
#include "backend/vulkan/vk_quant.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "quant/blocks.h"
#include "quant/dot.h"
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

// Activation rows with blocks of very different magnitudes, a block of zeros (d = 0) and values on
// rounding ties of the codes (x / d = k + 0.5 for the block's d).
std::vector<float> activation_rows(uint32_t ncols, uint32_t rows, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(ncols) * rows);
  for (size_t i = 0; i < x.size(); ++i) x[i] = nd(rng) * static_cast<float>(1 + (i / 256) % 5) * ((i / 256) % 3 == 2 ? 1e-3f : 1.0f);
  if (ncols >= 512) std::fill_n(x.begin() + 256, 256, 0.0f);
  for (uint32_t r = 0; r < rows; ++r) {
    float* b = x.data() + static_cast<size_t>(r) * ncols;  // max 127: d = 1, so x / d = x exactly
    b[0] = 127.0f;
    for (int i = 1; i < 16; ++i) b[i] = static_cast<float>(i) - 7.5f;
  }
  return x;
}

class VulkanKQuant : public VulkanTest {
 protected:
  void SetUp() override {
    VulkanTest::SetUp();
    if (!IsSkipped() && !has_mul_mv_k(*ctx_, gguf::TensorType::Q4_K)) {
      GTEST_SKIP() << "the device has no packed integer dot product or subgroups under 8 (the float kernels serve it)";
    }
  }
};

TEST_F(VulkanKQuant, ActivationCodesAreTheCpus) {
  std::mt19937 rng(5);
  const uint32_t ncols = 1024, rows = 3;
  const std::vector<float> x = activation_rows(ncols, rows, rng);
  const size_t qb = q8k_row_bytes(ncols);
  Buffer bx = ctx_->device_buffer(x.size() * 4), bq = ctx_->device_buffer(qb * rows);
  ctx_->upload(bx, 0, x.data(), x.size() * 4);
  quantize_q8k(*ctx_, ctx_->immediate(), View{&bx}, View{&bq}, ncols, rows);
  std::vector<uint8_t> got(qb * rows);
  ctx_->download(bq, 0, got.data(), got.size());
  std::vector<quant::BlockQ8_K> want(ncols / 256);
  for (uint32_t r = 0; r < rows; ++r) {
    quant::quantize_activation(gguf::TensorType::Q4_K, x.data() + static_cast<size_t>(r) * ncols, want.data(), ncols);
    const uint8_t* row = got.data() + r * qb;
    for (uint32_t b = 0; b < ncols / 256; ++b) {
      float d = 0;
      std::memcpy(&d, row + ncols + ncols / 4 + 4 * b, 4);
      EXPECT_EQ(d, want[b].d) << "row " << r << " block " << b;
      EXPECT_EQ(0, std::memcmp(row + 256 * b, want[b].qs, 256)) << "codes of row " << r << " block " << b;
      for (int g = 0; g < 16; ++g) {
        int32_t sum = 0;
        std::memcpy(&sum, row + ncols + 4 * (16 * b + g), 4);
        EXPECT_EQ(sum, want[b].bsums[g]) << "row " << r << " block " << b << " group " << g;
      }
    }
  }
  ctx_->release(bx);
  ctx_->release(bq);
}

TEST_F(VulkanKQuant, ProductEqualsTheCpusQuantizedProduct) {
  std::mt19937 rng(12);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const auto type : {gguf::TensorType::Q4_K, gguf::TensorType::Q5_K, gguf::TensorType::Q6_K}) {
    // One block (each result is one block's value: the CPU's bit for bit), and 17 blocks (a row that
    // the workgroup's 16 blocks a step do not divide), rows not a multiple of the rows per
    // workgroup, token counts below, at and above the tokens per workgroup.
    for (const uint32_t ncols : {256u, 4352u}) {
      for (const uint32_t ntok : {1u, 3u, 6u}) {
        const uint32_t nrows = 70;
        const size_t rs = quant::row_size(type, ncols), qb = q8k_row_bytes(ncols);
        std::vector<uint8_t> wq(rs * nrows + 16);
        std::vector<float> row(ncols);
        for (uint32_t r = 0; r < nrows; ++r) {
          for (auto& v : row) v = nd(rng) * (1 + r % 3);
          quant::quantize_row(type, row.data(), wq.data() + r * rs, ncols);
        }
        const std::vector<float> x = activation_rows(ncols, ntok, rng);
        std::vector<uint8_t> act(quant::activation_row_size(type, ncols));
        // The CPU's sum and, for the bound on summation order, the sum of its blocks' magnitudes.
        std::vector<float> want(static_cast<size_t>(nrows) * ntok), magnitude(want.size());
        const size_t wblock = quant::row_size(type, 256), ablock = quant::activation_row_size(type, 256);
        for (uint32_t t = 0; t < ntok; ++t) {
          quant::quantize_activation(type, x.data() + static_cast<size_t>(t) * ncols, act.data(), ncols);
          for (uint32_t r = 0; r < nrows; ++r) {
            const uint8_t* wr = wq.data() + r * rs;
            want[t * nrows + r] = quant::dot_ref(type, wr, act.data(), ncols);
            for (uint32_t b = 0; b < ncols / 256; ++b) {
              magnitude[t * nrows + r] += std::fabs(quant::dot_ref(type, wr + b * wblock, act.data() + b * ablock, 256));
            }
          }
        }
        Buffer bw = ctx_->device_buffer(wq.size()), bx = ctx_->device_buffer(x.size() * 4),
               bq = ctx_->device_buffer(qb * ntok), by = ctx_->device_buffer(want.size() * 4);
        ctx_->upload(bw, 0, wq.data(), wq.size());
        ctx_->upload(bx, 0, x.data(), x.size() * 4);
        quantize_q8k(*ctx_, ctx_->immediate(), View{&bx}, View{&bq}, ncols, ntok);
        mul_mv_k(*ctx_, ctx_->immediate(), type, View{&bw}, View{&bq}, View{&by}, ncols, nrows, ntok);
        std::vector<float> got(want.size());
        ctx_->download(by, 0, got.data(), got.size() * 4);
        for (size_t i = 0; i < got.size(); ++i) {
          const std::string where = fmt::format("{} cols {} tokens {}: row {} token {}", gguf::tensor_type_name(type), ncols,
                                                ntok, i % nrows, i / nrows);
          if (ncols == 256) {
            ASSERT_EQ(got[i], want[i]) << where;
          } else {
            ASSERT_NEAR(got[i], want[i], 3e-6 * magnitude[i]) << where;
          }
        }
        for (Buffer* b : {&bw, &bx, &bq, &by}) ctx_->release(*b);
      }
    }
  }
}

// Q8_K rows from the device (q8k_row_bytes apart) against the CPU's quantizer of the float rows x.
void expect_codes_of(const std::vector<float>& x, const std::vector<uint8_t>& codes, uint32_t width, uint32_t rows) {
  const size_t qb = q8k_row_bytes(width);
  std::vector<quant::BlockQ8_K> q(width / 256);
  for (uint32_t r = 0; r < rows; ++r) {
    quant::quantize_activation(gguf::TensorType::Q4_K, x.data() + static_cast<size_t>(r) * width, q.data(), width);
    const uint8_t* row = codes.data() + r * qb;
    for (uint32_t blk = 0; blk < width / 256; ++blk) {
      float d = 0;
      std::memcpy(&d, row + width + width / 4 + 4 * blk, 4);
      EXPECT_EQ(d, q[blk].d) << width << " row " << r << " block " << blk;
      EXPECT_EQ(0, std::memcmp(row + 256 * blk, q[blk].qs, 256)) << width << " row " << r << " block " << blk;
      for (int g = 0; g < 16; ++g) {
        int32_t s16 = 0;
        std::memcpy(&s16, row + width + 4 * (16 * blk + g), 4);
        EXPECT_EQ(s16, q[blk].bsums[g]) << width << " row " << r << " block " << blk << " group " << g;
      }
    }
  }
}

TEST_F(VulkanKQuant, GluOutputAndItsCodesInOneDispatch) {
  // SwiGLU with the Q8_K codes of its result (the down projection's input): the floats as the plain
  // op writes them, the codes as the CPU quantizes those floats.
  std::mt19937 rng(8);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  const uint32_t width = 768, rows = 3;
  std::vector<float> g(width * rows), u(g.size());
  for (auto& v : g) v = nd(rng);
  for (auto& v : u) v = nd(rng);
  Buffer bg = ctx_->device_buffer(g.size() * 4), bu = ctx_->device_buffer(u.size() * 4), bo = ctx_->device_buffer(g.size() * 4),
         bp = ctx_->device_buffer(g.size() * 4), bq = ctx_->device_buffer(q8k_row_bytes(width) * rows);
  ctx_->upload(bg, 0, g.data(), g.size() * 4);
  ctx_->upload(bu, 0, u.data(), u.size() * 4);
  eltwise(*ctx_, ctx_->immediate(), Eltwise::SwiGLU, View{&bg}, View{&bu}, View{&bp}, width, width, rows);
  eltwise(*ctx_, ctx_->immediate(), Eltwise::SwiGLU, View{&bg}, View{&bu}, View{&bo}, width, width, rows, false, 0, 0, View{&bq});
  std::vector<float> plain(g.size()), got(g.size());
  std::vector<uint8_t> codes(q8k_row_bytes(width) * rows);
  ctx_->download(bp, 0, plain.data(), plain.size() * 4);
  ctx_->download(bo, 0, got.data(), got.size() * 4);
  ctx_->download(bq, 0, codes.data(), codes.size());
  EXPECT_EQ(got, plain);
  expect_codes_of(got, codes, width, rows);
  for (Buffer* buf : {&bg, &bu, &bo, &bp, &bq}) ctx_->release(*buf);
}

TEST_F(VulkanKQuant, NormOfTheResidualSumAndItsCodesAreTheCpus) {
  // The fused residual add + whole-row norm + Q8_K codes (decode's one dispatch before the K-quant
  // products): the sum, the normalised rows and the codes against the CPU's add, norm and quantizer.
  // Rows of 256 (one chunk, partly idle), 1280 (a partial second chunk) and 4096 (four chunks).
  std::mt19937 rng(21);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  for (const uint32_t width : {256u, 1280u, 4096u}) {
    const uint32_t rows = 3;
    std::vector<float> a(static_cast<size_t>(width) * rows), b(a.size()), w(width), sum(a.size()), want(a.size());
    for (auto& v : a) v = nd(rng);
    for (auto& v : b) v = nd(rng);
    for (auto& v : w) v = nd(rng);
    for (size_t i = 0; i < a.size(); ++i) sum[i] = a[i] + b[i];
    cpu::rms_norm(sum.data(), w.data(), want.data(), width, width, rows, 1e-6f, 1.0f);
    const size_t qb = q8k_row_bytes(width);
    Buffer ba = ctx_->device_buffer(a.size() * 4), bb = ctx_->device_buffer(a.size() * 4), bw = ctx_->device_buffer(w.size() * 4),
           bs = ctx_->device_buffer(a.size() * 4), by = ctx_->device_buffer(a.size() * 4), bq = ctx_->device_buffer(qb * rows);
    ctx_->upload(ba, 0, a.data(), a.size() * 4);
    ctx_->upload(bb, 0, b.data(), b.size() * 4);
    ctx_->upload(bw, 0, w.data(), w.size() * 4);
    rms_norm_row(*ctx_, ctx_->immediate(), View{&ba}, View{&bb}, View{&bs}, View{&bw}, View{&by}, View{&bq}, width, rows, 1e-6f, 1.0f);
    std::vector<float> got_sum(a.size()), got(a.size());
    std::vector<uint8_t> codes(qb * rows);
    ctx_->download(bs, 0, got_sum.data(), got_sum.size() * 4);
    ctx_->download(by, 0, got.data(), got.size() * 4);
    ctx_->download(bq, 0, codes.data(), codes.size());
    EXPECT_EQ(got_sum, sum) << width;
    if (ctx_->features().fp64) {
      EXPECT_EQ(got, want) << width << ": the double sum gives the CPU's values bit for bit";
    } else {
      for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-5 * (1 + std::fabs(want[i]))) << width;
    }
    expect_codes_of(got, codes, width, rows);
    for (Buffer* buf : {&ba, &bb, &bw, &bs, &by, &bq}) ctx_->release(*buf);
  }
}

TEST_F(VulkanKQuant, Throughput) {
  // Decode-sized products of random blocks (the bytes' values do not change the work): wall time of a
  // recording of 50, best of 3, for the float kernel and the integer-dot one under a few shapes.
  if (!std::getenv("ZINC_VULKAN_BENCH")) GTEST_SKIP() << "set ZINC_VULKAN_BENCH=1 for the throughput table";
  std::mt19937 rng(3);
  std::printf("| type | rows | cols | kernel | us | GB/s |\n|---|---|---|---|---|---|\n");
  const auto timed = [&](auto&& record) {
    const int reps = 50;
    Recording rec(*ctx_, 2 * reps + 2);
    for (int i = 0; i < reps; ++i) {
      record(rec);
      rec.barrier();
    }
    rec.finish();
    rec.submit_and_wait();  // warm-up
    double best = 1e30;
    for (int i = 0; i < 3; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      rec.submit_and_wait();
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps);
    }
    return best;
  };
  {
    // The row ops around the products: the norm kernel's variants (double or float sum, with the
    // residual add and the codes or without) and a plain add, for one 4096-wide row.
    const uint32_t width = 4096;
    std::vector<float> x(width * 4);
    for (auto& v : x) v = static_cast<float>(rng() % 2001) / 1000.0f - 1.0f;
    Buffer bx = ctx_->device_buffer(x.size() * 4), by = ctx_->device_buffer(x.size() * 4), bq = ctx_->device_buffer(q8k_row_bytes(width));
    ctx_->upload(bx, 0, x.data(), x.size() * 4);
    const View a{&bx, 0, width * 4}, b{&bx, width * 4, width * 4}, w{&bx, width * 8, width * 4}, s{&by, 0, width * 4}, y{&by, width * 4, width * 4};
    for (const char* variant : {"rms_norm_row_f64", "rms_norm_row_f64_add", "rms_norm_row_f32", "rms_norm_row_f32_add"}) {
      const bool add = std::string(variant).ends_with("_add");
      for (const bool codes : {false, true}) {
        const uint32_t chunks[] = {width / 1024};
        const Kernel& k = ctx_->pipeline(variant, add ? 6 : 4, 20, chunks);
        const uint32_t push[] = {width, 1, 0, 0, codes ? static_cast<uint32_t>(q8k_row_bytes(width) / 4) : 0u};
        const std::array<View, 6> views{a, w, y, View{&bq}, b, s};
        const double t = timed([&](Recording& r) { r.dispatch(k, std::span<const View>(views.data(), add ? 6 : 4), push, 1); });
        std::printf("| %s%s | 1 | %u | %.2f us |\n", variant, codes ? " + codes" : "", width, t * 1e6);
      }
    }
    const double t = timed([&](Recording& r) { eltwise(*ctx_, r, Eltwise::Add, a, b, y, width, width, 1); });
    std::printf("| eltwise_add | 1 | %u | %.2f us |\n", width, t * 1e6);
    for (Buffer* buf : {&bx, &by, &bq}) ctx_->release(*buf);
  }
  for (const auto type : {gguf::TensorType::Q4_K, gguf::TensorType::Q6_K}) {
    for (const auto [nrows, ncols] : {std::pair{4096u, 4096u}, {1024u, 4096u}, {12288u, 4096u}, {4096u, 12288u}, {32768u, 4096u}}) {
      const size_t bytes = quant::row_size(type, ncols) * nrows;
      std::vector<uint32_t> wq((bytes + 3) / 4 + 4);
      for (auto& v : wq) v = static_cast<uint32_t>(rng()) & 0x3bff3bffu;  // finite halves wherever they fall
      std::vector<float> x(ncols);
      for (auto& v : x) v = static_cast<float>(rng() % 2001) / 1000.0f - 1.0f;
      Buffer bw = ctx_->device_buffer(wq.size() * 4), bx = ctx_->device_buffer(x.size() * 4),
             bq = ctx_->device_buffer(q8k_row_bytes(ncols)), by = ctx_->device_buffer(size_t{nrows} * 4);
      ctx_->upload(bw, 0, wq.data(), wq.size() * 4);
      ctx_->upload(bx, 0, x.data(), x.size() * 4);
      const auto row = [&](const char* kernel, double sec) {
        std::printf("| %s | %u | %u | %s | %.2f | %.0f |\n", std::string(gguf::tensor_type_name(type)).c_str(), nrows, ncols, kernel, sec * 1e6,
                    static_cast<double>(bytes) / sec / 1e9);
      };
      row("float", timed([&](Recording& r) { mul_mv(*ctx_, r, type, View{&bw}, View{&bx}, View{&by}, View{}, ncols, nrows, 1); }));
      row("quantize_q8k", timed([&](Recording& r) { quantize_q8k(*ctx_, r, View{&bx}, View{&bq}, ncols, 1); }));
      for (const auto [wg, rows] : {std::pair{"128", "2"}, {"128", "4"}, {"256", "4"}, {"64", "4"}, {"128", "8"}, {"256", "2"}}) {
        setenv("ZINC_VK_MVK_WG", wg, 1);
        setenv("ZINC_VK_MVK_ROWS", rows, 1);
        const double t = timed([&](Recording& r) { mul_mv_k(*ctx_, r, type, View{&bw}, View{&bq}, View{&by}, ncols, nrows, 1); });
        row(fmt::format("int-dot wg {} rows {}", wg, rows).c_str(), t);
      }
      unsetenv("ZINC_VK_MVK_WG");
      unsetenv("ZINC_VK_MVK_ROWS");
      for (Buffer* b : {&bw, &bx, &bq, &by}) ctx_->release(*b);
    }
  }
}

}  // namespace
}  // namespace zinc::backend::vk
