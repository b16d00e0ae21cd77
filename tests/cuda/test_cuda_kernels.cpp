// The CUDA products against the reference dequantization (src/quant/dequantize.cpp): for every weight
// type the kernels read, random rows quantized by the reference quantizer, then the product of each
// path (one token, a few, the tiled product, one expert per row) and the embedding lookup, compared
// with a double-precision product of the dequantized rows; the fused launches, the delta rule, the
// convolution, argmax and the routing against their references (attention: test_cuda_attention.cpp).
// Skips, saying why, where no NVIDIA GPU is visible.
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <deque>
#include <limits>
#include <random>
#include <tuple>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_weights.h"
#include "cuda_test_util.h"
#include "core/error.h"
#include "quant/dot.h"
#include "quant/quant.h"

namespace zinc {
namespace {

using gguf::TensorType;
using test_cuda::Dev;
using test_cuda::SplitScratch;
using test_cuda::upload;

class CudaKernels : public ::testing::TestWithParam<TensorType> {
 protected:
  void SetUp() override { ZINC_NEED_CUDA_DEVICE(); }
};

TEST_P(CudaKernels, ProductsMatchTheDequantizedRows) {
  const TensorType type = GetParam();
  const int64_t rows = 67, cols = 512, n_expert = 3;  // 67: a partial tile and a partial block of warps
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const size_t rb = quant::row_size(type, cols);
  std::vector<uint8_t> w(rb * static_cast<size_t>(rows * n_expert));
  std::vector<float> deq(static_cast<size_t>(rows * n_expert * cols)), row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows * n_expert; ++r) {
    for (float& v : row) v = dist(rng);
    quant::quantize_row(type, row.data(), w.data() + static_cast<size_t>(r) * rb, cols);
    quant::dequantize_row(type, w.data() + static_cast<size_t>(r) * rb, deq.data() + r * cols, cols);
  }
  const int max_n = 40;
  std::vector<float> x(static_cast<size_t>(max_n * cols)), bias(static_cast<size_t>(rows * n_expert));
  for (float& v : x) v = dist(rng);
  for (float& v : bias) v = dist(rng);
  Dev dw(w.size() + 16), dx(x.size() * 4), db(bias.size() * 4), dout(static_cast<size_t>(max_n * rows) * 4), dids(max_n * 4);
  upload(dw, w.data(), w.size());
  upload(dx, x.data(), x.size() * 4);
  upload(db, bias.data(), bias.size() * 4);
  std::vector<float> got(static_cast<size_t>(max_n * rows));
  // A sum of `cols` float products: off by at most cols * 2^-24 of the sum of the terms' magnitudes.
  // Prompts (more than 8 tokens) of quantized weights run on tensor cores with weights and activations
  // rounded to f16: each product off by at most 2^-10 of its magnitude more.
  const bool float_weights = type == TensorType::F32 || type == TensorType::F16 || type == TensorType::BF16;
  double f16_rounding = 0;
  const auto expect_row = [&](int64_t wrow, int64_t xrow, float b, float g, const std::string& what) {
    double sum = 0, mag = 0;
    for (int64_t c = 0; c < cols; ++c) {
      const double term = static_cast<double>(deq[static_cast<size_t>(wrow * cols + c)]) * x[static_cast<size_t>(xrow * cols + c)];
      sum += term;
      mag += std::fabs(term);
    }
    sum += b;
    ASSERT_LE(std::fabs(g - sum), 1e-6 * (mag + std::fabs(b)) + static_cast<double>(cols) * 6e-8 * mag + f16_rounding * mag) << what;
  };
  // (Float weights' prompts on both tile sizes.)
  for (const auto& [n, tile] : {std::pair{1, 0}, {2, 0}, {3, 0}, {5, 0}, {8, 0}, {11, 32}, {11, 64}, {40, 32}, {40, 64}}) {
    backend::cuda::set_float_tiles(tile);
    f16_rounding = n > 8 && !float_weights ? 1.0 / 1024 : 0;
    backend::cuda::mul_mat(nullptr, static_cast<int>(type), dw.p, rb, rows, cols, dx.as<float>(), cols, n, dout.as<float>(), rows,
                  n % 2 ? db.as<float>() : nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(got.data(), dout.p, static_cast<size_t>(n * rows) * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    for (int t = 0; t < n; ++t)
      for (int64_t r = 0; r < rows; ++r)
        expect_row(r, t, n % 2 ? bias[static_cast<size_t>(r)] : 0.0f, got[static_cast<size_t>(t * rows + r)],
                   fmt::format("{} tokens ({} tiles), token {} row {}", n, tile, t, r));
  }
  backend::cuda::set_float_tiles(0);
  f16_rounding = 0;
  // A prompt's product of float weights with a row or three (a shared expert's gate): one row a block.
  if (float_weights) {
    for (const int64_t few : {1, 3}) {
      const int n = 40;
      backend::cuda::mul_mat(nullptr, static_cast<int>(type), dw.p, rb, few, cols, dx.as<float>(), cols, n, dout.as<float>(), few, db.as<float>());
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(got.data(), dout.p, static_cast<size_t>(n * few) * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      for (int t = 0; t < n; ++t)
        for (int64_t r = 0; r < few; ++r)
          expect_row(r, t, bias[static_cast<size_t>(r)], got[static_cast<size_t>(t * few + r)], fmt::format("{} rows, token {} row {}", few, t, r));
    }
  }
  // One expert per output row: rows [first, first + 31) of expert ids[i], token i / 2.
  const int slots = 6;
  const std::vector<int32_t> ids = {2, 0, 1, 1, 0, 2};
  upload(dids, ids.data(), ids.size() * 4);
  const int64_t first = 5, count = 31;
  backend::cuda::mul_mat_id(nullptr, static_cast<int>(type), dw.p, rb, rb * static_cast<size_t>(rows), first, count, cols, dx.as<float>(), cols, 2,
                   dids.as<int32_t>(), slots, dout.as<float>(), count, db.as<float>(), rows);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(got.data(), dout.p, static_cast<size_t>(slots * count) * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  for (int i = 0; i < slots; ++i)
    for (int64_t r = 0; r < count; ++r)
      expect_row(ids[static_cast<size_t>(i)] * rows + first + r, i / 2, bias[static_cast<size_t>(ids[static_cast<size_t>(i)] * rows + r)],
                 got[static_cast<size_t>(i * count + r)], fmt::format("slot {} row {}", i, r));
  // A prompt's expert slots grouped by expert, one tiled product per expert (quantized weights, on
  // tensor cores): slot i is token i / 2 against rows [first, first + 31) of expert ids[i], 70 slots
  // (one expert past a tile of 64).
  if (backend::cuda::grouped_mul_mat_supported(static_cast<int>(type))) {
    f16_rounding = 1.0 / 1024;
    const int many = 70;
    std::vector<int32_t> slot_ids(static_cast<size_t>(many));
    for (int i = 0; i < many; ++i) slot_ids[static_cast<size_t>(i)] = i < 66 ? 1 : (i % 3 == 0 ? 0 : 2);
    Dev dslot(many * 4), dorder(many * 4), doffsets(4 * 4), dgout(static_cast<size_t>(many * count) * 4);
    upload(dslot, slot_ids.data(), slot_ids.size() * 4);
    backend::cuda::moe_group(nullptr, dslot.as<int32_t>(), many, static_cast<int>(n_expert), dorder.as<int32_t>(), doffsets.as<int32_t>());
    backend::cuda::grouped_mul_mat(nullptr, static_cast<int>(type), dw.p, rb, rb * static_cast<size_t>(rows), first, count, cols, dx.as<float>(),
                                   cols, 2, dorder.as<int32_t>(), doffsets.as<int32_t>(), static_cast<int>(n_expert), many, dgout.as<float>(), count,
                                   db.as<float>(), rows);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<float> gout(static_cast<size_t>(many * count));
    ASSERT_EQ(cudaMemcpy(gout.data(), dgout.p, gout.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    for (int i = 0; i < many; ++i) {
      const int64_t e = slot_ids[static_cast<size_t>(i)];
      for (int64_t r = 0; r < count; ++r)
        expect_row(e * rows + first + r, i / 2, bias[static_cast<size_t>(e * rows + r)], gout[static_cast<size_t>(i * count + r)],
                   fmt::format("grouped slot {} row {}", i, r));
    }
    f16_rounding = 0;
  }
  // Embedding rows, scaled: exactly the dequantized values times the scale.
  const std::vector<int32_t> tokens = {3, 0, 66, 3};
  upload(dids, tokens.data(), tokens.size() * 4);
  backend::cuda::embed(nullptr, static_cast<int>(type), dw.p, rb, dids.as<int32_t>(), cols, 4, 0.5f, dout.as<float>());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(got.data(), dout.p, static_cast<size_t>(4 * cols) * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  for (size_t t = 0; t < tokens.size(); ++t)
    for (int64_t c = 0; c < cols; ++c)
      ASSERT_EQ(got[t * static_cast<size_t>(cols) + static_cast<size_t>(c)], deq[static_cast<size_t>(tokens[t] * cols + c)] * 0.5f)
          << "token " << tokens[t] << " element " << c;
}

INSTANTIATE_TEST_SUITE_P(Types, CudaKernels,
                         ::testing::Values(TensorType::F32, TensorType::F16, TensorType::BF16, TensorType::Q4_0, TensorType::Q4_1,
                                           TensorType::Q5_0, TensorType::Q5_1, TensorType::Q8_0, TensorType::Q2_K, TensorType::Q3_K,
                                           TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K, TensorType::IQ4_NL,
                                           TensorType::IQ4_XS, TensorType::MXFP4),
                         [](const ::testing::TestParamInfo<TensorType>& i) { return std::string(gguf::tensor_type_name(i.param)); });

struct QuantRows {
  TensorType type;
  int64_t rows, cols;
  std::vector<uint8_t> w;
  size_t rb;
  QuantRows(TensorType t, int64_t r, int64_t c, std::mt19937& rng) : type(t), rows(r), cols(c), rb(quant::row_size(t, c)) {
    std::normal_distribution<float> dist(0.0f, 1.0f);
    w.resize(rb * static_cast<size_t>(rows));
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t i = 0; i < rows; ++i) {
      for (float& v : row) v = dist(rng);
      quant::quantize_row(type, row.data(), w.data() + static_cast<size_t>(i) * rb, cols);
    }
  }
  // The CPU's reference dot of row r with x (its codes), and a bound on the float rounding.
  double dot(int64_t r, const float* x) const {
    std::vector<uint8_t> act(quant::activation_row_size(type, cols));
    quant::quantize_activation(type, x, act.data(), cols);
    return quant::dot_ref(type, w.data() + static_cast<size_t>(r) * rb, act.data(), cols);
  }
  double bound(int64_t r, const float* x) const {
    std::vector<float> deq(static_cast<size_t>(cols));
    quant::dequantize_row(type, w.data() + static_cast<size_t>(r) * rb, deq.data(), cols);
    double mag = 0;
    for (int64_t c = 0; c < cols; ++c) mag += std::fabs(static_cast<double>(deq[static_cast<size_t>(c)]) * x[c]);
    return 1e-5 * mag;
  }
};

// Q4_K, Q5_K and Q6_K with one token (decode) or one expert slot at a time: against the activations' 8-bit
// codes, as the CPU's reference dot product computes them (integer sums per sub-block, exact), so the
// results differ from dot_ref() only by the order of a row's float multiply-adds.
class CudaCodeKernels : public CudaKernels {};
class CudaDecodeCodes : public CudaKernels {};

// Rows of 512, 768 and 6144 columns (the short ones: half-warp row groups with four rows a warp).
TEST_P(CudaDecodeCodes, DecodeProductsMatchTheCpuReferenceDot) {
  const TensorType type = GetParam();
  ASSERT_TRUE(backend::cuda::uses_codes(static_cast<int>(type)));
  for (const int64_t cols : {int64_t{512}, int64_t{768}, int64_t{6144}}) {
    SCOPED_TRACE(fmt::format("{} columns", cols));
    const int64_t rows = 37, n_expert = 3;
    std::mt19937 rng(11);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    const size_t rb = quant::row_size(type, cols);
    std::vector<uint8_t> w(rb * static_cast<size_t>(rows * n_expert));
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows * n_expert; ++r) {
      for (float& v : row) v = dist(rng);
      quant::quantize_row(type, row.data(), w.data() + static_cast<size_t>(r) * rb, cols);
    }
    const int tokens = backend::cuda::kCodesTokens, slots = 6;
    std::vector<float> x(static_cast<size_t>(tokens * cols));
    for (float& v : x) v = dist(rng) * 3.0f;
    // The CPU's codes of each token and its reference dot with every row.
    const size_t ab = quant::activation_row_size(type, cols);
    std::vector<uint8_t> act(ab * tokens);
    for (int t = 0; t < tokens; ++t) quant::quantize_activation(type, x.data() + t * cols, act.data() + t * ab, cols);
    const auto want = [&](int64_t wrow, int t) {
      return quant::dot_ref(type, w.data() + static_cast<size_t>(wrow) * rb, act.data() + static_cast<size_t>(t) * ab, cols);
    };
    std::vector<float> deq(static_cast<size_t>(cols));
    const auto bound = [&](int64_t wrow, int t) {  // float rounding of a few hundred multiply-adds
      quant::dequantize_row(type, w.data() + static_cast<size_t>(wrow) * rb, deq.data(), cols);
      double mag = 0;
      for (int64_t c = 0; c < cols; ++c) mag += std::fabs(static_cast<double>(deq[static_cast<size_t>(c)]) * x[static_cast<size_t>(t * cols + c)]);
      return 1e-5 * mag;
    };
    Dev dw(w.size() + 16), dx(x.size() * 4), dout(static_cast<size_t>(tokens * rows) * 4), dids(slots * 4),
        dq8(backend::cuda::q8_bytes(tokens, cols));
    upload(dw, w.data(), w.size());
    upload(dx, x.data(), x.size() * 4);
    std::vector<float> got(static_cast<size_t>(tokens * rows));
    // One token (the second).
    backend::cuda::mul_mat(nullptr, static_cast<int>(type), dw.p, rb, rows, cols, dx.as<float>() + cols, cols, 1, dout.as<float>(), rows,
                           nullptr, dq8.p);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(got.data(), dout.p, static_cast<size_t>(rows) * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    for (int64_t r = 0; r < rows; ++r) EXPECT_NEAR(got[static_cast<size_t>(r)], want(r, 1), bound(r, 1)) << "row " << r;
    // One token on each launch shape (warps per row group x rows per warp).
    for (const int split : {1, 2, 4})
      for (const int rows_per_warp : {1, 2, 4}) {
        const backend::cuda::Product p{static_cast<int>(type), dw.p, rb, 0, 0, rows, dout.as<float>(), rows};
        backend::cuda::mul_mat_codes(nullptr, &p, 1, cols, dx.as<float>() + cols, cols, 1, nullptr, 1, dq8.p, false, backend::cuda::Glu::None,
                                     split, rows_per_warp);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        ASSERT_EQ(cudaMemcpy(got.data(), dout.p, static_cast<size_t>(rows) * 4, cudaMemcpyDeviceToHost), cudaSuccess);
        for (int64_t r = 0; r < rows; ++r)
          ASSERT_NEAR(got[static_cast<size_t>(r)], want(r, 1), bound(r, 1)) << split << " x " << rows_per_warp << ", row " << r;
      }
    // Steps of a few tokens: each weight piece against every token's codes, with packed dot products and
    // on integer tensor cores (tiles of 8, 16 and 32 tokens, the last ragged; two of 32 for 41 and 64).
    for (const int mma_min : {backend::cuda::kCodesTokens + 1, 2}) {
      backend::cuda::set_codes_mma_min(mma_min);
      for (int n : {2, 3, 8, 9, 16, 23, 32, 41, backend::cuda::kCodesTokens}) {
        backend::cuda::mul_mat(nullptr, static_cast<int>(type), dw.p, rb, rows, cols, dx.as<float>(), cols, n, dout.as<float>(), rows,
                               nullptr, dq8.p);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        ASSERT_EQ(cudaMemcpy(got.data(), dout.p, static_cast<size_t>(n * rows) * 4, cudaMemcpyDeviceToHost), cudaSuccess);
        for (int t = 0; t < n; ++t)
          for (int64_t r = 0; r < rows; ++r)
            ASSERT_NEAR(got[static_cast<size_t>(t * rows + r)], want(r, t), bound(r, t))
                << (mma_min == 2 ? "tensor cores, " : "packed dots, ") << n << " tokens, token " << t << " row " << r;
      }
    }
    // 8 tokens a warp on tensor cores, each warp all or half of the super-blocks (split 1 and 2), with
    // the weights staged in shared memory (where a warp takes at least eight) and loaded as used.
    backend::cuda::set_codes_mma_min(2);
    for (const bool staged : {true, false})
      for (const int split : {1, 2})
        for (const int n : {3, 8}) {
          backend::cuda::set_codes_mma_weights_stage(staged ? 2 : 0);
          const backend::cuda::Product p{static_cast<int>(type), dw.p, rb, 0, 0, rows, dout.as<float>(), rows};
          backend::cuda::mul_mat_codes(nullptr, &p, 1, cols, dx.as<float>(), cols, 1, nullptr, n, dq8.p, false, backend::cuda::Glu::None, split,
                                       0);
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
          ASSERT_EQ(cudaMemcpy(got.data(), dout.p, static_cast<size_t>(n * rows) * 4, cudaMemcpyDeviceToHost), cudaSuccess);
          for (int t = 0; t < n; ++t)
            for (int64_t r = 0; r < rows; ++r)
              ASSERT_NEAR(got[static_cast<size_t>(t * rows + r)], want(r, t), bound(r, t))
                  << (staged ? "weights staged, " : "weights as used, ") << "split " << split << ", " << n << " tokens, token " << t << " row " << r;
        }
    backend::cuda::set_codes_mma_weights_stage(1);
    backend::cuda::set_codes_mma_min(0);
    // Expert slots: slot i is token i / 2 against expert ids[i]'s rows [2, 2 + 30).
    const std::vector<int32_t> ids = {1, 2, 0, 2, 1, 0};
    upload(dids, ids.data(), ids.size() * 4);
    const int64_t first = 2, count = 30;
    backend::cuda::mul_mat_id(nullptr, static_cast<int>(type), dw.p, rb, rb * static_cast<size_t>(rows), first, count, cols, dx.as<float>(), cols,
                              2, dids.as<int32_t>(), slots, dout.as<float>(), count, nullptr, 0, dq8.p);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(got.data(), dout.p, static_cast<size_t>(slots * count) * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    for (int i = 0; i < slots; ++i) {
      for (int64_t r = 0; r < count; ++r) {
        const int64_t wrow = ids[static_cast<size_t>(i)] * rows + first + r;
        EXPECT_NEAR(got[static_cast<size_t>(i * count + r)], want(wrow, i / 2), bound(wrow, i / 2)) << "slot " << i << " row " << r;
      }
    }
    // The same slots on each launch shape (four rows a warp: a mixture's down).
    for (const int split : {1, 2})
      for (const int rows_per_warp : {1, 4}) {
        std::vector<float> zero(static_cast<size_t>(slots * count), 0.0f);
        upload(dout, zero.data(), zero.size() * 4);
        const backend::cuda::Product p{static_cast<int>(type), dw.p, rb, rb * static_cast<size_t>(rows), first, count, dout.as<float>(), count};
        backend::cuda::mul_mat_codes(nullptr, &p, 1, cols, dx.as<float>(), cols, 2, dids.as<int32_t>(), slots, dq8.p, false, backend::cuda::Glu::None,
                                     split, rows_per_warp);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        ASSERT_EQ(cudaMemcpy(got.data(), dout.p, static_cast<size_t>(slots * count) * 4, cudaMemcpyDeviceToHost), cudaSuccess);
        for (int i = 0; i < slots; ++i)
          for (int64_t r = 0; r < count; ++r) {
            const int64_t wrow = ids[static_cast<size_t>(i)] * rows + first + r;
            ASSERT_NEAR(got[static_cast<size_t>(i * count + r)], want(wrow, i / 2), bound(wrow, i / 2))
                << "slots, " << split << " x " << rows_per_warp << ": slot " << i << " row " << r;
          }
      }

  }
}

// Prompts of Q4_K, Q5_K and Q6_K on integer tensor cores: the same reference dot (each token's 8-bit codes)
// for a step of 150 tokens (three tiles of 64, the last ragged) over 200 rows (two tiles of 128, the
// last ragged), its codes then reused by a second product (q8_ready); and a prompt's expert slots
// grouped by expert, with a bias, 150 slots of 75 tokens over three experts' rows [5, 5 + 131).
TEST_P(CudaCodeKernels, PromptProductsMatchTheCpuReferenceDot) {
  const TensorType type = GetParam();
  const int64_t rows = 200, cols = 768, n_expert = 3;
  std::mt19937 rng(12);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const QuantRows w(type, rows * n_expert, cols, rng);
  const int tokens = 150;
  std::vector<float> x(static_cast<size_t>(tokens * cols));
  for (float& v : x) v = dist(rng) * 2.0f;
  Dev dw(w.w.size() + 16), dx(x.size() * 4), dout(static_cast<size_t>(tokens * rows) * 4), dq8(backend::cuda::q8_bytes(tokens, cols));
  upload(dw, w.w.data(), w.w.size());
  upload(dx, x.data(), x.size() * 4);
  std::vector<float> got(static_cast<size_t>(tokens * rows));
  for (const bool ready : {false, true}) {
    // The second product: the rows of the second expert, the codes already in q8.
    const int64_t base = ready ? rows : 0;
    backend::cuda::mul_mat(nullptr, static_cast<int>(type), static_cast<const uint8_t*>(dw.p) + static_cast<size_t>(base) * w.rb, w.rb, rows,
                           cols, dx.as<float>(), cols, tokens, dout.as<float>(), rows, nullptr, dq8.p, ready);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(got.data(), dout.p, got.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    for (int t = 0; t < tokens; ++t)
      for (int64_t r = 0; r < rows; ++r) {
        const float* xt = x.data() + static_cast<size_t>(t) * cols;
        ASSERT_NEAR(got[static_cast<size_t>(t * rows + r)], w.dot(base + r, xt), w.bound(base + r, xt))
            << (ready ? "codes reused, " : "") << "token " << t << " row " << r;
      }
  }
  // Grouped: slot i is token i / 2; experts by a fixed pattern, most slots on expert 1.
  const int slots = tokens, x_div = 2;
  std::vector<float> bias(static_cast<size_t>(n_expert * rows));
  for (float& b : bias) b = dist(rng);
  Dev dbias(bias.size() * 4);
  upload(dbias, bias.data(), bias.size() * 4);
  {
    // Each tile's three super-blocks split over 2, 4 and 16 blocks (parts of none, one or two), with a
    // bias: every element written (NaN before), within the reference's bound, and the same bits on
    // every launch (the parts added in their order; each tile's counter ready for the next launch).
    const SplitScratch scratch;
    std::vector<float> again(got.size());
    for (const int ways : {2, 4, 16}) {
      backend::cuda::set_split_ways(ways);
      for (int launch = 0; launch < 3; ++launch) {
        ASSERT_EQ(cudaMemset(dout.p, 0xff, got.size() * 4), cudaSuccess);
        backend::cuda::mul_mat(nullptr, static_cast<int>(type), dw.p, w.rb, rows, cols, dx.as<float>(), cols, tokens, dout.as<float>(), rows,
                               dbias.as<float>(), dq8.p, launch > 0);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        ASSERT_EQ(cudaMemcpy(launch == 0 ? got.data() : again.data(), dout.p, got.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
        if (launch > 0) {
          ASSERT_EQ(std::memcmp(got.data(), again.data(), got.size() * 4), 0) << ways << " parts: launch " << launch << " differs";
          continue;
        }
        for (int t = 0; t < tokens; ++t)
          for (int64_t r = 0; r < rows; ++r) {
            const float* xt = x.data() + static_cast<size_t>(t) * cols;
            ASSERT_NEAR(got[static_cast<size_t>(t * rows + r)], w.dot(r, xt) + bias[static_cast<size_t>(r)], w.bound(r, xt) + 1e-6)
                << ways << " parts: token " << t << " row " << r;
          }
      }
    }
  }
  const int64_t first = 5, count = 131;
  std::vector<int32_t> ids(static_cast<size_t>(slots));
  for (int i = 0; i < slots; ++i) ids[static_cast<size_t>(i)] = i % 5 == 0 ? 0 : i % 7 == 0 ? 2 : 1;
  Dev dids(slots * 4), dorder(slots * 4), doffsets(4 * 4), dg(static_cast<size_t>(slots * count) * 4), dq8g(backend::cuda::q8_bytes(slots, cols));
  upload(dids, ids.data(), ids.size() * 4);
  backend::cuda::moe_group(nullptr, dids.as<int32_t>(), slots, static_cast<int>(n_expert), dorder.as<int32_t>(), doffsets.as<int32_t>());
  backend::cuda::grouped_mul_mat(nullptr, static_cast<int>(type), dw.p, w.rb, w.rb * static_cast<size_t>(rows), first, count, cols, dx.as<float>(),
                                 cols, x_div, dorder.as<int32_t>(), doffsets.as<int32_t>(), static_cast<int>(n_expert), slots, dg.as<float>(), count,
                                 dbias.as<float>(), rows, dq8g.p, false);
  std::vector<float> g(static_cast<size_t>(slots * count));
  const auto check_grouped = [&](const char* path) {
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(g.data(), dg.p, g.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    for (int i = 0; i < slots; ++i) {
      const int64_t e = ids[static_cast<size_t>(i)];
      const float* xt = x.data() + static_cast<size_t>(i / x_div) * cols;
      for (int64_t r = 0; r < count; ++r)
        ASSERT_NEAR(g[static_cast<size_t>(i * count + r)], w.dot(e * rows + first + r, xt) + bias[static_cast<size_t>(e * rows + r)],
                    w.bound(e * rows + first + r, xt) + 1e-6)
            << path << ": grouped slot " << i << " (expert " << e << ") row " << r;
    }
  };
  check_grouped("prompt tiles");
  // The same slots against codes on integer tensor cores, each expert's rows read once per 8 of its
  // slots (a mixture's steps of up to kCodesTokens rows).
  std::fill(g.begin(), g.end(), 0.0f);
  upload(dg, g.data(), g.size() * 4);
  const backend::cuda::Product gp{static_cast<int>(type), dw.p, w.rb, w.rb * static_cast<size_t>(rows), first, count, dg.as<float>(), count,
                                  dbias.as<float>(), rows};
  backend::cuda::grouped_mul_mat_codes(nullptr, &gp, 1, cols, dx.as<float>(), cols, x_div, dorder.as<int32_t>(), doffsets.as<int32_t>(),
                                       static_cast<int>(n_expert), slots, slots, dq8g.p, false);
  check_grouped("tensor cores");
}

INSTANTIATE_TEST_SUITE_P(Types, CudaCodeKernels, ::testing::Values(TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K),
                         [](const ::testing::TestParamInfo<TensorType>& i) { return std::string(gguf::tensor_type_name(i.param)); });
INSTANTIATE_TEST_SUITE_P(Types, CudaDecodeCodes, ::testing::Values(TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K),
                         [](const ::testing::TestParamInfo<TensorType>& i) { return std::string(gguf::tensor_type_name(i.param)); });

// The fused launches against their parts: products of one input in one launch (types mixed, enough
// rows that each row has one warp), gate and up with their activation, and the add + norm that also
// writes the codes the next products read.
class CudaFused : public ::testing::Test {
 protected:
  void SetUp() override { ZINC_NEED_CUDA_DEVICE(); }
};


// A prompt's products of one input (q, k and v: Q4_K and Q6_K mixed) in one launch of the prompt
// tiles, against the CPU's reference dots: rows past a tile and tokens past a tile masked.
// Three products of one input (Q4_K, Q6_K, Q4_K; 768 columns) and max_n rows of it, on the device.
struct ThreeProducts {
  static constexpr int64_t cols = 768;
  std::mt19937 rng;
  const QuantRows a, b, c;
  const int max_n;
  std::vector<float> x;
  Dev da, db, dc, dx, dq8, oa, ob, oc;
  backend::cuda::Product p[3];
  const QuantRows* q3[3] = {&a, &b, &c};
  const Dev* outs[3] = {&oa, &ob, &oc};
  ThreeProducts(uint32_t seed, int64_t ra, int64_t rb, int64_t rc, int n)
      : rng(seed), a(TensorType::Q4_K, ra, cols, rng), b(TensorType::Q6_K, rb, cols, rng), c(TensorType::Q4_K, rc, cols, rng), max_n(n),
        x(static_cast<size_t>(n * cols)), da(a.w.size()), db(b.w.size()), dc(c.w.size()), dx(x.size() * 4), dq8(backend::cuda::q8_bytes(n, cols)),
        oa(static_cast<size_t>(n * ra) * 4), ob(static_cast<size_t>(n * rb) * 4), oc(static_cast<size_t>(n * rc) * 4) {
    std::normal_distribution<float> dist(0.0f, 1.0f);
    for (float& v : x) v = dist(rng);
    upload(da, a.w.data(), a.w.size());
    upload(db, b.w.data(), b.w.size());
    upload(dc, c.w.data(), c.w.size());
    upload(dx, x.data(), x.size() * 4);
    p[0] = {static_cast<int>(a.type), da.p, a.rb, 0, 0, a.rows, oa.as<float>(), a.rows, nullptr, 0};
    p[1] = {static_cast<int>(b.type), db.p, b.rb, 0, 0, b.rows, ob.as<float>(), b.rows, nullptr, 0};
    p[2] = {static_cast<int>(c.type), dc.p, c.rb, 0, 0, c.rows, oc.as<float>(), c.rows, nullptr, 0};
  }
};

// Gate and up of `rows` rows (one type) with their biases, kCodesTokens rows of input, on the device;
// check() compares the activation's output with the CPU's reference dots.
struct GateUpProducts {
  const int64_t rows, cols;
  const int max_n = backend::cuda::kCodesTokens;
  const QuantRows g, u;
  std::vector<float> x, bias;
  Dev dg, du, dx, dbias, dq8, dout;
  backend::cuda::Product p[2];
  GateUpProducts(TensorType type, int64_t r, int64_t c, std::mt19937& rng)
      : rows(r), cols(c), g(type, r, c, rng), u(type, r, c, rng), x(static_cast<size_t>(max_n * c)), bias(static_cast<size_t>(2 * r)),
        dg(g.w.size()), du(u.w.size()), dx(x.size() * 4), dbias(bias.size() * 4), dq8(backend::cuda::q8_bytes(max_n, c)),
        dout(static_cast<size_t>(max_n * r) * 4) {
    std::normal_distribution<float> dist(0.0f, 1.0f);
    for (float& v : x) v = dist(rng);
    for (float& v : bias) v = dist(rng);
    upload(dg, g.w.data(), g.w.size());
    upload(du, u.w.data(), u.w.size());
    upload(dx, x.data(), x.size() * 4);
    upload(dbias, bias.data(), bias.size() * 4);
    p[0] = {static_cast<int>(type), dg.p, g.rb, 0, 0, rows, dout.as<float>(), rows, dbias.as<float>(), 0};
    p[1] = {static_cast<int>(type), du.p, u.rb, 0, 0, rows, nullptr, rows, dbias.as<float>() + rows, 0};
  }
  // n rows through mul_mat_codes (every output NaN before: one left unwritten fails), then checked.
  void run_and_check(backend::cuda::Glu glu, int n, int split, int rows_per_warp, const std::string& what) {
    ASSERT_EQ(cudaMemset(dout.p, 0xff, static_cast<size_t>(max_n * rows) * 4), cudaSuccess);
    backend::cuda::mul_mat_codes(nullptr, p, 2, cols, dx.as<float>(), cols, 1, nullptr, n, dq8.p, false, glu, split, rows_per_warp);
    check(glu, n, what);
  }
  // The same n rows as the slots of n_expert experts that share these weights (expert_bytes 0; slot t
  // to expert 5 t mod n_expert), grouped by expert (each expert's slots in groups of 8).
  void run_grouped_and_check(backend::cuda::Glu glu, int n, int n_expert, const std::string& what) {
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (int t = 0; t < n; ++t) ids[static_cast<size_t>(t)] = (5 * t) % n_expert;
    Dev dids(ids.size() * 4), dorder(ids.size() * 4), doffsets(static_cast<size_t>(n_expert + 1) * 4);
    upload(dids, ids.data(), ids.size() * 4);
    backend::cuda::moe_group(nullptr, dids.as<int32_t>(), n, n_expert, dorder.as<int32_t>(), doffsets.as<int32_t>());
    ASSERT_EQ(cudaMemset(dout.p, 0xff, static_cast<size_t>(max_n * rows) * 4), cudaSuccess);
    backend::cuda::grouped_mul_mat_codes(nullptr, p, 2, cols, dx.as<float>(), cols, 1, dorder.as<int32_t>(), doffsets.as<int32_t>(), n_expert, n, n,
                                         dq8.p, false, glu);
    check(glu, n, what);
  }
  void check(backend::cuda::Glu glu, int n, const std::string& what) {
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<float> got(static_cast<size_t>(n * rows));
    ASSERT_EQ(cudaMemcpy(got.data(), dout.p, got.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    for (int t = 0; t < n; ++t) {
      for (int64_t r = 0; r < rows; ++r) {
        const Ref& ref = reference(t, r);
        const double gv = ref.g + bias[static_cast<size_t>(r)], uv = ref.u + bias[static_cast<size_t>(rows + r)];
        const double act = glu == backend::cuda::Glu::SwiGLU ? gv / (1 + std::exp(-gv))
                                                             : 0.5 * gv * (1 + std::tanh(0.7978845608028654 * gv * (1 + 0.044715 * gv * gv)));
        // The activation's slope is at most 1.13: the gate's rounding passes on at most that much.
        const double tol = 1.2 * ref.g_bound * std::fabs(uv) + std::fabs(act) * ref.u_bound + 1e-6 * std::fabs(act * uv);
        ASSERT_NEAR(got[static_cast<size_t>(t * rows + r)], act * uv, tol)
            << gguf::tensor_type_name(g.type) << ", " << n << " tokens, " << what << ", token " << t << " row " << r;
      }
    }
  }
  // The CPU's reference dots of token t with row r of gate and up, and their bounds (each computed once).
  struct Ref {
    double g = 0, u = 0, g_bound = 0, u_bound = 0;
    bool known = false;
  };
  std::vector<Ref> refs = std::vector<Ref>(static_cast<size_t>(max_n * rows));
  const Ref& reference(int t, int64_t r) {
    Ref& ref = refs[static_cast<size_t>(t * rows + r)];
    if (!ref.known) {
      const float* xt = x.data() + t * cols;
      ref = {g.dot(r, xt), u.dot(r, xt), g.bound(r, xt), u.bound(r, xt), true};
    }
    return ref;
  }
};

TEST_F(CudaFused, PromptProductsOfOneInputInOneLaunch) {
  ThreeProducts f(12, 300, 260, 37, 130);
  const int64_t cols = f.cols;
  const std::vector<float>& x = f.x;
  const QuantRows* const(&q3)[3] = f.q3;
  const Dev* const(&outs)[3] = f.outs;
  const SplitScratch scratch;
  // (Rows, and the parts each tile's super-blocks are split over: 0 by the shape.)
  for (const auto& [n, ways] : {std::pair{backend::cuda::kCodesTokens + 1, 0}, {f.max_n, 0}, {f.max_n, 4}}) {
    backend::cuda::set_split_ways(ways);
    for (int k = 0; k < 3; ++k)  // (NaN everywhere: a row or token left unwritten fails)
      ASSERT_EQ(cudaMemset(outs[k]->p, 0xff, static_cast<size_t>(f.max_n * q3[k]->rows) * 4), cudaSuccess);
    backend::cuda::mul_mat_codes(nullptr, f.p, 3, cols, f.dx.as<float>(), cols, 1, nullptr, n, f.dq8.p, false);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    for (int k = 0; k < 3; ++k) {
      const QuantRows* q = q3[k];
      std::vector<float> got(static_cast<size_t>(n * q->rows));
      ASSERT_EQ(cudaMemcpy(got.data(), outs[k]->p, got.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      for (int t = 0; t < n; t += 3)
        for (int64_t r = 0; r < q->rows; r += 7)
          ASSERT_NEAR(got[static_cast<size_t>(t * q->rows + r)], q->dot(r, x.data() + t * cols), q->bound(r, x.data() + t * cols))
              << gguf::tensor_type_name(q->type) << ", " << n << " tokens, token " << t << " row " << r;
    }
  }
}

// A short prompt's products (9 to kCodesTokens rows) on shared tiles (of 32 tokens up to 32 rows, of 64
// past), one group of warps a block and two (the super-blocks split), and on the few-token path (each
// warp its own tokens' codes), against the CPU's reference dots: three products of one input (Q4_K,
// Q6_K, Q4_K: rows past a block's and tokens past a block's), then gate and up with their activation
// and biases (every type; 45 rows: past a block's 32).
TEST_F(CudaFused, ShortPromptProductsOnSharedTiles) {
  ThreeProducts f(23, 300, 70, 130, backend::cuda::kCodesTokens);
  // The CPU's reference dots and bounds, once for every mode.
  std::vector<double> want[3], bound[3];
  for (int k = 0; k < 3; ++k)
    for (int t = 0; t < f.max_n; ++t)
      for (int64_t r = 0; r < f.q3[k]->rows; ++r) {
        want[k].push_back(f.q3[k]->dot(r, f.x.data() + t * f.cols));
        bound[k].push_back(f.q3[k]->bound(r, f.x.data() + t * f.cols));
      }
  for (const int mode : {2, 3, 0})
    for (const int n : {17, 28, 32, 33, 64, 65, 100, backend::cuda::kCodesTokens}) {
      backend::cuda::set_codes_wide(mode);
      for (int k = 0; k < 3; ++k)  // (NaN everywhere: a row or token left unwritten fails)
        ASSERT_EQ(cudaMemset(f.outs[k]->p, 0xff, static_cast<size_t>(f.max_n * f.q3[k]->rows) * 4), cudaSuccess);
      backend::cuda::mul_mat_codes(nullptr, f.p, 3, f.cols, f.dx.as<float>(), f.cols, 1, nullptr, n, f.dq8.p, false);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      for (int k = 0; k < 3; ++k) {
        const QuantRows* q = f.q3[k];
        std::vector<float> got(static_cast<size_t>(n * q->rows));
        ASSERT_EQ(cudaMemcpy(got.data(), f.outs[k]->p, got.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
        for (int t = 0; t < n; ++t)
          for (int64_t r = 0; r < q->rows; ++r)
            ASSERT_NEAR(got[static_cast<size_t>(t * q->rows + r)], want[k][static_cast<size_t>(t * q->rows + r)],
                        bound[k][static_cast<size_t>(t * q->rows + r)])
                << "mode " << mode << ", product " << k << ", " << n << " tokens, token " << t << " row " << r;
      }
    }
  std::mt19937 rng(24);
  for (TensorType type : {TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K}) {
    GateUpProducts gu(type, 45, 2048, rng);
    for (const int mode : {2, 3, 1})
      for (const auto& [glu, n] : {std::pair{backend::cuda::Glu::SwiGLU, 24}, {backend::cuda::Glu::GeGLU, 32}, {backend::cuda::Glu::SwiGLU, 40},
                                   {backend::cuda::Glu::GeGLU, 64}, {backend::cuda::Glu::SwiGLU, gu.max_n}}) {
        backend::cuda::set_codes_wide(mode);
        ASSERT_NO_FATAL_FAILURE(gu.run_and_check(glu, n, 0, 0, fmt::format("mode {}", mode)));
      }
  }
  backend::cuda::set_codes_wide(1);
}

// Four products of one input in one launch (a recurrent layer's qkv, gate, beta and alpha): Q4_K,
// Q6_K, Q5_K and Q4_K of as many rows as a block takes, more, and fewer, for one token and a few, on
// packed dot products and on integer tensor cores.
TEST_F(CudaFused, FourProductsOfOneInputInOneLaunch) {
  std::mt19937 rng(19);
  const int64_t cols = 512;
  const int max_n = 9;
  const QuantRows q[4] = {QuantRows(TensorType::Q4_K, 300, cols, rng), QuantRows(TensorType::Q6_K, 37, cols, rng),
                          QuantRows(TensorType::Q5_K, 8, cols, rng), QuantRows(TensorType::Q4_K, 33, cols, rng)};
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(max_n * cols));
  for (float& v : x) v = dist(rng);
  Dev dx(x.size() * 4), dq8(backend::cuda::q8_bytes(max_n, cols));
  upload(dx, x.data(), x.size() * 4);
  std::deque<Dev> dw, out;  // (never moved)
  for (const QuantRows& r : q) {
    dw.emplace_back(r.w.size());
    upload(dw.back(), r.w.data(), r.w.size());
    out.emplace_back(static_cast<size_t>(max_n * r.rows) * 4);
  }
  backend::cuda::Product p[4];
  for (int k = 0; k < 4; ++k) p[k] = {static_cast<int>(q[k].type), dw[static_cast<size_t>(k)].p, q[k].rb, 0, 0, q[k].rows,
                                      out[static_cast<size_t>(k)].as<float>(), q[k].rows, nullptr, 0};
  for (const int mma_min : {max_n + 1, 2}) {
    backend::cuda::set_codes_mma_min(mma_min);
    for (const int n : {1, 3, max_n}) {
      for (int k = 0; k < 4; ++k)  // (NaN everywhere: a row or token left unwritten fails)
        ASSERT_EQ(cudaMemset(out[static_cast<size_t>(k)].p, 0xff, static_cast<size_t>(max_n * q[k].rows) * 4), cudaSuccess);
      backend::cuda::mul_mat_codes(nullptr, p, 4, cols, dx.as<float>(), cols, 1, nullptr, n, dq8.p, false);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      for (int k = 0; k < 4; ++k) {
        std::vector<float> got(static_cast<size_t>(n * q[k].rows));
        ASSERT_EQ(cudaMemcpy(got.data(), out[static_cast<size_t>(k)].p, got.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
        for (int t = 0; t < n; ++t)
          for (int64_t r = 0; r < q[k].rows; ++r)
            ASSERT_NEAR(got[static_cast<size_t>(t * q[k].rows + r)], q[k].dot(r, x.data() + t * cols), q[k].bound(r, x.data() + t * cols))
                << "product " << k << ", " << n << " tokens" << (mma_min == 2 ? " (tensor cores)" : "") << ", token " << t << " row " << r;
      }
    }
  }
  backend::cuda::set_codes_mma_min(0);
}

TEST_F(CudaFused, ProductsOfOneInputInOneLaunch) {
  ThreeProducts f(11, 2100, 2050, 37, backend::cuda::kCodesTokens);
  const int64_t cols = f.cols;
  const int max_n = f.max_n;
  const std::vector<float>& x = f.x;
  backend::cuda::Product(&p)[3] = f.p;
  const Dev &dx = f.dx, &dq8 = f.dq8, &oa = f.oa, &ob = f.ob, &oc = f.oc;
  // The reference of every 7th row of each product, for every token.
  std::vector<std::vector<double>> want[3], tol[3];
  const QuantRows* const(&q3)[3] = f.q3;
  for (int k = 0; k < 3; ++k)
    for (int t = 0; t < max_n; ++t) {
      want[k].emplace_back();
      tol[k].emplace_back();
      for (int64_t r = 0; r < q3[k]->rows; r += 7) {
        want[k].back().push_back(q3[k]->dot(r, x.data() + t * cols));
        tol[k].back().push_back(q3[k]->bound(r, x.data() + t * cols));
      }
    }
  // Packed dot products (1 to 8 tokens; more in groups of 8), then integer tensor cores (2 to 64), their
  // codes staged in shared memory and read from memory, their weights staged (+-2) and loaded as used
  // (+-3, taken as 2).
  for (const int mma_min : {max_n + 1, 2, -2, 3, -3}) {
    backend::cuda::set_codes_mma_stage(mma_min > 0);
    backend::cuda::set_codes_mma_weights_stage(std::abs(mma_min) != 3 ? 2 : 0);
    backend::cuda::set_codes_mma_min(std::abs(mma_min) == 3 ? 2 : std::abs(mma_min));
    for (int n : {1, 3, 8, 9, 16, 29, 41, max_n}) {
      for (const auto& [split, rows_per_warp] : {std::pair{0, 0}, {1, 1}, {2, 1}, {4, 1}, {8, 1}, {1, 2}, {2, 4}, {4, 4}})
      for (const int groups : {0, 1, 2, 4})
      for (const int tiles : {0, 1, 2}) {
        const bool mma = std::abs(mma_min) == 2 || std::abs(mma_min) == 3;
        if (mma && n > 1 && rows_per_warp > 1) continue;  // (the tensor cores' tiles are 16 rows)
        // The tensor cores' groups of 8 tokens a warp and tiles of rows a warp, each choice (the groups
        // past the tokens and the tiles past the rows masked).
        if ((groups > 0 || tiles > 0) && (!mma || n == 1 || (split != 0 && split != 8))) continue;
        backend::cuda::set_codes_mma_groups(groups);
        backend::cuda::set_codes_mma_tiles(tiles);
        backend::cuda::mul_mat_codes(nullptr, p, 3, cols, dx.as<float>(), cols, 1, nullptr, n, dq8.p, false, backend::cuda::Glu::None,
                                     split, rows_per_warp);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        for (int k = 0; k < 3; ++k) {
          const QuantRows* q = q3[k];
          const Dev* out = k == 0 ? &oa : k == 1 ? &ob : &oc;
          std::vector<float> got(static_cast<size_t>(n * q->rows));
          ASSERT_EQ(cudaMemcpy(got.data(), out->p, got.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
          for (int t = 0; t < n; ++t)
            for (int64_t r = 0, i = 0; r < q->rows; r += 7, ++i)
              ASSERT_NEAR(got[static_cast<size_t>(t * q->rows + r)], want[k][t][i], tol[k][t][i])
                  << gguf::tensor_type_name(q->type) << ", " << (mma && n > 1 ? mma_min > 0 ? "tensor cores, staged, " : "tensor cores, " : "packed dots, ")
                  << (std::abs(mma_min) == 3 ? "weights as used, " : "") << n
                  << " tokens, split " << split << ", rows per warp " << rows_per_warp << ", groups " << groups << ", tiles " << tiles
                  << ", token " << t << " row " << r;
        }
      }
    }
  }
  backend::cuda::set_codes_mma_groups(0);
  backend::cuda::set_codes_mma_tiles(0);
  backend::cuda::set_codes_mma_min(0);
  backend::cuda::set_codes_mma_stage(true);
  backend::cuda::set_codes_mma_weights_stage(1);
}

// Steps of 1 to kSameRows tokens (a speculative step's next token and drafts; a few sequences'
// decode): each token's rows the same bit for bit as in a step of that token alone, on packed dot
// products (1 and 2 tokens, Q6_K alone up to 4) and on integer tensor cores (more). Otherwise a greedy
// text would change with where drafting happened or with the other requests being decoded. The
// products' shapes take each split of a row's super-blocks (1, 2 and 4 warps), products of one input
// in one launch of mixed types, gate and up with their activation, and biases.
TEST_F(CudaFused, RowsAreTheSameInStepsOfUpToEightTokens) {
  std::mt19937 rng(23);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  struct Case {
    std::vector<std::pair<TensorType, int64_t>> products;  // type, rows
    int64_t cols;
    backend::cuda::Glu glu;
    bool bias;
  };
  const Case cases[] = {
      {{{TensorType::Q4_K, 32}}, 2048, backend::cuda::Glu::None, false},
      {{{TensorType::Q6_K, 4096}}, 2048, backend::cuda::Glu::None, false},
      {{{TensorType::Q4_K, 4100}}, 4096, backend::cuda::Glu::None, true},
      {{{TensorType::Q6_K, 1500}}, 4096, backend::cuda::Glu::None, false},
      {{{TensorType::Q5_K, 300}}, 512, backend::cuda::Glu::None, true},
      {{{TensorType::Q4_K, 2048}, {TensorType::Q6_K, 512}, {TensorType::Q4_K, 512}}, 2048, backend::cuda::Glu::None, false},
      {{{TensorType::Q4_K, 700}, {TensorType::Q4_K, 700}}, 1024, backend::cuda::Glu::SwiGLU, true},
      {{{TensorType::Q6_K, 4096}, {TensorType::Q6_K, 4096}}, 2048, backend::cuda::Glu::GeGLU, false},
  };
  const int max_n = backend::cuda::kSameRows;
  for (const Case& k : cases) {
    const bool glu = k.glu != backend::cuda::Glu::None;
    std::vector<float> x(static_cast<size_t>(max_n * k.cols));
    for (float& v : x) v = dist(rng);
    Dev dx(x.size() * 4), dq8(backend::cuda::q8_bytes(max_n, k.cols));
    upload(dx, x.data(), x.size() * 4);
    std::deque<QuantRows> q;
    std::deque<Dev> dw, out, one, dbias;
    std::vector<backend::cuda::Product> p;
    std::string what;
    for (const auto& [type, rows] : k.products) {
      q.emplace_back(type, rows, k.cols, rng);
      dw.emplace_back(q.back().w.size());
      upload(dw.back(), q.back().w.data(), q.back().w.size());
      out.emplace_back(static_cast<size_t>(max_n * rows) * 4);
      one.emplace_back(static_cast<size_t>(max_n * rows) * 4);
      std::vector<float> b(static_cast<size_t>(rows));
      for (float& v : b) v = dist(rng);
      dbias.emplace_back(b.size() * 4);
      upload(dbias.back(), b.data(), b.size() * 4);
      p.push_back({static_cast<int>(type), dw.back().p, q.back().rb, 0, 0, rows, out.back().as<float>(), rows,
                   k.bias ? dbias.back().as<float>() : nullptr, 0});
      what += std::string(gguf::tensor_type_name(type)) + " " + std::to_string(rows) + "x" + std::to_string(k.cols) + " ";
    }
    const size_t outs = glu ? 1 : p.size();
    // Each token alone (its output row copied aside), then steps of 2 .. max_n tokens.
    for (int t = 0; t < max_n; ++t) {
      backend::cuda::mul_mat_codes(nullptr, p.data(), static_cast<int>(p.size()), k.cols, dx.as<float>() + t * k.cols, k.cols, 1, nullptr, 1,
                                   dq8.p, false, k.glu);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      for (size_t i = 0; i < outs; ++i) {
        const auto rows = static_cast<size_t>(p[i].rows);
        ASSERT_EQ(cudaMemcpy(one[i].as<float>() + t * rows, out[i].p, rows * 4, cudaMemcpyDeviceToDevice), cudaSuccess);
      }
    }
    for (int n = 2; n <= max_n; ++n) {
      for (size_t i = 0; i < outs; ++i) ASSERT_EQ(cudaMemset(out[i].p, 0xff, static_cast<size_t>(max_n * p[i].rows) * 4), cudaSuccess);
      backend::cuda::mul_mat_codes(nullptr, p.data(), static_cast<int>(p.size()), k.cols, dx.as<float>(), k.cols, 1, nullptr, n, dq8.p, false,
                                   k.glu);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      for (size_t i = 0; i < outs; ++i) {
        const auto rows = static_cast<size_t>(p[i].rows) * static_cast<size_t>(n);
        std::vector<float> got(rows), want(rows);
        ASSERT_EQ(cudaMemcpy(got.data(), out[i].p, rows * 4, cudaMemcpyDeviceToHost), cudaSuccess);
        ASSERT_EQ(cudaMemcpy(want.data(), one[i].p, rows * 4, cudaMemcpyDeviceToHost), cudaSuccess);
        for (size_t e = 0; e < rows; ++e)
          ASSERT_EQ(std::memcmp(&got[e], &want[e], 4), 0) << what << (glu ? "with their activation, " : "") << "product " << i << ", " << n
                                                          << " tokens: token " << e / static_cast<size_t>(p[i].rows) << " row "
                                                          << e % static_cast<size_t>(p[i].rows) << " " << got[e] << " alone " << want[e];
      }
    }
  }
}

// The same for the float and 32-element weights' products against float activations (F32, F16, BF16,
// Q8_0): steps of 2 to 8 tokens, each token's row against the token alone, bit for bit.
TEST_F(CudaFused, FloatRowsAreTheSameInStepsOfUpToEightTokens) {
  std::mt19937 rng(29);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const int max_n = backend::cuda::kSameRows;
  for (const TensorType type : {TensorType::F32, TensorType::F16, TensorType::BF16, TensorType::Q8_0})
  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{37, 256}, {1030, 1024}}) {
    const QuantRows q(type, rows, cols, rng);
    std::vector<float> x(static_cast<size_t>(max_n * cols));
    for (float& v : x) v = dist(rng);
    Dev dw(q.w.size()), dx(x.size() * 4), dout(static_cast<size_t>(max_n * rows) * 4), done(static_cast<size_t>(max_n * rows) * 4);
    upload(dw, q.w.data(), q.w.size());
    upload(dx, x.data(), x.size() * 4);
    for (int t = 0; t < max_n; ++t)
      backend::cuda::mul_mat(nullptr, static_cast<int>(type), dw.p, q.rb, rows, cols, dx.as<float>() + t * cols, cols, 1,
                             done.as<float>() + t * rows, rows, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<float> want(static_cast<size_t>(max_n * rows)), got(want.size());
    ASSERT_EQ(cudaMemcpy(want.data(), done.p, want.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    for (int n = 2; n <= max_n; ++n) {
      ASSERT_EQ(cudaMemset(dout.p, 0xff, got.size() * 4), cudaSuccess);
      backend::cuda::mul_mat(nullptr, static_cast<int>(type), dw.p, q.rb, rows, cols, dx.as<float>(), cols, n, dout.as<float>(), rows, nullptr);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(got.data(), dout.p, got.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      for (size_t e = 0; e < static_cast<size_t>(n * rows); ++e)
        ASSERT_EQ(std::memcmp(&got[e], &want[e], 4), 0) << gguf::tensor_type_name(type) << " " << rows << "x" << cols << ", " << n
                                                        << " tokens: token " << e / static_cast<size_t>(rows) << " row " << e % static_cast<size_t>(rows)
                                                        << " " << got[e] << " alone " << want[e];
    }
  }
}

TEST_F(CudaFused, GateAndUpWithTheirActivation) {
  std::mt19937 rng(12);
  for (const int64_t cols : {int64_t{512}, int64_t{2048}})
  for (TensorType type : {TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K}) {
    GateUpProducts f(type, 45, cols, rng);
    const int max_n = f.max_n;
    // Packed dot products (mma_min above n), then integer tensor cores (2 tokens on).
    for (const auto& [glu, n, rows_per_warp, mma_min] :
         {std::tuple{backend::cuda::Glu::SwiGLU, 3, 0, 99}, {backend::cuda::Glu::GeGLU, 3, 0, 99}, {backend::cuda::Glu::SwiGLU, 1, 1, 99},
          {backend::cuda::Glu::GeGLU, 1, 2, 99}, {backend::cuda::Glu::SwiGLU, 3, 0, 2}, {backend::cuda::Glu::GeGLU, 8, 0, 2},
          {backend::cuda::Glu::SwiGLU, 13, 0, 2}, {backend::cuda::Glu::GeGLU, max_n, 0, 2}, {backend::cuda::Glu::SwiGLU, 41, 8, 2},
          {backend::cuda::Glu::SwiGLU, 29, 4, 2}, {backend::cuda::Glu::SwiGLU, 8, 1, 2}, {backend::cuda::Glu::GeGLU, 5, 1, 2},
          {backend::cuda::Glu::SwiGLU, 16, 2, 2}, {backend::cuda::Glu::GeGLU, 11, 4, 2}}) {
      // (With the tensor cores rows_per_warp is the split: eight, four, two and one warps a tile; one
      // with 2048 columns, eight super-blocks a warp, takes the weights staged.)
      // The codes staged or read from memory; the weights staged (ws) or loaded as used; 9 to 16
      // tokens held to fewer registers (capped) or not.
      for (const auto& [stage, ws, capped] : {std::tuple{true, true, true}, {false, true, true}, {true, false, true}, {false, false, true},
                                              {true, true, false}}) {
        if ((!stage || !ws || !capped) && mma_min != 2) continue;
        backend::cuda::set_codes_mma_stage(stage);
        backend::cuda::set_codes_mma_weights_stage(ws ? 2 : 0);
        backend::cuda::set_codes_mma_glu_capped(capped ? 2 : 0);
        backend::cuda::set_codes_mma_min(mma_min);
        ASSERT_NO_FATAL_FAILURE(f.run_and_check(glu, n, mma_min == 2 ? rows_per_warp : 0, mma_min == 2 ? 0 : rows_per_warp,
                                                fmt::format("mma from {}{}{}{}", mma_min, stage ? ", staged" : "", ws ? ", weights staged" : "",
                                                            capped ? "" : ", all registers")));
      }
    }
  }
  backend::cuda::set_codes_mma_min(0);
  backend::cuda::set_codes_mma_stage(true);
  backend::cuda::set_codes_mma_weights_stage(1);
  backend::cuda::set_codes_mma_glu_capped(1);
}

// Gate and up with their activation over a mixture's slots grouped by expert (one expert or three, 1 to
// 3 groups of 8 slots an expert), held to fewer registers (the default) or in all of them.
TEST_F(CudaFused, GateAndUpGroupedByExpert) {
  std::mt19937 rng(14);
  for (TensorType type : {TensorType::Q4_K, TensorType::Q6_K}) {
    GateUpProducts f(type, 45, 2048, rng);
    for (const auto& [glu, n, n_expert] : {std::tuple{backend::cuda::Glu::SwiGLU, 5, 1}, {backend::cuda::Glu::GeGLU, 13, 1},
                                           {backend::cuda::Glu::SwiGLU, 40, 3}, {backend::cuda::Glu::SwiGLU, 3, 3}})
      for (const int capped : {1, 0}) {
        backend::cuda::set_codes_mma_glu_capped(capped);
        ASSERT_NO_FATAL_FAILURE(f.run_grouped_and_check(glu, n, n_expert, fmt::format("grouped, {} experts{}", n_expert, capped ? "" : ", all registers")));
      }
  }
  backend::cuda::set_codes_mma_glu_capped(1);
}

// The add + norm over n rows of `width` columns against double sums, its codes against the products' own.
void check_add_norm(int64_t width) {
  std::mt19937 rng(13);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const int n = 3;
  ASSERT_TRUE(backend::cuda::add_rms_norm_fits(width));
  std::vector<float> a(static_cast<size_t>(n * width)), b(a.size()), w(static_cast<size_t>(width));
  for (float& v : a) v = dist(rng);
  for (float& v : b) v = dist(rng);
  for (float& v : w) v = dist(rng);
  Dev da(a.size() * 4), db(b.size() * 4), dw(w.size() * 4), dsum(a.size() * 4), dout(a.size() * 4), dq8(backend::cuda::q8_bytes(n, width)),
      dq8b(backend::cuda::q8_bytes(n, width)), dp(16);
  upload(da, a.data(), a.size() * 4);
  upload(db, b.data(), b.size() * 4);
  upload(dw, w.data(), w.size() * 4);
  backend::cuda::add_rms_norm(nullptr, da.as<float>(), db.as<float>(), dsum.as<float>(), dw.as<float>(), dout.as<float>(), width, n, 1e-6f,
                              0.5f, dq8.p);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> sum(a.size()), out(a.size());
  ASSERT_EQ(cudaMemcpy(sum.data(), dsum.p, sum.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(out.data(), dout.p, out.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  for (int t = 0; t < n; ++t) {
    double ss = 0;
    for (int64_t i = 0; i < width; ++i) {
      const size_t k = static_cast<size_t>(t * width + i);
      ASSERT_EQ(sum[k], a[k] + b[k]) << "row " << t << " element " << i;
      ss += static_cast<double>(sum[k]) * sum[k];
    }
    const double scale = 1.0 / std::sqrt(ss / static_cast<double>(width) + 1e-6);
    for (int64_t i = 0; i < width; ++i) {
      const size_t k = static_cast<size_t>(t * width + i);
      const double want = sum[k] * scale * (w[static_cast<size_t>(i)] + 0.5);
      ASSERT_NEAR(out[k], want, 1e-5 * std::fabs(want) + 1e-6) << "row " << t << " element " << i;
    }
  }
  // The codes are those the products would make of the norm's rows themselves (a product that
  // quantizes them into a second buffer).
  std::mt19937 rng2(14);
  const QuantRows one(TensorType::Q4_K, 1, width, rng2);
  Dev dwq(one.w.size()), dy(static_cast<size_t>(n) * 4);
  upload(dwq, one.w.data(), one.w.size());
  backend::cuda::mul_mat(nullptr, static_cast<int>(one.type), dwq.p, one.rb, 1, width, dout.as<float>(), width, n, dy.as<float>(), 1, nullptr,
                         dq8b.p, false);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<uint8_t> fused(backend::cuda::q8_bytes(n, width)), separate(fused.size());
  ASSERT_EQ(cudaMemcpy(fused.data(), dq8.p, fused.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(separate.data(), dq8b.p, separate.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(fused, separate);
  // And the product against them is the CPU's reference dot of the norm's rows.
  std::vector<float> y(static_cast<size_t>(n));
  ASSERT_EQ(cudaMemcpy(y.data(), dy.p, y.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  for (int t = 0; t < n; ++t) EXPECT_NEAR(y[static_cast<size_t>(t)], one.dot(0, out.data() + t * width), one.bound(0, out.data() + t * width));
}

TEST_F(CudaFused, AddNormWritesTheSumTheNormAndTheCodes) {
  // Five super-blocks (eight warps: warps with one and with none), 16 (16 warps, one each), 20 and 50
  // (32 warps: one, none, or two each).
  for (const int64_t width : {1280, 4096, 5120, 12800}) {
    SCOPED_TRACE(fmt::format("{} columns", width));
    check_add_norm(width);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// A per-head norm and the gated activation after it in one launch (as the delta rule's output takes
// them): the double-precision norm of each group times the weights, through SiLU or GELU with z on
// either side; and the codes are those a product makes of the rows itself.
TEST_F(CudaFused, HeadNormAndGatedActivationWithTheCodes) {
  std::mt19937 rng(17);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const int64_t width = 1280;  // five super-blocks: warps with one and with none
  const int n = 3;
  for (const int64_t group : {int64_t{8}, int64_t{128}, int64_t{256}})
  for (const bool gelu : {false, true})
  for (const bool act_first : {false, true}) {
    ASSERT_TRUE(backend::cuda::norm_glu_fits(width, group));
    std::vector<float> x(static_cast<size_t>(n * width)), z(x.size()), w(static_cast<size_t>(group));
    for (std::vector<float>* v : {&x, &z, &w})
      for (float& f : *v) f = dist(rng);
    Dev dx(x.size() * 4), dz(z.size() * 4), dw(w.size() * 4), dout(x.size() * 4), dq8(backend::cuda::q8_bytes(n, width)),
        dq8b(backend::cuda::q8_bytes(n, width));
    upload(dx, x.data(), x.size() * 4);
    upload(dz, z.data(), z.size() * 4);
    upload(dw, w.data(), w.size() * 4);
    backend::cuda::norm_glu(nullptr, dx.as<float>(), dw.as<float>(), dz.as<float>(), dout.as<float>(), width, group, n, 1e-6f, 0.25f, gelu,
                            act_first, dq8.p);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<float> out(x.size());
    ASSERT_EQ(cudaMemcpy(out.data(), dout.p, out.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    const auto act = [&](double v) {
      return gelu ? 0.5 * v * (1.0 + std::tanh(0.7978845608028654 * v * (1.0 + 0.044715 * v * v))) : v / (1.0 + std::exp(-v));
    };
    for (int t = 0; t < n; ++t) {
      for (int64_t g0 = 0; g0 < width; g0 += group) {
        double ss = 0;
        for (int64_t i = g0; i < g0 + group; ++i) ss += static_cast<double>(x[static_cast<size_t>(t * width + i)]) * x[static_cast<size_t>(t * width + i)];
        const double scale = 1.0 / std::sqrt(ss / static_cast<double>(group) + 1e-6);
        for (int64_t i = g0; i < g0 + group; ++i) {
          const size_t k = static_cast<size_t>(t * width + i);
          const double h = x[k] * scale * (w[static_cast<size_t>(i - g0)] + 0.25), zv = z[k];
          const double want = act_first ? act(h) * zv : act(zv) * h;
          ASSERT_NEAR(out[k], want, 2e-5 * std::fabs(want) + 1e-6)
              << "group " << group << (gelu ? " gelu" : " silu") << (act_first ? " act(h) z" : " act(z) h") << " row " << t << " element " << i;
        }
      }
    }
    std::mt19937 rng2(18);
    const QuantRows one(TensorType::Q6_K, 1, width, rng2);
    Dev dwq(one.w.size()), dy(static_cast<size_t>(n) * 4);
    upload(dwq, one.w.data(), one.w.size());
    backend::cuda::mul_mat(nullptr, static_cast<int>(one.type), dwq.p, one.rb, 1, width, dout.as<float>(), width, n, dy.as<float>(), 1,
                           nullptr, dq8b.p, false);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<uint8_t> fused(backend::cuda::q8_bytes(n, width)), separate(fused.size());
    ASSERT_EQ(cudaMemcpy(fused.data(), dq8.p, fused.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(separate.data(), dq8b.p, separate.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(fused, separate) << "group " << group;
  }
}

// The gated delta rule against its definition (double precision), q, k and v read as columns of one
// tensor (as the layer's convolution writes them): steps of 1, 150 (chunks of the launch, the last
// ragged) and 2 tokens in a row, the state carried between them; grouped and tiled key heads.
TEST(CudaDeltaRule, StepsMatchTheDefinition) {
  ZINC_NEED_CUDA_DEVICE();
  for (const bool tiled : {false, true}) {
    const int hk = 2, hv = 4, dk = 64, dv = 48;
    const int64_t qw = int64_t{hk} * dk, vw = int64_t{hv} * dv, width = 2 * qw + vw;
    std::mt19937 rng(41);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> A(static_cast<size_t>(hv)), dt(static_cast<size_t>(hv));
    for (float& f : A) f = -std::fabs(dist(rng));
    for (float& f : dt) f = dist(rng);
    std::vector<double> S(static_cast<size_t>(hv * dk * dv), 0.0);  // [h][i][j], the definition's
    std::vector<float> state(S.size(), 0.0f);                        // [h][j][i], the launch's
    for (size_t i = 0; i < state.size(); ++i) {
      const size_t h = i / (dk * dv), r = i % (dk * dv), jj = r / dk, ii = r % dk;
      state[i] = 0.1f * dist(rng);
      S[h * dk * dv + ii * dv + jj] = state[i];
    }
    Dev dstate(state.size() * 4), dA(A.size() * 4), ddt(dt.size() * 4);
    upload(dstate, state.data(), state.size() * 4);
    upload(dA, A.data(), A.size() * 4);
    upload(ddt, dt.data(), dt.size() * 4);
    for (const int n : {1, 150, 2}) {
      std::vector<float> x(static_cast<size_t>(n * width)), alpha(static_cast<size_t>(n * hv)), beta(alpha.size());
      for (float& f : x) f = dist(rng);
      for (float& f : alpha) f = dist(rng) * 3.0f;  // (past 20 too: softplus taken as its input)
      alpha[0] = 25.0f;
      for (float& f : beta) f = dist(rng);
      Dev dx(x.size() * 4), dal(alpha.size() * 4), dbe(beta.size() * 4), dout(static_cast<size_t>(n * vw) * 4);
      upload(dx, x.data(), x.size() * 4);
      upload(dal, alpha.data(), alpha.size() * 4);
      upload(dbe, beta.data(), beta.size() * 4);
      backend::cuda::DeltaArgs a;
      a.q = dx.as<float>();
      a.k = dx.as<float>() + qw;
      a.v = dx.as<float>() + 2 * qw;
      a.alpha = dal.as<float>();
      a.beta_in = dbe.as<float>();
      a.A = dA.as<float>();
      a.dt_bias = ddt.as<float>();
      a.state = dstate.as<float>();
      a.out = dout.as<float>();
      a.n = n;
      a.q_stride = width;
      a.v_stride = width;
      a.out_stride = vw;
      a.hk = hk;
      a.hv = hv;
      a.dk = dk;
      a.dv = dv;
      a.tiled = tiled;
      backend::cuda::delta_rule(nullptr, a);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      std::vector<float> out(static_cast<size_t>(n * vw));
      ASSERT_EQ(cudaMemcpy(out.data(), dout.p, out.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      for (int t = 0; t < n; ++t) {
        for (int h = 0; h < hv; ++h) {
          const int kh = tiled ? h % hk : h / (hv / hk);
          const float* q = x.data() + t * width + kh * dk;
          const float* k = q + qw;
          const float* v = x.data() + t * width + 2 * qw + h * dv;
          double qq = 0, kk = 0;
          for (int i = 0; i < dk; ++i) qq += double{q[i]} * q[i], kk += double{k[i]} * k[i];
          const double qn = 1.0 / std::sqrt(double{dk}) / std::sqrt(qq + 1e-6), kn = 1.0 / std::sqrt(kk + 1e-6);
          const double ax = double{alpha[static_cast<size_t>(t * hv + h)]} + dt[static_cast<size_t>(h)];
          const double decay = std::exp(A[static_cast<size_t>(h)] * (ax > 20.0 ? ax : std::log1p(std::exp(ax))));
          const double b = 1.0 / (1.0 + std::exp(-double{beta[static_cast<size_t>(t * hv + h)]}));
          double* Sh = S.data() + static_cast<size_t>(h) * dk * dv;
          for (int jj = 0; jj < dv; ++jj) {
            double sk = 0;
            for (int i = 0; i < dk; ++i) sk += (Sh[i * dv + jj] *= decay) * k[i] * kn;
            const double delta = (v[jj] - sk) * b;
            double o = 0, mag = 0;
            for (int i = 0; i < dk; ++i) {
              Sh[i * dv + jj] += k[i] * kn * delta;
              o += Sh[i * dv + jj] * q[i] * qn;
              mag += std::fabs(Sh[i * dv + jj] * q[i] * qn);
            }
            ASSERT_NEAR(out[static_cast<size_t>(t * vw + h * dv + jj)], o, 1e-4 * mag + 1e-5)
                << (tiled ? "tiled" : "grouped") << ", " << n << " tokens: token " << t << " head " << h << " column " << jj;
          }
        }
      }
    }
    ASSERT_EQ(cudaMemcpy(state.data(), dstate.p, state.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    for (size_t i = 0; i < state.size(); ++i) {
      const size_t h = i / (dk * dv), r = i % (dk * dv), jj = r / dk, ii = r % dk;
      const double want = S[h * dk * dv + ii * dv + jj];
      ASSERT_NEAR(state[i], want, 1e-4 * std::fabs(want) + 1e-4) << "state element " << i;
    }
  }
}

// The causal depthwise convolution of a recurrent layer against its definition (double precision):
// steps of 1, 2, 40 and 17 tokens in a row (the state carried between them; 40 and 17 span chunks of
// the launch), each token's window kept; kernels of 4 and 2 taps.
TEST(CudaConv, CausalConvolutionCarriesItsState) {
  ZINC_NEED_CUDA_DEVICE();
  std::mt19937 rng(31);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const int64_t width = 300;
  for (const int kernel : {4, 2}) {
    const int k1 = kernel - 1;
    std::vector<float> w(static_cast<size_t>(width * kernel)), state(static_cast<size_t>(k1 * width));
    for (float& v : w) v = dist(rng);
    for (float& v : state) v = dist(rng);
    std::vector<std::vector<double>> inputs(static_cast<size_t>(width));  // every input so far, per channel: the state first
    for (int64_t c = 0; c < width; ++c)
      for (int j = 0; j < k1; ++j) inputs[static_cast<size_t>(c)].push_back(state[static_cast<size_t>(j * width + c)]);
    Dev dw(w.size() * 4), dstate(state.size() * 4);
    upload(dw, w.data(), w.size() * 4);
    upload(dstate, state.data(), state.size() * 4);
    for (const int n : {1, 2, 40, 17}) {
      std::vector<float> x(static_cast<size_t>(n * width));
      for (float& v : x) v = dist(rng);
      const size_t kept_stride = static_cast<size_t>(k1 * width);
      Dev dx(x.size() * 4), dout(x.size() * 4), dkept(std::max<size_t>(4, static_cast<size_t>(n) * kept_stride * 4));
      upload(dx, x.data(), x.size() * 4);
      backend::cuda::ssm_conv(nullptr, dx.as<float>(), dw.as<float>(), dstate.as<float>(), dout.as<float>(), width, kernel, n,
                              dkept.as<float>(), kept_stride);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      std::vector<float> out(x.size()), kept(static_cast<size_t>(n) * kept_stride), st(state.size());
      ASSERT_EQ(cudaMemcpy(out.data(), dout.p, out.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(kept.data(), dkept.p, kept.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(st.data(), dstate.p, st.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      for (int64_t c = 0; c < width; ++c) {
        std::vector<double>& in = inputs[static_cast<size_t>(c)];
        for (int t = 0; t < n; ++t) {
          in.push_back(x[static_cast<size_t>(t * width + c)]);
          double sum = 0;
          for (int j = 0; j < kernel; ++j) sum += static_cast<double>(w[static_cast<size_t>(c * kernel + j)]) * in[in.size() - kernel + j];
          const double want = sum / (1 + std::exp(-sum));
          ASSERT_NEAR(out[static_cast<size_t>(t * width + c)], want, 1e-5 * (1 + std::fabs(want)))
              << "kernel " << kernel << ", step of " << n << ", token " << t << ", channel " << c;
          for (int j = 0; j < k1; ++j)
            ASSERT_EQ(kept[static_cast<size_t>(t) * kept_stride + static_cast<size_t>(j * width + c)], static_cast<float>(in[in.size() - k1 + j]))
                << "kept window, token " << t;
        }
        for (int j = 0; j < k1; ++j)
          ASSERT_EQ(st[static_cast<size_t>(j * width + c)], static_cast<float>(in[in.size() - k1 + j])) << "state after a step of " << n;
      }
    }
  }
}

// Decode routing in one launch (the router's float32 product and the routing by the last block) against
// a double-precision reference: logits of duplicated router rows tie, and the lower expert must win;
// both orders (softmax then top k, top k then softmax), repeated launches (the counters return to zero).
// Greedy ids on the device: each row's largest value, the first on ties, against std::max_element;
// rows of random values, a tie placed before and after the maximum, all equal, -inf and NaN entries,
// -0 before +0 (equal values); the ties in blocks of columns apart.
TEST(CudaArgmax, EachRowsLargestTheFirstOnTies) {
  ZINC_NEED_CUDA_DEVICE();
  std::mt19937 rng(21);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const int64_t width = 151936 + 5;  // not a multiple of the block
  const int n = 8;
  std::vector<float> x(static_cast<size_t>(n * width));
  for (float& v : x) v = dist(rng);
  float* zeros = x.data() + static_cast<size_t>(7 * width);  // row 7: -0 then +0 in another block, one value
  std::fill(zeros, zeros + width, -1.0f);
  zeros[10] = -0.0f;
  zeros[70000] = 0.0f;
  float* r = x.data();
  r[100] = r[90000] = 9.0f;  // row 0: a tie, the first wins
  r += width;
  r[width - 1] = 8.0f;  // row 1: the last column
  r += width;
  std::fill(r, r + width, 0.5f);  // row 2: all equal
  r += width;
  std::fill(r, r + width, -std::numeric_limits<float>::infinity());  // row 3: -inf but one
  r[77] = -1.0f;
  r += width;
  r[0] = std::numeric_limits<float>::quiet_NaN();  // row 4: NaN first, then a clear maximum
  r[5000] = 7.0f;
  r += width;
  for (int64_t c = 0; c < width; c += 3) r[c] = std::numeric_limits<float>::quiet_NaN();  // row 5
  r[4] = 6.0f;
  Dev dx(x.size() * 4), dout(static_cast<size_t>(n) * 4), scratch(backend::cuda::argmax_scratch_bytes(n));
  upload(dx, x.data(), x.size() * 4);
  // Twice: each launch leaves its scratch as the next needs it.
  for (int launch = 0; launch < 2; ++launch) {
    ASSERT_EQ(cudaMemset(dout.p, 0xff, static_cast<size_t>(n) * 4), cudaSuccess);
    backend::cuda::argmax_rows(nullptr, dx.as<float>(), width, n, dout.as<int32_t>(), scratch.p);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<int32_t> got(static_cast<size_t>(n));
    ASSERT_EQ(cudaMemcpy(got.data(), dout.p, got.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    const std::vector<int32_t> want = {100, static_cast<int32_t>(width - 1), 0, 77, 5000, 4};
    for (int i = 0; i < 6; ++i) EXPECT_EQ(got[static_cast<size_t>(i)], want[static_cast<size_t>(i)]) << "row " << i << ", launch " << launch;
    const float* last = x.data() + static_cast<size_t>(6 * width);
    EXPECT_EQ(got[6], std::max_element(last, last + width) - last) << "row 6 (random), launch " << launch;
    EXPECT_EQ(got[7], 10) << "row 7 (-0 and +0), launch " << launch;
  }
}

TEST(CudaMoe, RouterLaunchChoosesAndWeighsAsTheReference) {
  ZINC_NEED_CUDA_DEVICE();
  std::mt19937 rng(29);
  std::normal_distribution<float> dist(0.0f, 0.3f);
  for (const int ne : {32, 128, 256})
  for (const int n : {3, 64}) {  // (a decode step; a step of as many rows as the launch takes)
    for (const bool topk_first : {false, true})
    for (const bool norm : {true, false}) {  // (without the renormalisation, with a scale per expert)
      const int64_t d = 384;
      const int k = 8;
      std::vector<float> w(static_cast<size_t>(ne * d)), x(static_cast<size_t>(n * d));
      // Rows a_e x0 and rows x = (1 + t / 32) x0: the logits keep the order of a_e. Experts 0..6 first,
      // then experts 20 and 21 tied for the last place (equal rows give equal logits), the rest below.
      // (Logits within about 30 of each other: the softmax of the last chosen stays a normal float.)
      for (int64_t i = 0; i < d; ++i) x[static_cast<size_t>(i)] = dist(rng);
      for (int t = 1; t < n; ++t)
        for (int64_t i = 0; i < d; ++i) x[static_cast<size_t>(t * d + i)] = (1.0f + static_cast<float>(t) / 32.0f) * x[static_cast<size_t>(i)];
      for (int e = 0; e < ne; ++e) {
        const float a = e < 7 ? 0.05f * static_cast<float>(8 - e) : e == 20 || e == 21 ? 0.03f : -0.01f * static_cast<float>(1 + (e * 7) % 13);
        for (int64_t i = 0; i < d; ++i) w[static_cast<size_t>(e * d + i)] = a * x[static_cast<size_t>(i)];
      }
      std::vector<float> scale(static_cast<size_t>(ne));
      for (int e = 0; e < ne; ++e) scale[static_cast<size_t>(e)] = 1.0f + static_cast<float>(e % 5) / 4.0f;
      // And a row of its own (a shared expert's gate) in the same launch when renormalised.
      std::vector<float> w2(static_cast<size_t>(d));
      for (float& f : w2) f = dist(rng);
      Dev dw(w.size() * 4), dx(x.size() * 4), dlog(static_cast<size_t>(n * ne) * 4), dcount(static_cast<size_t>(n) * 4),
          dids(static_cast<size_t>(n * k) * 4), dwts(static_cast<size_t>(n * k) * 4), dscale(scale.size() * 4), dw2(w2.size() * 4),
          dout2(static_cast<size_t>(n) * 4);
      upload(dw, w.data(), w.size() * 4);
      upload(dw2, w2.data(), w2.size() * 4);
      upload(dx, x.data(), x.size() * 4);
      upload(dscale, scale.data(), scale.size() * 4);
      ASSERT_EQ(cudaMemset(dcount.p, 0, static_cast<size_t>(n) * 4), cudaSuccess);
      ASSERT_TRUE(backend::cuda::moe_router_fits(static_cast<int>(TensorType::F32), d, ne));
      for (int rep = 0; rep < 3; ++rep) {
        backend::cuda::moe_router(nullptr, dw.as<float>(), dx.as<float>(), d, n, dcount.as<unsigned>(), dlog.as<float>(), ne, k, topk_first,
                                  norm, 1.0f, nullptr, norm ? nullptr : dscale.as<float>(), dids.as<int32_t>(), dwts.as<float>(),
                                  norm ? dw2.as<float>() : nullptr, norm ? dout2.as<float>() : nullptr);
      }
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      std::vector<int32_t> ids(static_cast<size_t>(n * k));
      std::vector<float> wts(ids.size());
      std::vector<unsigned> count(static_cast<size_t>(n));
      ASSERT_EQ(cudaMemcpy(ids.data(), dids.p, ids.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(wts.data(), dwts.p, wts.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(count.data(), dcount.p, count.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      for (unsigned c : count) EXPECT_EQ(c, 0u) << "counters left for the next launch";
      if (norm) {
        std::vector<float> out2(static_cast<size_t>(n));
        ASSERT_EQ(cudaMemcpy(out2.data(), dout2.p, out2.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
        for (int t = 0; t < n; ++t) {
          double want = 0, mag = 0;
          for (int64_t i = 0; i < d; ++i) {
            want += static_cast<double>(w2[static_cast<size_t>(i)]) * x[static_cast<size_t>(t * d + i)];
            mag += std::fabs(static_cast<double>(w2[static_cast<size_t>(i)]) * x[static_cast<size_t>(t * d + i)]);
          }
          EXPECT_NEAR(out2[static_cast<size_t>(t)], want, 1e-6 * mag + 1e-7) << "the extra row's product, token " << t;
        }
      }
      for (int t = 0; t < n; ++t) {
        std::vector<double> l(static_cast<size_t>(ne));
        for (int e = 0; e < ne; ++e) {
          double acc = 0;
          for (int64_t i = 0; i < d; ++i) acc += static_cast<double>(w[static_cast<size_t>(e * d + i)]) * x[static_cast<size_t>(t * d + i)];
          l[static_cast<size_t>(e)] = acc;
        }
        // Top k, larger first and the lower expert on ties (the tied rows are exactly equal products).
        std::vector<int> order(static_cast<size_t>(ne));
        for (int e = 0; e < ne; ++e) order[static_cast<size_t>(e)] = e;
        std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return l[static_cast<size_t>(a)] > l[static_cast<size_t>(b)]; });
        std::vector<int> chosen(order.begin(), order.begin() + k);
        const double m = l[static_cast<size_t>(order[0])];
        double top = 0, all = 0;
        for (int e : chosen) top += std::exp(l[static_cast<size_t>(e)] - m);
        for (int e = 0; e < ne; ++e) all += std::exp(l[static_cast<size_t>(e)] - m);
        std::sort(chosen.begin(), chosen.end());
        for (int i = 0; i < k; ++i) {
          const size_t s = static_cast<size_t>(t * k + i);
          const int e = chosen[static_cast<size_t>(i)];
          ASSERT_EQ(ids[s], e) << "ne " << ne << " token " << t << " slot " << i;
          // Renormalised over the chosen (or the softmax over the chosen alone): the same weights in both
          // orders; else the softmax over every expert, times the expert's scale.
          const double p = std::exp(l[static_cast<size_t>(e)] - m) / (norm || topk_first ? top : all);
          const double want = norm ? p : p * scale[static_cast<size_t>(e)];
          EXPECT_NEAR(wts[s], want, 1e-5) << "ne " << ne << " token " << t << " slot " << i << (topk_first ? " top k first" : "")
                                          << (norm ? "" : " not renormalised");
        }
        EXPECT_EQ(ids[static_cast<size_t>(t * k + k - 1)], 20) << "the tie for the last place goes to the lower expert";
      }
    }
  }
}

// The add and norm forming a mixture's weighted sum of slots themselves: the sum equals the other
// term plus moe_combine's output exactly; with a shared expert, plus its rows times the sigmoid of
// their gate (one a row, or one an element) as sigmoid_mul and the add of the two outputs form them.
TEST(CudaMoe, AddNormCombinesTheSlotsAsTheCombineLaunch) {
  ZINC_NEED_CUDA_DEVICE();
  std::mt19937 rng(31);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const int64_t width = 512;
  const int n = 2, k = 4;
  for (const int64_t gw : {int64_t{0}, int64_t{1}, width}) {  // (0: no shared expert)
    std::vector<float> a(static_cast<size_t>(n * width)), y(static_cast<size_t>(n * k * width)), wts(static_cast<size_t>(n * k)),
        w(static_cast<size_t>(width)), sh(a.size()), g(static_cast<size_t>(n * std::max<int64_t>(gw, 1)));
    for (std::vector<float>* v : {&a, &y, &wts, &w, &sh, &g})
      for (float& f : *v) f = dist(rng);
    Dev da(a.size() * 4), dy(y.size() * 4), dwts(wts.size() * 4), dw(w.size() * 4), dcomb(a.size() * 4), dsum(a.size() * 4),
        dsum2(a.size() * 4), dout(a.size() * 4), dout2(a.size() * 4), dsh(sh.size() * 4), dg(g.size() * 4), dscaled(a.size() * 4);
    upload(da, a.data(), a.size() * 4);
    upload(dy, y.data(), y.size() * 4);
    upload(dwts, wts.data(), wts.size() * 4);
    upload(dw, w.data(), w.size() * 4);
    upload(dsh, sh.data(), sh.size() * 4);
    upload(dg, g.data(), g.size() * 4);
    backend::cuda::moe_combine(nullptr, dy.as<float>(), dwts.as<float>(), n, k, width, dcomb.as<float>());
    if (gw > 0) {
      backend::cuda::sigmoid_mul(nullptr, dsh.as<float>(), dg.as<float>(), dscaled.as<float>(), width, gw, n);
      backend::cuda::elementwise(nullptr, backend::cuda::Elementwise::Add, dcomb.as<float>(), dscaled.as<float>(), dcomb.as<float>(),
                                 n * width);
    }
    backend::cuda::add_rms_norm(nullptr, da.as<float>(), dcomb.as<float>(), dsum.as<float>(), dw.as<float>(), dout.as<float>(), width, n,
                                1e-6f, 0.0f, nullptr);
    backend::cuda::add_rms_norm(nullptr, da.as<float>(), nullptr, dsum2.as<float>(), dw.as<float>(), dout2.as<float>(), width, n, 1e-6f,
                                0.0f, nullptr, dy.as<float>(), dwts.as<float>(), k, gw > 0 ? dsh.as<float>() : nullptr,
                                gw > 0 ? dg.as<float>() : nullptr, std::max<int64_t>(gw, 1));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<float> sum(a.size()), sum2(a.size()), out(a.size()), out2(a.size());
    ASSERT_EQ(cudaMemcpy(sum.data(), dsum.p, sum.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(sum2.data(), dsum2.p, sum.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(out.data(), dout.p, out.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(out2.data(), dout2.p, out.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    for (size_t i = 0; i < sum.size(); ++i) {
      ASSERT_EQ(sum2[i], sum[i]) << "gate width " << gw << " element " << i;
      ASSERT_EQ(out2[i], out[i]) << "gate width " << gw << " element " << i;
    }
    if (gw > 0) {  // (and the shared term is there: the sums differ from those without it)
      double moved = 0;
      for (size_t i = 0; i < sum.size(); ++i) moved += std::fabs(static_cast<double>(sum[i]) - a[i]);
      EXPECT_GT(moved, 1.0);
    }
  }
}

// Green contexts (a long prompt's context on 8 in 11 of the multiprocessors, the others' steps on the
// rest): both parts made, a stream on each, and a kernel on each stream giving the bytes it gives on
// an ordinary stream. (Driver entry points asked for by too old a version once left every green
// stream unmade, and the lane silently on every multiprocessor.)
TEST(CudaGreen, AKernelRunsOnEachPart) {
  ZINC_NEED_CUDA_DEVICE();
  int dev = 0, sms = 0, least = 0, greatest = 0;
  ASSERT_EQ(cudaGetDevice(&dev), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetStreamPriorityRange(&least, &greatest), cudaSuccess);
  const backend::cuda::GreenPair g = backend::cuda::make_green_pair(8 * sms / 11);
  if (g.error == "the driver has no green contexts") GTEST_SKIP() << g.error;
  ASSERT_TRUE(g.error.empty()) << g.error;
  EXPECT_GE(g.part_sms, 8 * sms / 11);
  EXPECT_GT(g.rest_sms, 0);
  EXPECT_LE(g.part_sms + g.rest_sms, sms);
  cudaStream_t streams[2] = {backend::cuda::green_stream(g.part, least), backend::cuda::green_stream(g.rest, greatest)};
  ASSERT_NE(streams[0], nullptr);
  ASSERT_NE(streams[1], nullptr);
  const int64_t cols = 4096;
  const int rows = 64;
  std::vector<float> x(static_cast<size_t>(rows * cols));
  std::mt19937 rng(41);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (float& v : x) v = dist(rng);
  const size_t bytes = backend::cuda::q8_bytes(rows, cols);
  Dev dx(x.size() * 4), want(bytes), got0(bytes), got1(bytes);
  upload(dx, x.data(), x.size() * 4);
  // (The copy and the buffers' zeroing done before the green streams read and write them: those streams
  // do not wait for the default stream's work, and a copy from pageable memory may return before its
  // last bytes land.)
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  backend::cuda::quantize_codes(nullptr, dx.as<float>(), cols, 1, cols, rows, want.p);
  backend::cuda::quantize_codes(streams[0], dx.as<float>(), cols, 1, cols, rows, got0.p);
  backend::cuda::quantize_codes(streams[1], dx.as<float>(), cols, 1, cols, rows, got1.p);
  // (Each stream waited on: a green context's work is not the primary context's, which a device-wide
  // synchronize waits for.)
  for (cudaStream_t s : streams) ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<uint8_t> w(bytes), a(bytes), b(bytes);
  ASSERT_EQ(cudaMemcpy(w.data(), want.p, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(a.data(), got0.p, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(b.data(), got1.p, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  // (Where they differ: the first byte, how many, and the region, codes then scales then sums.)
  const auto differ = [&](const std::vector<uint8_t>& got) {
    size_t first = bytes, count = 0;
    for (size_t i = 0; i < bytes; ++i)
      if (got[i] != w[i]) first = std::min(first, i), ++count;
    return count == 0 ? std::string() : "first at byte " + std::to_string(first) + " of " + std::to_string(bytes) + " (codes end at " +
                                            std::to_string(rows * cols) + "), " + std::to_string(count) + " bytes";
  };
  EXPECT_EQ(differ(a), "") << "the lane's part";
  EXPECT_EQ(differ(b), "") << "the rest";
  EXPECT_NE(std::count(w.begin(), w.end(), 0), static_cast<std::ptrdiff_t>(bytes));  // (the kernel wrote something)
  for (cudaStream_t s : streams) cudaStreamDestroy(s);
  backend::cuda::destroy_green(g.part);
  backend::cuda::destroy_green(g.rest);
}

TEST(CudaBackend, SaysWhyWhereItCannotStart) {
  int n = 0;
  const bool visible = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
  (void)cudaGetLastError();
  if (visible) {
    auto b = backend::make_cuda_backend();
    EXPECT_EQ(b->name(), "cuda");
    EXPECT_FALSE(b->device_name().empty());
    EXPECT_GT(b->measured_bandwidth_gbs(), 10.0);
    EXPECT_THROW(backend::make_cuda_backend(n), Error);  // one past the last device
  } else {
    try {
      (void)backend::make_cuda_backend();
      FAIL() << "a CUDA backend started without a device";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("no CUDA device"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace zinc
