// Vulkan kernels on random data against the op's exact value, within the bound of the kernel's float
// arithmetic under Vulkan's precision (float_bound.h); where a kernel sums in double, against the CPU
// backend's values bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

#include "backend/cpu/cpu_ops.h"
#include "core/error.h"
#include "float_bound.h"
#include "vk_test_util.h"

namespace zinc::backend::vk {
namespace {

class VulkanOps : public VulkanTest {};

TEST_F(VulkanOps, ContextNamesItsDevice) {
  EXPECT_FALSE(ctx_->device_name().empty());
  std::printf("device: %s\n", ctx_->device_name().c_str());
}

TEST_F(VulkanOps, RmsNormMatchesTheCpu) {
  struct Case {
    uint32_t width, group, rows;
    bool weight;
    float offset;
  };
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  Kernel k64 = ctx_->kernel(ctx_->features().fp64 ? "rms_norm_f64" : "rms_norm_f32", 3, 16);
  Kernel k32 = ctx_->kernel("rms_norm_f32", 3, 16);
  for (const Case c : {Case{64, 64, 3, true, 0.0f}, Case{1000, 1000, 2, false, 0.0f}, Case{4096, 4096, 4, true, 1.0f},
                       Case{512, 128, 5, true, 0.0f}, Case{300, 300, 1, true, 0.0f}}) {
    std::vector<float> x(static_cast<size_t>(c.width) * c.rows), w(c.group), want(x.size());
    for (auto& v : x) v = nd(rng);
    for (auto& v : w) v = nd(rng);
    cpu::rms_norm(x.data(), c.weight ? w.data() : nullptr, want.data(), c.width, c.group, c.rows, 1e-6f, c.offset);
    Buffer bx = ctx_->host_buffer(x.size() * 4), bw = ctx_->host_buffer(w.size() * 4), by = ctx_->host_buffer(x.size() * 4);
    std::memcpy(bx.mapped, x.data(), x.size() * 4);
    std::memcpy(bw.mapped, w.data(), w.size() * 4);
    struct {
      uint32_t group, has_weight;
      float eps, offset;
    } push{c.group, c.weight ? 1u : 0u, 1e-6f, c.offset};
    const Buffer* bindings[] = {&bx, &bw, &by};
    // The float sum: y = x * inversesqrt(sum x^2 / group + eps) * (w + offset), exactly and bounded.
    ctx_->run(k32, bindings, &push, c.rows * (c.width / c.group));
    const auto* got = static_cast<const float*>(by.mapped);
    int outside = 0;
    for (uint32_t g0 = 0; g0 < c.width * c.rows; g0 += c.group) {
      const auto xg = test::exact(x.data() + g0, c.group);
      const test::Fb scale = test::vk::inversesqrt(test::vk::div(test::dot(xg, xg), test::Fb(c.group)) + test::Fb(1e-6f));
      for (uint32_t i = 0; i < c.group; ++i) {
        const test::Fb wi = c.weight ? test::Fb(w[i]) + test::Fb(c.offset) : test::Fb(1.0);
        const test::Fb y = xg[i] * scale * wi;
        outside += std::fabs(got[g0 + i] - y.v) > y.e;
      }
    }
    EXPECT_EQ(outside, 0) << c.width << " wide, groups of " << c.group;
    // The double sum: the CPU's values bit for bit (what keeps the quantized products' codes equal).
    if (ctx_->features().fp64) {
      ctx_->run(k64, bindings, &push, c.rows * (c.width / c.group));
      size_t differ = 0;
      for (size_t i = 0; i < x.size(); ++i) differ += got[i] != want[i];
      EXPECT_EQ(differ, 0u) << c.width << " wide, groups of " << c.group << " (double sum)";
    }
    ctx_->release(bx);
    ctx_->release(bw);
    ctx_->release(by);
  }
  ctx_->release(k32);
  ctx_->release(k64);
}

TEST_F(VulkanOps, ElementwiseOpsMatchTheirDefinitions) {
  // Each variant against its definition, over a size that needs a second row of workgroups (> 65535 * 256
  // would be costly on lavapipe; 70000 elements with a narrow dispatch exercise the same indexing).
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  const uint32_t width = 700, rows = 100, n = width * rows;
  std::vector<float> a(n), b(n), b1(rows);
  for (auto& v : a) v = nd(rng);
  for (auto& v : b) v = nd(rng);
  for (auto& v : b1) v = nd(rng);
  struct Case {
    const char* shader;
    bool per_row_b;
  };
  for (const Case c : {Case{"eltwise_add", false}, Case{"eltwise_mul", false}, Case{"eltwise_swiglu", false},
                       Case{"eltwise_geglu", false}, Case{"eltwise_sigmoid_mul", false},
                       Case{"eltwise_sigmoid_mul", true}, Case{"eltwise_softcap", false},
                       Case{"eltwise_swiglu_clamped", false}}) {
    const std::string name = c.shader;
    const std::vector<float>& bv = c.per_row_b ? b1 : b;
    Kernel k = ctx_->kernel(c.shader, 3, 24);
    Buffer ba = ctx_->host_buffer(n * 4), bb = ctx_->host_buffer(bv.size() * 4), bo = ctx_->host_buffer(n * 4);
    std::memcpy(ba.mapped, a.data(), n * 4);
    std::memcpy(bb.mapped, bv.data(), bv.size() * 4);
    struct {
      uint32_t n, a_width, b_width, b_row_stride;
      float p0, p1;
    } push{n, width, c.per_row_b ? 1u : width, c.per_row_b ? 1u : width, name == "eltwise_softcap" ? 5.0f : 1.702f, 7.0f};
    const Buffer* bindings[] = {&ba, &bb, &bo};
    const uint32_t groups = (n + 255) / 256;  // 274: as 137 x 2 so the second row is used
    ctx_->run(k, bindings, &push, (groups + 1) / 2, 2);
    const auto* got = static_cast<const float*>(bo.mapped);
    // The shader's formula for each variant, exactly and with its bound under Vulkan's precision (exp
    // and tanh may be off by a few units in the last place, more for large arguments).
    using test::Fb;
    namespace tvk = test::vk;
    int outside = 0;
    for (uint32_t i = 0; i < n; ++i) {
      const Fb x = a[i], y = c.per_row_b ? b1[i / width] : b[i];
      Fb r;
      if (name == "eltwise_add") r = x + y;
      if (name == "eltwise_mul") r = x * y;
      if (name == "eltwise_swiglu") r = tvk::div(x, Fb(1.0) + tvk::exp(-x)) * y;
      if (name == "eltwise_geglu") {
        const Fb inner = Fb(0.79788456080286535588f) * x * (Fb(1.0) + Fb(0.044715f) * x * x);
        r = Fb(0.5) * x * (Fb(1.0) + tvk::tanh(inner)) * y;
      }
      if (name == "eltwise_sigmoid_mul") r = tvk::div(x, Fb(1.0) + tvk::exp(-y));
      if (name == "eltwise_softcap") r = Fb(5.0f) * tvk::tanh(tvk::div(x, Fb(5.0f)));
      if (name == "eltwise_swiglu_clamped") {
        const Fb g{std::min(x.v, 7.0), 0}, u{std::clamp(y.v, -7.0, 7.0), 0};
        r = tvk::div(g, Fb(1.0) + tvk::exp(Fb(-1.702f) * g)) * (u + Fb(1.0));
      }
      if (std::fabs(got[i] - r.v) > r.e && outside++ < 3) {
        ADD_FAILURE() << c.shader << " element " << i << ": " << got[i] << " vs " << r.v << " +- " << r.e;
      }
    }
    EXPECT_EQ(outside, 0) << c.shader << (c.per_row_b ? " (one gate per row)" : "");
    ctx_->release(ba);
    ctx_->release(bb);
    ctx_->release(bo);
    ctx_->release(k);
  }
}

TEST_F(VulkanOps, RopeMatchesTheDefinition) {
  // Normal and NeoX pairs, whole and partial rotation, plain, YaRN and per-pair factors, at positions
  // far from 0; the angles come from the CPU's table, which the kernel is given.
  struct Case {
    graph::RopeMode mode;
    int n_head, head_dim, n_rot;
    bool yarn, factors;
  };
  std::mt19937 rng(4);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  Kernel k = ctx_->kernel("rope", 3, 20);
  for (const Case c : {Case{graph::RopeMode::Normal, 4, 64, 64, false, false}, Case{graph::RopeMode::NeoX, 3, 128, 128, true, false},
                       Case{graph::RopeMode::NeoX, 2, 256, 64, false, false}, Case{graph::RopeMode::Normal, 2, 128, 128, false, true}}) {
    const int n_tok = 5;
    const int32_t pos0 = 12345;
    graph::RopeParams rp;
    rp.base = 1e6f;
    if (c.yarn) {
      rp.freq_scale = 0.25f;
      rp.ext_factor = 1.0f;
      rp.attn_factor = 1.1386f;
      rp.n_ctx_orig = 4096;
    }
    std::vector<float> factors(static_cast<size_t>(c.n_rot / 2));
    for (size_t i = 0; i < factors.size(); ++i) factors[i] = 1.0f + static_cast<float>(i % 7);
    const uint32_t width = static_cast<uint32_t>(c.n_head * c.head_dim), n = width * n_tok;
    std::vector<float> x(n), cs(static_cast<size_t>(c.n_rot) * n_tok);
    for (auto& v : x) v = nd(rng);
    const float* f = c.factors ? factors.data() : nullptr;
    for (int t = 0; t < n_tok; ++t) cpu::rope_cos_sin(c.n_rot, rp, f, pos0 + t, cs.data() + t * c.n_rot);
    Buffer bx = ctx_->host_buffer(n * 4), bc = ctx_->host_buffer(cs.size() * 4), bo = ctx_->host_buffer(n * 4);
    std::memcpy(bx.mapped, x.data(), n * 4);
    std::memcpy(bc.mapped, cs.data(), cs.size() * 4);
    const uint32_t push[] = {width, static_cast<uint32_t>(c.head_dim), static_cast<uint32_t>(c.n_rot),
                             c.mode == graph::RopeMode::NeoX ? 1u : 0u, n};
    const Buffer* bindings[] = {&bx, &bc, &bo};
    ctx_->run(k, bindings, push, (n + 255) / 256);
    const auto* got = static_cast<const float*>(bo.mapped);
    // rope.comp's formula with the (cos, sin) it is given, exactly and bounded: a pair's first element
    // x_e c - x_p s, its second x_p s + x_e c; dimensions past n_rot copied.
    int outside = 0;
    for (uint32_t e = 0; e < n; ++e) {
      const int d = static_cast<int>(e % static_cast<uint32_t>(c.head_dim));
      const int t = static_cast<int>(e / width);
      test::Fb r = x[e];
      if (d < c.n_rot) {
        const bool neox = c.mode == graph::RopeMode::NeoX;
        const bool first = neox ? d < c.n_rot / 2 : d % 2 == 0;
        const int i = neox ? (first ? d : d - c.n_rot / 2) : d / 2;
        const int partner = static_cast<int>(e) - d + (neox ? (first ? d + c.n_rot / 2 : d - c.n_rot / 2) : (first ? d + 1 : d - 1));
        const test::Fb cv = cs[static_cast<size_t>(t * c.n_rot + 2 * i)], sv = cs[static_cast<size_t>(t * c.n_rot + 2 * i + 1)];
        const test::Fb xe = x[e], xp = x[static_cast<size_t>(partner)];
        r = first ? xe * cv - xp * sv : xp * sv + xe * cv;
      }
      outside += std::fabs(got[e] - r.v) > r.e;
    }
    EXPECT_EQ(outside, 0) << (c.mode == graph::RopeMode::NeoX ? "neox" : "normal") << " head " << c.head_dim
                          << " rotating " << c.n_rot;
    ctx_->release(bx);
    ctx_->release(bc);
    ctx_->release(bo);
  }
  ctx_->release(k);
}

TEST_F(VulkanOps, UnknownShaderAndWrongDeviceAreClearErrors) {
  EXPECT_THROW(ctx_->kernel("no_such_shader", 1, 0), Error);
  try {
    Context::create(1000);
    FAIL() << "device 1000 opened";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("device 1000 requested"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace zinc::backend::vk
