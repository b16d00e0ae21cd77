// The mixture-of-experts router split from the norm it reads (vk_router_split.h): R_w r beside the
// attention (moe_router_product), M a beside o's product with the experts chosen from z alone
// (moe_router_split), their weights once the norm's scale is known (moe_route's `given` form),
// against a double-precision oracle of the router as the graph defines it: h = W_o a + r (a the Q8_K
// codes o reads), x = RMSNorm(h) * (w + offset), logits = R x * logit_scale, then the routing. And each
// token's experts and weights in a step of several bit for bit its one-token step's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "backend/vulkan/vk_misc.h"
#include "backend/vulkan/vk_ops.h"
#include "backend/vulkan/vk_quant.h"
#include "backend/vulkan/vk_router_split.h"
#include "graph/graph.h"
#include "quant/quant.h"
#include "vk_test_util.h"

namespace zinc::backend::vk {
namespace {

using graph::TensorId;

class VulkanRouterSplit : public VulkanTest {
 protected:
  std::vector<float> randoms(size_t n, float sd) {
    std::normal_distribution<float> nd(0.0f, sd);
    std::vector<float> v(n);
    for (auto& x : v) x = nd(rng_);
    return v;
  }
  Buffer upload(const void* data, size_t bytes) {
    Buffer b = ctx_->device_buffer(bytes);
    ctx_->upload(b, 0, data, bytes);
    return b;
  }
  Buffer zeros(size_t bytes) {
    Buffer b = ctx_->device_buffer(bytes);
    ctx_->fill_zero(b, 0, bytes);
    return b;
  }
  template <typename T>
  std::vector<T> download(const Buffer& b, size_t n, size_t offset = 0) {
    std::vector<T> v(n);
    ctx_->download(b, offset, v.data(), n * sizeof(T));
    return v;
  }
  std::mt19937 rng_{7};
};

struct Case {
  bool topk_first, norm_topk, escale;
  float logit_scale, offset;
};

// The routing of one token's logits (already times logit_scale), in double: the slots' experts in
// selection order and their weights.
void route(const std::vector<double>& l, uint32_t k, const Case& c, const std::vector<float>& escale,
           std::vector<uint32_t>& ids, std::vector<double>& w) {
  const size_t ne = l.size();
  std::vector<uint32_t> order(ne);
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return l[a] > l[b]; });
  ids.assign(order.begin(), order.begin() + k);
  const double mx = l[order[0]];
  double all = 0;
  for (double v : l) all += std::exp(v - mx);
  w.assign(k, 0.0);
  double sel = 0;
  for (uint32_t i = 0; i < k; ++i) sel += std::exp(l[ids[i]] - mx);
  for (uint32_t i = 0; i < k; ++i) {
    const double e = std::exp(l[ids[i]] - mx);
    w[i] = c.topk_first || c.norm_topk ? e / sel : e / all;
    if (c.escale) w[i] *= escale[ids[i]];
  }
}

TEST_F(VulkanRouterSplit, ChoosesAndWeighsTheRoutersExperts) {
  const auto type = gguf::TensorType::Q4_K;
  if (!has_mul_mv_k(*ctx_, type)) GTEST_SKIP() << "the device has no packed integer dot product or subgroups under 8";
  const uint32_t d = 512, d_in = 768, ne = 64, k = 8, n = 5, blocks = d / 256;
  if (!rms_norm_row_factored_fits(*ctx_, d)) GTEST_SKIP() << "the device has no factored norm for rows of " << d;
  const float eps = 1e-6f;
  for (const Case& c : {Case{false, true, false, 1.0f, 0.0f}, Case{true, false, true, 0.7f, 1.0f},
                        Case{false, false, false, 1.3f, 1.0f}}) {
    SCOPED_TRACE(testing::Message() << "top-k first " << c.topk_first << ", norm " << c.norm_topk << ", logit scale "
                                    << c.logit_scale << ", offset " << c.offset);
    // W_o [d][d_in] quantized; a, r, the norm's weights, the router.
    const size_t rs = quant::row_size(type, d_in);
    std::vector<uint8_t> wo(rs * d + 16);
    for (uint32_t j = 0; j < d; ++j) {
      const std::vector<float> row = randoms(d_in, 0.05f);
      quant::quantize_row(type, row.data(), wo.data() + j * rs, d_in);
    }
    std::vector<float> wof(static_cast<size_t>(d) * d_in);
    quant::dequantize_row(type, wo.data(), wof.data(), static_cast<int64_t>(wof.size()));
    const std::vector<float> a = randoms(static_cast<size_t>(n) * d_in, 1.0f), r = randoms(static_cast<size_t>(n) * d, 2.0f),
                             nw = randoms(d, 0.5f), router = randoms(static_cast<size_t>(ne) * d, 0.3f),
                             escale = randoms(ne, 1.0f);
    std::vector<float> rw(static_cast<size_t>(ne) * d), m(static_cast<size_t>(ne) * d_in);
    router_split_matrices(router.data(), nw.data(), c.offset, wof.data(), ne, d, d_in, rw.data(), m.data());

    Buffer bwo = upload(wo.data(), wo.size()), ba = upload(a.data(), a.size() * 4), br = upload(r.data(), r.size() * 4),
           bnw = upload(nw.data(), nw.size() * 4), brw = upload(rw.data(), rw.size() * 4), bm = upload(m.data(), m.size() * 4),
           bes = upload(escale.data(), escale.size() * 4);
    Buffer bxq = zeros(q8k_row_bytes(d_in) * n), bo = zeros(size_t{4} * d * n), bh = zeros(size_t{4} * d * n),
           by = zeros(size_t{4} * d * n), bnq = zeros(q8k_row_bytes(d) * n), parts = zeros(size_t{4} * blocks * n),
           logits = zeros(size_t{4} * ne * n), ids = zeros(size_t{4} * k * n), wts = zeros(size_t{4} * k * n), count = zeros(4 * n);
    Dispatcher& im = ctx_->immediate();
    quantize_q8k(*ctx_, im, View{&ba}, View{&bxq}, d_in, n);
    mul_mv_k(*ctx_, im, type, View{&bwo}, View{&bxq}, View{&bo}, d_in, d, n);
    rms_norm_row(*ctx_, im, View{&bo}, View{&br}, View{&bh}, View{&bnw}, View{&by}, View{&bnq}, d, n, eps, c.offset, View{}, 0,
                 View{&parts});
    NormScale ns;
    ns.partials = View{&parts};
    ns.blocks = blocks;
    ns.eps = eps;
    // A token's rows: all n at once, then each alone (its own views of the same buffers).
    const auto run = [&](uint32_t t0, uint32_t nt) {
      const auto at = [&](const Buffer& b, size_t row_bytes) { return View{&b, row_bytes * t0, row_bytes * nt}; };
      moe_router_product(*ctx_, im, View{&brw}, at(br, size_t{4} * d), at(logits, size_t{4} * ne), d, ne, nt);
      ASSERT_TRUE(moe_router_split(*ctx_, im, View{&bm}, at(bxq, q8k_row_bytes(d_in)), at(logits, size_t{4} * ne),
                                   at(ids, size_t{4} * k), View{&count}, d_in, ne, k, nt, c.topk_first, c.logit_scale));
      NormScale given = ns;
      given.partials = at(parts, size_t{4} * blocks);
      moe_route(*ctx_, im, at(logits, size_t{4} * ne), View{}, c.escale ? View{&bes} : View{}, at(ids, size_t{4} * k),
                at(wts, size_t{4} * k), ne, k, nt, c.topk_first, c.norm_topk, c.logit_scale, given);
    };
    run(0, n);
    const std::vector<uint32_t> got_ids = download<uint32_t>(ids, size_t{k} * n);
    const std::vector<float> got_w = download<float>(wts, size_t{k} * n);
    EXPECT_EQ(download<uint32_t>(count, n), std::vector<uint32_t>(n, 0u)) << "the counters back at zero";

    // The oracle from o's own codes: h = W_o a + r, the norm, the router, the routing.
    const std::vector<uint8_t> codes = download<uint8_t>(bxq, q8k_row_bytes(d_in) * n);
    int checked = 0;
    for (uint32_t t = 0; t < n; ++t) {
      const uint8_t* row = codes.data() + q8k_row_bytes(d_in) * t;
      std::vector<double> av(d_in);
      for (uint32_t c2 = 0; c2 < d_in; ++c2) {
        float db;
        std::memcpy(&db, row + d_in + d_in / 4 + 4 * (c2 / 256), 4);
        av[c2] = static_cast<double>(static_cast<int8_t>(row[c2])) * db;
      }
      std::vector<double> h(d);
      double ss = 0;
      for (uint32_t j = 0; j < d; ++j) {
        double s = r[static_cast<size_t>(t) * d + j];
        for (uint32_t c2 = 0; c2 < d_in; ++c2) s += static_cast<double>(wof[static_cast<size_t>(j) * d_in + c2]) * av[c2];
        h[j] = s;
        ss += s * s;
      }
      const double scale = 1.0 / std::sqrt(ss / d + eps);
      std::vector<double> l(ne);
      for (uint32_t e = 0; e < ne; ++e) {
        double s = 0;
        for (uint32_t j = 0; j < d; ++j) s += static_cast<double>(router[static_cast<size_t>(e) * d + j]) * h[j] * scale * (nw[j] + c.offset);
        l[e] = s * c.logit_scale;
      }
      std::vector<uint32_t> want_ids;
      std::vector<double> want_w;
      route(l, k, c, escale, want_ids, want_w);
      std::vector<double> sorted = l;
      std::sort(sorted.rbegin(), sorted.rend());
      if (sorted[k - 1] - sorted[k] < 1e-3) continue;  // a near tie at the last slot: either is right
      ++checked;
      std::vector<uint32_t> got(got_ids.begin() + k * t, got_ids.begin() + k * (t + 1));
      std::vector<uint32_t> a_set = got, b_set = want_ids;
      std::sort(a_set.begin(), a_set.end());
      std::sort(b_set.begin(), b_set.end());
      ASSERT_EQ(a_set, b_set) << "token " << t << ": the chosen experts";
      for (uint32_t i = 0; i < k; ++i) {
        const size_t j = static_cast<size_t>(std::find(want_ids.begin(), want_ids.end(), got[i]) - want_ids.begin());
        EXPECT_NEAR(got_w[k * t + i], want_w[j], 2e-5 + 1e-4 * std::abs(want_w[j])) << "token " << t << ", slot " << i;
      }
    }
    EXPECT_GE(checked, 3) << "too few tokens without a near tie to check";

    // Each token alone: the same experts and weights, bit for bit.
    for (uint32_t t = 0; t < n; ++t) run(t, 1);
    EXPECT_EQ(download<uint32_t>(ids, size_t{k} * n), got_ids) << "a token's experts alone";
    const std::vector<float> alone = download<float>(wts, size_t{k} * n);
    EXPECT_EQ(0, std::memcmp(alone.data(), got_w.data(), alone.size() * 4)) << "a token's weights alone";
    for (Buffer* b : {&bwo, &ba, &br, &bnw, &brw, &bm, &bes, &bxq, &bo, &bh, &by, &bnq, &parts, &logits, &ids, &wts, &count}) {
      ctx_->release(*b);
    }
  }
}

TEST(RouterSites, AreTheBiasFreeFloatRoutersOfAProductsNorm) {
  // Three MoE layers after o, its residual add and the norm: an F32 router (a site), one with a bias,
  // one stored as Q8_0; and a fourth whose router reads the residual itself, not the norm.
  graph::Graph g;
  graph::Builder b(g);
  const int64_t d = 256, d_in = 512, ff = 256, ne = 8;
  using gguf::TensorType;
  TensorId h = b.input(d, "h");
  for (int layer = 0; layer < 4; ++layer) {
    const auto name = [&](const char* s) { return fmt::format("blk.{}.{}", layer, s); };
    const TensorId a = b.input(d_in, name("a"));
    const TensorId o = b.matmul(b.weight(name("o"), TensorType::Q4_K, {d_in, d, 1, 1}, layer), a, name("o_out"), layer);
    const TensorId sum = b.add(o, h, name("sum"), layer);
    const TensorId x = b.rms_norm(sum, b.weight(name("norm"), TensorType::F32, {d, 1, 1, 1}, layer), 1e-6f, 0.0f, name("x"), layer);
    graph::Builder::MoeVariant v;
    v.norm_topk = true;
    if (layer == 1) {  // (expert biases come all four or none)
      v.router_b = b.weight(name("router_b"), TensorType::F32, {ne, 1, 1, 1}, layer);
      v.gate_b = b.weight(name("gate_b"), TensorType::F32, {ff, ne, 1, 1}, layer);
      v.up_b = b.weight(name("up_b"), TensorType::F32, {ff, ne, 1, 1}, layer);
      v.down_b = b.weight(name("down_b"), TensorType::F32, {d, ne, 1, 1}, layer);
    }
    if (layer == 3) v.router_in = sum;
    const TensorId router = b.weight(name("router"), layer == 2 ? TensorType::Q8_0 : TensorType::F32, {d, ne, 1, 1}, layer);
    const TensorId y = b.moe(x, router, b.weight(name("gate"), TensorType::Q4_K, {d, ff, ne, 1}, layer),
                             b.weight(name("up"), TensorType::Q4_K, {d, ff, ne, 1}, layer),
                             b.weight(name("down"), TensorType::Q4_K, {ff, d, ne, 1}, layer), 2, v, name("moe"), layer);
    h = b.add(y, sum, name("out"), layer);
  }
  const std::vector<RouterSite> sites = router_sites(g);
  ASSERT_EQ(sites.size(), 1u);
  EXPECT_EQ(g.nodes[sites[0].o].op, graph::Op::MatMul);
  EXPECT_EQ(g.tensor(g.nodes[sites[0].o].in[0]).name, "blk.0.o");
  EXPECT_EQ(g.nodes[sites[0].norm].op, graph::Op::RmsNorm);
  EXPECT_EQ(g.nodes[sites[0].moe].op, graph::Op::MoE);
  EXPECT_EQ(g.tensor(sites[0].r).name, "h");
}

}  // namespace
}  // namespace zinc::backend::vk
