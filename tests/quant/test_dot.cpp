// Dot products and matrix products. The scalar reference is checked against an independent path:
// dequantize the weight row and the quantized activations (dequantization is verified bit-exact
// elsewhere) and sum the products in double precision. Every fast kernel is then checked against the
// scalar reference on random data of awkward lengths.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/system_info.h"
#include "core/thread_pool.h"
#include "quant/blocks.h"
#include "quant/dot.h"
#include "quant/fp16.h"
#include "quant/matmul.h"
#include "quant/packed.h"
#include "quant/quant.h"
#include "quant_codes.h"

namespace zinc::quant {
namespace {

using gguf::TensorType;

const TensorType kTypes[] = {TensorType::F32,  TensorType::F16,  TensorType::BF16,   TensorType::Q4_0,
                             TensorType::Q4_1, TensorType::Q5_0, TensorType::Q5_1,   TensorType::Q8_0,
                             TensorType::Q2_K, TensorType::Q3_K, TensorType::Q4_K,   TensorType::Q5_K,
                             TensorType::Q6_K, TensorType::IQ4_NL, TensorType::IQ4_XS, TensorType::MXFP4};

std::vector<float> random_row(int64_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> g(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = g(rng);
  return v;
}

std::vector<float> dequantized_activation(TensorType w, const std::vector<uint8_t>& act, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  const TensorType a = dot_activation_type(w);
  if (a == TensorType::Q8_1) {
    const auto* b = reinterpret_cast<const BlockQ8_1*>(act.data());
    for (int64_t i = 0; i < n; ++i) out[i] = fp16_to_f32(b[i / 32].d) * b[i / 32].qs[i % 32];
  } else {
    dequantize_row(a, act.data(), out.data(), n);
  }
  return out;
}

struct Case {
  std::vector<uint8_t> w, act;
  double expected;     // Σ w·a in double
  double terms;        // Σ (|scaled code| + |offset|)·|a| (quant_codes.h): the kernels' terms' magnitudes
  double stored_sums;  // Q4_1/Q5_1: Σ |m·s| over blocks, s the activation block's sum stored as fp16
};

Case make_case(TensorType t, int64_t n, std::mt19937& rng) {
  Case c;
  const auto wf = random_row(n, rng);
  const auto xf = random_row(n, rng, 0.5f);
  c.w.resize(row_size(t, n));
  quantize_row(t, wf.data(), c.w.data(), n);
  c.act.resize(activation_row_size(t, n));
  quantize_activation(t, xf.data(), c.act.data(), n);
  std::vector<float> wd(static_cast<size_t>(n));
  dequantize_row(t, c.w.data(), wd.data(), n);
  const auto ad = dequantized_activation(t, c.act, n);
  c.expected = 0;
  for (int64_t i = 0; i < n; ++i) c.expected += static_cast<double>(wd[i]) * ad[i];
  c.terms = test::code_and_offset_terms(t, test::code_bits(t), c.w.data(), ad.data(), n);
  c.stored_sums = 0;
  if (t == TensorType::Q4_1 || t == TensorType::Q5_1) {
    const auto* y = reinterpret_cast<const BlockQ8_1*>(c.act.data());
    const size_t bs = t == TensorType::Q4_1 ? sizeof(BlockQ4_1) : sizeof(BlockQ5_1);
    for (int64_t i = 0; i < n / 32; ++i) {
      uint16_t m;
      std::memcpy(&m, c.w.data() + static_cast<size_t>(i) * bs + 2, 2);
      c.stored_sums += std::fabs(static_cast<double>(fp16_to_f32(m)) * fp16_to_f32(y[i].s));
    }
  }
  return c;
}

TEST(Dot, ReferenceMatchesDequantizedProducts) {
  std::mt19937 rng(3);
  for (TensorType t : kTypes) {
    for (int64_t blocks : {1, 3, 8}) {
      const int64_t n = blocks * 256;
      const Case c = make_case(t, n, rng);
      const double got = dot_ref(t, c.w.data(), c.act.data(), n);
      // The reference's rounding (quant_codes.h), and for Q4_1/Q5_1 the activation block sums it reads,
      // stored as fp16 (within 2^-11 of the exact sum), times the block's offset.
      const double tol = test::dot_rounding_bound(t, n, c.terms) + 0x1p-11 * c.stored_sums;
      EXPECT_NEAR(got, c.expected, tol) << gguf::tensor_type_name(t) << " n=" << n;
    }
  }
}

TEST(Dot, FastKernelsMatchTheReferenceOnAwkwardLengths) {
  std::mt19937 rng(4);
  for (TensorType t : kTypes) {
    const DotKernel k = dot_kernel(t);
    for (int64_t blocks : {1, 2, 3, 5, 7, 9, 16, 33}) {
      // Block formats: whole blocks; float formats: lengths that are not multiples of any vector width.
      const int64_t len = block_size(t) == 1 ? blocks * 7 + 1 : blocks * block_size(t);
      const Case c = make_case(t, len, rng);
      const double ref = dot_ref(t, c.w.data(), c.act.data(), len);
      const double got = k.fn(c.w.data(), c.act.data(), len);
      EXPECT_NEAR(got, ref, 2 * test::dot_rounding_bound(t, len, c.terms)) << gguf::tensor_type_name(t) << " " << k.isa << " n=" << len;
    }
  }
}

// Σ|w_i·a_i| of a weight row against an activation row's codes: the scale float summation errors
// are measured against.
double magnitude(TensorType t, const uint8_t* w, const uint8_t* act, int64_t n) {
  std::vector<float> wd(static_cast<size_t>(n));
  dequantize_row(t, w, wd.data(), n);
  const auto ad = dequantized_activation(t, std::vector<uint8_t>(act, act + activation_row_size(t, n)), n);
  double m = 0;
  for (int64_t i = 0; i < n; ++i) m += std::fabs(static_cast<double>(wd[static_cast<size_t>(i)]) * ad[static_cast<size_t>(i)]);
  return m;
}

// Two kernels that sum the same float terms in different orders: each is within (L + 8)·u of the
// terms' magnitudes, where L is its longest chain of float additions, at most one per block (one per
// element for float weights), and 8 covers the sums across vector lanes (Higham §4.2, u = 2^-24).
double order_bound(TensorType t, int64_t n, double mag) {
  return 2.0 * (static_cast<double>(n / block_size(t)) + 8.0) * 0x1p-24 * mag;
}

TEST(Dot, MatmulMatchesPerRowDots) {
  std::mt19937 rng(5);
  ThreadPool pool(3);
  for (TensorType t : {TensorType::Q4_0, TensorType::Q4_K, TensorType::Q6_K, TensorType::Q8_0, TensorType::F16}) {
    const int64_t rows = 37, cols = 512, tokens = 5;
    std::vector<uint8_t> w(row_size(t, cols) * rows);
    for (int64_t r = 0; r < rows; ++r) {
      const auto v = random_row(cols, rng);
      quantize_row(t, v.data(), w.data() + r * row_size(t, cols), cols);
    }
    const auto x = random_row(cols * tokens, rng);
    std::vector<float> y(static_cast<size_t>(rows * tokens)), yv(static_cast<size_t>(rows));
    matmul(t, w.data(), rows, cols, x.data(), tokens, y.data(), pool);
    std::vector<uint8_t> act(activation_row_size(t, cols));
    for (int64_t tok = 0; tok < tokens; ++tok) {
      quantize_activation(t, x.data() + tok * cols, act.data(), cols);
      for (int64_t r = 0; r < rows; ++r) {
        const uint8_t* wr = w.data() + r * row_size(t, cols);
        const float ref = dot_ref(t, wr, act.data(), cols);
        EXPECT_NEAR(y[tok * rows + r], ref, order_bound(t, cols, magnitude(t, wr, act.data(), cols))) << gguf::tensor_type_name(t);
      }
    }
    matvec(t, w.data(), rows, cols, x.data(), yv.data(), pool);
    quantize_activation(t, x.data(), act.data(), cols);
    for (int64_t r = 0; r < rows; ++r) {
      EXPECT_NEAR(yv[r], y[r], order_bound(t, cols, magnitude(t, w.data() + r * row_size(t, cols), act.data(), cols)));
    }
  }
}

// Over several tokens, matmul runs tile kernels (kDotTileRows weight rows × kDotTileTokens tokens per
// call) where the type has them, and the single-row kernel for the rows and tokens left over (odd row
// counts, token counts that are not multiples of kDotTileTokens). Every token must get what matvec
// gives it, up to float summation order.
TEST(Dot, MatmulOverTokensMatchesPerTokenMatvec) {
  std::mt19937 rng(6);
  ThreadPool pool(2);
  for (TensorType t : {TensorType::Q4_0, TensorType::Q5_0, TensorType::Q8_0, TensorType::IQ4_NL, TensorType::Q4_K,
                       TensorType::Q5_K, TensorType::Q6_K, TensorType::Q3_K, TensorType::F16}) {
    const int64_t cols = 512;
    for (int64_t rows : {37, 64}) {
      std::vector<uint8_t> w(row_size(t, cols) * rows);
      for (int64_t r = 0; r < rows; ++r) {
        const auto v = random_row(cols, rng);
        quantize_row(t, v.data(), w.data() + r * row_size(t, cols), cols);
      }
      for (int64_t tokens : {5, 8, 13}) {
        const auto x = random_row(cols * tokens, rng);
        std::vector<float> y(static_cast<size_t>(rows * tokens)), yv(static_cast<size_t>(rows));
        matmul(t, w.data(), rows, cols, x.data(), tokens, y.data(), pool);
        std::vector<uint8_t> act(activation_row_size(t, cols));
        for (int64_t tok = 0; tok < tokens; ++tok) {
          matvec(t, w.data(), rows, cols, x.data() + tok * cols, yv.data(), pool);
          quantize_activation(t, x.data() + tok * cols, act.data(), cols);
          for (int64_t r = 0; r < rows; ++r) {
            const double mag = magnitude(t, w.data() + r * row_size(t, cols), act.data(), cols);
            ASSERT_NEAR(y[tok * rows + r], yv[r], order_bound(t, cols, mag))
                << gguf::tensor_type_name(t) << " rows=" << rows << " tokens=" << tokens << " token " << tok << " row " << r;
          }
        }
      }
    }
  }
}

// Packed weights (packed.h) against the scalar reference, for every packed type, token counts below,
// at and above a tile (and above a prefill chunk), several row groups. The packed kernels sum in float
// once per sub-block (16 or 32 elements): the bound counts one addition per 16 elements.
TEST(Dot, PackedMatmulMatchesTheReference) {
  std::mt19937 rng(7);
  ThreadPool pool(2);
  int ran = 0;
  for (TensorType t : {TensorType::Q8_0, TensorType::Q4_0, TensorType::IQ4_NL, TensorType::MXFP4, TensorType::Q4_K, TensorType::Q5_K, TensorType::IQ4_XS, TensorType::Q6_K,
                       TensorType::Q2_K, TensorType::Q3_K}) {
    for (int64_t cols : {256, 768}) {
      const int64_t rows = 48;
      if (!can_pack(t, rows, cols)) continue;
      ++ran;
      EXPECT_FALSE(can_pack(t, rows + 8, cols));
      std::vector<uint8_t> w(row_size(t, cols) * rows);
      for (int64_t r = 0; r < rows; ++r) {
        const auto v = random_row(cols, rng);
        quantize_row(t, v.data(), w.data() + r * row_size(t, cols), cols);
      }
      if (t == TensorType::Q8_0) {
        // Codes of −128 (other quantizers write them; ours stop at −127) in every third row.
        for (int64_t r = 0; r < rows; r += 3) {
          auto* blocks = reinterpret_cast<BlockQ8_0*>(w.data() + r * row_size(t, cols));
          for (int64_t i = 0; i < cols / 32; ++i) blocks[i].qs[(r + i) % 32] = -128;
        }
      }
      const PackedMatrix packed(t, w.data(), rows, cols, pool);
      for (int64_t tokens : {1, 3, 8, 9, 21, 70}) {
        const auto x = random_row(cols * tokens, rng);
        std::vector<float> y(static_cast<size_t>(rows * tokens), NAN);
        matmul_packed(packed.view(), x.data(), tokens, y.data(), pool);
        std::vector<uint8_t> act(activation_row_size(t, cols));
        for (int64_t tok = 0; tok < tokens; ++tok) {
          quantize_activation(t, x.data() + tok * cols, act.data(), cols);
          for (int64_t r = 0; r < rows; ++r) {
            const uint8_t* wr = w.data() + r * row_size(t, cols);
            const double bound = 2.0 * (static_cast<double>(cols) / 16 + 8.0) * 0x1p-24 * magnitude(t, wr, act.data(), cols);
            ASSERT_NEAR(y[tok * rows + r], dot_ref(t, wr, act.data(), cols), bound)
                << gguf::tensor_type_name(t) << " cols=" << cols << " tokens=" << tokens << " token " << tok << " row " << r;
          }
        }
      }
      // A token's products do not depend on the tile it runs in (one token alone, or among others):
      // prefill in chunks and decode token by token give the same numbers.
      {
        const int64_t tokens = 11;
        const auto x = random_row(cols * tokens, rng);
        std::vector<float> all(static_cast<size_t>(rows * tokens)), one(static_cast<size_t>(rows));
        matmul_packed(packed.view(), x.data(), tokens, all.data(), pool);
        for (int64_t tok = 0; tok < tokens; ++tok) {
          matmul_packed(packed.view(), x.data() + tok * cols, 1, one.data(), pool);
          for (int64_t r = 0; r < rows; ++r) ASSERT_EQ(one[r], all[tok * rows + r]) << gguf::tensor_type_name(t) << " token " << tok;
        }
      }
      // A slice of the packed rows (one expert of a stacked tensor) is those rows' product.
      const auto x = random_row(cols * 2, rng);
      std::vector<float> all(static_cast<size_t>(rows * 2)), part(static_cast<size_t>(16 * 2));
      matmul_packed(packed.view(), x.data(), 2, all.data(), pool);
      matmul_packed(packed.view().slice(32, 16), x.data(), 2, part.data(), pool);
      for (int tok = 0; tok < 2; ++tok)
        for (int r = 0; r < 16; ++r) EXPECT_EQ(part[tok * 16 + r], all[tok * rows + 32 + r]);
      // Products given one key quantize x once (q, k and v; gate and up): the same numbers as alone,
      // and the codes of the first call serve the second even where x has changed since (the caller's
      // promise broken on purpose: that is how the reuse shows); another key quantizes again.
      {
        const int64_t tokens = 20;
        auto xk = random_row(cols * tokens, rng);
        std::vector<float> lo_alone(static_cast<size_t>(16 * tokens)), hi_alone(lo_alone), lo(lo_alone), hi(lo_alone);
        matmul_packed(packed.view().slice(0, 16), xk.data(), tokens, lo_alone.data(), pool);
        matmul_packed(packed.view().slice(32, 16), xk.data(), tokens, hi_alone.data(), pool);
        const uint64_t key = 0x5eed00000001ull + static_cast<uint64_t>(ran);
        matmul_packed(packed.view().slice(0, 16), xk.data(), tokens, lo.data(), pool, key);
        for (float& v : xk) v = -v;
        matmul_packed(packed.view().slice(32, 16), xk.data(), tokens, hi.data(), pool, key);
        EXPECT_EQ(lo, lo_alone) << gguf::tensor_type_name(t);
        EXPECT_EQ(hi, hi_alone) << gguf::tensor_type_name(t) << ": the second product quantized x again";
        matmul_packed(packed.view().slice(32, 16), xk.data(), tokens, hi.data(), pool, key + 1);
        for (size_t i = 0; i < hi.size(); ++i) ASSERT_NEAR(hi[i], -hi_alone[i], 1e-3f * (1.0f + std::fabs(hi_alone[i]))) << i;
      }
    }
  }
  if (ran == 0) GTEST_SKIP() << "this CPU (or ZINC_CPU_ISA) runs no packed kernels (" << dot_isa_in_use() << ")";
}

// Prompts' Q8_0 and Q4_K products on AMX tiles (16 tokens at a time) give bit for bit the AVX-512 VNNI
// tiles' numbers: each call against the VNNI kernel on the same packed rows and activation blocks, for
// rows of 1 to 5 blocks and more (the tile's pipeline starts and drains within a few blocks or
// sub-blocks), with Q8_0 codes of −128 and activations at both ends of the code range and zero; and
// through matmul_packed, a prompt of 40 tokens (two AMX tiles and 8 tokens on VNNI) equals its tokens'
// products one by one.
TEST(Dot, PackedAmxTilesEqualTheVnniTiles) {
  if (!packed_amx_in_use(TensorType::Q8_0)) {
    GTEST_SKIP() << "no AMX here (the CPU lacks AMX-INT8, the OS did not grant the tile state, ZINC_CPU_ISA is not avx512, or "
                    "ZINC_CPU_AMX=0; kernels in use: "
                 << dot_isa_in_use() << ")";
  }
  EXPECT_EQ(packed_tile_amx(TensorType::Q6_K), nullptr);
  std::mt19937 rng(11);
  ThreadPool pool(2);
  for (TensorType type : {TensorType::Q8_0, TensorType::Q4_K}) {
    ASSERT_TRUE(packed_amx_in_use(type)) << gguf::tensor_type_name(type);
    const PackedTileFn amx = packed_tile_amx(type), vnni = packed_tile_avx512(type, 8);
    ASSERT_NE(amx, nullptr);
    ASSERT_NE(vnni, nullptr);
    const int64_t bs = block_size(type);
    for (int64_t blocks : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{4}, int64_t{5}, 48 / (bs / 32)}) {
      const int64_t rows = 32, cols = blocks * bs;
      std::vector<uint8_t> w(row_size(type, cols) * rows);
      for (int64_t r = 0; r < rows; ++r) {
        const auto v = random_row(cols, rng);
        auto* row = w.data() + r * row_size(type, cols);
        quantize_row(type, v.data(), row, cols);
        if (type == TensorType::Q8_0) {
          auto* b = reinterpret_cast<BlockQ8_0*>(row);
          for (int64_t i = 0; i < blocks; ++i) b[i].qs[(r + 3 * i) % 32] = -128;
        }
      }
      const PackedMatrix packed(type, w.data(), rows, cols, pool);
      const size_t arow = packed_activation_row_size(type, cols);
      std::vector<uint8_t> act(arow * kAmxTokens);
      for (int t = 0; t < kAmxTokens; ++t) {
        auto x = random_row(cols, rng, t % 5 == 0 ? 1000.0f : 1.0f);
        if (t == 3) std::fill(x.begin(), x.end(), 0.0f);  // a zero row: scale 0
        if (t == 4) for (int64_t e = 0; e < cols; ++e) x[e] = e % 2 ? 1.0f : -1.0f;  // codes of ±127
        quantize_packed_activation(type, x.data(), act.data() + t * arow, cols);
      }
      for (int64_t g = 0; g < rows / kPackRows; ++g) {
        const uint8_t* wg = packed.view().data + static_cast<size_t>(g) * packed_group_size(type, cols);
        std::vector<float> got(kAmxTokens * kPackRows, NAN), want(kAmxTokens * kPackRows, NAN);
        amx(wg, cols, act.data(), arow, got.data(), kPackRows);
        vnni(wg, cols, act.data(), arow, want.data(), kPackRows);
        vnni(wg, cols, act.data() + 8 * arow, arow, want.data() + 8 * kPackRows, kPackRows);
        for (size_t k = 0; k < got.size(); ++k)
          ASSERT_EQ(std::bit_cast<uint32_t>(got[k]), std::bit_cast<uint32_t>(want[k]))
              << gguf::tensor_type_name(type) << " cols=" << cols << " group " << g << " token " << k / kPackRows << " row " << k % kPackRows;
      }
    }
    const int64_t rows = 48, cols = 768, tokens = 40;
    std::vector<uint8_t> w(row_size(type, cols) * rows);
    for (int64_t r = 0; r < rows; ++r) {
      const auto v = random_row(cols, rng);
      quantize_row(type, v.data(), w.data() + r * row_size(type, cols), cols);
    }
    const PackedMatrix packed(type, w.data(), rows, cols, pool);
    const auto x = random_row(cols * tokens, rng);
    std::vector<float> all(static_cast<size_t>(rows * tokens)), one(static_cast<size_t>(rows));
    matmul_packed(packed.view(), x.data(), tokens, all.data(), pool);
    for (int64_t tok = 0; tok < tokens; ++tok) {
      matmul_packed(packed.view(), x.data() + tok * cols, 1, one.data(), pool);
      for (int64_t r = 0; r < rows; ++r) ASSERT_EQ(one[r], all[tok * rows + r]) << gguf::tensor_type_name(type) << " token " << tok << " row " << r;
    }
  }
}

// The packed kernels' activation blocks hold exactly quantize_activation()'s codes and scales, with
// the sums of their codes: random rows, rows with ties at ±0.5 (after scaling), zeros, NaN and an
// infinity.
TEST(Dot, PackedActivationsHoldTheQuantizersCodes) {
  std::mt19937 rng(11);
  for (TensorType t : {TensorType::Q8_0, TensorType::Q4_K}) {
    const int64_t n = 512;
    std::vector<std::vector<float>> rows;
    for (int k = 0; k < 4; ++k) rows.push_back(random_row(n, rng));
    std::vector<float> ties(n);
    for (int64_t i = 0; i < n; ++i) ties[i] = (i % 32 == 0) ? 127.0f : static_cast<float>(i % 255 - 127) + 0.5f;
    rows.push_back(ties);
    std::vector<float> special = random_row(n, rng);
    for (int64_t i = 0; i < 32; ++i) special[i] = 0.0f;
    special[40] = NAN;
    special[300] = INFINITY;
    special[301] = -2.5f;
    rows.push_back(special);
    for (size_t k = 0; k < rows.size(); ++k) {
      std::vector<uint8_t> want(activation_row_size(t, n)), got(packed_activation_row_size(t, n));
      quantize_activation(t, rows[k].data(), want.data(), n);
      quantize_packed_activation(t, rows[k].data(), got.data(), n);
      if (t == TensorType::Q8_0) {
        const auto* w = reinterpret_cast<const BlockQ8_0*>(want.data());
        const auto* g = reinterpret_cast<const BlockQ8_0P*>(got.data());
        for (int64_t i = 0; i < n / 32; ++i) {
          int32_t sum = 0;
          for (int e = 0; e < 32; ++e) {
            ASSERT_EQ(g[i].qs[e], w[i].qs[e]) << "row " << k << " block " << i << " element " << e;
            sum += w[i].qs[e];
          }
          ASSERT_EQ(g[i].d, fp16_to_f32(w[i].d)) << "row " << k << " block " << i;
          ASSERT_EQ(g[i].neg_sum128, -128 * sum) << "row " << k << " block " << i;
        }
      } else {
        const auto* w = reinterpret_cast<const BlockQ8_K*>(want.data());
        const auto* g = reinterpret_cast<const BlockQ8_KP*>(got.data());
        for (int64_t i = 0; i < n / 256; ++i) {
          ASSERT_EQ(g[i].d, w[i].d) << "row " << k << " block " << i;
          for (int e = 0; e < 256; ++e) ASSERT_EQ(g[i].qs[e], w[i].qs[e]) << "row " << k << " block " << i << " element " << e;
          for (int s = 0; s < 16; ++s) ASSERT_EQ(g[i].bsums[s], w[i].bsums[s]) << "row " << k << " block " << i;
          for (int s = 0; s < 8; ++s) ASSERT_EQ(g[i].bsum32[s], w[i].bsums[2 * s] + w[i].bsums[2 * s + 1]) << "row " << k << " block " << i;
        }
      }
    }
  }
}

TEST(ThreadPool, CoversEveryIndexOnceAndRethrows) {
  ThreadPool pool(4);
  for (int64_t n : {1, 3, 4, 5, 1000}) {
    std::vector<int> hits(static_cast<size_t>(n), 0);
    pool.parallel_for(n, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[i]++;
    });
    for (int h : hits) ASSERT_EQ(h, 1);
  }
  EXPECT_THROW(pool.parallel_for(10, [](int64_t b, int64_t) {
    if (b > 0) throw std::runtime_error("boom");
  }), std::runtime_error);
  int after = 0;
  pool.parallel_for(1, [&](int64_t, int64_t) { after = 1; });  // still usable
  EXPECT_EQ(after, 1);
}

}  // namespace
}  // namespace zinc::quant
