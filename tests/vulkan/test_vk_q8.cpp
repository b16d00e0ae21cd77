// The products the CPU's way (quantized activations, integer block sums, the CPU's float expression per
// block) of the 32-element formats (mul_mv_q8) and the K-quants (mul_mv_k) against the CPU's reference
// dot products: a block's value bit for bit, a row's up to float summation order, which is what keeps
// greedy decoding on the GPU on the CPU's tokens.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <array>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/vulkan/vk_ops.h"
#include "backend/vulkan/vk_quant.h"
#include "core/error.h"
#include "quant/blocks.h"
#include "quant/dot.h"
#include "quant/fp16.h"
#include "quant/quant.h"
#include "float_bound.h"
#include "vk_test_util.h"

namespace zinc::backend::vk {
namespace {

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

class VulkanQ8 : public VulkanTest {};

// Every weight type of the 32-element formats, the ones that pair with Q8_1 activations included.
constexpr gguf::TensorType kQ8Types[] = {gguf::TensorType::Q4_0, gguf::TensorType::Q4_1,   gguf::TensorType::Q5_0,
                                         gguf::TensorType::Q5_1, gguf::TensorType::Q8_0,   gguf::TensorType::IQ4_NL,
                                         gguf::TensorType::MXFP4};

// activation_rows, but rows of one block random (there, activation_rows' block of ties would make every
// d exactly 1).
std::vector<float> q8_activation_rows(uint32_t ncols, uint32_t rows, std::mt19937& rng) {
  if (ncols > 32) return activation_rows(ncols, rows, rng);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(ncols) * rows);
  for (size_t i = 0; i < x.size(); ++i) x[i] = nd(rng) * static_cast<float>(1 + i / 32 % 4);
  return x;
}

// nrows rows of ncols, quantized to `type` (rows with an offset, so that the affine
// formats' minimum matters), and room for the kernels' whole-word reads past the end.
std::vector<uint8_t> weight_rows(gguf::TensorType type, uint32_t ncols, uint32_t nrows, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const size_t rs = quant::row_size(type, ncols);
  std::vector<uint8_t> wq(rs * nrows + 16);
  std::vector<float> row(ncols);
  for (uint32_t r = 0; r < nrows; ++r) {
    for (auto& v : row) v = nd(rng) * static_cast<float>(1 + r % 3) + 0.25f * static_cast<float>(r % 5);
    quant::quantize_row(type, row.data(), wq.data() + r * rs, ncols);
  }
  return wq;
}

bool is_kquant(gguf::TensorType type) {
  return type == gguf::TensorType::Q4_K || type == gguf::TensorType::Q5_K || type == gguf::TensorType::Q6_K;
}

// Σ|scale term · x| + Σ|min term · x| over the elements of a K-quant row (x: its Q8_K codes times
// their scale; Q6_K has no min term). mul_mv_k rounds each invocation's part of a block relative to
// these: the Q4_K / Q5_K formula subtracts the min part from the scale part, so the product itself
// can be far smaller than either.
double kquant_terms(gguf::TensorType type, const uint8_t* wr, const uint8_t* act, uint32_t ncols) {
  const size_t wb = quant::row_size(type, 256);
  std::vector<uint8_t> blk(wb);
  std::vector<float> scaled(256), mins(256, 0.0f);
  double sum = 0;
  for (uint32_t b = 0; b < ncols / 256; ++b) {
    quant::BlockQ8_K a;
    std::memcpy(&a, act + b * sizeof(quant::BlockQ8_K), sizeof a);
    const uint8_t* w = wr + b * wb;
    if (type == gguf::TensorType::Q6_K) {
      quant::dequantize_row(type, w, scaled.data(), 256);
    } else {  // d and dmin are the block's first two halves: zero one to keep the other's term
      const uint16_t zero = 0;
      std::memcpy(blk.data(), w, wb);
      std::memcpy(blk.data() + 2, &zero, 2);
      quant::dequantize_row(type, blk.data(), scaled.data(), 256);
      std::memcpy(blk.data(), w, wb);
      std::memcpy(blk.data(), &zero, 2);
      quant::dequantize_row(type, blk.data(), mins.data(), 256);
    }
    for (int i = 0; i < 256; ++i) sum += (std::fabs(scaled[i]) + std::fabs(mins[i])) * std::fabs(a.d * a.qs[i]);
  }
  return sum;
}

// The CPU's reference product of weight row `wr` with activation row `act` (quantize_activation's
// bytes), the sum of its blocks' magnitudes (the scale of what summation order can change) and, for
// K-quants, the sum of its terms (kquant_terms).
struct CpuDot {
  float value, magnitude;
  double terms = 0;
};
CpuDot cpu_dot(gguf::TensorType type, const uint8_t* wr, const uint8_t* act, uint32_t ncols) {
  const auto qk = static_cast<uint32_t>(quant::block_size(type));
  const size_t wblock = quant::row_size(type, qk), ablock = quant::activation_row_size(type, qk);
  CpuDot r{quant::dot_ref(type, wr, act, ncols), 0.0f};
  for (uint32_t b = 0; b < ncols / qk; ++b) r.magnitude += std::fabs(quant::dot_ref(type, wr + b * wblock, act + b * ablock, qk));
  if (is_kquant(type)) r.terms = kquant_terms(type, wr, act, ncols);
  return r;
}

// The CPU's expert products, laid out as mul_mv_q8_id / mul_mv_k_id write them: for (token, slot) pair
// p, row r of expert ids[p] against x row p (per_slot) or p / n_used, quantized as the CPU quantizes
// it, plus that expert's bias row where given.
std::vector<CpuDot> cpu_expert_products(gguf::TensorType type, const std::vector<uint8_t>& wq, const std::vector<float>& x,
                                        uint32_t ncols, uint32_t nrows, const std::vector<uint32_t>& ids, uint32_t n_used,
                                        bool per_slot, const std::vector<float>* bias) {
  const size_t rs = quant::row_size(type, ncols), ab = quant::activation_row_size(type, ncols);
  const size_t xrows = x.size() / ncols;
  std::vector<uint8_t> act(ab * xrows);
  for (size_t t = 0; t < xrows; ++t) quant::quantize_activation(type, x.data() + t * ncols, act.data() + t * ab, ncols);
  std::vector<CpuDot> want(ids.size() * nrows);
  for (size_t pair = 0; pair < ids.size(); ++pair) {
    const size_t e = ids[pair], xr = per_slot ? pair : pair / n_used;
    for (uint32_t r = 0; r < nrows; ++r) {
      CpuDot& c = want[pair * nrows + r];
      c = cpu_dot(type, wq.data() + (e * nrows + r) * rs, act.data() + xr * ab, ncols);
      if (bias) {
        c.value += (*bias)[e * nrows + r];
        c.terms += std::fabs((*bias)[e * nrows + r]);
      }
    }
  }
  return want;
}

// The device buffers of an expert-product test: weights, x, its codes (xq_bytes), y (y_floats),
// ids and bias, uploaded; released with the object.
struct ExpertBuffers {
  Context& ctx;
  Buffer w, x, xq, y, ids, bias;
  ExpertBuffers(Context& c, const std::vector<uint8_t>& wq, const std::vector<float>& xv, size_t xq_bytes, size_t y_floats,
                const std::vector<uint32_t>& idv, const std::vector<float>& bv)
      : ctx(c),
        w(c.device_buffer(wq.size())),
        x(c.device_buffer(xv.size() * 4)),
        xq(c.device_buffer(xq_bytes)),
        y(c.device_buffer(y_floats * 4)),
        ids(c.device_buffer(idv.size() * 4)),
        bias(c.device_buffer(bv.size() * 4)) {
    c.upload(w, 0, wq.data(), wq.size());
    c.upload(x, 0, xv.data(), xv.size() * 4);
    c.upload(ids, 0, idv.data(), idv.size() * 4);
    c.upload(bias, 0, bv.data(), bv.size() * 4);
  }
  ~ExpertBuffers() {
    for (Buffer* b : {&w, &x, &xq, &y, &ids, &bias}) ctx.release(*b);
  }
  std::vector<float> result(size_t n) {
    std::vector<float> got(n);
    ctx.download(y, 0, got.data(), got.size() * 4);
    return got;
  }
};

// One block (each result is one block's value: the CPU's bit for bit); else equal up to the order
// blocks are added in (each partial sum rounds once on either side).
void expect_product(gguf::TensorType type, float got, const CpuDot& want, uint32_t ncols, const std::string& where) {
  const auto qk = static_cast<uint32_t>(quant::block_size(type));
  if (is_kquant(type)) {
    // mul_mv_k: each invocation's 32 elements of a block take the CPU's float expression of a block
    // (3 roundings, relative to their terms), the ncols / 32 parts are added in some order; the CPU
    // rounds each block's expression and adds ncols / 256 blocks (and a bias, where given, once).
    const double roundings = ncols / 32.0 + ncols / 256.0 + 8;
    ASSERT_NEAR(got, want.value, roundings * 0x1p-24 * want.terms) << where;
  } else if (ncols == qk) {
    ASSERT_EQ(got, want.value) << where;
  } else {
    ASSERT_NEAR(got, want.value, static_cast<float>(ncols / qk) * 0x1p-23f * want.magnitude) << where;
  }
}

// Each (pair, row) of an expert product against the CPU's, as expect_product judges one.
void expect_expert_products(gguf::TensorType type, const std::vector<float>& got, const std::vector<CpuDot>& want,
                            uint32_t ncols, uint32_t nrows, bool per_slot) {
  for (size_t i = 0; i < got.size(); ++i) {
    expect_product(type, got[i], want[i], ncols,
                   fmt::format("{} cols {} x per {}: row {} pair {}", gguf::tensor_type_name(type), ncols,
                               per_slot ? "slot" : "token", i % nrows, i / nrows));
  }
}

TEST_F(VulkanQ8, ProductEqualsTheCpusQuantizedProduct) {
  std::mt19937 rng(11);
  // One block, 37 (MXFP4 rows at odd bytes) and 133 (more blocks than invocations: some take two);
  // one row a workgroup (ZINC_VULKAN_Q8_ROWS=1) and the default 4 (32 invocations a row, 70 rows: the
  // last workgroup's two rows past the end repeat a row and store nothing). Each with the packed dot
  // product (where the device has it) and without (ZINC_VULKAN_Q8_DOT=0).
  for (const char* dot : {"0", ""}) {
  ScopedEnv dot_env("ZINC_VULKAN_Q8_DOT", dot);
  for (const char* rows_per_group : {"1", ""}) {
    ScopedEnv rows_env("ZINC_VULKAN_Q8_ROWS", rows_per_group);
    for (const auto type : kQ8Types) {
      for (const uint32_t ncols : {32u, 1184u, 4256u}) {
        const uint32_t nrows = 70, ntok = 7;
        const size_t rs = quant::row_size(type, ncols);
        const std::vector<uint8_t> wq = weight_rows(type, ncols, nrows, rng);
        const std::vector<float> x = q8_activation_rows(ncols, ntok, rng);
        std::vector<CpuDot> want(static_cast<size_t>(nrows) * ntok);
        std::vector<uint8_t> act(quant::activation_row_size(type, ncols));
        for (uint32_t t = 0; t < ntok; ++t) {
          quant::quantize_activation(type, x.data() + static_cast<size_t>(t) * ncols, act.data(), ncols);
          for (uint32_t r = 0; r < nrows; ++r) want[t * nrows + r] = cpu_dot(type, wq.data() + r * rs, act.data(), ncols);
        }
        Buffer bw = ctx_->device_buffer(wq.size()), bx = ctx_->device_buffer(x.size() * 4),
               bq = ctx_->device_buffer(mul_mv_q8_bytes(ncols) * ntok), by = ctx_->device_buffer(want.size() * 4);
        ctx_->upload(bw, 0, wq.data(), wq.size());
        ctx_->upload(bx, 0, x.data(), x.size() * 4);
        mul_mv_q8(*ctx_, ctx_->immediate(), type, View{&bw}, View{&bx}, View{&bq}, View{&by}, ncols, nrows, ntok);
        std::vector<float> got(want.size());
        ctx_->download(by, 0, got.data(), got.size() * 4);
        for (size_t i = 0; i < got.size(); ++i) {
          expect_product(type, got[i], want[i], ncols,
                         fmt::format("{} cols {}: row {} token {}", gguf::tensor_type_name(type), ncols, i % nrows, i / nrows));
        }
        for (Buffer* b : {&bw, &bx, &bq, &by}) ctx_->release(*b);
      }
    }
  }
  }
}

TEST_F(VulkanQ8, ExpertProductsEqualTheCpusQuantizedProducts) {
  // Experts picked differently per (token, slot), x per token (gate, up) or per pair (down), with and
  // without a bias row per expert (one float add after the CPU's sum).
  std::mt19937 rng(13);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const uint32_t nrows = 37, n_expert = 5, n_used = 3, ntok = 4;
  std::vector<uint32_t> ids(ntok * n_used);
  for (uint32_t i = 0; i < ids.size(); ++i) ids[i] = (i * 2 + i / n_used) % n_expert;  // distinct within a token
  std::vector<float> bias(static_cast<size_t>(nrows) * n_expert);
  for (auto& v : bias) v = nd(rng);
  // One row a workgroup, two (37 rows: one past the end) and the default 4 (three past it); with the
  // packed dot product and without.
  for (const char* dot : {"0", ""}) {
  ScopedEnv dot_env("ZINC_VULKAN_Q8_DOT", dot);
  for (const char* rows_per_group : {"1", "2", ""}) {
    ScopedEnv rows_env("ZINC_VULKAN_Q8_ROWS", rows_per_group);
    for (const auto type : kQ8Types) {
      for (const uint32_t ncols : {32u, 1184u}) {
        for (const bool per_slot : {false, true}) {
          const bool biased = per_slot;
          const std::vector<uint8_t> wq = weight_rows(type, ncols, nrows * n_expert, rng);
          const uint32_t xrows = per_slot ? ntok * n_used : ntok;
          const std::vector<float> x = q8_activation_rows(ncols, xrows, rng);
          const std::vector<CpuDot> want = cpu_expert_products(type, wq, x, ncols, nrows, ids, n_used, per_slot, biased ? &bias : nullptr);
          ExpertBuffers b(*ctx_, wq, x, mul_mv_q8_bytes(ncols) * xrows, want.size(), ids, bias);
          mul_mv_q8_id(*ctx_, ctx_->immediate(), type, View{&b.w}, View{&b.ids}, View{&b.x}, View{&b.xq}, View{&b.y},
                       biased ? View{&b.bias} : View{}, ncols, nrows, n_expert, n_used, ntok, per_slot);
          expect_expert_products(type, b.result(want.size()), want, ncols, nrows, per_slot);
        }
      }
    }
  }
  }
}

TEST_F(VulkanQ8, DownProductAddsItsSlotsItself) {
  // mul_mv_q8_id_combine: y as the down product without the combine writes it, and each token's row the
  // slots' weighted sum in slot order, each product rounded; the counters left zero for the next call.
  if (!ctx_->features().int_dot) GTEST_SKIP() << "the device has no packed integer dot product";
  std::mt19937 rng(17);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const uint32_t nrows = 37, n_expert = 5, n_used = 3, ntok = 4;
  std::vector<uint32_t> ids(ntok * n_used);
  for (uint32_t i = 0; i < ids.size(); ++i) ids[i] = (i * 2 + i / n_used) % n_expert;
  std::vector<float> bias(static_cast<size_t>(nrows) * n_expert), wts(ntok * n_used);
  for (auto& v : bias) v = nd(rng);
  for (auto& v : wts) v = std::fabs(nd(rng));
  Buffer bwt = ctx_->device_buffer(wts.size() * 4), bout = ctx_->device_buffer(size_t{4} * nrows * ntok),
         bcount = ctx_->device_buffer(size_t{4} * nrows * ntok);  // (one row a group: the most counters)
  ctx_->upload(bwt, 0, wts.data(), wts.size() * 4);
  ctx_->fill_zero(bcount, 0, bcount.size);
  // One row a workgroup, two (a group past the end) and the default 4.
  for (const char* rows_per_group : {"1", "2", ""}) {
    ScopedEnv rows_env("ZINC_VULKAN_Q8_ROWS", rows_per_group);
    ASSERT_LE(4 * mul_mv_q8_combine_counts(nrows, ntok), bcount.size);
    for (const auto type : {gguf::TensorType::Q5_0, gguf::TensorType::Q4_1, gguf::TensorType::Q8_0, gguf::TensorType::MXFP4}) {
      for (const uint32_t ncols : {64u, 1184u}) {
        for (const bool biased : {false, true}) {
          const std::vector<uint8_t> wq = weight_rows(type, ncols, nrows * n_expert, rng);
          const std::vector<float> x = q8_activation_rows(ncols, ntok * n_used, rng);
          ExpertBuffers b(*ctx_, wq, x, mul_mv_q8_bytes(ncols) * ntok * n_used, size_t{nrows} * ntok * n_used, ids, bias);
          const View bv = biased ? View{&b.bias} : View{};
          mul_mv_q8_id(*ctx_, ctx_->immediate(), type, View{&b.w}, View{&b.ids}, View{&b.x}, View{&b.xq}, View{&b.y}, bv, ncols,
                       nrows, n_expert, n_used, ntok, true);
          const std::vector<float> plain = b.result(size_t{nrows} * ntok * n_used);
          for (int round = 0; round < 2; ++round) {  // the second on the counters the first left
            const std::vector<float> nan(size_t{nrows} * ntok * n_used, std::nanf(""));
            ctx_->upload(b.y, 0, nan.data(), nan.size() * 4);
            ASSERT_TRUE(mul_mv_q8_id_combine(*ctx_, ctx_->immediate(), type, View{&b.w}, View{&b.ids}, View{&bwt}, View{&b.xq},
                                             View{&b.y}, View{&bout}, View{&bcount}, bv, ncols, nrows, n_expert, n_used, ntok));
            const std::string what = fmt::format("{} cols {} rows/group '{}'{} round {}", gguf::tensor_type_name(type), ncols,
                                                 rows_per_group, biased ? " biased" : "", round);
            EXPECT_EQ(b.result(plain.size()), plain) << what;
            std::vector<float> out(size_t{nrows} * ntok);
            ctx_->download(bout, 0, out.data(), out.size() * 4);
            for (uint32_t t = 0; t < ntok; ++t) {
              for (uint32_t r = 0; r < nrows; ++r) {
                float total = 0.0f;
                for (uint32_t k = 0; k < n_used; ++k) {
                  volatile const float v = wts[t * n_used + k] * plain[(t * n_used + k) * nrows + r];  // rounded, no fused add
                  total += v;
                }
                ASSERT_EQ(out[t * nrows + r], total) << what << ": token " << t << " row " << r;
              }
            }
          }
          std::vector<uint32_t> counts(mul_mv_q8_combine_counts(nrows, ntok));
          ctx_->download(bcount, 0, counts.data(), counts.size() * 4);
          EXPECT_EQ(counts, std::vector<uint32_t>(counts.size(), 0u)) << gguf::tensor_type_name(type);
        }
      }
    }
  }
  for (Buffer* b : {&bwt, &bout, &bcount}) ctx_->release(*b);
}

TEST_F(VulkanQ8, GateUpAndTheirGluInOneDispatch) {
  // mul_mv_q8_id_glu against its three dispatches (the gate and up products, then eltwise's GLU with
  // the down product's codes): the activation's floats and codes bit for bit, with and without the
  // biases, SwiGLU and the clamped form, and again on the counters the first call left.
  if (!ctx_->features().int_dot || !eltwise_q8_fits(*ctx_, 96)) GTEST_SKIP() << "no packed integer dot product or subgroups under 8";
  std::mt19937 rng(19);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const uint32_t nrows = 96, n_expert = 5, n_used = 3, ntok = 2, pairs = ntok * n_used;
  std::vector<uint32_t> ids(pairs);
  for (uint32_t i = 0; i < ids.size(); ++i) ids[i] = (i * 2 + i / n_used) % n_expert;
  std::vector<float> gbias(size_t{nrows} * n_expert), ubias(gbias.size());
  for (auto& v : gbias) v = nd(rng);
  for (auto& v : ubias) v = nd(rng);
  const size_t qb = mul_mv_q8_bytes(nrows) * pairs;
  Buffer bu = ctx_->device_buffer(size_t{4} * nrows * pairs), bg0 = ctx_->device_buffer(size_t{4} * nrows * pairs),
         bq0 = ctx_->device_buffer(qb), bq = ctx_->device_buffer(qb), bub = ctx_->device_buffer(ubias.size() * 4),
         bcount = ctx_->device_buffer(4 * mul_mv_q8_glu_counts(nrows, pairs));
  ctx_->upload(bub, 0, ubias.data(), ubias.size() * 4);
  ctx_->fill_zero(bcount, 0, bcount.size);
  for (const char* rows_per_group : {"1", "", "8"}) {
    ScopedEnv rows_env("ZINC_VULKAN_Q8_ROWS", rows_per_group);
    for (const auto type : {gguf::TensorType::Q5_0, gguf::TensorType::Q4_1, gguf::TensorType::Q8_0, gguf::TensorType::MXFP4}) {
      for (const uint32_t ncols : {64u, 1184u}) {
        for (const bool biased : {false, true}) {
          for (const bool clamped : {false, true}) {
            const std::vector<uint8_t> wg = weight_rows(type, ncols, nrows * n_expert, rng);
            const std::vector<uint8_t> wu = weight_rows(type, ncols, nrows * n_expert, rng);
            const std::vector<float> x = q8_activation_rows(ncols, ntok, rng);
            ExpertBuffers b(*ctx_, wg, x, mul_mv_q8_bytes(ncols) * ntok, size_t{nrows} * pairs, ids, gbias);
            Buffer bwu = ctx_->device_buffer(wu.size());
            ctx_->upload(bwu, 0, wu.data(), wu.size());
            const View gb = biased ? View{&b.bias} : View{}, ub = biased ? View{&bub} : View{};
            const uint32_t format = q8_act_format(type);
            // The three dispatches (gate's codes of x left in xq by the first).
            mul_mv_q8_id(*ctx_, ctx_->immediate(), type, View{&b.w}, View{&b.ids}, View{&b.x}, View{&b.xq}, View{&bg0}, gb, ncols,
                         nrows, n_expert, n_used, ntok, false);
            mul_mv_q8_id_codes(*ctx_, ctx_->immediate(), type, View{&bwu}, View{&b.ids}, View{&b.xq}, View{&bu}, ub, ncols, nrows,
                               n_expert, n_used, ntok, false);
            const Eltwise op = clamped ? Eltwise::SwiGLUClamped : Eltwise::SwiGLU;
            eltwise(*ctx_, ctx_->immediate(), op, View{&bg0}, View{&bu}, View{&bg0}, nrows, nrows, pairs, false, clamped ? 1.702f : 0,
                    clamped ? 1.5f : 0, View{}, View{&bq0}, format);
            std::vector<float> want(size_t{nrows} * pairs);
            std::vector<uint8_t> want_codes(qb), codes(qb);
            ctx_->download(bg0, 0, want.data(), want.size() * 4);
            ctx_->download(bq0, 0, want_codes.data(), qb);
            for (int round = 0; round < 2; ++round) {
              const std::string what = fmt::format("{} cols {} rows/group '{}'{}{} round {}", gguf::tensor_type_name(type), ncols,
                                                   rows_per_group, biased ? " biased" : "", clamped ? " clamped" : "", round);
              ASSERT_TRUE(mul_mv_q8_id_glu(*ctx_, ctx_->immediate(), type, View{&b.w}, View{&bwu}, View{&b.ids}, View{&b.xq},
                                           View{&b.y}, View{&bq}, View{&bcount}, gb, ub, ncols, nrows, n_expert, n_used, ntok,
                                           clamped, 1.702f, 1.5f, format))
                  << what;
              EXPECT_EQ(b.result(want.size()), want) << what;
              ctx_->download(bq, 0, codes.data(), qb);
              EXPECT_EQ(codes, want_codes) << what;
            }
            ctx_->release(bwu);
          }
        }
      }
    }
  }
  std::vector<uint32_t> counts(mul_mv_q8_glu_counts(nrows, pairs));
  ctx_->download(bcount, 0, counts.data(), counts.size() * 4);
  EXPECT_EQ(counts, std::vector<uint32_t>(counts.size(), 0u));
  for (Buffer* buf : {&bu, &bg0, &bq0, &bq, &bub, &bcount}) ctx_->release(*buf);
}

// An op run with the 32-element formats' codes of its output (rows of width, `type`'s activation
// format): its floats (out) bit for bit those of the op without them (plain), and the codes the CPU
// makes of those floats.
void expect_plain_floats_and_cpu_codes(Context& ctx, Buffer& out, Buffer& plain, Buffer& codes_at, gguf::TensorType type,
                                       uint32_t width, uint32_t rows, const std::string& what) {
  std::vector<float> y(static_cast<size_t>(width) * rows), y0(y.size());
  std::vector<uint8_t> codes(mul_mv_q8_bytes(width) * rows);
  ctx.download(out, 0, y.data(), y.size() * 4);
  ctx.download(plain, 0, y0.data(), y0.size() * 4);
  ctx.download(codes_at, 0, codes.data(), codes.size());
  EXPECT_EQ(y, y0) << what;
  std::string first;
  EXPECT_EQ(codes_unlike_the_cpus(type, y, codes, width, first), 0)
      << gguf::tensor_type_name(type) << " codes of " << what << ", first at " << first;
}

TEST_F(VulkanQ8, NormWritesItsRowsActivationCodes) {
  // rms_norm_row with the 32-element formats' codes of its output (decode's norm before their
  // products, one dispatch): the normalised rows as without the codes, bit for bit, and the codes the
  // CPU makes of those rows, for both activation formats (Q4_1's Q8_1, Q4_0's and MXFP4's Q8_0), with
  // and without the residual add. Rows of 2880 (gpt-oss: 90 blocks, a partial chunk), 96 and 4096;
  // 40 rows each, some of them scaled by 2^-20 and 2^20 before the norm.
  if (!rms_norm_row_q8_fits(*ctx_, 96)) GTEST_SKIP() << "subgroups under 8 invocations: no codes from the norm here";
  std::mt19937 rng(31);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const uint32_t width : {2880u, 96u, 4096u}) {
    const uint32_t rows = 40;
    std::vector<float> a(static_cast<size_t>(width) * rows), b(a.size()), w(width);
    for (size_t i = 0; i < a.size(); ++i) a[i] = nd(rng) * ((i / width) % 3 == 1 ? 0x1p-20f : (i / width) % 3 == 2 ? 0x1p20f : 1.0f);
    for (auto& v : b) v = nd(rng) * 0.5f;
    for (auto& v : w) v = nd(rng);
    const size_t qb = mul_mv_q8_bytes(width);
    Buffer ba = ctx_->device_buffer(a.size() * 4), bb = ctx_->device_buffer(a.size() * 4), bw = ctx_->device_buffer(w.size() * 4),
           bs = ctx_->device_buffer(a.size() * 4), by = ctx_->device_buffer(a.size() * 4), by0 = ctx_->device_buffer(a.size() * 4),
           bq = ctx_->device_buffer(qb * rows);
    ctx_->upload(ba, 0, a.data(), a.size() * 4);
    ctx_->upload(bb, 0, b.data(), b.size() * 4);
    ctx_->upload(bw, 0, w.data(), w.size() * 4);
    for (const bool add : {false, true}) {
      for (const auto type : {gguf::TensorType::Q4_1, gguf::TensorType::Q4_0, gguf::TensorType::MXFP4}) {
        const View sum = add ? View{&bs} : View{}, other = add ? View{&bb} : View{};
        rms_norm_row(*ctx_, ctx_->immediate(), View{&ba}, other, sum, View{&bw}, View{&by0}, View{}, width, rows, 1e-6f, 0.0f);
        rms_norm_row(*ctx_, ctx_->immediate(), View{&ba}, other, sum, View{&bw}, View{&by}, View{}, width, rows, 1e-6f, 0.0f,
                     View{&bq}, q8_act_format(type));
        expect_plain_floats_and_cpu_codes(*ctx_, by, by0, bq, type, width, rows,
                                          fmt::format("rows of {}{}", width, add ? " with the add" : ""));
      }
    }
    for (Buffer* buf : {&ba, &bb, &bw, &bs, &by, &by0, &bq}) ctx_->release(*buf);
  }
}

TEST_F(VulkanQ8, GluWritesItsRowsActivationCodes) {
  // eltwise's SwiGLU (and GPT-OSS's clamped one) with the codes of its output for the down product
  // of the 32-element formats (decode's activation before the experts' down products): the output as
  // without the codes, bit for bit, and the codes the CPU makes of it. Rows of 2880 (a workgroup's
  // 256 values straddle rows) and 96, 24 of them (3 a row of 8 slots).
  if (!eltwise_q8_fits(*ctx_, 96)) GTEST_SKIP() << "subgroups under 8 invocations: no codes from the activation here";
  std::mt19937 rng(41);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  for (const uint32_t width : {2880u, 96u}) {
    const uint32_t rows = 24;
    std::vector<float> a(static_cast<size_t>(width) * rows), b(a.size());
    for (auto& v : a) v = nd(rng);
    for (auto& v : b) v = nd(rng);
    const size_t qb = mul_mv_q8_bytes(width);
    Buffer ba = ctx_->device_buffer(a.size() * 4), bb = ctx_->device_buffer(a.size() * 4), bo = ctx_->device_buffer(a.size() * 4),
           bo0 = ctx_->device_buffer(a.size() * 4), bq = ctx_->device_buffer(qb * rows);
    ctx_->upload(ba, 0, a.data(), a.size() * 4);
    ctx_->upload(bb, 0, b.data(), b.size() * 4);
    for (const auto op : {Eltwise::SwiGLU, Eltwise::SwiGLUClamped}) {
      for (const auto type : {gguf::TensorType::Q4_1, gguf::TensorType::MXFP4}) {
        eltwise(*ctx_, ctx_->immediate(), op, View{&ba}, View{&bb}, View{&bo0}, width, width, rows, false, 1.702f, 7.0f);
        eltwise(*ctx_, ctx_->immediate(), op, View{&ba}, View{&bb}, View{&bo}, width, width, rows, false, 1.702f, 7.0f, View{},
                View{&bq}, q8_act_format(type));
        expect_plain_floats_and_cpu_codes(*ctx_, bo, bo0, bq, type, width, rows,
                                          fmt::format("the {} of rows of {}", op == Eltwise::SwiGLU ? "SwiGLU" : "clamped SwiGLU", width));
      }
    }
    for (Buffer* buf : {&ba, &bb, &bo, &bo0, &bq}) ctx_->release(*buf);
  }
}

TEST_F(VulkanQ8, ActivationCodesAreTheCpus) {
  // The codes a product leaves in xq: Q8_1 (Q4_1's pairing) byte for byte the CPU's BlockQ8_1 rows;
  // Q8_0 the CPU's codes and the float value of its fp16 d. Rows with ties and zeros, and many blocks
  // of magnitudes from 2^-24 to 2^24 whose elements lie within 2 ulps of x / d = k + 1/2 for the
  // CPU's d: a code there moves with the last bit of d = max|x| / 127 or of 1 / d.
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-24, 24), half_code(-127, 126), ulps(-2, 2);
  std::vector<float> edges(4096 * 64);
  for (size_t i = 0; i < edges.size(); i += 32) {
    const float amax = std::fabs(nd(rng)) * std::ldexp(1.0f, exponent(rng)), d = amax / 127;
    edges[i] = amax;
    for (size_t j = i + 1; j < i + 32; ++j) {
      float v = (static_cast<float>(half_code(rng)) + 0.5f) * d;
      for (int u = ulps(rng); u != 0; u += u < 0 ? 1 : -1) v = std::nextafter(v, u < 0 ? -amax : amax);
      edges[j] = v;
    }
  }
  for (const auto& [x, ncols] : {std::pair{activation_rows(1024, 3, rng), 1024u}, std::pair{edges, 4096u}}) {
    const auto rows = static_cast<uint32_t>(x.size() / ncols);
    const size_t qb = mul_mv_q8_bytes(ncols);
    for (const auto type : {gguf::TensorType::Q4_1, gguf::TensorType::Q4_0}) {
      const std::vector<uint8_t> wq = weight_rows(type, ncols, 1, rng);
      Buffer bw = ctx_->device_buffer(wq.size()), bx = ctx_->device_buffer(x.size() * 4), bq = ctx_->device_buffer(qb * rows),
             by = ctx_->device_buffer(rows * 4);
      ctx_->upload(bw, 0, wq.data(), wq.size());
      ctx_->upload(bx, 0, x.data(), x.size() * 4);
      mul_mv_q8(*ctx_, ctx_->immediate(), type, View{&bw}, View{&bx}, View{&bq}, View{&by}, ncols, 1, rows);
      std::vector<uint8_t> got(qb * rows);
      ctx_->download(bq, 0, got.data(), got.size());
      std::string first;
      EXPECT_EQ(codes_unlike_the_cpus(type, x, got, ncols, first), 0) << gguf::tensor_type_name(type) << " activations of " << ncols << " columns, first at " << first;
      for (Buffer* buf : {&bw, &bx, &bq, &by}) ctx_->release(*buf);
    }
  }
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
  expect_codes_of(x, got, ncols, rows);
  ctx_->release(bx);
  ctx_->release(bq);
}

TEST_F(VulkanKQuant, ProductEqualsTheCpusQuantizedProduct) {
  std::mt19937 rng(12);
  for (const auto type : {gguf::TensorType::Q4_K, gguf::TensorType::Q5_K, gguf::TensorType::Q6_K}) {
    // One block, 3 (rows that split the workgroup into groups, the last slot of each idle) and 17
    // blocks (a row that the workgroup's 8 blocks a step do not divide), rows not a multiple of the
    // rows per workgroup, token counts below, at and above the tokens per workgroup.
    for (const uint32_t ncols : {256u, 768u, 4352u}) {
      for (const uint32_t ntok : {1u, 3u, 6u}) {
        const uint32_t nrows = 70;
        const size_t rs = quant::row_size(type, ncols), qb = q8k_row_bytes(ncols);
        const std::vector<uint8_t> wq = weight_rows(type, ncols, nrows, rng);
        const std::vector<float> x = activation_rows(ncols, ntok, rng);
        std::vector<uint8_t> act(quant::activation_row_size(type, ncols));
        std::vector<CpuDot> want(static_cast<size_t>(nrows) * ntok);
        for (uint32_t t = 0; t < ntok; ++t) {
          quant::quantize_activation(type, x.data() + static_cast<size_t>(t) * ncols, act.data(), ncols);
          for (uint32_t r = 0; r < nrows; ++r) want[t * nrows + r] = cpu_dot(type, wq.data() + r * rs, act.data(), ncols);
        }
        Buffer bw = ctx_->device_buffer(wq.size()), bx = ctx_->device_buffer(x.size() * 4),
               bq = ctx_->device_buffer(qb * ntok), by = ctx_->device_buffer(want.size() * 4);
        ctx_->upload(bw, 0, wq.data(), wq.size());
        ctx_->upload(bx, 0, x.data(), x.size() * 4);
        quantize_q8k(*ctx_, ctx_->immediate(), View{&bx}, View{&bq}, ncols, ntok);
        // The launcher's shapes for these sizes, then every workgroup size, rows and tokens per
        // workgroup it can pick for others.
        for (const auto& [wg, rows, tpw, groups] : {std::tuple{"", "", "", ""}, {"64", "4", "8", ""}, {"128", "2", "2", "1"},
                                                    {"64", "1", "16", ""}, {"128", "2", "4", "16"}, {"256", "3", "1", "4"}}) {
          ScopedEnv e1("ZINC_VULKAN_MVK_WG", wg), e2("ZINC_VULKAN_MVK_ROWS", rows), e3("ZINC_VULKAN_MVK_TOKENS", tpw),
              e4("ZINC_VULKAN_MVK_GROUPS", groups);
          const std::vector<float> zeros(want.size(), 0.0f);
          ctx_->upload(by, 0, zeros.data(), zeros.size() * 4);
          mul_mv_k(*ctx_, ctx_->immediate(), type, View{&bw}, View{&bq}, View{&by}, ncols, nrows, ntok);
          std::vector<float> got(want.size());
          ctx_->download(by, 0, got.data(), got.size() * 4);
          for (size_t i = 0; i < got.size(); ++i) {
            expect_product(type, got[i], want[i], ncols,
                           fmt::format("{} cols {} tokens {} shape {}/{}/{}/{}: row {} token {}", gguf::tensor_type_name(type), ncols,
                                       ntok, wg, rows, tpw, groups, i % nrows, i / nrows));
          }
        }
        // With a bias (the graph's Add after the product, now the product's): each sum plus bias[row],
        // one float add, the sums those of the product without it.
        std::vector<float> bias(nrows), plain(want.size()), biased(want.size());
        for (uint32_t r = 0; r < nrows; ++r) bias[r] = 0.37f * static_cast<float>(r % 7) - 1.1f;
        Buffer bb = ctx_->device_buffer(bias.size() * 4), by2 = ctx_->device_buffer(want.size() * 4);
        ctx_->upload(bb, 0, bias.data(), bias.size() * 4);
        mul_mv_k(*ctx_, ctx_->immediate(), type, View{&bw}, View{&bq}, View{&by}, ncols, nrows, ntok);
        mul_mv_k(*ctx_, ctx_->immediate(), type, View{&bw}, View{&bq}, View{&by2}, ncols, nrows, ntok, NormScale{}, View{&bb});
        ctx_->download(by, 0, plain.data(), plain.size() * 4);
        ctx_->download(by2, 0, biased.data(), biased.size() * 4);
        for (size_t i = 0; i < plain.size(); ++i) {
          ASSERT_EQ(biased[i], plain[i] + bias[i % nrows]) << gguf::tensor_type_name(type) << " cols " << ncols << " tokens " << ntok
                                                             << ": row " << i % nrows << " token " << i / nrows << " with a bias";
        }
        for (Buffer* b : {&bw, &bx, &bq, &by, &bb, &by2}) ctx_->release(*b);
      }
    }
  }
}

TEST_F(VulkanKQuant, RowsAreTheSameInStepsOfAnyTokens) {
  // Each token's row of a step of several tokens bit for bit the product of that token alone (a
  // decode step), for the launcher's shapes: a speculative step's verifying rows and a batch's rows
  // then give the one-token step's logits. Rows of 17 and 16 blocks (more than the workgroup takes a
  // step) and 3 blocks (groups of rows).
  std::mt19937 rng(21);
  for (const auto type : {gguf::TensorType::Q4_K, gguf::TensorType::Q5_K, gguf::TensorType::Q6_K}) {
    for (const auto& [ncols, nrows] : {std::pair{4352u, 70u}, {4096u, 512u}, {768u, 2048u}}) {
      const size_t qb = q8k_row_bytes(ncols);
      const std::vector<uint8_t> wq = weight_rows(type, ncols, nrows, rng);
      Buffer bw = ctx_->device_buffer(wq.size());
      ctx_->upload(bw, 0, wq.data(), wq.size());
      for (const uint32_t ntok : {3u, 8u}) {
        const std::vector<float> x = activation_rows(ncols, ntok, rng);
        Buffer bx = ctx_->device_buffer(x.size() * 4), bq = ctx_->device_buffer(qb * ntok),
               by = ctx_->device_buffer(static_cast<size_t>(nrows) * ntok * 4), b1 = ctx_->device_buffer(static_cast<size_t>(nrows) * 4);
        ctx_->upload(bx, 0, x.data(), x.size() * 4);
        quantize_q8k(*ctx_, ctx_->immediate(), View{&bx}, View{&bq}, ncols, ntok);
        mul_mv_k(*ctx_, ctx_->immediate(), type, View{&bw}, View{&bq}, View{&by}, ncols, nrows, ntok);
        std::vector<float> all(static_cast<size_t>(nrows) * ntok), one(nrows);
        ctx_->download(by, 0, all.data(), all.size() * 4);
        for (uint32_t t = 0; t < ntok; ++t) {
          mul_mv_k(*ctx_, ctx_->immediate(), type, View{&bw}, View{&bq, t * qb, qb}, View{&b1}, ncols, nrows, 1);
          ctx_->download(b1, 0, one.data(), one.size() * 4);
          EXPECT_EQ(std::memcmp(all.data() + static_cast<size_t>(t) * nrows, one.data(), nrows * 4), 0)
              << gguf::tensor_type_name(type) << " " << ncols << " x " << nrows << ", token " << t << " of " << ntok;
        }
        for (Buffer* b : {&bx, &bq, &by, &b1}) ctx_->release(*b);
      }
      ctx_->release(bw);
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

TEST_F(VulkanKQuant, HeadNormAndItsGluInOneDispatchAreTheTwoDispatches) {
  // A gated DeltaNet's per-head norm and the SwiGLU gating it (rms_norm_glu): the normalised rows, the
  // gated rows and their Q8_K codes, bit for bit those of rms_norm then eltwise SwiGLU with codes (and
  // the codes the CPU's of those floats); without codes the same floats. Heads of 64, 128 and 256 (two,
  // six and two of them a row), with and without a weight.
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  struct Case {
    uint32_t width, group;
    bool weight;
    float offset;
  };
  for (const Case c : {Case{256, 64, true, 0.0f}, Case{768, 128, true, 1.0f}, Case{512, 256, false, 0.0f}}) {
    SCOPED_TRACE(fmt::format("rows of {}, heads of {}", c.width, c.group));
    ASSERT_TRUE(rms_norm_glu_fits(*ctx_, c.width, c.group)) << "subgroups of " << ctx_->features().subgroup_size;
    const uint32_t rows = 3;
    std::vector<float> x(c.width * rows), z(x.size()), w(c.group);
    for (auto& v : x) v = nd(rng);
    for (auto& v : z) v = nd(rng);
    for (auto& v : w) v = nd(rng);
    Buffer bx = ctx_->device_buffer(x.size() * 4), bz = ctx_->device_buffer(z.size() * 4), bw = ctx_->device_buffer(w.size() * 4);
    Buffer by1 = ctx_->device_buffer(x.size() * 4), bo1 = ctx_->device_buffer(x.size() * 4), bq1 = ctx_->device_buffer(q8k_row_bytes(c.width) * rows);
    Buffer by2 = ctx_->device_buffer(x.size() * 4), bo2 = ctx_->device_buffer(x.size() * 4), bq2 = ctx_->device_buffer(q8k_row_bytes(c.width) * rows);
    Buffer bo3 = ctx_->device_buffer(x.size() * 4);
    ctx_->upload(bx, 0, x.data(), x.size() * 4);
    ctx_->upload(bz, 0, z.data(), z.size() * 4);
    ctx_->upload(bw, 0, w.data(), w.size() * 4);
    const std::vector<uint8_t> zeros(q8k_row_bytes(c.width) * rows, 0);  // (the rows' padding is never written)
    ctx_->upload(bq1, 0, zeros.data(), zeros.size());
    ctx_->upload(bq2, 0, zeros.data(), zeros.size());
    const View wv = c.weight ? View{&bw} : View{};
    rms_norm(*ctx_, ctx_->immediate(), View{&bx}, wv, View{&by1}, c.width, c.group, rows, 1e-6f, c.offset);
    eltwise(*ctx_, ctx_->immediate(), Eltwise::SwiGLU, View{&bz}, View{&by1}, View{&bo1}, c.width, c.width, rows, false, 0, 0, View{&bq1});
    rms_norm_glu(*ctx_, ctx_->immediate(), View{&bx}, wv, View{&bz}, View{&by2}, View{&bo2}, View{&bq2}, c.width, c.group, rows, 1e-6f,
                 c.offset);
    rms_norm_glu(*ctx_, ctx_->immediate(), View{&bx}, wv, View{&bz}, View{&by2}, View{&bo3}, View{}, c.width, c.group, rows, 1e-6f,
                 c.offset);
    std::vector<float> y1(x.size()), o1(x.size()), y2(x.size()), o2(x.size()), o3(x.size());
    std::vector<uint8_t> q1(q8k_row_bytes(c.width) * rows), q2(q1.size());
    ctx_->download(by1, 0, y1.data(), y1.size() * 4);
    ctx_->download(bo1, 0, o1.data(), o1.size() * 4);
    ctx_->download(bq1, 0, q1.data(), q1.size());
    ctx_->download(by2, 0, y2.data(), y2.size() * 4);
    ctx_->download(bo2, 0, o2.data(), o2.size() * 4);
    ctx_->download(bq2, 0, q2.data(), q2.size());
    ctx_->download(bo3, 0, o3.data(), o3.size() * 4);
    EXPECT_EQ(y2, y1);
    EXPECT_EQ(o2, o1);
    EXPECT_EQ(q2, q1);
    EXPECT_EQ(o3, o1);
    expect_codes_of(o2, q2, c.width, rows);
    // And the op itself: the CPU's norm and SwiGLU, within float rounding.
    std::vector<float> want(x.size());
    cpu::rms_norm(x.data(), c.weight ? w.data() : nullptr, want.data(), c.width, c.group, rows, 1e-6f, c.offset);
    for (size_t i = 0; i < want.size(); ++i) {
      const double g = z[i], v = g / (1.0 + std::exp(-g)) * want[i];
      ASSERT_NEAR(o2[i], v, 1e-5 * (1.0 + std::fabs(v))) << "element " << i;
    }
    for (Buffer* b : {&bx, &bz, &bw, &by1, &bo1, &bq1, &by2, &bo2, &bq2, &bo3}) ctx_->release(*b);
  }
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
      // rms_norm_row.comp without doubles, exactly and with its bound under Vulkan's precision
      // (float_bound.h): y = (x * inversesqrt(sum x^2 / width + eps)) * (w + 1), x the residual sum.
      for (uint32_t r = 0; r < rows; ++r) {
        const auto xr = test::exact(sum.data() + static_cast<size_t>(r) * width, width);
        const test::Fb scale = test::vk::inversesqrt(test::vk::div(test::dot(xr, xr), test::Fb(width)) + test::Fb(1e-6f));
        for (uint32_t i = 0; i < width; ++i) {
          const test::Fb y = xr[i] * scale * (test::Fb(w[i]) + test::Fb(1.0f));
          ASSERT_NEAR(got[static_cast<size_t>(r) * width + i], y.v, y.e) << width << " wide, row " << r;
        }
      }
    }
    expect_codes_of(got, codes, width, rows);
    for (Buffer* buf : {&ba, &bb, &bw, &bs, &by, &bq}) ctx_->release(*buf);
  }
}

TEST_F(VulkanKQuant, ExpertProductsEqualTheCpusQuantizedProducts) {
  // K-quant experts (mul_mv_k_id) as VulkanQ8's expert test takes the 32-element formats: experts
  // picked differently per (token, slot), x per token or per pair, with and without bias rows.
  std::mt19937 rng(17);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const uint32_t nrows = 37, n_expert = 5, n_used = 3, ntok = 3;
  std::vector<uint32_t> ids(ntok * n_used);
  for (uint32_t i = 0; i < ids.size(); ++i) ids[i] = (i * 2 + i / n_used) % n_expert;
  std::vector<float> bias(static_cast<size_t>(nrows) * n_expert);
  for (auto& v : bias) v = nd(rng);
  for (const auto type : {gguf::TensorType::Q4_K, gguf::TensorType::Q5_K, gguf::TensorType::Q6_K}) {
    for (const uint32_t ncols : {256u, 1280u}) {
      for (const bool per_slot : {false, true}) {
        const std::vector<uint8_t> wq = weight_rows(type, ncols, nrows * n_expert, rng);
        const uint32_t xrows = per_slot ? ntok * n_used : ntok;
        const std::vector<float> x = activation_rows(ncols, xrows, rng);
        const std::vector<CpuDot> want = cpu_expert_products(type, wq, x, ncols, nrows, ids, n_used, per_slot, per_slot ? &bias : nullptr);
        ExpertBuffers b(*ctx_, wq, x, q8k_row_bytes(ncols) * xrows, want.size(), ids, bias);
        quantize_q8k(*ctx_, ctx_->immediate(), View{&b.x}, View{&b.xq}, ncols, xrows);
        mul_mv_k_id(*ctx_, ctx_->immediate(), type, View{&b.w}, View{&b.ids}, View{&b.xq}, View{&b.y},
                    per_slot ? View{&b.bias} : View{}, ncols, nrows, n_expert, n_used, ntok, per_slot);
        expect_expert_products(type, b.result(want.size()), want, ncols, nrows, per_slot);
        if (!per_slot) continue;
        // The down product with the combine folded in: each token's row is the slots' products (with
        // their bias rows) weighted and added in slot order.
        std::vector<float> wts(ids.size());
        for (auto& v : wts) v = std::uniform_real_distribution<float>(0.0f, 1.0f)(rng);
        Buffer bwts = ctx_->device_buffer(wts.size() * 4);
        ctx_->upload(bwts, 0, wts.data(), wts.size() * 4);
        ASSERT_TRUE(mul_mv_k_id_combine(*ctx_, ctx_->immediate(), type, View{&b.w}, View{&b.ids}, View{&bwts}, View{&b.xq}, View{&b.y},
                                        View{&b.bias}, ncols, nrows, n_expert, n_used, ntok));
        const std::vector<float> comb = b.result(static_cast<size_t>(ntok) * nrows);
        ctx_->release(bwts);
        const double roundings = ncols / 32.0 + ncols / 256.0 + 8;
        for (uint32_t t = 0; t < ntok; ++t) {
          for (uint32_t r = 0; r < nrows; ++r) {
            double sum = 0, bound = 0;
            for (uint32_t k = 0; k < n_used; ++k) {
              const CpuDot& d = want[(t * n_used + k) * nrows + r];
              const double wk = wts[t * n_used + k];
              sum += wk * d.value;
              bound += wk * (roundings * 0x1p-24 * d.terms + (n_used + 2) * 0x1p-24 * std::fabs(d.value));
            }
            ASSERT_NEAR(comb[t * nrows + r], sum, bound) << gguf::tensor_type_name(type) << " cols " << ncols << " combined: token " << t << " row " << r;
          }
        }
      }
    }
  }
}

TEST_F(VulkanKQuant, Throughput) {
  // Decode-sized products of random blocks (the bytes' values do not change the work): wall time of a
  // recording of 50, best of 3, for the float kernel and the integer-dot one under a few shapes.
  if (!std::getenv("ZINC_TEST_VULKAN_BENCH")) GTEST_SKIP() << "set ZINC_TEST_VULKAN_BENCH=1 for the throughput table";
  std::mt19937 rng(3);
  std::printf("| type | rows | cols | kernel | us | GB/s |\n|---|---|---|---|---|---|\n");
  const auto timed = [&](const std::function<void(Recording&)>& record) { return seconds_per_rep(*ctx_, 50, 1, record); };
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
        for (const uint32_t wgs : {256u, 512u, 1024u}) {
          const uint32_t spec[] = {width / 4 / wgs, wgs};
          const Kernel& k = ctx_->pipeline(variant, add ? 6 : 4, 20, spec);
          const uint32_t push[] = {width, 1, 0, 0, codes ? static_cast<uint32_t>(q8k_row_bytes(width) / 4) : 0u};
          const std::array<View, 6> views{a, w, y, View{&bq}, b, s};
          const double t = timed([&](Recording& r) { r.dispatch(k, std::span<const View>(views.data(), add ? 6 : 4), push, 1); });
          std::printf("| %s%s, %u invocations | 1 | %u | %.2f us |\n", variant, codes ? " + codes" : "", wgs, width, t * 1e6);
        }
      }
    }
    const double t = timed([&](Recording& r) { eltwise(*ctx_, r, Eltwise::Add, a, b, y, width, width, 1); });
    std::printf("| eltwise_add | 1 | %u | %.2f us |\n", width, t * 1e6);
    for (Buffer* buf : {&bx, &by, &bq}) ctx_->release(*buf);
  }
  for (const auto type : {gguf::TensorType::Q4_K, gguf::TensorType::Q6_K}) {
    for (const auto& [nrows, ncols] : {std::pair{4096u, 4096u}, {1024u, 4096u}, {12288u, 4096u}, {4096u, 12288u}, {32768u, 4096u}, {151936u, 4096u}}) {
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
      for (const auto& [wg, rows] : {std::pair{"128", "2"}, {"128", "4"}, {"256", "4"}, {"64", "4"}, {"128", "8"}, {"256", "2"}}) {
        ScopedEnv e1("ZINC_VULKAN_MVK_WG", wg), e2("ZINC_VULKAN_MVK_ROWS", rows);
        const double t = timed([&](Recording& r) { mul_mv_k(*ctx_, r, type, View{&bw}, View{&bq}, View{&by}, ncols, nrows, 1); });
        row(fmt::format("int-dot wg {} rows {}", wg, rows).c_str(), t);
      }
      for (Buffer* b : {&bw, &bx, &bq, &by}) ctx_->release(*b);
    }
  }
}

TEST_F(VulkanKQuant, ExpertLatency) {
  // One token's expert products as a decode step runs them (each after the one before): wall time per
  // dispatch of a recording of 64, best of 3, under a few shapes, beside a dense product of the same
  // bytes; GB/s of the 8 selected experts' weight bytes. Each dispatch reads 8 other experts (a dense
  // product: the next 8 experts' rows), all 128 every 16 dispatches, so the weights come from memory
  // rather than the last-level cache, as in a model. Shapes of qwen3-30b-a3b (128 experts, 8 used).
  if (!std::getenv("ZINC_TEST_VULKAN_BENCH")) GTEST_SKIP() << "set ZINC_TEST_VULKAN_BENCH=1 for the latency table";
  std::mt19937 rng(9);
  const uint32_t n_expert = 128, n_used = 8, reps = 64;
  std::printf("| product | type | rows | cols | wg/rows/groups | us | GB/s |\n|---|---|---|---|---|---|---|\n");
  std::vector<uint32_t> ids(size_t{n_used} * reps);
  for (uint32_t i = 0; i < ids.size(); ++i) ids[i] = (i * 5) % n_expert;  // 8 distinct experts per dispatch
  std::vector<float> wts(ids.size(), 0.125f);
  {
    // The floor under them: a dispatch of one workgroup that adds 4 floats, and decode's norm of a
    // 2,048-wide row with its residual add and codes (one workgroup), each after a barrier.
    Buffer a = ctx_->device_buffer(2048 * 4 * 4), q = ctx_->device_buffer(q8k_row_bytes(2048));
    ctx_->fill_zero(a, 0, a.size);
    const View x{&a, 0, 8192}, b{&a, 8192, 8192}, sum{&a, 16384, 8192}, y{&a, 24576, 8192};
    std::printf("| a dependent 4-float add | - | - | - | - | %.2f | - |\n", 1e6 * seconds_per_rep(*ctx_, reps, 1, [&](Recording& r) {
      eltwise(*ctx_, r, Eltwise::Add, x, b, y, 4, 4, 1);
    }));
    std::printf("| a dependent add + norm + codes, 2048 wide | - | - | - | - | %.2f | - |\n", 1e6 * seconds_per_rep(*ctx_, reps, 1, [&](Recording& r) {
      rms_norm_row(*ctx_, r, x, b, sum, View{}, y, View{&q}, 2048, 1, 1e-6f, 0.0f);
    }));
    ctx_->release(a);
    ctx_->release(q);
  }
  for (const auto type : {gguf::TensorType::Q4_K, gguf::TensorType::Q6_K}) {
    for (const auto& [nrows, ncols] : {std::pair{768u, 2048u}, {2048u, 768u}, {512u, 2048u}, {2048u, 512u}}) {
      const size_t per_expert = quant::row_size(type, ncols) * nrows, bytes = per_expert * n_expert, used = per_expert * n_used;
      std::vector<uint32_t> wq((bytes + 3) / 4 + 4);
      for (auto& v : wq) v = static_cast<uint32_t>(rng()) & 0x3bff3bffu;
      std::vector<float> x(size_t{ncols} * n_used);
      for (auto& v : x) v = static_cast<float>(rng() % 2001) / 1000.0f - 1.0f;
      Buffer bw = ctx_->device_buffer(wq.size() * 4), bx = ctx_->device_buffer(x.size() * 4), bq = ctx_->device_buffer(q8k_row_bytes(ncols) * n_used),
             by = ctx_->device_buffer(size_t{nrows} * 4 * n_used), bi = ctx_->device_buffer(ids.size() * 4), bt = ctx_->device_buffer(wts.size() * 4);
      ctx_->upload(bw, 0, wq.data(), wq.size() * 4);
      ctx_->upload(bx, 0, x.data(), x.size() * 4);
      ctx_->upload(bi, 0, ids.data(), ids.size() * 4);
      ctx_->upload(bt, 0, wts.data(), wts.size() * 4);
      quantize_q8k(*ctx_, ctx_->immediate(), View{&bx}, View{&bq}, ncols, n_used);
      const auto row = [&](const char* what, const std::string& shape, double sec) {
        std::printf("| %s | %s | %u | %u | %s | %.2f | %.0f |\n", what, std::string(gguf::tensor_type_name(type)).c_str(), nrows, ncols,
                    shape.c_str(), sec * 1e6, static_cast<double>(used) / sec / 1e9);
      };
      for (const auto& [wg, rows, groups] : {std::tuple{"", "", ""}, {"64", "2", "1"}, {"64", "4", ""}, {"128", "4", ""}, {"64", "1", ""}}) {
        ScopedEnv e1("ZINC_VULKAN_MVK_WG", wg), e2("ZINC_VULKAN_MVK_ROWS", rows), e3("ZINC_VULKAN_MVK_GROUPS", groups);
        const std::string shape = fmt::format("{}/{}/{}", wg, rows, groups);
        uint32_t rep = 0;
        row("dense", shape, seconds_per_rep(*ctx_, reps, 1, [&](Recording& r) {
          const View w{&bw, (rep++ % (n_expert / n_used)) * used, used};
          mul_mv_k(*ctx_, r, type, w, View{&bq}, View{&by}, ncols, nrows * n_used, 1);
        }));
        rep = 0;
        row("experts", shape, seconds_per_rep(*ctx_, reps, 1, [&](Recording& r) {
          const View id{&bi, (rep++ % reps) * n_used * 4, n_used * 4};
          mul_mv_k_id(*ctx_, r, type, View{&bw}, id, View{&bq}, View{&by}, View{}, ncols, nrows, n_expert, n_used, 1, nrows > ncols);
        }));
        if (nrows > ncols) {
          rep = 0;
          row("experts + combine", shape, seconds_per_rep(*ctx_, reps, 1, [&](Recording& r) {
            const View id{&bi, (rep++ % reps) * n_used * 4, n_used * 4};
            mul_mv_k_id_combine(*ctx_, r, type, View{&bw}, id, View{&bt}, View{&bq}, View{&by}, View{}, ncols, nrows, n_expert, n_used, 1);
          }));
        }
      }
      for (Buffer* b : {&bw, &bx, &bq, &by, &bi, &bt}) ctx_->release(*b);
    }
  }
}

TEST_F(VulkanKQuant, TokensThroughput) {
  // Products of several tokens (the steps of many sequences): wall time per product of a recording
  // of 30, best of 3, under the shapes the launcher can take (workgroup size, rows and tokens per
  // workgroup), and GB/s of weight bytes (read once per pass over the weights).
  if (!std::getenv("ZINC_TEST_VULKAN_BENCH")) GTEST_SKIP() << "set ZINC_TEST_VULKAN_BENCH=1 for the throughput table";
  std::mt19937 rng(4);
  std::printf("| type | rows | cols | tokens | wg | rows/wg | tokens/wg | us | us/token | GB/s |\n|---|---|---|---|---|---|---|---|---|---|\n");
  for (const auto type : {gguf::TensorType::Q4_K, gguf::TensorType::Q6_K}) {
    for (const auto& [nrows, ncols] : {std::pair{4096u, 4096u}, {12288u, 4096u}, {4096u, 12288u}, {151936u, 4096u}}) {
      const size_t bytes = quant::row_size(type, ncols) * nrows;
      std::vector<uint32_t> wq((bytes + 3) / 4 + 4);
      for (auto& v : wq) v = static_cast<uint32_t>(rng()) & 0x3bff3bffu;  // finite halves wherever they fall
      const uint32_t max_tok = 32;
      std::vector<float> x(size_t{ncols} * max_tok);
      for (auto& v : x) v = static_cast<float>(rng() % 2001) / 1000.0f - 1.0f;
      Buffer bw = ctx_->device_buffer(wq.size() * 4), bx = ctx_->device_buffer(x.size() * 4),
             bq = ctx_->device_buffer(q8k_row_bytes(ncols) * max_tok), by = ctx_->device_buffer(size_t{nrows} * 4 * max_tok);
      ctx_->upload(bw, 0, wq.data(), wq.size() * 4);
      ctx_->upload(bx, 0, x.data(), x.size() * 4);
      quantize_q8k(*ctx_, ctx_->immediate(), View{&bx}, View{&bq}, ncols, max_tok);
      for (const uint32_t ntok : {1u, 4u, 8u, 16u, 32u}) {
        for (const auto& [wg, rows, tpw] : {std::tuple{"64", "4", "4"}, {"128", "2", "4"}, {"64", "4", "8"}, {"128", "2", "8"}, {"64", "2", "8"},
                                            {"64", "8", "4"}, {"128", "4", "8"}, {"64", "2", "16"}, {"128", "1", "16"}, {"64", "4", "16"},
                                            {"256", "1", "8"}, {"64", "1", "8"}}) {
          if (ntok == 1 && std::string(tpw) != "4") continue;
          ScopedEnv e1("ZINC_VULKAN_MVK_WG", wg), e2("ZINC_VULKAN_MVK_ROWS", rows), e3("ZINC_VULKAN_MVK_TOKENS", tpw);
          const double t = seconds_per_rep(*ctx_, 30, 1, [&](Recording& r) { mul_mv_k(*ctx_, r, type, View{&bw}, View{&bq}, View{&by}, ncols, nrows, ntok); });
          std::printf("| %s | %u | %u | %u | %s | %s | %s | %.1f | %.2f | %.0f |\n", std::string(gguf::tensor_type_name(type)).c_str(), nrows, ncols,
                      ntok, wg, rows, tpw, t * 1e6, t * 1e6 / ntok, static_cast<double>(bytes) / t / 1e9);
        }
      }
      for (Buffer* b : {&bw, &bx, &bq, &by}) ctx_->release(*b);
    }
  }
}

}  // namespace
}  // namespace zinc::backend::vk
