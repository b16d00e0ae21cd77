// The Vulkan matrix-matrix product (vk_gemm.h's mul_mm_q) on F16 weights against a float64 product of
// the same weights and float activations (the graph's Op::MatMul: out[t] = W · x[t]), over ragged
// tiles, output column ranges and view offsets, with every kernel the device has (the other weight
// types: test_vk_quant.cpp). ZINC_TEST_VULKAN_BENCH=1 adds a throughput table.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "backend/vulkan/vk_gemm.h"
#include "core/error.h"
#include "quant/fp16.h"
#include "vk_test_util.h"

namespace zinc::backend::vk {
namespace {

class VulkanGemm : public VulkanTest {
 protected:
  // The kernels to test here: the portable one always, the tensor-core one where the device has it.
  std::vector<MulMmKernel> kernels() const {
    std::vector<MulMmKernel> out{MulMmKernel::Tiled};
    if (mul_mm_kernel(*ctx_) == MulMmKernel::CoopMatNV) out.push_back(MulMmKernel::CoopMatNV);
    return out;
  }
};

struct Shape {
  uint32_t ncols, nrows, n_tokens, y_stride, y_offset;
};

constexpr float kUntouched = -12345.0f;  // Y's value wherever the product must not write

// One product's operands and its float64 reference: W rounded to f16, X float, and (for the
// tensor-core kernel, which rounds X to f16) the reference with X rounded too.
struct Problem {
  Shape s;
  std::vector<uint16_t> w;  // (nrows, ncols) f16 bits: two to a uint, the even column low
  std::vector<float> x;     // (n_tokens, ncols)
  std::vector<double> want, want_x16, mag;  // (n_tokens, nrows); mag: sum of |W[r][c] X[t][c]|

  Problem(Shape shape, std::mt19937& rng) : s(shape) {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    w.resize(size_t{s.nrows} * s.ncols);
    x.resize(size_t{s.n_tokens} * s.ncols);
    for (auto& v : w) v = quant::f32_to_fp16(nd(rng));
    for (auto& v : x) v = nd(rng);
    std::vector<double> wf(w.size()), xf(x.size()), xh(x.size());
    for (size_t i = 0; i < w.size(); ++i) wf[i] = quant::fp16_to_f32(w[i]);
    for (size_t i = 0; i < x.size(); ++i) {
      xf[i] = x[i];
      xh[i] = quant::fp16_to_f32(quant::f32_to_fp16(x[i]));
    }
    want.assign(size_t{s.n_tokens} * s.nrows, 0.0);
    want_x16 = want;
    mag = want;
    for (uint32_t t = 0; t < s.n_tokens; ++t) {
      for (uint32_t r = 0; r < s.nrows; ++r) {
        const double* wr = &wf[size_t{r} * s.ncols];
        const size_t xo = size_t{t} * s.ncols, o = size_t{t} * s.nrows + r;
        for (uint32_t c = 0; c < s.ncols; ++c) {
          want[o] += wr[c] * xf[xo + c];
          want_x16[o] += wr[c] * xh[xo + c];
          mag[o] += std::fabs(wr[c] * xf[xo + c]);
        }
      }
    }
  }
};

// Device buffers of a problem, each view `pad` bytes into its buffer; Y holds one token row more than
// the product writes, all kUntouched.
struct Operands {
  Context& ctx;
  Buffer w, x, y, scratch;
  View vw, vx, vy, vs;
  size_t y_floats;

  Operands(Context& c, const Problem& p) : ctx(c) {
    const size_t pad = ctx.features().offset_alignment;
    const size_t wb = p.w.size() * 2, xb = p.x.size() * 4, sb = std::max<size_t>(mul_mm_scratch_bytes(p.s.ncols, p.s.n_tokens), 16);
    y_floats = size_t{p.s.n_tokens + 1} * p.s.y_stride;
    w = ctx.host_buffer(pad + wb);
    x = ctx.host_buffer(pad + xb);
    y = ctx.host_buffer(pad + y_floats * 4);
    scratch = ctx.host_buffer(pad + sb);
    std::memcpy(static_cast<uint8_t*>(w.mapped) + pad, p.w.data(), wb);
    std::memcpy(static_cast<uint8_t*>(x.mapped) + pad, p.x.data(), xb);
    std::fill_n(reinterpret_cast<float*>(static_cast<uint8_t*>(y.mapped) + pad), y_floats, kUntouched);
    vw = View{&w, pad, wb};
    vx = View{&x, pad, xb};
    vy = View{&y, pad, y_floats * 4};
    vs = View{&scratch, pad, sb};
  }
  ~Operands() {
    ctx.release(w);
    ctx.release(x);
    ctx.release(y);
    ctx.release(scratch);
  }
  Operands(const Operands&) = delete;
  Operands& operator=(const Operands&) = delete;
  const float* got() const { return reinterpret_cast<const float*>(static_cast<const uint8_t*>(y.mapped) + vy.offset); }
};

// Records the product of an F16 weight: X converted to f16 first (then a barrier) for the tensor-core
// kernel, which reads it so.
void product(Context& ctx, Dispatcher& d, MulMmKernel k, View w, View x, View y, View x16, const Shape& s) {
  if (k == MulMmKernel::CoopMatNV) {
    mul_mm_convert_x(ctx, d, x, x16, s.ncols, s.n_tokens);
    d.barrier();
  }
  mul_mm_q(ctx, d, k, gguf::TensorType::F16, w, k == MulMmKernel::CoopMatNV ? x16 : x, y, View{}, s.ncols, s.nrows,
           s.n_tokens, s.y_stride, s.y_offset);
}

// Worst |got - want| / sum |terms| over the product, and whether every other float of Y is untouched.
struct Verdict {
  double worst = 0, worst_x16 = 0;
  size_t stray = 0;  // floats outside the product that changed
  uint32_t ncols = 0;  // terms per sum
};

Verdict judge(const Problem& p, const float* got, size_t y_floats) {
  Verdict v;
  v.ncols = p.s.ncols;
  const Shape& s = p.s;
  for (size_t i = 0; i < y_floats; ++i) {
    const size_t t = i / s.y_stride, col = i % s.y_stride;
    if (t < s.n_tokens && col >= s.y_offset && col < s.y_offset + s.nrows) {
      const size_t o = t * s.nrows + (col - s.y_offset);
      v.worst = std::max(v.worst, std::fabs(got[i] - p.want[o]) / (p.mag[o] + 1e-30));
      v.worst_x16 = std::max(v.worst_x16, std::fabs(got[i] - p.want_x16[o]) / (p.mag[o] + 1e-30));
      if (std::isnan(got[i])) v.worst = v.worst_x16 = INFINITY;
    } else if (std::memcmp(&got[i], &kUntouched, 4) != 0) {
      ++v.stray;
    }
  }
  return v;
}

// The products of f16 weights and x are exact in float; what remains is the float sum of ncols terms,
// at most (ncols + 4)·u of the terms' magnitudes in any order (Higham §4.2, u = 2^-24; the 4 covers
// the final additions across lanes). The tensor-core kernel first rounds x to f16: 2^-11 relative per
// element with nearest-even, up to 2^-10 if the device rounds otherwise; so against its own reference
// (x rounded on the host) and against the float one it is held to 2^-10 + (ncols + 4)·u. A missing or
// repeated block moves a result by about the magnitude divided by the blocks, far above either.
void expect_close(MulMmKernel k, const Verdict& v, const char* what) {
  const double sum_bound = (v.ncols + 4.0) * 0x1p-24;
  if (k == MulMmKernel::Tiled) {
    EXPECT_LT(v.worst, sum_bound) << what;
  } else {
    EXPECT_LT(v.worst_x16, 0x1p-10 + sum_bound) << what;
    EXPECT_LT(v.worst, 0x1p-10 + sum_bound) << what;
  }
  EXPECT_EQ(v.stray, 0u) << what << ": floats of Y outside the product changed";
}

TEST_F(VulkanGemm, ProductMatchesFloat64OnRaggedTilesAndColumnRanges) {
  std::printf("mul_mm picks %s on %s\n", mul_mm_kernel_name(mul_mm_kernel(*ctx_)), ctx_->device_name().c_str());
  std::mt19937 rng(11);
  // 200 rows: a partial last tile for both kernels; 1, 7, 130 tokens: partial token tiles (130: a
  // third tile of 2 for the tiled kernel, a second of 2 for the tensor-core one); 96 columns: an odd
  // number of the tensor-core kernel's K-steps (its double buffer ends on the other half).
  const Shape shapes[] = {{256, 200, 1, 200, 0},  {256, 200, 7, 200, 0},  {256, 200, 64, 331, 17},
                          {256, 200, 130, 200, 0}, {96, 129, 33, 300, 171}, {512, 64, 128, 64, 0}};
  for (const Shape& s : shapes) {
    const Problem p(s, rng);
    for (MulMmKernel k : kernels()) {
      // The tensor-core kernel in both of its tile heights.
      for (const char* bm : k == MulMmKernel::CoopMatNV ? std::vector<const char*>{"64", "128", "64w", "128w"}
                                                          : std::vector<const char*>{""}) {
        // "w": 8 subgroups (the default), else 4.
        ScopedEnv rows("ZINC_VULKAN_MM_BM", bm), warps("ZINC_VULKAN_MM_WARPS", *bm ? (std::string(bm).ends_with("w") ? "8" : "4") : "");
        Operands o(*ctx_, p);
        product(*ctx_, ctx_->immediate(), k, o.vw, o.vx, o.vy, o.vs, s);
        const Verdict v = judge(p, o.got(), o.y_floats);
        char what[192];
        std::snprintf(what, sizeof what, "%s%s%s: %u cols, %u rows, %u tokens, Y columns [%u, %u) of %u", mul_mm_kernel_name(k),
                      *bm ? ", rows per tile " : "", bm, s.ncols, s.nrows, s.n_tokens, s.y_offset, s.y_offset + s.nrows,
                      s.y_stride);
        expect_close(k, v, what);
      }
    }
  }
}

TEST_F(VulkanGemm, DefaultLauncherUsesThePickedKernelInARecording) {
  // The executor's path: the kernel mul_mm picks, recorded once and replayed, the scratch reused.
  std::mt19937 rng(12);
  const Shape s{128, 70, 20, 70, 0};
  const Problem p(s, rng);
  Operands o(*ctx_, p);
  Recording rec(*ctx_, 2);
  product(*ctx_, rec, mul_mm_kernel(*ctx_), o.vw, o.vx, o.vy, o.vs, s);
  rec.finish();
  for (int i = 0; i < 2; ++i) {
    rec.submit_and_wait();
    expect_close(mul_mm_kernel(*ctx_), judge(p, o.got(), o.y_floats), "recorded product");
  }
}

TEST_F(VulkanGemm, GridSplitIntoRowsSkipsTheWorkgroupsPastTheEnd) {
  // The launcher splits a grid past Features::max_groups_x into y; the shader numbers workgroups
  // x-fastest and returns from those past the last tile. 5 row tiles x 3 token tiles = 15 tiles as
  // 8 x 2 workgroups, so the last one has no tile.
  std::mt19937 rng(13);
  const Shape s{64, 300, 130, 300, 0};
  const Problem p(s, rng);
  Operands o(*ctx_, p);
  // mm_q.glsl's push constants: a dense product (no experts) of rows of ncols halves.
  const uint32_t push[13] = {s.ncols, s.nrows, s.n_tokens, s.y_stride, s.y_offset, 3, 15, s.ncols * 2, 0, 0, 0, 0, 0};
  const View bindings[] = {o.vw, o.vx, o.vy, o.vx, o.vx};
  ctx_->immediate().dispatch(ctx_->pipeline("mul_mm_q_f16", 5, sizeof(push)), bindings, push, 8, 2);
  expect_close(MulMmKernel::Tiled, judge(p, o.got(), o.y_floats), "tiled kernel on an 8 x 2 grid");
}

TEST_F(VulkanGemm, BadShapesAndMissingKernelsAreClearErrors) {
  Buffer b = ctx_->host_buffer(1 << 16);
  const View v{&b, 0, 0};
  const auto f16 = gguf::TensorType::F16;
  const MulMmKernel k = mul_mm_kernel(*ctx_);
  EXPECT_THROW(mul_mm_q(*ctx_, ctx_->immediate(), k, f16, v, v, v, View{}, 48, 4, 2, 4, 0), Error);   // 48 columns
  EXPECT_THROW(mul_mm_q(*ctx_, ctx_->immediate(), k, f16, v, v, v, View{}, 64, 4, 2, 10, 7), Error);  // rows 7..11 of 10
  if (k != MulMmKernel::CoopMatNV) {
    EXPECT_THROW(mul_mm_q(*ctx_, ctx_->immediate(), MulMmKernel::CoopMatNV, f16, v, v, v, View{}, 64, 4, 2, 4, 0), Error);
  }
  const View small{&b, 0, 64};
  EXPECT_THROW(mul_mm_convert_x(*ctx_, ctx_->immediate(), v, small, 64, 4), Error);  // f16 X too small
  EXPECT_THROW(moe_sort(*ctx_, ctx_->immediate(), k, v, v, 4, 2, 513), Error);        // over 512 experts
  ctx_->release(b);
}

TEST_F(VulkanGemm, Throughput) {
  // Prefill-sized products (512 tokens, K 4096): wall time of a recording of 10 products, best of 3.
  if (!std::getenv("ZINC_TEST_VULKAN_BENCH")) GTEST_SKIP() << "set ZINC_TEST_VULKAN_BENCH=1 for the throughput table";
  const uint32_t m = 512, k = 4096;
  std::mt19937 rng(14);
  std::uniform_int_distribution<int> bits(0x2c00, 0x3800);  // f16 in [1/16, 1/2]
  std::printf("| kernel | tokens | rows | cols | ms | TFLOPS |\n|---|---|---|---|---|---|\n");
  for (const uint32_t n : {1024u, 4096u, 12288u}) {
    std::vector<uint16_t> w(size_t{n} * k);
    for (auto& v : w) v = static_cast<uint16_t>(bits(rng) | (rng() & 1 ? 0x8000 : 0));
    std::vector<float> x(size_t{m} * k);
    for (auto& v : x) v = static_cast<float>(rng() % 2001) / 1000.0f - 1.0f;
    Buffer bw = ctx_->device_buffer(w.size() * 2), bx = ctx_->device_buffer(x.size() * 4),
           by = ctx_->device_buffer(size_t{m} * n * 4), bs = ctx_->device_buffer(mul_mm_scratch_bytes(k, m));
    ctx_->upload(bw, 0, w.data(), w.size() * 2);
    ctx_->upload(bx, 0, x.data(), x.size() * 4);
    for (const auto& [kern, bm, warps] : std::vector<std::tuple<MulMmKernel, const char*, const char*>>{
             {MulMmKernel::Tiled, "", ""}, {MulMmKernel::CoopMatNV, "64", "4"}, {MulMmKernel::CoopMatNV, "128", "4"},
             {MulMmKernel::CoopMatNV, "64", "8"}, {MulMmKernel::CoopMatNV, "128", "8"}}) {
      if (const auto ks = kernels(); std::find(ks.begin(), ks.end(), kern) == ks.end()) continue;
      ScopedEnv rows("ZINC_VULKAN_MM_BM", bm), subgroups("ZINC_VULKAN_MM_WARPS", warps);
      const double best = seconds_per_rep(*ctx_, 10, 2, [&](Recording& rec) {
        product(*ctx_, rec, kern, View{&bw}, View{&bx}, View{&by}, View{&bs}, Shape{k, n, m, n, 0});
      });
      std::printf("| %s%s%s%s%s | %u | %u | %u | %.3f | %.1f |\n", mul_mm_kernel_name(kern), *bm ? ", rows per tile " : "", bm,
                  *warps ? ", subgroups " : "", warps, m, n, k, best * 1e3, 2.0 * m * n * k / best / 1e12);
    }
    ctx_->release(bw);
    ctx_->release(bx);
    ctx_->release(by);
    ctx_->release(bs);
  }
}

}  // namespace
}  // namespace zinc::backend::vk
