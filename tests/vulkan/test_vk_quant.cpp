// The kernels that read GGUF weights (vk_quant.h) against the CPU's definition of every format
// (quant::dequantize_row), one test per weight type. Weights are random bytes with their scale fields
// set to finite values, so every bit of every field is exercised, not just the patterns a quantizer
// writes; products are checked against the dequantized rows multiplied in double.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <random>
#include <string>
#include <vector>

#include "backend/vulkan/vk_gemm.h"
#include "backend/vulkan/vk_quant.h"
#include "core/error.h"
#include "quant/fp16.h"
#include "float_bound.h"
#include "quant/quant.h"
#include "quant_codes.h"
#include "vk_test_util.h"

namespace zinc::backend::vk {
namespace {

using gguf::TensorType;

constexpr TensorType kTypes[] = {TensorType::F32,  TensorType::F16,  TensorType::BF16,   TensorType::Q4_0,
                                 TensorType::Q4_1, TensorType::Q5_0, TensorType::Q5_1,   TensorType::Q8_0,
                                 TensorType::Q2_K, TensorType::Q3_K, TensorType::Q4_K,   TensorType::Q5_K,
                                 TensorType::Q6_K, TensorType::IQ4_NL, TensorType::IQ4_XS, TensorType::MXFP4};

// Byte offsets of a block's fp16 scale fields (src/quant/blocks.h), MXFP4's exponent aside.
std::vector<size_t> half_fields(TensorType t) {
  switch (t) {
    case TensorType::Q4_0: case TensorType::Q5_0: case TensorType::Q8_0: case TensorType::IQ4_NL:
    case TensorType::IQ4_XS:
      return {0};
    case TensorType::Q4_1: case TensorType::Q5_1: case TensorType::Q4_K: case TensorType::Q5_K:
      return {0, 2};
    case TensorType::Q2_K: return {80, 82};
    case TensorType::Q3_K: return {108};
    case TensorType::Q6_K: return {208};
    default: return {};
  }
}

// A weight of nrows rows of ncols: its bytes (16 bytes of slack past the end, as the kernels allow)
// and the rows as the CPU dequantizes them.
struct Weight {
  std::vector<uint8_t> bytes;
  std::vector<float> values;  // [nrows][ncols]
  size_t row_bytes = 0;
};

Weight random_weight(TensorType t, uint32_t ncols, uint32_t nrows, std::mt19937& rng) {
  Weight w;
  w.row_bytes = quant::row_size(t, ncols);
  const size_t n = static_cast<size_t>(ncols) * nrows, size = w.row_bytes * nrows;
  w.bytes.assign(size + 16, 0);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  if (t == TensorType::F32 || t == TensorType::F16 || t == TensorType::BF16) {
    for (size_t i = 0; i < n; ++i) {
      const float v = nd(rng);
      if (t == TensorType::F32) std::memcpy(w.bytes.data() + 4 * i, &v, 4);
      const uint16_t h = t == TensorType::F16 ? quant::f32_to_fp16(v) : quant::f32_to_bf16(v);
      if (t != TensorType::F32) std::memcpy(w.bytes.data() + 2 * i, &h, 2);
    }
  } else {
    std::uniform_int_distribution<int> byte(0, 255);
    for (size_t i = 0; i < size; ++i) w.bytes[i] = static_cast<uint8_t>(byte(rng));
    const auto info = *gguf::tensor_type_info(static_cast<uint32_t>(t));
    std::uniform_real_distribution<float> scale(0.002f, 0.05f);
    for (size_t b = 0; b < size / info.type_size; ++b) {
      uint8_t* block = w.bytes.data() + b * info.type_size;
      for (const size_t off : half_fields(t)) {
        const uint16_t h = quant::f32_to_fp16(byte(rng) & 1 ? scale(rng) : -scale(rng));
        std::memcpy(block + off, &h, 2);
      }
      // MXFP4: exponents around 2^0, the two subnormal scales included now and then.
      if (t == TensorType::MXFP4) {
        block[0] = static_cast<uint8_t>(b % 7 == 3 ? static_cast<int>(b % 2) : 118 + byte(rng) % 16);
      }
    }
  }
  w.values.resize(n);
  for (uint32_t r = 0; r < nrows; ++r) {
    quant::dequantize_row(t, w.bytes.data() + r * w.row_bytes, w.values.data() + static_cast<size_t>(r) * ncols, ncols);
  }
  return w;
}

std::vector<float> random_floats(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

// Worst error of a row's product relative to the magnitudes of its terms: each weight split into its
// scaled code and its offset (quant_codes.h), times x, plus the bias. A float sum of n terms in any order
// is within (n + 1) u of their magnitudes (Higham §4.2, u = 2^-24); with 2 ncols terms and a bias,
// (2 ncols + 4) u bounds any grouping a kernel uses (block sums scaled once, offsets summed apart).
struct DotCheck {
  double worst = 0;
  void add(double got, double want, double terms) { worst = std::max(worst, std::fabs(got - want) / (terms + 1e-30)); }
  static double bound(uint32_t ncols) { return (2.0 * ncols + 4) * test::kU; }
};

// code_and_offset_terms of row r of w with x.
double row_terms(TensorType t, const std::vector<int>& owner, const Weight& w, uint32_t r, const float* x, uint32_t ncols) {
  return test::code_and_offset_terms(t, owner, w.bytes.data() + r * w.row_bytes, x, ncols);
}

// Every slot's expert product y[t][j] (experts ids[t][j], clamped to n_expert - 1, rows back to back in
// w; x per token or per slot; bias {nrows, n_expert} or null) against the dequantized experts in
// double. x_slack times sum |x| joins each row's terms (the tensor-core bound's absolute part); a NaN
// counts as a result far off.
DotCheck check_experts(TensorType type, const Weight& w, const std::vector<uint32_t>& ids, const std::vector<float>& x,
                       const float* bias, const float* got, uint32_t ncols, uint32_t nrows, uint32_t n_expert,
                       uint32_t n_used, uint32_t ntok, bool per_slot, double x_slack) {
  const auto owner = test::code_bits(type);
  DotCheck check;
  for (uint32_t t = 0; t < ntok; ++t) {
    for (uint32_t j = 0; j < n_used; ++j) {
      const uint32_t e = std::min(ids[t * n_used + j], n_expert - 1);
      const float* xs = x.data() + static_cast<size_t>(per_slot ? t * n_used + j : t) * ncols;
      double xsum = 0;
      for (uint32_t i = 0; i < ncols; ++i) xsum += std::fabs(static_cast<double>(xs[i]));
      for (uint32_t r = 0; r < nrows; ++r) {
        const float* wr = w.values.data() + (static_cast<size_t>(e) * nrows + r) * ncols;
        const double b = bias ? bias[static_cast<size_t>(e) * nrows + r] : 0.0;
        double want = b;
        for (uint32_t i = 0; i < ncols; ++i) want += static_cast<double>(wr[i]) * xs[i];
        const float g = got[(static_cast<size_t>(t) * n_used + j) * nrows + r];
        check.add(std::isnan(g) ? 1e30 : g, want, row_terms(type, owner, w, e * nrows + r, xs, ncols) + std::fabs(b) + x_slack * xsum);
      }
    }
  }
  return check;
}

class QuantFixture : public VulkanTest {
 protected:
  void TearDown() override {
    if (!ctx_) return;
    for (Buffer& b : buffers_) ctx_->release(b);
  }
  // A host-visible buffer holding `bytes` (and at least 16 bytes), released with the fixture.
  Buffer& buffer(const void* data, size_t bytes) {
    buffers_.push_back(ctx_->host_buffer(std::max<size_t>(bytes, 16)));
    if (data) std::memcpy(buffers_.back().mapped, data, bytes);
    return buffers_.back();
  }
  template <typename T>
  Buffer& buffer(const std::vector<T>& v) {
    return buffer(v.data(), v.size() * sizeof(T));
  }
  static View whole(const Buffer& b) { return View{&b, 0, 0}; }

  struct MulMvCase {
    uint32_t ncols, nrows;
    std::vector<uint32_t> tokens;
  };
  // mul_mv against the dequantized rows, for each case and token count, with and without a bias.
  void check_mul_mv(TensorType type, const std::vector<MulMvCase>& cases);

  std::deque<Buffer> buffers_;  // references stay valid as it grows
};

class QuantKernels : public QuantFixture, public ::testing::WithParamInterface<TensorType> {};

std::string type_name(const ::testing::TestParamInfo<TensorType>& info) {
  return std::string(gguf::tensor_type_name(info.param));
}

TEST_P(QuantKernels, MulMvMatchesTheDequantizedWeights) {
  // Ragged rows (37: the last workgroup's second row is past the end), one unit per invocation (256
  // columns) and several (2816), 1, 3 and 9 tokens (9: two token groups, one short), with and
  // without a bias. (Each token count is another pipeline, which lavapipe takes a while to build.)
  check_mul_mv(GetParam(), {{256, 37, {1, 3}}, {2816, 37, {1, 9}}});
}

TEST_F(QuantFixture, MulMvOfATallMatrix) {
  // Four rows per workgroup, the last group ragged.
  check_mul_mv(TensorType::Q4_K, {{256, 8195, {1}}});
  check_mul_mv(TensorType::Q8_0, {{256, 8195, {2}}});
}

void QuantFixture::check_mul_mv(TensorType type, const std::vector<MulMvCase>& cases) {
  std::mt19937 rng(static_cast<uint32_t>(type) + 11);
  const auto owner = test::code_bits(type);
  for (const MulMvCase& c : cases) {
    const Weight w = random_weight(type, c.ncols, c.nrows, rng);
    const std::vector<float> bias = random_floats(c.nrows, rng);
    const Buffer& bw = buffer(w.bytes);
    const Buffer& bb = buffer(bias);
    for (const uint32_t ntok : c.tokens) {
      const std::vector<float> x = random_floats(static_cast<size_t>(c.ncols) * ntok, rng);
      const Buffer& bx = buffer(x);
      const Buffer& by = buffer(nullptr, static_cast<size_t>(c.nrows) * ntok * 4);
      std::vector<double> terms_of(static_cast<size_t>(c.nrows) * ntok);
      for (uint32_t t = 0; t < ntok; ++t) {
        for (uint32_t r = 0; r < c.nrows; ++r) {
          terms_of[static_cast<size_t>(t) * c.nrows + r] = row_terms(type, owner, w, r, x.data() + static_cast<size_t>(t) * c.ncols, c.ncols);
        }
      }
      for (const bool with_bias : {false, true}) {
        mul_mv(*ctx_, ctx_->immediate(), type, whole(bw), whole(bx), whole(by), with_bias ? whole(bb) : View{}, c.ncols,
               c.nrows, ntok);
        const auto* got = static_cast<const float*>(by.mapped);
        DotCheck check;
        for (uint32_t t = 0; t < ntok; ++t) {
          for (uint32_t r = 0; r < c.nrows; ++r) {
            const float* xt = x.data() + static_cast<size_t>(t) * c.ncols;
            double want = with_bias ? bias[r] : 0.0;
            for (uint32_t i = 0; i < c.ncols; ++i) want += static_cast<double>(w.values[static_cast<size_t>(r) * c.ncols + i]) * xt[i];
            const double terms = terms_of[static_cast<size_t>(t) * c.nrows + r] + (with_bias ? std::fabs(bias[r]) : 0.0);
            check.add(got[static_cast<size_t>(t) * c.nrows + r], want, terms);
          }
        }
        EXPECT_LT(check.worst, DotCheck::bound(c.ncols)) << c.ncols << " x " << c.nrows << ", " << ntok << " tokens"
                                                         << (with_bias ? ", bias" : "");
      }
    }
  }
}

TEST_P(QuantKernels, MulMvRowsAreTheSameInStepsOfAnyTokens) {
  // Each token's row of a step of several tokens bit for bit the product of that token alone (a
  // decode step): a speculative step's verifying rows and a batch's rows then give the one-token
  // step's logits, so greedy text does not depend on where drafts or other sequences joined a step.
  // Few rows (a router, a gate of one row, a recurrent layer's per-head projections) and many.
  const TensorType type = GetParam();
  std::mt19937 rng(static_cast<uint32_t>(type) + 31);
  for (const auto& [ncols, nrows] : {std::pair{1024u, 256u}, {2048u, 32u}, {2048u, 1u}, {512u, 1100u}}) {
    const Weight w = random_weight(type, ncols, nrows, rng);
    const Buffer& bw = buffer(w.bytes);
    for (const uint32_t ntok : {2u, 3u, 5u, 8u}) {
      const std::vector<float> x = random_floats(static_cast<size_t>(ncols) * ntok, rng);
      const Buffer& bx = buffer(x);
      const Buffer& by = buffer(nullptr, static_cast<size_t>(nrows) * ntok * 4);
      const Buffer& b1 = buffer(nullptr, static_cast<size_t>(nrows) * 4);
      mul_mv(*ctx_, ctx_->immediate(), type, whole(bw), whole(bx), whole(by), View{}, ncols, nrows, ntok);
      for (uint32_t t = 0; t < ntok; ++t) {
        mul_mv(*ctx_, ctx_->immediate(), type, whole(bw), View{&bx, static_cast<size_t>(t) * ncols * 4, static_cast<size_t>(ncols) * 4},
               whole(b1), View{}, ncols, nrows, 1);
        EXPECT_EQ(std::memcmp(static_cast<const float*>(by.mapped) + static_cast<size_t>(t) * nrows, b1.mapped, nrows * 4), 0)
            << ncols << " x " << nrows << ", token " << t << " of " << ntok;
      }
    }
  }
}

TEST_P(QuantKernels, MulMvIdMatchesTheDequantizedExperts) {
  // 4 experts, 2 per token, 3 tokens (expert 1 chosen twice, expert 0 never; an expert repeated
  // within a token); x shared per token (gate, up) or one per slot (down); with and without the
  // per-expert bias.
  const TensorType type = GetParam();
  std::mt19937 rng(static_cast<uint32_t>(type) + 23);
  const uint32_t ncols = 512, nrows = 37, n_expert = 4, n_used = 2, ntok = 3;
  const Weight w = random_weight(type, ncols, nrows * n_expert, rng);  // experts' rows back to back
  const std::vector<uint32_t> ids = {3, 1, 2, 2, 1, 3};
  const std::vector<float> bias = random_floats(static_cast<size_t>(nrows) * n_expert, rng);
  const Buffer& bw = buffer(w.bytes);
  const Buffer& bi = buffer(ids);
  const Buffer& bb = buffer(bias);
  const Buffer& by = buffer(nullptr, static_cast<size_t>(nrows) * n_used * ntok * 4);
  for (const bool per_slot : {false, true}) {
    const std::vector<float> x = random_floats(static_cast<size_t>(ncols) * ntok * (per_slot ? n_used : 1), rng);
    const Buffer& bx = buffer(x);
    for (const bool with_bias : {false, true}) {
      mul_mv_id(*ctx_, ctx_->immediate(), type, whole(bw), whole(bi), whole(bx), whole(by),
                with_bias ? whole(bb) : View{}, ncols, nrows, n_expert, n_used, ntok, per_slot);
      const DotCheck check = check_experts(type, w, ids, x, with_bias ? bias.data() : nullptr,
                                           static_cast<const float*>(by.mapped), ncols, nrows, n_expert, n_used, ntok, per_slot, 0.0);
      EXPECT_LT(check.worst, DotCheck::bound(ncols)) << (per_slot ? "x per slot" : "x per token") << (with_bias ? ", bias" : "");
    }
  }
}

// The prefill products on stored weights (mul_mm_q, mul_mm_q_id), with every kernel the device has.
// The portable kernel multiplies the decoded floats in float: DotCheck's bound. The tensor-core one
// rounds each decoded weight and each x to f16 (2^-11 relative each, nearest; a value below f16's
// normal range is off by at most 2^-25 absolute): held to 2^-10 more, relative to the terms plus
// 2^-15 sum |x| (the absolute part as a relative one). A slot of a K-step read from the wrong column
// moves a result by about its magnitude over sqrt(ncols), far above either bound.
std::vector<MulMmKernel> mm_kernels(const Context& ctx) {
  std::vector<MulMmKernel> out{MulMmKernel::Tiled};
  if (mul_mm_kernel(ctx) == MulMmKernel::CoopMatNV) out.push_back(MulMmKernel::CoopMatNV);
  return out;
}

double mm_bound(MulMmKernel k, uint32_t ncols) {
  return DotCheck::bound(ncols) + (k == MulMmKernel::CoopMatNV ? 0x1p-10 : 0.0);
}

// The X operand the kernel reads: x itself (Tiled), or x in f16 (CoopMatNV), converted on the device.
View mm_x(Context& ctx, MulMmKernel k, const Buffer& x, Buffer& x16, uint32_t ncols, uint32_t rows) {
  if (k == MulMmKernel::Tiled) return View{&x, 0, 0};
  Recording rec(ctx, 1);
  mul_mm_convert_x(ctx, rec, View{&x, 0, 0}, View{&x16, 0, 0}, ncols, rows);
  rec.finish();
  rec.submit_and_wait();
  return View{&x16, 0, 0};
}

double abs_sum(const float* x, uint32_t n) {
  double s = 0;
  for (uint32_t i = 0; i < n; ++i) s += std::fabs(static_cast<double>(x[i]));
  return s;
}

// The prompt-product kernels the device runs, the tensor-core one with one and with two K-steps a pass
// (ZINC_VULKAN_MM_STEPS; "" for the portable kernel).
std::vector<std::pair<MulMmKernel, const char*>> mm_kernel_steps(const Context& ctx) {
  std::vector<std::pair<MulMmKernel, const char*>> out;
  for (const MulMmKernel k : mm_kernels(ctx)) {
    if (k == MulMmKernel::CoopMatNV) {
      out.emplace_back(k, "1");
      out.emplace_back(k, "2");
    } else {
      out.emplace_back(k, "");
    }
  }
  return out;
}

TEST_P(QuantKernels, MulMmQMatchesTheDequantizedWeights) {
  // 70 rows (a ragged row tile for both kernels), 1, 70 and 130 tokens (ragged token tiles: 130 is a
  // third tile of 2 for the portable kernel, a second for the tensor-core one), 768 columns (three
  // K-quant blocks: an odd number of 256-element blocks) or, for the smaller blocks, 800 (25 K-steps of
  // 32: a pass of two steps ends on a step of zeros); the output at column 3 of rows of 75 (the rest of
  // Y untouched); with and without a bias. The tensor-core kernel runs one and two K-steps a pass.
  const TensorType type = GetParam();
  std::mt19937 rng(static_cast<uint32_t>(type) + 51);
  const uint32_t ncols = quant::block_size(type) == 256 ? 768 : 800, nrows = 70, y_stride = 75, y_offset = 3;
  const Weight w = random_weight(type, ncols, nrows, rng);
  const auto owner = test::code_bits(type);
  const std::vector<float> bias = random_floats(nrows, rng);
  const Buffer& bw = buffer(w.bytes);
  const Buffer& bb = buffer(bias);
  for (const uint32_t ntok : {1u, 70u, 130u}) {
    const std::vector<float> x = random_floats(static_cast<size_t>(ncols) * ntok, rng);
    const Buffer& bx = buffer(x);
    Buffer& bx16 = buffer(nullptr, mul_mm_scratch_bytes(ncols, ntok));
    Buffer& by = buffer(nullptr, static_cast<size_t>(y_stride) * ntok * 4);
    for (const auto& [k, steps] : mm_kernel_steps(*ctx_)) {
      ScopedEnv pass("ZINC_VULKAN_MM_STEPS", steps);
      const View xv = mm_x(*ctx_, k, bx, bx16, ncols, ntok);
      for (const bool with_bias : {false, true}) {
        // The tensor-core kernel's tiles of 128 rows too (these sizes take 64 by themselves; the
        // codebook types keep 64 where 128 would pass the device's shared memory).
        ScopedEnv rows("ZINC_VULKAN_MM_BM", k == MulMmKernel::CoopMatNV && with_bias ? "128" : "");
        std::fill_n(static_cast<float*>(by.mapped), static_cast<size_t>(y_stride) * ntok, -7.0f);
        mul_mm_q(*ctx_, ctx_->immediate(), k, type, whole(bw), xv, whole(by), with_bias ? whole(bb) : View{}, ncols, nrows,
                 ntok, y_stride, y_offset);
        const auto* got = static_cast<const float*>(by.mapped);
        DotCheck check;
        size_t stray = 0;
        for (uint32_t t = 0; t < ntok; ++t) {
          const float* xt = x.data() + static_cast<size_t>(t) * ncols;
          for (uint32_t c = 0; c < y_stride; ++c) {
            const float g = got[static_cast<size_t>(t) * y_stride + c];
            if (c < y_offset || c >= y_offset + nrows) {
              stray += g != -7.0f;
              continue;
            }
            const uint32_t r = c - y_offset;
            double want = with_bias ? bias[r] : 0.0;
            for (uint32_t i = 0; i < ncols; ++i) want += static_cast<double>(w.values[static_cast<size_t>(r) * ncols + i]) * xt[i];
            const double terms = row_terms(type, owner, w, r, xt, ncols) + (with_bias ? std::fabs(bias[r]) : 0.0) +
                                 (k == MulMmKernel::CoopMatNV ? 0x1p-15 * abs_sum(xt, ncols) : 0.0);
            check.add(g, want, terms);
          }
        }
        EXPECT_LT(check.worst, mm_bound(k, ncols)) << mul_mm_kernel_name(k) << ", " << ntok << " tokens" << (with_bias ? ", bias" : "")
                                                   << (*steps ? ", K-steps a pass: " : "") << steps;
        EXPECT_EQ(stray, 0u) << mul_mm_kernel_name(k) << ": floats of Y outside the product changed";
      }
    }
  }
}

TEST_P(QuantKernels, MulMmQIdMatchesTheDequantizedExperts) {
  // 6 experts, 2 per token, 150 tokens: expert 1 is every token's first choice (150 slots: three
  // tiles of the portable kernel, two of the tensor-core one), the second is one of 2..5 at random,
  // and one token names expert 9 (clamped to 5); expert 0 is never chosen. x shared per token (gate,
  // up) or one per slot (down); with and without the per-expert bias. The route is sorted once per
  // kernel (and tile shape) and read by all four products. The tensor-core kernel runs its 128-token
  // tiles and (ZINC_VULKAN_MOE_NARROW=64: 50 slots an expert) its narrow ones: expert 1's 150 slots
  // in five tiles, the others' ~37 in two, the last of each partial; each with one and two K-steps a pass.
  const TensorType type = GetParam();
  std::mt19937 rng(static_cast<uint32_t>(type) + 61);
  const uint32_t ncols = 256, nrows = 37, n_expert = 6, n_used = 2, ntok = 150;
  const Weight w = random_weight(type, ncols, nrows * n_expert, rng);
  std::vector<uint32_t> ids(static_cast<size_t>(ntok) * n_used);
  std::uniform_int_distribution<uint32_t> pick(2, 5);
  for (uint32_t t = 0; t < ntok; ++t) {
    ids[2 * t] = 1;
    ids[2 * t + 1] = t == 77 ? 9 : pick(rng);
  }
  const std::vector<float> bias = random_floats(static_cast<size_t>(nrows) * n_expert, rng);
  const Buffer& bw = buffer(w.bytes);
  const Buffer& bi = buffer(ids);
  const Buffer& bb = buffer(bias);
  const Buffer& broute = buffer(nullptr, moe_route_bytes(ntok, n_used, n_expert));
  Buffer& by = buffer(nullptr, static_cast<size_t>(nrows) * n_used * ntok * 4);
  struct Run {
    MulMmKernel k;
    const char* narrow;
    const char* steps;
  };
  for (const auto& [k, narrow, steps] : std::vector<Run>{{MulMmKernel::Tiled, "", ""},
                                                          {MulMmKernel::CoopMatNV, "0", "1"},
                                                          {MulMmKernel::CoopMatNV, "0", "2"},
                                                          {MulMmKernel::CoopMatNV, "64", "1"},
                                                          {MulMmKernel::CoopMatNV, "64", "2"}}) {
    if (const auto ks = mm_kernels(*ctx_); std::find(ks.begin(), ks.end(), k) == ks.end()) continue;
    ScopedEnv tiles("ZINC_VULKAN_MOE_NARROW", narrow), pass("ZINC_VULKAN_MM_STEPS", steps);
    moe_sort(*ctx_, ctx_->immediate(), k, whole(bi), whole(broute), ntok, n_used, n_expert);
    for (const bool per_slot : {false, true}) {
      const uint32_t xrows = ntok * (per_slot ? n_used : 1);
      const std::vector<float> x = random_floats(static_cast<size_t>(ncols) * xrows, rng);
      const Buffer& bx = buffer(x);
      Buffer& bx16 = buffer(nullptr, mul_mm_scratch_bytes(ncols, xrows));
      const View xv = mm_x(*ctx_, k, bx, bx16, ncols, xrows);
      for (const bool with_bias : {false, true}) {
        std::fill_n(static_cast<float*>(by.mapped), static_cast<size_t>(nrows) * n_used * ntok, NAN);
        mul_mm_q_id(*ctx_, ctx_->immediate(), k, type, whole(bw), whole(broute), xv, whole(by), with_bias ? whole(bb) : View{},
                    ncols, nrows, n_expert, n_used, ntok, per_slot);
        const DotCheck check = check_experts(type, w, ids, x, with_bias ? bias.data() : nullptr, static_cast<const float*>(by.mapped),
                                             ncols, nrows, n_expert, n_used, ntok, per_slot,
                                             k == MulMmKernel::CoopMatNV ? 0x1p-15 : 0.0);
        EXPECT_LT(check.worst, mm_bound(k, ncols)) << mul_mm_kernel_name(k) << (per_slot ? ", x per slot" : ", x per token")
                                                   << (with_bias ? ", bias" : "") << (std::string(narrow) == "64" ? ", narrow tiles" : "")
                                                   << (*steps ? ", K-steps a pass: " : "") << steps;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(EveryType, QuantKernels, ::testing::ValuesIn(kTypes), type_name);

TEST_F(QuantFixture, RecordedOpsReplayWithOffsetViews) {
  // The executor's path: views at aligned offsets inside shared buffers, the ops recorded once and
  // replayed after the inputs change (an embedding lookup, then a product with the looked-up row).
  std::mt19937 rng(7);
  const TensorType type = TensorType::Q4_K;
  const uint32_t ncols = 512, nrows = 40;
  const Weight emb = random_weight(type, ncols, nrows, rng), w = random_weight(type, ncols, nrows, rng);
  const auto owner = test::code_bits(type);
  const size_t align = ctx_->features().offset_alignment;
  const auto round_up = [&](size_t v) { return (v + align - 1) / align * align; };
  const size_t w_off = round_up(emb.bytes.size()), size_w = w_off + w.bytes.size();
  std::vector<uint8_t> weights(size_w);
  std::memcpy(weights.data(), emb.bytes.data(), emb.bytes.size());
  std::memcpy(weights.data() + w_off, w.bytes.data(), w.bytes.size());
  Buffer& bw = buffer(weights);
  const size_t x_off = align, y_off = round_up(x_off + ncols * 4);
  Buffer& act = buffer(nullptr, y_off + nrows * 4);
  Buffer& bi = buffer(nullptr, 16);
  Recording rec(*ctx_, 2);
  get_rows(*ctx_, rec, type, View{&bw, 0, emb.bytes.size()}, View{&bi, 0, 4}, View{&act, x_off, ncols * 4}, ncols, 1,
           1.0f);
  rec.barrier();
  mul_mv(*ctx_, rec, type, View{&bw, w_off, w.bytes.size()}, View{&act, x_off, ncols * 4}, View{&act, y_off, nrows * 4},
         View{}, ncols, nrows, 1);
  rec.finish();
  for (const uint32_t id : {7u, 31u}) {
    std::memcpy(bi.mapped, &id, 4);
    rec.submit_and_wait();
    const auto* y = reinterpret_cast<const float*>(static_cast<const uint8_t*>(act.mapped) + y_off);
    DotCheck check;
    const float* xv = emb.values.data() + static_cast<size_t>(id) * ncols;
    for (uint32_t r = 0; r < nrows; ++r) {
      double want = 0;
      for (uint32_t i = 0; i < ncols; ++i) want += static_cast<double>(w.values[static_cast<size_t>(r) * ncols + i]) * xv[i];
      check.add(y[r], want, row_terms(type, owner, w, r, xv, ncols));
    }
    EXPECT_LT(check.worst, DotCheck::bound(ncols)) << "token " << id;
  }
}

TEST_F(QuantFixture, DISABLED_MulMvBandwidth) {
  // A benchmark, not a check (run with --gtest_also_run_disabled_tests): decode's product, one token,
  // over 4096 x 4096 weights of each type, copies of it cycled so that the bytes read exceed the L2
  // cache, 64 products per submission; prints the weight bytes read per second (best of 5).
  const uint32_t ncols = 4096, nrows = 4096, reps = 64;
  std::printf("%s\n%-8s %10s %10s\n", ctx_->device_name().c_str(), "type", "us/call", "GB/s");
  std::mt19937 rng(1);
  std::uniform_int_distribution<int> byte(0, 255);
  for (const TensorType type : kTypes) {
    const size_t size = quant::row_size(type, ncols) * nrows;
    const size_t align = ctx_->features().offset_alignment, stride = (size + align - 1) / align * align;
    const size_t copies = std::max<size_t>(1, (size_t{256} << 20) / stride);
    // Finite scales do not matter to the timing: random bytes, with halves kept away from NaN.
    std::vector<uint8_t> bytes(stride);
    for (auto& b : bytes) b = static_cast<uint8_t>(byte(rng) & 0x3b);
    Buffer bw = ctx_->device_buffer(stride * copies + 16);
    for (size_t c = 0; c < copies; ++c) ctx_->upload(bw, c * stride, bytes.data(), bytes.size());
    const std::vector<float> x = random_floats(ncols, rng);
    Buffer& bx = buffer(x);
    Buffer& by = buffer(nullptr, nrows * 4);
    Recording rec(*ctx_, reps);
    for (uint32_t i = 0; i < reps; ++i) {
      mul_mv(*ctx_, rec, type, View{&bw, (i % copies) * stride, size}, whole(bx), whole(by), View{}, ncols, nrows, 1);
      rec.barrier();
    }
    rec.finish();
    rec.submit_and_wait();  // warm-up: pipelines, clocks
    double best = 1e30;
    for (int run = 0; run < 5; ++run) {
      const auto t0 = std::chrono::steady_clock::now();
      rec.submit_and_wait();
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    const double per_call = best / reps;
    std::printf("%-8s %10.1f %10.1f\n", std::string(gguf::tensor_type_name(type)).c_str(), per_call * 1e6,
                static_cast<double>(size) / per_call / 1e9);
    ctx_->release(bw);
  }
}

TEST_F(QuantFixture, UnsupportedTypesAndWidthsAreClearErrors) {
  Buffer& b = buffer(nullptr, 4096);
  const View v = whole(b);
  EXPECT_FALSE(has_quant_kernels(TensorType::IQ2_XXS));
  EXPECT_TRUE(has_quant_kernels(TensorType::MXFP4));
  try {
    mul_mv(*ctx_, ctx_->immediate(), TensorType::IQ2_XXS, v, v, v, View{}, 256, 1, 1);
    FAIL() << "IQ2_XXS accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("IQ2_XXS"), std::string::npos) << e.what();
  }
  EXPECT_THROW(get_rows(*ctx_, ctx_->immediate(), TensorType::F16, v, v, v, 10, 1, 1.0f), Error);  // 10 % 4
  EXPECT_THROW(mul_mm_q(*ctx_, ctx_->immediate(), MulMmKernel::Tiled, TensorType::Q4_K, v, v, v, View{}, 128, 1, 1, 1, 0),
               Error);  // 128 % 256
}

}  // namespace
}  // namespace zinc::backend::vk
