// Quantizers: error bounds on random data, exact reproduction of representable values, and the
// reference rounding of the simple formats on hand-picked inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/error.h"
#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/quant.h"
#include "quant/rounding.h"

namespace zinc::quant {
namespace {

std::vector<float> gaussian(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = g(rng);
  return x;
}

std::vector<float> round_trip(TensorType t, const std::vector<float>& x) {
  std::vector<uint8_t> q(row_size(t, static_cast<int64_t>(x.size())));
  quantize_row(t, x.data(), q.data(), static_cast<int64_t>(x.size()));
  std::vector<float> y(x.size());
  dequantize_row(t, q.data(), y.data(), static_cast<int64_t>(x.size()));
  return y;
}

double rmse(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
  return std::sqrt(s / static_cast<double>(a.size()));
}

struct Bound {
  TensorType type;
  double max_rmse;  // on unit Gaussian data; about a third above the step size / sqrt(12) of each format
};

TEST(Quantize, ErrorOnGaussianDataIsBounded) {
  const auto x = gaussian(256 * 64, 1);
  const Bound bounds[] = {
      {TensorType::F16, 0.0005}, {TensorType::BF16, 0.003}, {TensorType::Q8_0, 0.01},
      {TensorType::Q6_K, 0.025}, {TensorType::Q5_0, 0.06},  {TensorType::Q5_1, 0.06},
      {TensorType::Q5_K, 0.05},  {TensorType::Q4_0, 0.12},  {TensorType::Q4_1, 0.11},
      {TensorType::Q4_K, 0.1},   {TensorType::IQ4_NL, 0.11}, {TensorType::IQ4_XS, 0.11},
      {TensorType::Q3_K, 0.2},   {TensorType::Q2_K, 0.4},   {TensorType::MXFP4, 0.2}};
  for (const auto& [t, bound] : bounds) {
    const double e = rmse(x, round_trip(t, x));
    EXPECT_LT(e, bound) << gguf::tensor_type_name(t);
    EXPECT_GT(e, 0.0) << gguf::tensor_type_name(t);
  }
  EXPECT_EQ(rmse(x, round_trip(TensorType::F32, x)), 0.0);
}

TEST(Quantize, MoreBitsMeanLessError) {
  const auto x = gaussian(256 * 32, 2);
  const double q2 = rmse(x, round_trip(TensorType::Q2_K, x));
  const double q3 = rmse(x, round_trip(TensorType::Q3_K, x));
  const double q4 = rmse(x, round_trip(TensorType::Q4_K, x));
  const double q5 = rmse(x, round_trip(TensorType::Q5_K, x));
  const double q6 = rmse(x, round_trip(TensorType::Q6_K, x));
  const double q8 = rmse(x, round_trip(TensorType::Q8_0, x));
  EXPECT_GT(q2, q3);
  EXPECT_GT(q3, q4);
  EXPECT_GT(q4, q5);
  EXPECT_GT(q5, q6);
  EXPECT_GT(q6, q8);
  // The searched K-quant beats the same-size simple format.
  EXPECT_LT(q4, rmse(x, round_trip(TensorType::Q4_0, x)));
}

TEST(Quantize, HandlesZerosAndOutliers) {
  for (TensorType t : {TensorType::Q4_0, TensorType::Q4_1, TensorType::Q5_0, TensorType::Q5_1, TensorType::Q8_0,
                       TensorType::Q2_K, TensorType::Q3_K, TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K,
                       TensorType::IQ4_NL, TensorType::IQ4_XS, TensorType::MXFP4}) {
    std::vector<float> zeros(256, 0.0f);
    for (float v : round_trip(t, zeros)) ASSERT_EQ(v, 0.0f) << gguf::tensor_type_name(t);
    // One large outlier among small values: the outlier must survive within its block's precision.
    std::vector<float> x(256, 0.01f);
    x[77] = -50.0f;
    const auto y = round_trip(t, x);
    EXPECT_NEAR(y[77], -50.0f, 50.0 * 0.15) << gguf::tensor_type_name(t);
    for (float v : y) ASSERT_TRUE(std::isfinite(v)) << gguf::tensor_type_name(t);
  }
}

TEST(Quantize, RepresentableValuesAreExact) {
  // Values already on a format's grid come back unchanged.
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = static_cast<float>((j % 15) - 7) * 0.25f;  // Q4_0 grid with d = 0.25
  x[3] = -2.0f;                                                                  // the -8 end
  EXPECT_EQ(round_trip(TensorType::Q4_0, x), x);
  std::vector<float> q8(32);
  for (int j = 0; j < 32; ++j) q8[j] = static_cast<float>(j * 8 - 127) * 0.5f;  // max |x| = 127 * 0.5: d = 0.5
  EXPECT_EQ(round_trip(TensorType::Q8_0, q8), q8);
  std::vector<float> f16 = {1.0f, -0.5f, 65504.0f, 0.0f};
  EXPECT_EQ(round_trip(TensorType::F16, f16), f16);
}

TEST(Quantize, ReferenceRoundingOfSimpleFormats) {
  // Q8_0: d = max|x| / 127, codes round half away from zero.
  std::vector<float> x(32, 0.0f);
  x[0] = 127.0f;
  x[1] = 2.5f;
  x[2] = -2.5f;
  x[3] = 0.49f;
  BlockQ8_0 b8{};
  quantize_row(TensorType::Q8_0, x.data(), &b8, 32);
  EXPECT_EQ(fp16_to_f32(b8.d), 1.0f);
  EXPECT_EQ(b8.qs[0], 127);
  EXPECT_EQ(b8.qs[1], 3);
  EXPECT_EQ(b8.qs[2], -3);
  EXPECT_EQ(b8.qs[3], 0);
  // Q4_0: d = (signed value of largest magnitude) / -8, so that value gets code 0.
  std::vector<float> y(32, 0.0f);
  y[5] = 4.0f;
  y[6] = -1.0f;
  BlockQ4_0 b4{};
  quantize_row(TensorType::Q4_0, y.data(), &b4, 32);
  EXPECT_EQ(fp16_to_f32(b4.d), -0.5f);
  EXPECT_EQ(b4.qs[5] & 15, 0);   // 4 / -0.5 = -8 → code 0
  EXPECT_EQ(b4.qs[6] & 15, 10);  // -1 / -0.5 = 2 → code 10
  EXPECT_EQ(b4.qs[0] & 15, 8);   // 0 → code 8
  // MXFP4: exponent floor(log2(max)) - 2 + 127.
  std::vector<float> m(32, 0.0f);
  m[0] = 6.0f;
  m[1] = -0.5f;
  BlockMXFP4 bm{};
  quantize_row(TensorType::MXFP4, m.data(), &bm, 32);
  EXPECT_EQ(bm.e, 127);                  // floor(log2 6) = 2
  EXPECT_EQ(bm.qs[0] & 15, 7);           // 6 = 12 * 0.5
  EXPECT_EQ(bm.qs[1] & 15, 9);           // -0.5 = -1 * 0.5
}

// The activation quantizers' vectorizable rounding (rounding.h) against the libm functions it replaces:
// every multiple of 1/64 in [-130, 130] (all ties included) and random values of every magnitude
// that x·(127/amax) can take.
TEST(Quantize, CodeRoundingMatchesLibm) {
  std::vector<float> values;
  for (int k = -130 * 64; k <= 130 * 64; ++k) values.push_back(static_cast<float>(k) / 64.0f);
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> u(-127.5f, 127.5f);
  for (int k = 0; k < 100000; ++k) values.push_back(u(rng));
  for (float v : {0.5f, -0.5f, 1.5f, -1.5f, 126.5f, -126.5f, 127.49999f, 0.49999997f, -0.49999997f, 1e-30f, -0.0f})
    values.push_back(v);
  for (float v : values) {
    EXPECT_EQ(code_round_even(v), static_cast<float>(std::clamp(std::lrintf(v), -127l, 127l))) << v;
    if (std::fabs(v) <= 127.5f) {
      EXPECT_EQ(code_round_away(v), std::clamp(std::roundf(v), -127.0f, 127.0f)) << v;
    }
  }
  EXPECT_EQ(code_round_even(NAN), -127.0f);
}

TEST(Quantize, AbsMaxSkipsNaNLikeStdMax) {
  std::mt19937 rng(10);
  std::normal_distribution<float> g(0.0f, 3.0f);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<float> x(37);
    for (auto& v : x) v = g(rng);
    if (trial % 5 == 1) x[static_cast<size_t>(trial) % x.size()] = NAN;
    if (trial % 5 == 2) x[static_cast<size_t>(trial) % x.size()] = -INFINITY;
    if (trial % 5 == 3) std::fill(x.begin(), x.end(), -0.0f);
    float expected = 0;
    for (float v : x) expected = std::max(expected, std::fabs(v));
    const float got = abs_max(x.data(), static_cast<int>(x.size()));
    EXPECT_EQ(got, expected) << trial;
    EXPECT_FALSE(std::signbit(got));
  }
}

TEST(Quantize, BadArgumentsAreErrors) {
  std::vector<float> x(100, 1.0f);
  std::vector<uint8_t> out(1024);
  EXPECT_THROW(quantize_row(TensorType::Q4_K, x.data(), out.data(), 100), Error);
  EXPECT_THROW(quantize_row(TensorType::IQ2_XXS, x.data(), out.data(), 256), Error);
}

}  // namespace
}  // namespace zinc::quant
