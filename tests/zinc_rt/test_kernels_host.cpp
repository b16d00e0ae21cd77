// ZINC_RT's kernels (shaders/amdgpu/*.cl) compiled for the host and run by amdgpu_host_run.cpp, each
// workgroup's work-items as fibers of one thread: their results against the CPU backend's, as the ladder's kernel
// rungs check them on an AMD GPU (zinc rt-selftest). What runs here is the kernels' own logic, not
// the AMDGPU compiler's code; without clang-19 or later the kernels are not built and the tests skip.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "amdgpu_host_run.h"
#include "host_kernels.h"
#include "backend/cpu/cpu_ops.h"
#include "gguf/types.h"
#include "quant/dot.h"
#include "quant/fp16.h"
#include "quant/quant.h"

extern "C" {
uint32_t zrt_host_group_id(uint32_t dim);
uint32_t zrt_host_item_id(uint32_t dim);
void zrt_host_barrier();
}

namespace zinc::backend::zinc_rt {
namespace {

using host::kBuilt;

#define SKIP_UNLESS_BUILT() \
  if (!kBuilt) GTEST_SKIP() << "ZINC_RT's kernels were not built (no clang-19 or later with ld.lld: install clang-19 lld-19)"

TEST(ZincRtHostRunner, ItemsMeetAtBarriersEachWorkgroupInTurn) {
  // The runner itself (no kernel needed): each item of a 4x2x1 workgroup writes its slot, and after the
  // barrier reads its neighbour's; a second barrier, then the slots are written again for the next
  // workgroup. Every item of every group of a 3x2 grid, with its ids in each dimension, exactly once.
  constexpr uint32_t kItems = 8;
  uint32_t slot[kItems] = {};
  std::vector<uint32_t> seen(6 * kItems, 0);
  std::vector<int> calls(6 * kItems, 0);
  host::run({3, 2, 1}, {4, 2, 1}, [&] {
    const uint32_t g = zrt_host_group_id(0) + 3 * zrt_host_group_id(1), i = zrt_host_item_id(0) + 4 * zrt_host_item_id(1);
    EXPECT_EQ(zrt_host_group_id(2), 0u);
    EXPECT_EQ(zrt_host_item_id(2), 0u);
    slot[i] = 1000 * g + i;
    zrt_host_barrier();
    seen[g * kItems + i] = slot[(i + 1) % kItems];
    ++calls[g * kItems + i];
    zrt_host_barrier();  // (every item has read before the next workgroup writes)
  });
  for (uint32_t g = 0; g < 6; ++g) {
    for (uint32_t i = 0; i < kItems; ++i) {
      EXPECT_EQ(calls[g * kItems + i], 1) << "group " << g << " item " << i;
      EXPECT_EQ(seen[g * kItems + i], 1000 * g + (i + 1) % kItems) << "group " << g << " item " << i;
    }
  }
}

TEST(ZincRtHostRunner, ItemsMissingABarrierAreAnErrorNotAHang) {
  // Item 0 waits at a barrier the others never reach (a GPU would hang or be undefined): an error naming
  // it, and the runner runs the next kernel afresh.
  EXPECT_THROW(
      {
        try {
          host::run({2, 1, 1}, {64, 1, 1}, [] {
            if (zrt_host_item_id(0) == 0) zrt_host_barrier();
          });
        } catch (const std::logic_error& e) {
          EXPECT_NE(std::string(e.what()).find("63 of 64 ended"), std::string::npos) << e.what();
          throw;
        }
      },
      std::logic_error);
  std::vector<int> calls(2 * 64, 0);
  host::run({2, 1, 1}, {64, 1, 1}, [&] {
    zrt_host_barrier();
    ++calls[zrt_host_group_id(0) * 64 + zrt_host_item_id(0)];
  });
  for (int c : calls) EXPECT_EQ(c, 1);
}

TEST(ZincRtHostKernels, FillIdsWritesEachIdOnceAndNothingPastN) {
  SKIP_UNLESS_BUILT();
  for (const uint32_t n : {1u, 63u, 64u, 1000u}) {
    std::vector<uint32_t> out(n + 70, 0xdeadbeefu);
    host::run({(n + 63) / 64 + 1, 1, 1}, {64, 1, 1}, [&] { fill_ids(out.data(), n); });  // a workgroup past n too
    for (uint32_t i = 0; i < out.size(); ++i) {
      ASSERT_EQ(out[i], i < n ? 3 * i + 1 : 0xdeadbeefu) << "n " << n << " word " << i;
    }
  }
}

TEST(ZincRtHostKernels, RmsNormIsTheCpusNorm) {
  // Widths below, at and past the workgroup of 256, with and without a tail past the last eight (100,
  // 1,000 + 3), the ladder's 4,196, a head of 128 as per-head norms take it, and a row of 7 (only the
  // tail); rows of their own scale, one of tiny values (their squares' sum far below a float's
  // precision of the mean): bit for bit cpu::rms_norm, the output's guard untouched.
  SKIP_UNLESS_BUILT();
  std::mt19937 rng(31);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f), uw(0.5f, 1.5f);
  for (const uint32_t width : {7u, 100u, 128u, 256u, 1003u, 4196u}) {
    const uint32_t rows = 3;
    const float eps = 1e-6f;
    std::vector<float> x(size_t{rows} * width), w(width), want(x.size()), got(x.size() + 16, -7.0f);
    for (uint32_t r = 0; r < rows; ++r)
      for (uint32_t i = 0; i < width; ++i) x[size_t{r} * width + i] = u(rng) * (r == 2 ? 1e-4f : static_cast<float>(r + 1));
    for (auto& v : w) v = uw(rng);
    cpu::rms_norm(x.data(), w.data(), want.data(), width, width, rows, eps, 0.0f);
    host::run({rows, 1, 1}, {256, 1, 1}, [&] { rms_norm(x.data(), w.data(), got.data(), width, eps); });
    int differ = 0;
    for (size_t i = 0; i < want.size(); ++i) differ += got[i] != want[i];
    EXPECT_EQ(differ, 0) << "width " << width;
    for (size_t i = want.size(); i < got.size(); ++i) EXPECT_EQ(got[i], -7.0f) << "width " << width << " guard " << i - want.size();
  }
}

// Rows of floats of several scales, a block of zeros, a NaN and a value at the clamp: n blocks.
std::vector<float> activations(uint32_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(size_t{n} * 256);
  for (size_t i = 0; i < x.size(); ++i) x[i] = nd(rng) * static_cast<float>(1 + i / 256 % 5) * (i / 256 % 3 == 2 ? 1e-3f : 1.0f);
  if (n > 1) std::fill(x.begin() + 256, x.begin() + 512, 0.0f);
  if (n > 2) x[600] = std::nanf("");
  return x;
}

TEST(ZincRtHostKernels, QuantizeQ8KMakesTheCpusCodes) {
  // Byte for byte the CPU's Q8_K blocks (d, codes, sums of 16), a zero block and a NaN included.
  SKIP_UNLESS_BUILT();
  for (const uint32_t n : {1u, 9u}) {
    const std::vector<float> x = activations(n, 40 + n);
    std::vector<uint8_t> want(quant::activation_row_size(gguf::TensorType::Q4_K, 256 * n));
    quant::quantize_activation(gguf::TensorType::Q4_K, x.data(), want.data(), 256 * n);
    ASSERT_EQ(want.size(), size_t{n} * 292);
    std::vector<uint32_t> got(size_t{n} * 73 + 4, 0xdeadbeefu);
    host::run({n, 1, 1}, {64, 1, 1}, [&] { quantize_q8_k(x.data(), got.data()); });
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(reinterpret_cast<const uint8_t*>(got.data())[i], want[i]) << n << " blocks, block " << i / 292 << " byte " << i % 292;
    }
    for (size_t i = size_t{n} * 73; i < got.size(); ++i) EXPECT_EQ(got[i], 0xdeadbeefu) << "guard " << i;
  }
}

// The K-quant products against the CPU's definition: rows the project's quantizer made (for Q4_K,
// scales and mins of all 64 values, so both halves of the packed 6-bit fields are read) times the CPU's
// Q8_K codes of the activations, bit for bit quant::dot_ref, over 1, 8 and 40 blocks (40: more than a
// chunk of 16; odd block counts leave Q6_K's 210-byte rows 2-byte aligned).
void expect_the_cpus_dot_products(gguf::TensorType type, const std::function<void(const uint8_t*, const uint32_t*, float*, uint32_t, uint32_t)>& kernel) {
  std::mt19937 rng(32);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const uint32_t ncols : {256u, 2048u, 10240u, 768u}) {
    const uint32_t nrows = 5;
    const size_t row_bytes = quant::row_size(type, ncols);
    std::vector<float> wf(size_t{nrows} * ncols);
    for (uint32_t r = 0; r < nrows; ++r)
      for (uint32_t c = 0; c < ncols; ++c) wf[size_t{r} * ncols + c] = nd(rng) * (1.0f + static_cast<float>(c % 97) / 16.0f);
    std::vector<uint32_t> wq((nrows * row_bytes + 3) / 4);
    auto* bytes = reinterpret_cast<uint8_t*>(wq.data());
    for (uint32_t r = 0; r < nrows; ++r) quant::quantize_row(type, wf.data() + size_t{r} * ncols, bytes + r * row_bytes, ncols);
    std::vector<float> x = activations(ncols / 256, ncols);
    for (auto& v : x) v = std::isnan(v) ? 1.0f : v;
    std::vector<uint32_t> xq(size_t{ncols} / 256 * 73);
    quant::quantize_activation(type, x.data(), xq.data(), ncols);
    std::vector<float> y(nrows + 4, -7.0f);
    host::run({nrows, 1, 1}, {64, 1, 1}, [&] { kernel(bytes, xq.data(), y.data(), ncols, static_cast<uint32_t>(row_bytes)); });
    for (uint32_t r = 0; r < nrows; ++r) {
      EXPECT_EQ(y[r], quant::dot_ref(type, bytes + r * row_bytes, xq.data(), ncols)) << ncols << " columns, row " << r;
    }
    for (uint32_t r = nrows; r < y.size(); ++r) EXPECT_EQ(y[r], -7.0f) << "guard " << r - nrows;
  }
}

TEST(ZincRtHostKernels, MulMvQ4KIsTheCpusDotProduct) {
  SKIP_UNLESS_BUILT();
  expect_the_cpus_dot_products(gguf::TensorType::Q4_K, [](const uint8_t* w, const uint32_t* xq, float* y, uint32_t ncols, uint32_t row_bytes) {
    mul_mv_q4_k(w, xq, y, ncols, row_bytes);
  });
}

TEST(ZincRtHostKernels, MulMvQ6KIsTheCpusDotProduct) {
  SKIP_UNLESS_BUILT();
  expect_the_cpus_dot_products(gguf::TensorType::Q6_K, [](const uint8_t* w, const uint32_t* xq, float* y, uint32_t ncols, uint32_t row_bytes) {
    mul_mv_q6_k(w, xq, y, ncols, row_bytes);
  });
}

TEST(ZincRtHostKernels, GetRowsAreTheCpusDequantizedRows) {
  // A step's tokens' rows (one twice, the last row of the matrix among them) of Q4_K and Q6_K
  // matrices the project's quantizer made: bit for bit quant::dequantize_row, the output's guard
  // untouched.
  SKIP_UNLESS_BUILT();
  std::mt19937 rng(33);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const auto type : {gguf::TensorType::Q4_K, gguf::TensorType::Q6_K}) {
    const uint32_t ncols = 768, nrows = 7;
    const size_t row_bytes = quant::row_size(type, ncols);
    std::vector<float> wf(size_t{nrows} * ncols);
    for (auto& v : wf) v = nd(rng);
    std::vector<uint8_t> wq(nrows * row_bytes);
    for (uint32_t r = 0; r < nrows; ++r) quant::quantize_row(type, wf.data() + size_t{r} * ncols, wq.data() + r * row_bytes, ncols);
    const std::vector<int32_t> ids = {3, 0, 6, 3};
    std::vector<float> got(ids.size() * ncols + 8, -7.0f), want(ncols);
    const auto kernel = type == gguf::TensorType::Q4_K ? get_rows_q4_k : get_rows_q6_k;
    host::run({static_cast<uint32_t>(ids.size()), 1, 1}, {64, 1, 1},
              [&] { kernel(wq.data(), ids.data(), got.data(), ncols, static_cast<uint32_t>(row_bytes)); });
    for (size_t i = 0; i < ids.size(); ++i) {
      quant::dequantize_row(type, wq.data() + static_cast<size_t>(ids[i]) * row_bytes, want.data(), ncols);
      int differ = 0;
      for (uint32_t c = 0; c < ncols; ++c) differ += got[i * ncols + c] != want[c];
      EXPECT_EQ(differ, 0) << gguf::tensor_type_name(type) << " token " << i;
    }
    for (size_t i = ids.size() * ncols; i < got.size(); ++i) EXPECT_EQ(got[i], -7.0f) << "guard " << i;
  }
}

TEST(ZincRtHostKernels, RopeIsTheCpusRotation) {
  // Both pairings, a whole and a partial rotation (the rest copied), 3 heads of 3 tokens at positions
  // 5..7 and 4,000..4,002, the angles from the CPU's table: bit for bit cpu::rope.
  SKIP_UNLESS_BUILT();
  std::mt19937 rng(34);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const bool neox : {false, true}) {
    for (const auto& [dim, rot] : {std::pair{128u, 128u}, {80u, 64u}}) {
      const uint32_t head_dim = dim, n_rot = rot;  // (copies: clang before 16 lets no lambda capture a structured binding)
      for (const int32_t pos0 : {5, 4000}) {
        const int n_head = 3, n_tok = 3;
        graph::RopeParams p;
        p.base = 1000000.0f;
        std::vector<float> x(static_cast<size_t>(n_tok) * n_head * head_dim), want(x.size()), got(x.size() + 4, -7.0f), cs(static_cast<size_t>(n_tok) * n_rot);
        for (auto& v : x) v = nd(rng);
        for (int t = 0; t < n_tok; ++t) cpu::rope_cos_sin(n_rot, p, nullptr, pos0 + t, cs.data() + static_cast<size_t>(t) * n_rot);
        cpu::rope(x.data(), want.data(), n_tok, n_head, head_dim, n_rot, neox ? graph::RopeMode::NeoX : graph::RopeMode::Normal, p, nullptr, pos0);
        host::run({n_head, n_tok, 1}, {64, 1, 1}, [&] {
          rope(x.data(), cs.data(), got.data(), n_head, head_dim, n_rot, neox ? 1 : 0);
        });
        int differ = 0;
        for (size_t i = 0; i < want.size(); ++i) differ += got[i] != want[i];
        EXPECT_EQ(differ, 0) << (neox ? "neox" : "normal") << " head_dim " << head_dim << " n_rot " << n_rot << " from " << pos0;
        for (size_t i = want.size(); i < got.size(); ++i) EXPECT_EQ(got[i], -7.0f) << "guard " << i;
      }
    }
  }
}

TEST(ZincRtHostKernels, SwigluMatchesTheCpuBackend) {
  // 1,000 elements (a partial last workgroup) of gates over [-20, 20]: within 2e-6 relative of
  // cpu::swiglu (whose vector exponential may differ in the last bits), nothing written past n.
  SKIP_UNLESS_BUILT();
  std::mt19937 rng(35);
  std::uniform_real_distribution<float> u(-20.0f, 20.0f);
  const uint32_t n = 1000;
  std::vector<float> g(n), up(n), want(n), got(n + 300, -7.0f);
  for (auto& v : g) v = u(rng);
  for (auto& v : up) v = u(rng) / 4.0f;
  cpu::swiglu(g.data(), up.data(), want.data(), n);
  host::run({(n + 255) / 256, 1, 1}, {256, 1, 1}, [&] { swiglu(g.data(), up.data(), got.data(), n); });
  int outside = 0;
  for (uint32_t i = 0; i < n; ++i) outside += !(std::fabs(got[i] - want[i]) <= 2e-6f * std::fabs(want[i]) + 1e-30f);
  EXPECT_EQ(outside, 0);
  for (size_t i = n; i < got.size(); ++i) EXPECT_EQ(got[i], -7.0f) << "guard " << i;
}

TEST(ZincRtHostKernels, AddAddsAndWritesNothingPastN) {
  SKIP_UNLESS_BUILT();
  const uint32_t n = 700;
  std::vector<float> a(n), b(n), got(n + 300, -7.0f);
  for (uint32_t i = 0; i < n; ++i) {
    a[i] = static_cast<float>(i) * 0.37f - 50.0f;
    b[i] = 1.0f / static_cast<float>(i + 1);
  }
  host::run({(n + 255) / 256, 1, 1}, {256, 1, 1}, [&] { add(a.data(), b.data(), got.data(), n); });
  for (uint32_t i = 0; i < n; ++i) ASSERT_EQ(got[i], a[i] + b[i]) << i;
  for (size_t i = n; i < got.size(); ++i) EXPECT_EQ(got[i], -7.0f) << "guard " << i;
}

TEST(ZincRtHostKernels, KvStoreWritesTheCpusHalvesAtThePosition) {
  // Row *pos of both caches becomes the rows rounded to half bit for bit as quant::f32_to_fp16 rounds
  // them (ties to even, subnormals, overflow to infinity, signed zeros, a NaN still a NaN); every other
  // row is untouched.
  SKIP_UNLESS_BUILT();
  const uint32_t width = 300, rows = 6;
  std::mt19937 rng(36);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> k(width), v(width);
  for (uint32_t i = 0; i < width; ++i) {
    k[i] = nd(rng) * std::ldexp(1.0f, static_cast<int>(i % 40) - 28);  // 2^-28 .. 2^11: subnormal halves to normal ones
    v[i] = -nd(rng);
  }
  const float specials[] = {65504.0f, 65520.0f, 1e9f, -0.0f, 0.0f, 1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 0x1p-25f, 0x1.8p-25f, 0x1p-26f};
  for (size_t i = 0; i < std::size(specials); ++i) k[i] = specials[i];
  v[3] = std::nanf("");
  v[4] = -INFINITY;
  std::vector<uint16_t> kc(size_t{rows} * width, 0x1234), vc(kc.size(), 0x4321);
  const int32_t pos = 4;
  host::run({(width + 255) / 256, 1, 1}, {256, 1, 1}, [&] { kv_store(k.data(), v.data(), kc.data(), vc.data(), &pos, width); });
  for (uint32_t r = 0; r < rows; ++r) {
    for (uint32_t i = 0; i < width; ++i) {
      const size_t at = size_t{r} * width + i;
      if (r != static_cast<uint32_t>(pos)) {
        ASSERT_EQ(kc[at], 0x1234) << "row " << r;
        ASSERT_EQ(vc[at], 0x4321) << "row " << r;
        continue;
      }
      ASSERT_EQ(kc[at], quant::f32_to_fp16(k[i])) << "key element " << i << " " << k[i];
      if (std::isnan(v[i])) {
        EXPECT_TRUE(std::isnan(quant::fp16_to_f32(vc[at]))) << i;
      } else {
        ASSERT_EQ(vc[at], quant::f32_to_fp16(v[i])) << "value element " << i << " " << v[i];
      }
    }
  }
}

TEST(ZincRtHostKernels, AttentionDecodeIsTheSoftmaxOfTheCache) {
  // One token's heads over a cache of n_kv rows of halves, grouped-query heads (4 over 2 and over 1),
  // head widths 64, 128 and 256 (the second output element of a work-item), key counts within one
  // chunk, at its edge and over several (the running maximum rescaling the sums, a large score in a
  // later chunk): against the same softmax in double over the halves' values, within 2e-5 of the
  // output's scale. Rows past n_kv hold huge values a wrong bound would show.
  SKIP_UNLESS_BUILT();
  std::mt19937 rng(37);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const uint32_t head_dim : {64u, 128u, 256u}) {
    for (const uint32_t n_head_kv : {2u, 1u}) {
      for (const int32_t n_kv : {1, 5, 128, 129, 300}) {
        const uint32_t n_head = 4, kv_width = n_head_kv * head_dim, rows = 320;
        std::vector<float> q(size_t{n_head} * head_dim);
        for (auto& x : q) x = nd(rng);
        std::vector<uint16_t> kc(size_t{rows} * kv_width), vc(kc.size());
        for (uint32_t r = 0; r < rows; ++r) {
          for (uint32_t i = 0; i < kv_width; ++i) {
            const bool past = r >= static_cast<uint32_t>(n_kv);
            const float big = r == 200 ? 4.0f : 1.0f;  // one key far above the rest (in a later chunk)
            kc[size_t{r} * kv_width + i] = quant::f32_to_fp16(past ? 6e4f : nd(rng) * big);
            vc[size_t{r} * kv_width + i] = quant::f32_to_fp16(past ? 6e4f : nd(rng));
          }
        }
        const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
        std::vector<float> got(q.size() + 8, -7.0f);
        host::run({n_head, 1, 1}, {128, 1, 1}, [&] {
          attention_decode(q.data(), kc.data(), vc.data(), got.data(), &n_kv, n_head, n_head_kv, head_dim, kv_width, scale);
        });
        for (uint32_t h = 0; h < n_head; ++h) {
          const uint32_t off = h / (n_head / n_head_kv) * head_dim;
          std::vector<double> s(static_cast<size_t>(n_kv));
          double mx = -1e300, sum = 0;
          for (int32_t j = 0; j < n_kv; ++j) {
            double d = 0;
            for (uint32_t i = 0; i < head_dim; ++i) d += double{q[h * head_dim + i]} * quant::fp16_to_f32(kc[size_t(j) * kv_width + off + i]);
            s[static_cast<size_t>(j)] = d * scale;
            mx = std::max(mx, d * scale);
          }
          for (double& x : s) sum += (x = std::exp(x - mx));
          int outside = 0;
          for (uint32_t i = 0; i < head_dim; ++i) {
            double o = 0;
            for (int32_t j = 0; j < n_kv; ++j) o += s[static_cast<size_t>(j)] * quant::fp16_to_f32(vc[size_t(j) * kv_width + off + i]);
            o /= sum;
            outside += !(std::fabs(got[h * head_dim + i] - o) <= 2e-5);
          }
          EXPECT_EQ(outside, 0) << "head_dim " << head_dim << " kv heads " << n_head_kv << " n_kv " << n_kv << " head " << h;
        }
        for (size_t i = q.size(); i < got.size(); ++i) EXPECT_EQ(got[i], -7.0f) << "guard " << i;
      }
    }
  }
}

}  // namespace
}  // namespace zinc::backend::zinc_rt
