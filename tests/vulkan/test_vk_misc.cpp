// The launchers of vk_misc.h (MoE routing and combining, SsmConv, DeltaNet, strided row copies,
// argmax) against the CPU backend: its functions where it has them (cpu::ssm_conv,
// cpu::gated_delta_rule, the greedy sampler), else the CPU executor's inline code (MoE routing, Split,
// Concat, SelectLast) restated here. Every buffer is bound at an offset of Features::offset_alignment,
// as the executor's views are.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/vulkan/vk_misc.h"
#include "backend/vulkan/vk_ops.h"
#include "backend/vulkan/vk_plan.h"
#include "backend/vulkan/vk_quant.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "sample/sampler.h"
#include "float_bound.h"
#include "vk_test_util.h"

namespace zinc::backend::vk {
namespace {

// A host-visible buffer holding `bytes` after a leading pad of the device's offset alignment, bound
// through a view that starts past the pad.
class Buf {
 public:
  Buf(Context& ctx, size_t bytes) : ctx_(ctx), pad_(ctx.features().offset_alignment) {
    b_ = ctx.host_buffer(pad_ + std::max<size_t>(bytes, 4));
    std::memset(b_.mapped, 0, b_.size);
  }
  template <class T>
  Buf(Context& ctx, const std::vector<T>& v) : Buf(ctx, v.size() * sizeof(T)) {
    std::memcpy(data(), v.data(), v.size() * sizeof(T));
  }
  ~Buf() { ctx_.release(b_); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  View view() const { return View{&b_, pad_, b_.size - pad_}; }
  uint8_t* data() const { return static_cast<uint8_t*>(b_.mapped) + pad_; }
  template <class T>
  std::vector<T> read(size_t n) const {
    std::vector<T> v(n);
    std::memcpy(v.data(), data(), n * sizeof(T));
    return v;
  }

 private:
  Context& ctx_;
  size_t pad_;
  Buffer b_;
};

class VulkanMisc : public VulkanTest {};

// CpuExecutable::moe's routing of one token, restated: ids and weights in selection order.
void route_on_cpu(const float* logits, const float* bias, const float* expert_scale, int ne, int k, bool topk_first,
                  bool norm_topk, float scale, uint32_t* ids, float* weights) {
  std::vector<float> l(logits, logits + ne);
  if (scale != 1.0f) {
    for (float& x : l) x *= scale;
  }
  if (bias) {
    for (int e = 0; e < ne; ++e) l[static_cast<size_t>(e)] += bias[e];
  }
  if (!topk_first) {
    const float mx = *std::max_element(l.begin(), l.end());
    float sum = 0;
    for (float& x : l) sum += x = std::exp(x - mx);
    for (float& x : l) x /= sum;
  }
  std::vector<int> order(static_cast<size_t>(ne));
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int a, int b) {
    return l[static_cast<size_t>(a)] > l[static_cast<size_t>(b)] || (l[static_cast<size_t>(a)] == l[static_cast<size_t>(b)] && a < b);
  });
  std::vector<float> w(static_cast<size_t>(k));
  for (int i = 0; i < k; ++i) w[static_cast<size_t>(i)] = l[static_cast<size_t>(order[static_cast<size_t>(i)])];
  if (topk_first) {
    const float mx = w[0];
    float sum = 0;
    for (float& x : w) sum += x = std::exp(x - mx);
    for (float& x : w) x /= sum;
  }
  float top = 0;
  for (float x : w) top += x;
  for (int i = 0; i < k; ++i) {
    const int e = order[static_cast<size_t>(i)];
    const float wt = norm_topk ? w[static_cast<size_t>(i)] / top : w[static_cast<size_t>(i)];
    ids[i] = static_cast<uint32_t>(e);
    weights[i] = expert_scale ? wt * expert_scale[e] : wt;
  }
}

// The routing weights as moe_route.comp computes them, exactly, with a bound on its float arithmetic
// under Vulkan's precision (float_bound.h): logits * scale + bias; softmax first (exp(l - max) / sum) or
// after the top k; optional renormalisation over the k, then the expert's scale. `ids` are the k chosen.
// Fails the test when the k-th and the next candidate are closer than their bounds (unless exactly
// tied, which both sides order by index): the choice must not be left to rounding.
std::vector<test::Fb> route_bound(const float* logits, const float* bias, const float* expert_scale, int ne, int k,
                                  bool topk_first, bool norm_topk, float scale, const uint32_t* ids) {
  using test::Fb;
  std::vector<Fb> l(static_cast<size_t>(ne));
  for (int e = 0; e < ne; ++e) {
    l[static_cast<size_t>(e)] = Fb(logits[e]) * Fb(scale);
    if (bias) l[static_cast<size_t>(e)] += Fb(bias[e]);
  }
  if (!topk_first) {
    const Fb mx = test::max(l);
    for (Fb& x : l) x = test::vk::exp(x - mx);
    const Fb sum = test::sum(l);
    for (Fb& x : l) x = test::vk::div(x, sum);
  }
  std::vector<bool> chosen(static_cast<size_t>(ne), false);
  for (int i = 0; i < k; ++i) chosen[ids[i]] = true;
  for (int e = 0; e < ne; ++e) {
    if (chosen[static_cast<size_t>(e)]) continue;
    for (int i = 0; i < k; ++i) {
      const Fb &in = l[ids[i]], &out = l[static_cast<size_t>(e)];
      if (in.v == out.v) continue;
      EXPECT_GT(in.v - out.v, in.e + out.e) << "expert " << ids[i] << " against " << e << ": the choice is within rounding";
    }
  }
  std::vector<Fb> w;
  for (int i = 0; i < k; ++i) w.push_back(l[ids[i]]);
  if (topk_first) {
    const Fb top_l = w[0];
    for (Fb& x : w) x = test::vk::exp(x - top_l);
    const Fb sum = test::sum(w);
    for (Fb& x : w) x = test::vk::div(x, sum);
  }
  const Fb top = test::sum(w);
  for (int i = 0; i < k; ++i) {
    Fb wt = norm_topk ? test::vk::div(w[static_cast<size_t>(i)], top) : w[static_cast<size_t>(i)];
    if (expert_scale) wt = wt * Fb(expert_scale[ids[i]]);
    w[static_cast<size_t>(i)] = wt;
  }
  return w;
}

TEST_F(VulkanMisc, MoeRoutingMatchesTheCpu) {
  // Both routings with and without renormalisation, bias, expert scale and logit scale; expert counts
  // below, at and between multiples of the workgroup; one case of logits rounded to a few values, so
  // that equal weights must be ordered by expert index as the CPU orders them.
  struct Case {
    uint32_t n_expert, n_used;
    bool topk_first, norm, bias, scale, coarse;
    float logit_scale;
  };
  std::mt19937 rng(21);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::uniform_real_distribution<float> ud(0.5f, 1.5f);
  const uint32_t n_tok = 5;
  for (const Case c : {Case{8, 2, false, true, false, false, false, 1.0f}, Case{60, 4, false, false, true, false, false, 1.0f},
                       Case{128, 8, false, true, false, true, false, 0.5f}, Case{256, 8, false, true, true, false, false, 1.0f},
                       Case{32, 4, true, false, true, false, false, 1.0f}, Case{128, 16, true, true, false, true, false, 1.0f},
                       Case{256, 16, false, false, false, false, true, 1.0f}, Case{100, 6, true, false, false, false, true, 2.0f}}) {
    std::vector<float> logits(static_cast<size_t>(c.n_expert) * n_tok), bias(c.n_expert), es(c.n_expert);
    for (auto& v : logits) v = c.coarse ? std::round(nd(rng) * 0.5f) : nd(rng);
    for (auto& v : bias) v = nd(rng) * 0.1f;
    for (auto& v : es) v = ud(rng);
    std::vector<uint32_t> want_ids(static_cast<size_t>(c.n_used) * n_tok);
    std::vector<float> want_w(want_ids.size());
    for (uint32_t t = 0; t < n_tok; ++t) {
      route_on_cpu(logits.data() + t * c.n_expert, c.bias ? bias.data() : nullptr, c.scale ? es.data() : nullptr,
                   static_cast<int>(c.n_expert), static_cast<int>(c.n_used), c.topk_first, c.norm, c.logit_scale,
                   want_ids.data() + t * c.n_used, want_w.data() + t * c.n_used);
    }
    Buf bl(*ctx_, logits), bb(*ctx_, bias), bs(*ctx_, es), bi(*ctx_, want_ids.size() * 4), bw(*ctx_, want_w.size() * 4);
    moe_route(*ctx_, ctx_->immediate(), bl.view(), c.bias ? bb.view() : View{}, c.scale ? bs.view() : View{}, bi.view(),
              bw.view(), c.n_expert, c.n_used, n_tok, c.topk_first, c.norm, c.logit_scale);
    const auto ids = bi.read<uint32_t>(want_ids.size());
    const auto w = bw.read<float>(want_w.size());
    EXPECT_EQ(ids, want_ids) << c.n_expert << " experts, top " << c.n_used << (c.topk_first ? " (top-k first)" : "")
                             << (c.coarse ? " (tied logits)" : "");
    for (uint32_t t = 0; t < n_tok; ++t) {
      const auto bound = route_bound(logits.data() + t * c.n_expert, c.bias ? bias.data() : nullptr, c.scale ? es.data() : nullptr,
                                     static_cast<int>(c.n_expert), static_cast<int>(c.n_used), c.topk_first, c.norm,
                                     c.logit_scale, want_ids.data() + t * c.n_used);
      for (uint32_t i = 0; i < c.n_used; ++i) {
        const test::Fb& b = bound[i];
        EXPECT_LE(std::fabs(w[t * c.n_used + i] - b.v), b.e) << c.n_expert << " experts, top " << c.n_used << ", token " << t;
      }
    }
  }
  std::vector<float> one(4);
  Buf b(*ctx_, one);
  EXPECT_THROW(moe_route(*ctx_, ctx_->immediate(), b.view(), {}, {}, b.view(), b.view(), 300, 8, 1, false, false, 1.0f),
               Error);
}

TEST_F(VulkanMisc, RepeatRecordsANamedKernelTwice) {
  // ZINC_VULKAN_REPEAT (measuring): a named kernel's dispatch runs twice, a barrier between, so an
  // in-place add adds twice; another kernel's once.
  const std::vector<float> x{1.0f, 2.0f, 3.0f, 4.0f}, y0{10.0f, 20.0f, 30.0f, 40.0f};
  for (const char* names : {"", "eltwise_add", "eltwise_mul,rms_norm"}) {
    ScopedEnv e("ZINC_VULKAN_REPEAT", names);
    Buf bx(*ctx_, x), by(*ctx_, y0);
    Recording rec(*ctx_, 1);
    eltwise(*ctx_, rec, Eltwise::Add, by.view(), bx.view(), by.view(), 4, 4, 1);
    rec.finish();
    rec.submit_and_wait();
    const float times = std::string(names) == "eltwise_add" ? 2.0f : 1.0f;
    const auto y = by.read<float>(4);
    for (size_t i = 0; i < 4; ++i) EXPECT_EQ(y[i], y0[i] + times * x[i]) << "'" << names << "' element " << i;
  }
}

TEST_F(VulkanMisc, UnorderedLeavesOutOnlyTheBarriersBeforeANamedKernel) {
  // ZINC_VULKAN_UNORDERED (measuring): the barrier before each dispatch of a named kernel is left out;
  // every other barrier is still recorded, before the dispatch after it. Three dependent in-place adds
  // (two barriers between them, one at the recording's start): naming them drops two, naming another
  // kernel none, and then the chain's sums are exact.
  const std::vector<float> x{1.0f, 2.0f, 3.0f, 4.0f}, y0{10.0f, 20.0f, 30.0f, 40.0f};
  for (const char* names : {"", "eltwise_mul", "eltwise_add", "rms_norm,eltwise_add"}) {
    ScopedEnv e("ZINC_VULKAN_UNORDERED", names);
    Buf bx(*ctx_, x), by(*ctx_, y0);
    Recording rec(*ctx_, 3);
    for (int i = 0; i < 3; ++i) {
      if (i > 0) rec.barrier();
      eltwise(*ctx_, rec, Eltwise::Add, by.view(), bx.view(), by.view(), 4, 4, 1);
    }
    rec.finish();
    const bool named = std::string(names).find("eltwise_add") != std::string::npos;
    EXPECT_EQ(rec.barriers(), named ? 1u : 3u) << "'" << names << "'";
    rec.submit_and_wait();
    if (named) continue;  // (a race by design)
    const auto y = by.read<float>(4);
    for (size_t i = 0; i < 4; ++i) EXPECT_EQ(y[i], y0[i] + 3.0f * x[i]) << "'" << names << "' element " << i;
  }
}

TEST_F(VulkanMisc, ABarrierRightAfterAnotherIsNotRecorded) {
  // Barriers with no dispatch between them (as around a dispatch of no workgroups) order nothing the
  // first did not: one is recorded. Two dependent adds with three barriers between them: the
  // recording's first barrier and one more, and the sums exact.
  const std::vector<float> x{1.0f, 2.0f, 3.0f, 4.0f}, y0{10.0f, 20.0f, 30.0f, 40.0f};
  Buf bx(*ctx_, x), by(*ctx_, y0);
  Recording rec(*ctx_, 2);
  eltwise(*ctx_, rec, Eltwise::Add, by.view(), bx.view(), by.view(), 4, 4, 1);
  for (int i = 0; i < 3; ++i) rec.barrier();
  eltwise(*ctx_, rec, Eltwise::Add, by.view(), bx.view(), by.view(), 4, 4, 1);
  rec.finish();
  EXPECT_EQ(rec.barriers(), 2u);
  rec.submit_and_wait();
  const auto y = by.read<float>(4);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(y[i], y0[i] + 2.0f * x[i]) << "element " << i;
}

TEST_F(VulkanMisc, PipelineStatsPrintsEachPipelineOrSaysWhyNot) {
  // ZINC_VULKAN_PIPELINE_STATS (measuring): a context made with it prints, for each pipeline it
  // makes, a line naming the shader and its specialization with the driver's statistics; where the
  // device lacks the extension it says so once and makes its pipelines as ever.
  ScopedEnv e("ZINC_VULKAN_PIPELINE_STATS", "1");
  testing::internal::CaptureStderr();
  std::unique_ptr<Context> ctx = Context::create();
  const std::vector<float> x{1.0f, 2.0f, 3.0f, 4.0f}, y0{10.0f, 20.0f, 30.0f, 40.0f};
  {
    Buf bx(*ctx, x), by(*ctx, y0);
    Recording rec(*ctx, 1);
    eltwise(*ctx, rec, Eltwise::Add, by.view(), bx.view(), by.view(), 4, 4, 1);
    rec.finish();
    rec.submit_and_wait();
    const auto y = by.read<float>(4);
    for (size_t i = 0; i < 4; ++i) EXPECT_EQ(y[i], y0[i] + x[i]) << "element " << i;
  }
  const std::string err = testing::internal::GetCapturedStderr();
  if (err.find("has no VK_KHR_pipeline_executable_properties") != std::string::npos) {
    EXPECT_EQ(err.find("pipeline eltwise"), std::string::npos) << err;
  } else {
    const size_t at = err.find("pipeline eltwise_add");
    ASSERT_NE(at, std::string::npos) << err;
    const std::string line = err.substr(at, err.find('\n', at) - at);
    EXPECT_NE(line.find(" | "), std::string::npos) << "no statistics: " << line;
  }
}

TEST_F(VulkanMisc, MoeRoutingLatency) {
  // One token's routing as a decode step runs it (each after the one before): wall time per dispatch of
  // a recording of 100, best of 3, beside an element-wise add of one 2048-float row (a dispatch's floor).
  if (!std::getenv("ZINC_TEST_VULKAN_BENCH")) GTEST_SKIP() << "set ZINC_TEST_VULKAN_BENCH=1 for the latency table";
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::vector<float> logits(256), row(2048);
  for (auto& v : logits) v = nd(rng);
  for (auto& v : row) v = nd(rng);
  Buf bl(*ctx_, logits), bi(*ctx_, 64 * 4), bw(*ctx_, 64 * 4), ba(*ctx_, row), bo(*ctx_, row.size() * 4);
  std::printf("| kernel | experts | used | us per dispatch |\n|---|---|---|---|\n");
  const double floor = seconds_per_rep(*ctx_, 100, 1, [&](Recording& r) {
    eltwise(*ctx_, r, Eltwise::Add, ba.view(), ba.view(), bo.view(), 2048, 2048, 1);
  });
  std::printf("| eltwise_add (2048) | - | - | %.2f |\n", floor * 1e6);
  for (const auto& [ne, k, topk_first] : {std::tuple{128u, 8u, false}, {256u, 8u, false}, {32u, 4u, true}}) {
    const double t = seconds_per_rep(*ctx_, 100, 1, [&](Recording& r) {
      moe_route(*ctx_, r, bl.view(), View{}, View{}, bi.view(), bw.view(), ne, k, 1, topk_first, true, 1.0f);
    });
    std::printf("| moe_route | %u | %u | %.2f |\n", ne, k, t * 1e6);
  }
  // The router's product and the routing as one dispatch (moe_router), beside its product alone (a
  // float mat-vec of the router's rows), for a 2,048-wide row; everything in device memory.
  for (const uint32_t ne : {128u, 256u}) {
    std::vector<float> r(size_t{ne} * 2048);
    for (auto& v : r) v = nd(rng) * 0.05f;
    Buffer br = ctx_->device_buffer(r.size() * 4), bx = ctx_->device_buffer(row.size() * 4), bd = ctx_->device_buffer(4096);
    ctx_->upload(br, 0, r.data(), r.size() * 4);
    ctx_->upload(bx, 0, row.data(), row.size() * 4);
    ctx_->fill_zero(bd, 0, bd.size);
    const View lv{&bd, 0, 1024}, iv{&bd, 1024, 256}, wv{&bd, 1280, 256}, cv{&bd, 1536, 16};
    const double product = seconds_per_rep(*ctx_, 100, 1, [&](Recording& rec) {
      mul_mv(*ctx_, rec, gguf::TensorType::F32, View{&br}, View{&bx}, lv, View{}, 2048, ne, 1);
    });
    std::printf("| mul_mv_f32 (the router's product) | %u | - | %.2f |\n", ne, product * 1e6);
    const double both = seconds_per_rep(*ctx_, 100, 1, [&](Recording& rec) {
      moe_router(*ctx_, rec, View{&br}, View{&bx}, lv, View{}, View{}, iv, wv, cv, 2048, ne, 8, 1, false, true, 1.0f, NormScale{});
    });
    std::printf("| moe_router (product and routing) | %u | 8 | %.2f |\n", ne, both * 1e6);
    for (Buffer* b : {&br, &bx, &bd}) ctx_->release(*b);
  }
}

TEST_F(VulkanMisc, DependentDispatchLatency) {
  // What orders a decode step's dependent dispatches, measured (dispatch_chain.comp): a chain of
  // stages, each reading its own chunk of weights and a value the stage before wrote, ordered by a
  // pipeline barrier after each (mode 0) or by counts the next stage's workgroups wait on with no
  // barrier between (1: wait, then load; 2: load, then wait), or the whole chain in one dispatch whose
  // workgroups wait for each other between stages (4: load, then a grid-wide wait). Wall time per
  // stage of the chain, best of 3, and GB/s of the weights. No wait may give up (done[stages] stays 0).
  if (!std::getenv("ZINC_TEST_VULKAN_BENCH")) GTEST_SKIP() << "set ZINC_TEST_VULKAN_BENCH=1 for the latency table";
  const Kernel& k = ctx_->pipeline("dispatch_chain", 3, 16);
  std::printf("| workgroups | bytes a stage | stages | mode | us a stage | GB/s |\n|---|---|---|---|---|---|\n");
  for (const auto& [groups, words] : {std::pair{1u, 0u}, {1u, 16u}, {132u, 0u}, {264u, 0u}, {264u, 1657u}, {528u, 828u}, {132u, 3314u},
                                      {264u, 414u}, {264u, 6628u}}) {
    const size_t stage_bytes = size_t{groups} * words * 16;
    const uint32_t stages = stage_bytes == 0 ? 64u
                                             : static_cast<uint32_t>(std::min<size_t>(64, ctx_->features().max_storage_range / stage_bytes));
    Buffer w = ctx_->device_buffer(std::max<size_t>(16, stage_bytes * stages)), x = ctx_->device_buffer(size_t{groups} * stages * 4),
           d = ctx_->device_buffer((stages + 1) * 4);
    ctx_->fill_zero(w, 0, w.size);
    ctx_->fill_zero(x, 0, x.size);
    ctx_->fill_zero(d, 0, d.size);
    const View views[] = {View{&w}, View{&x}, View{&d}};
    for (const uint32_t mode : {0u, 1u, 2u, 4u}) {
      Recording r(*ctx_, stages + 1);
      const uint32_t reset[4] = {0, 0, 3, stages};
      r.dispatch(k, views, reset, 1);
      r.barrier();
      for (uint32_t s = 0; s < (mode == 4 ? 1 : stages); ++s) {
        const uint32_t push[4] = {s, words, mode, stages};
        r.dispatch(k, views, push, groups);
        if (mode == 0) r.barrier();
      }
      r.finish();
      r.submit_and_wait();
      double best = 1e30;
      for (int i = 0; i < 3; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        r.submit_and_wait();
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / stages);
      }
      uint32_t gave_up = 0;
      ctx_->download(d, size_t{stages} * 4, &gave_up, 4);
      EXPECT_EQ(gave_up, 0u) << groups << " workgroups, mode " << mode;
      std::printf("| %u | %zu | %u | %u | %.2f | %.0f |\n", groups, stage_bytes, stages, mode, best * 1e6,
                  static_cast<double>(stage_bytes) / best / 1e9);
    }
    for (Buffer* b : {&w, &x, &d}) ctx_->release(*b);
  }
}

TEST_F(VulkanMisc, AGateAddedNextKeepsItsInputsApartFromTheSum) {
  // A shared expert's shape: b a per-row gate, a its gated rows, c the experts' rows, then
  // sum = c + a * sigmoid(b) (one dispatch: sigmoid_mul_add), read by a product. First-fit would put
  // the sum over the gate once the gate's last reader ran, and the recorder then refuses the fusion
  // (each invocation reads its row's gate while others write the sum); the plan keeps the gate's
  // inputs alive until the add. Where the sum is normalised next, the add goes with the norm instead.
  for (const bool normed : {false, true}) {
    graph::Graph g;
    graph::Builder b(g);
    const int64_t w = 256;
    using gguf::TensorType;
    const graph::TensorId x = b.input(w, "x");
    const graph::TensorId gate = b.matmul(b.weight("gate", TensorType::F32, {w, 1, 1, 1}), x, "gate_out", 0);
    const graph::TensorId a = b.matmul(b.weight("a", TensorType::F32, {w, w, 1, 1}), x, "a_out", 0);
    const graph::TensorId c = b.matmul(b.weight("c", TensorType::F32, {w, w, 1, 1}), x, "c_out", 0);
    const graph::TensorId gated = b.sigmoid_mul(a, gate, "gated", 0);
    graph::TensorId sum = b.add(c, gated, "sum", 0);
    if (normed) sum = b.rms_norm(sum, b.weight("norm", TensorType::F32, {w, 1, 1, 1}), 1e-6f, 0.0f, "normed", 0);
    g.logits = b.matmul(b.weight("out", TensorType::F32, {w, w, 1, 1}), sum, "logits", 0);
    const size_t at = 4;  // the SigmoidMul's node
    ASSERT_EQ(g.nodes[at].op, graph::Op::SigmoidMul);
    EXPECT_EQ(gate_then_add(g, at), !normed);
    if (normed) continue;
    ExecOptions opts;
    opts.n_ctx = 32;
    opts.max_tokens = 4;
    const Plan p = make_plan(*ctx_, g, opts, std::vector<size_t>(g.nodes.size(), 0));
    const auto range = [&](graph::TensorId t) {
      const size_t from = p.act_offset[static_cast<size_t>(t)];
      return std::pair{from, from + static_cast<size_t>(g.tensor(t).ne[0]) * p.max_rows * 4};
    };
    const auto [s0, s1] = range(g.nodes[at + 1].out);
    for (const graph::TensorId in : {gate, a}) {
      const auto [i0, i1] = range(in);
      EXPECT_TRUE(i1 <= s0 || s1 <= i0) << g.tensor(in).name << " at [" << i0 << ", " << i1 << "), the sum at [" << s0 << ", " << s1 << ")";
    }
  }
}

TEST_F(VulkanMisc, AGatedAddAndNormKeepsItsInputsApartFromItsOutputs) {
  // The mixture tail of Qwen3.5/3.6 and Qwen3-Next: sum = c + a * sigmoid(gate), h = x + sum, then h's
  // norm (one dispatch: rms_norm_row's gated add, Plan::gate_norm). Each workgroup reads its row's
  // inputs and writes its row of h and of the norm, so neither may lie over another row of an input
  // (over the per-row gate not at all); the plan keeps all four nodes' inputs alive until the norm.
  graph::Graph g;
  graph::Builder b(g);
  const int64_t w = 256;
  using gguf::TensorType;
  const graph::TensorId in = b.input(w, "in");
  const graph::TensorId x = b.matmul(b.weight("x", TensorType::F32, {w, w, 1, 1}), in, "x_out", 0);
  const graph::TensorId gate = b.matmul(b.weight("gate", TensorType::F32, {w, 1, 1, 1}), x, "gate_out", 0);
  const graph::TensorId a = b.matmul(b.weight("a", TensorType::F32, {w, w, 1, 1}), x, "a_out", 0);
  const graph::TensorId c = b.matmul(b.weight("c", TensorType::F32, {w, w, 1, 1}), x, "c_out", 0);
  const graph::TensorId gated = b.sigmoid_mul(a, gate, "gated", 0);
  const graph::TensorId h = b.add(x, b.add(c, gated, "sum", 0), "h", 0);
  const graph::TensorId y = b.rms_norm(h, b.weight("norm", TensorType::F32, {w, 1, 1, 1}), 1e-6f, 0.0f, "normed", 0);
  g.logits = b.matmul(b.weight("out", TensorType::F32, {w, w, 1, 1}), y, "logits", 0);
  const size_t at = 5;  // the SigmoidMul's node
  ASSERT_EQ(g.nodes[at].op, graph::Op::SigmoidMul);
  ExecOptions opts;
  opts.n_ctx = 32;
  opts.max_tokens = 4;
  const Plan p = make_plan(*ctx_, g, opts, std::vector<size_t>(g.nodes.size(), 0));
  ASSERT_TRUE(p.gate_norm[at]);
  const auto range = [&](graph::TensorId t) {
    const size_t from = p.act_offset[static_cast<size_t>(t)];
    return std::pair{from, from + static_cast<size_t>(g.tensor(t).ne[0]) * p.max_rows * 4};
  };
  for (const graph::TensorId out : {h, y}) {
    const auto [o0, o1] = range(out);
    for (const graph::TensorId t : {gate, a, c, x}) {
      const auto [i0, i1] = range(t);
      const bool apart = i1 <= o0 || o1 <= i0, same_rows = i0 == o0 && t != gate;
      EXPECT_TRUE(apart || same_rows) << g.tensor(t).name << " at [" << i0 << ", " << i1 << "), " << g.tensor(out).name << " at [" << o0
                                      << ", " << o1 << ")";
    }
  }
  setenv("ZINC_VULKAN_GATE_NORM", "0", 1);
  EXPECT_FALSE(make_plan(*ctx_, g, opts, std::vector<size_t>(g.nodes.size(), 0)).gate_norm[at]);
  unsetenv("ZINC_VULKAN_GATE_NORM");
}

TEST_F(VulkanMisc, MoeCombineIsTheWeightedSumOfTheExperts) {
  std::mt19937 rng(22);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const uint32_t width : {64u, 30u, 2880u}) {
    const uint32_t n_used = 4, n_tok = 3;
    std::vector<float> y(static_cast<size_t>(width) * n_used * n_tok), w(static_cast<size_t>(n_used) * n_tok);
    for (auto& v : y) v = nd(rng);
    for (auto& v : w) v = nd(rng);
    // Each output is a dot product of n_used terms: exact value and its float bound (float_bound.h).
    std::vector<test::Fb> want(static_cast<size_t>(width) * n_tok);
    for (uint32_t t = 0; t < n_tok; ++t) {
      for (uint32_t i = 0; i < width; ++i) {
        std::vector<test::Fb> wk, yk;
        for (uint32_t k = 0; k < n_used; ++k) {
          wk.push_back(w[t * n_used + k]);
          yk.push_back(y[(static_cast<size_t>(t) * n_used + k) * width + i]);
        }
        want[static_cast<size_t>(t) * width + i] = test::dot(wk, yk);
      }
    }
    Buf by(*ctx_, y), bw(*ctx_, w), bo(*ctx_, want.size() * 4);
    moe_combine(*ctx_, ctx_->immediate(), by.view(), bw.view(), bo.view(), width, n_used, n_tok);
    const auto got = bo.read<float>(want.size());
    int outside = 0;
    for (size_t i = 0; i < got.size(); ++i) outside += std::fabs(got[i] - want[i].v) > want[i].e;
    EXPECT_EQ(outside, 0) << width << " wide";
  }
}

TEST_F(VulkanMisc, SsmConvMatchesTheCpuAcrossSteps) {
  // A prompt longer than one block of tokens, then single-token steps (fewer tokens than the state
  // holds rows), then a two-token step: outputs and the carried state against cpu::ssm_conv.
  std::mt19937 rng(23);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const uint32_t kernel : {4u, 2u}) {
    const uint32_t width = 200;
    std::vector<float> w(static_cast<size_t>(width) * kernel), state(static_cast<size_t>(kernel - 1) * width);
    for (auto& v : w) v = nd(rng);
    for (auto& v : state) v = nd(rng);
    Buf bw(*ctx_, w), bs(*ctx_, state);
    for (const uint32_t n_tok : {19u, 1u, 1u, 2u}) {
      std::vector<float> x(static_cast<size_t>(width) * n_tok), want(x.size());
      for (auto& v : x) v = nd(rng);
      // The kernel's formula, exactly and with its bound under Vulkan's precision: s = a dot product of
      // `kernel` terms over the rows (state, x); out = s / (1 + exp(-s)).
      std::vector<test::Fb> exact(x.size());
      for (uint32_t t = 0; t < n_tok; ++t) {
        for (uint32_t ch = 0; ch < width; ++ch) {
          std::vector<test::Fb> wj, xj;
          for (uint32_t j = 0; j < kernel; ++j) {
            const uint32_t r = t + j;
            wj.push_back(w[static_cast<size_t>(ch) * kernel + j]);
            xj.push_back(r < kernel - 1 ? state[static_cast<size_t>(r) * width + ch] : x[static_cast<size_t>(r - (kernel - 1)) * width + ch]);
          }
          const test::Fb sum = test::dot(wj, xj);
          exact[static_cast<size_t>(t) * width + ch] = test::vk::div(sum, test::Fb(1.0) + test::vk::exp(-sum));
        }
      }
      cpu::ssm_conv(x.data(), w.data(), state.data(), want.data(), width, static_cast<int>(kernel), n_tok);  // the next state
      Buf bx(*ctx_, x), bo(*ctx_, x.size() * 4);
      ssm_conv(*ctx_, ctx_->immediate(), bx.view(), bw.view(), bs.view(), bo.view(), width, kernel, n_tok);
      const auto got = bo.read<float>(want.size());
      int outside = 0;
      for (size_t i = 0; i < got.size(); ++i) outside += std::fabs(got[i] - exact[i].v) > exact[i].e;
      EXPECT_EQ(outside, 0) << "kernel " << kernel << ", " << n_tok << " tokens";
      EXPECT_EQ(bs.read<float>(state.size()), state) << "kernel " << kernel << ", " << n_tok << " tokens";
    }
  }
}

// delta_net.comp's log(1 + u): w = 1 + u; w == 1 ? u : log(w) * (u / (w - 1)). The quotient undoes w's
// rounding exactly, so the error is log's (Vulkan: 2^-21 absolute for w in [0.5, 2], else 3 ulps) carried
// by a factor within one rounding of 1, plus the quotient's and the product's roundings (2.5 + 0.5 ulps).
test::Fb log1p_trick(const test::Fb& u) {
  const double v = std::log1p(u.v), lo = u.v - u.e;
  const double carried = lo > -1 ? u.e / (1 + lo) : INFINITY;  // slope 1 / (1 + u)
  const double w = 1 + u.v;
  const double log_err = w >= 0.5 && w <= 2.0 ? 0x1p-21 : test::ulps(3, std::fabs(std::log(w)));
  return {v, carried + log_err * (1 + 4 * test::kU) + test::ulps(3, std::fabs(v) + log_err)};
}

// One token of one value head through delta_net.comp's formulas, exactly and with the bound of its
// float arithmetic under Vulkan's precision, from the exact state S (dk x dv). Errors already in the
// state are carried separately: the exact map S -> exp(g) (I - beta k k^T) S is a contraction for g <= 0,
// 0 <= beta <= 1, |k| <= 1, so a column's error bound E_j passes through unchanged and the step's own
// rounding adds to it; the output o_j = S_j . q reads E_j |q|.
void delta_net_token(std::vector<double>& S, std::vector<double>& E, int dk, int dv, const float* q, const float* k,
                     const float* v, float a, float b, float A, float dt, std::vector<double>& out_v, std::vector<double>& out_e) {
  using test::Fb;
  namespace vk = test::vk;
  const Fb x = Fb(a) + Fb(dt);
  const Fb sp = x.v > 20.0 ? x : log1p_trick(vk::exp(x));
  const Fb decay = vk::exp(Fb(A) * sp);
  const Fb beta = vk::div(Fb(1.0), Fb(1.0) + vk::exp(-Fb(b)));
  const auto kv = test::exact(k, static_cast<size_t>(dk)), qv = test::exact(q, static_cast<size_t>(dk));
  const Fb inv_k = vk::inversesqrt(test::dot(kv, kv) + Fb(1e-6f));
  const Fb q_scale = vk::inversesqrt(Fb(static_cast<double>(dk)));
  const Fb q_norm = q_scale * vk::inversesqrt(test::dot(qv, qv) + Fb(1e-6f));
  const double qn = std::sqrt(test::dot(qv, qv).v) * q_norm.v;  // |q| after normalisation
  for (int j = 0; j < dv; ++j) {
    std::vector<Fb> col(static_cast<size_t>(dk));
    for (int i = 0; i < dk; ++i) col[static_cast<size_t>(i)] = Fb(S[static_cast<size_t>(i * dv + j)]) * decay;
    const Fb delta = (Fb(v[j]) - test::dot(col, kv) * inv_k) * beta;
    const Fb dk_ = inv_k * delta;
    double local = 0;
    for (int i = 0; i < dk; ++i) {
      Fb& s = col[static_cast<size_t>(i)];
      s = s + kv[static_cast<size_t>(i)] * dk_;
      S[static_cast<size_t>(i * dv + j)] = s.v;
      local += s.e * s.e;
    }
    const Fb o = test::dot(col, qv) * q_norm;
    out_v[static_cast<size_t>(j)] = o.v;
    out_e[static_cast<size_t>(j)] = o.e + qn * (E[static_cast<size_t>(j)] + std::sqrt(local));
    E[static_cast<size_t>(j)] += std::sqrt(local);
  }
}

TEST_F(VulkanMisc, DeltaNetMatchesTheDefinition) {
  // A prompt, then a decode step continuing from the state the kernel kept: outputs and state against
  // the definition's exact values within the bound of the kernel's arithmetic (delta_net_token). Shapes:
  // grouped and tiled heads, full 128 x 128 heads and sizes that leave partial column blocks and row
  // groups, a long prompt, and an a + dt_bias past softplus's linear cut.
  struct Case {
    int n_head_k, n_head_v, dk, dv;
    bool tiled;
    int n_tok;
  };
  std::mt19937 rng(24);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> ud(-1.0f, 1.0f);
  for (const Case c : {Case{2, 4, 128, 128, false, 6}, Case{2, 6, 40, 48, true, 70}, Case{1, 2, 64, 32, false, 3}}) {
    const size_t qw = static_cast<size_t>(c.n_head_k * c.dk), vw = static_cast<size_t>(c.n_head_v * c.dv);
    const auto hv = static_cast<size_t>(c.n_head_v);
    std::vector<float> A(hv), dt(hv), state0(hv * static_cast<size_t>(c.dk * c.dv));
    for (auto& v : A) v = -std::exp(ud(rng));
    for (auto& v : dt) v = ud(rng);
    for (auto& v : state0) v = nd(rng) * 0.1f;
    std::vector<std::vector<double>> S(hv), E(hv);
    for (size_t h = 0; h < hv; ++h) {
      S[h].assign(state0.begin() + static_cast<std::ptrdiff_t>(h * c.dk * c.dv), state0.begin() + static_cast<std::ptrdiff_t>((h + 1) * c.dk * c.dv));
      E[h].assign(static_cast<size_t>(c.dv), 0.0);
    }
    Buf bA(*ctx_, A), bdt(*ctx_, dt), bst(*ctx_, state0);
    for (const int n : {c.n_tok, 1}) {
      const auto un = static_cast<size_t>(n);
      std::vector<float> q(un * qw), k(un * qw), v(un * vw), a(un * hv), b(un * hv);
      for (auto& x : q) x = nd(rng);
      for (auto& x : k) x = nd(rng);
      for (auto& x : v) x = nd(rng);
      for (auto& x : a) x = nd(rng);
      for (auto& x : b) x = nd(rng);
      a[0] = 25.0f;
      std::vector<double> want(un * vw), bound(un * vw), ov(static_cast<size_t>(c.dv)), oe(ov.size());
      for (size_t t = 0; t < un; ++t) {
        for (size_t h = 0; h < hv; ++h) {
          const size_t kh = c.tiled ? h % static_cast<size_t>(c.n_head_k) : h / (hv / static_cast<size_t>(c.n_head_k));
          delta_net_token(S[h], E[h], c.dk, c.dv, q.data() + t * qw + kh * static_cast<size_t>(c.dk), k.data() + t * qw + kh * static_cast<size_t>(c.dk),
                          v.data() + t * vw + h * static_cast<size_t>(c.dv), a[t * hv + h], b[t * hv + h], A[h], dt[h], ov, oe);
          for (size_t j = 0; j < static_cast<size_t>(c.dv); ++j) {
            want[t * vw + h * static_cast<size_t>(c.dv) + j] = ov[j];
            bound[t * vw + h * static_cast<size_t>(c.dv) + j] = oe[j];
          }
        }
      }
      Buf bq(*ctx_, q), bk(*ctx_, k), bv(*ctx_, v), ba(*ctx_, a), bb(*ctx_, b), bo(*ctx_, un * vw * 4);
      delta_net(*ctx_, ctx_->immediate(), bq.view(), bk.view(), bv.view(), ba.view(), bb.view(), bA.view(), bdt.view(),
                bst.view(), bo.view(), static_cast<uint32_t>(c.n_head_k), static_cast<uint32_t>(c.n_head_v),
                static_cast<uint32_t>(c.dk), static_cast<uint32_t>(c.dv), c.tiled, static_cast<uint32_t>(n));
      const auto got = bo.read<float>(un * vw);
      const auto st = bst.read<float>(state0.size());
      const std::string what = std::to_string(c.n_head_v) + " heads of " + std::to_string(c.dk) + " x " +
                               std::to_string(c.dv) + ", " + std::to_string(n) + " tokens";
      int outside = 0, state_outside = 0;
      for (size_t i = 0; i < got.size(); ++i) outside += std::fabs(got[i] - want[i]) > bound[i];
      for (size_t h = 0; h < hv; ++h) {
        for (size_t e = 0; e < static_cast<size_t>(c.dk * c.dv); ++e) {
          state_outside += std::fabs(st[h * static_cast<size_t>(c.dk * c.dv) + e] - S[h][e]) > E[h][e % static_cast<size_t>(c.dv)];
        }
      }
      EXPECT_EQ(outside, 0) << what << ": outputs";
      EXPECT_EQ(state_outside, 0) << what << ": state";
    }
  }
}

TEST_F(VulkanMisc, CopyRowsDoesSplitConcatAndSelectLast) {
  std::mt19937 rng(25);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const uint32_t n_tok = 7;
  // Split as the CPU executor does it: n_head groups of group_stride per row, each group's
  // [group_offset, + piece); once with 4-aligned sizes (16-byte copies), once without.
  struct Split {
    uint32_t in_w, n_head, group_stride, group_offset, piece;
  };
  for (const Split s : {Split{96, 4, 24, 8, 16}, Split{90, 3, 30, 5, 7}}) {
    std::vector<float> x(static_cast<size_t>(s.in_w) * n_tok);
    for (auto& v : x) v = nd(rng);
    const uint32_t width = s.n_head * s.piece;
    std::vector<float> want(static_cast<size_t>(width) * n_tok);
    for (uint32_t t = 0; t < n_tok; ++t) {
      for (uint32_t gi = 0; gi < s.n_head; ++gi) {
        std::memcpy(want.data() + t * width + gi * s.piece, x.data() + t * s.in_w + gi * s.group_stride + s.group_offset,
                    s.piece * sizeof(float));
      }
    }
    Buf bx(*ctx_, x), bo(*ctx_, want.size() * 4);
    copy_rows(*ctx_, ctx_->immediate(), bx.view(), bo.view(), n_tok, 0, s.in_w, s.group_offset, s.group_stride, s.n_head,
              s.piece, width, 0);
    EXPECT_EQ(bo.read<float>(want.size()), want) << "split of " << s.in_w << " into " << s.n_head << " x " << s.piece;
  }
  // Concat of parts 12, 5 and 20 wide: one call per part, each into its columns.
  {
    const std::vector<uint32_t> widths = {12, 5, 20};
    const uint32_t width = 37;
    std::vector<float> want(static_cast<size_t>(width) * n_tok);
    Buf bo(*ctx_, want.size() * 4);
    uint32_t at = 0;
    for (const uint32_t pw : widths) {
      std::vector<float> x(static_cast<size_t>(pw) * n_tok);
      for (auto& v : x) v = nd(rng);
      for (uint32_t t = 0; t < n_tok; ++t) std::memcpy(want.data() + t * width + at, x.data() + t * pw, pw * sizeof(float));
      Buf bx(*ctx_, x);
      copy_rows(*ctx_, ctx_->immediate(), bx.view(), bo.view(), n_tok, 0, pw, 0, 0, 1, pw, width, at);
      at += pw;
    }
    EXPECT_EQ(bo.read<float>(want.size()), want) << "concat";
  }
  // SelectLast: the last row only.
  {
    const uint32_t width = 64;
    std::vector<float> x(static_cast<size_t>(width) * n_tok);
    for (auto& v : x) v = nd(rng);
    const std::vector<float> want(x.end() - width, x.end());
    Buf bx(*ctx_, x), bo(*ctx_, width * 4);
    copy_rows(*ctx_, ctx_->immediate(), bx.view(), bo.view(), 1, n_tok - 1, width, 0, 0, 1, width, width, 0);
    EXPECT_EQ(bo.read<float>(width), want) << "select last";
  }
}

TEST_F(VulkanMisc, ArgmaxPicksTheGreedySamplersToken) {
  // Against sample::Sampler with temperature 0 (Candidates::keep_best): the first of equal maxima,
  // NaN never, +inf above every finite value, -0 equal to +0; vocabularies from one
  // workgroup's share to 2^18; through a recording as the executor runs it (two dispatches, a barrier).
  std::mt19937 rng(26);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  struct Case {
    uint32_t n;
    const char* what;
  };
  for (const Case c : {Case{1000, "plain"}, Case{151936, "tie"}, Case{262144, "tie across groups"}, Case{70000, "nan"},
                       Case{5000, "inf"}, Case{2048, "negative zero"}}) {
    const std::string what = c.what;
    std::vector<float> x(c.n);
    for (auto& v : x) v = nd(rng);
    if (what == "tie") x[5000] = x[90000] = x[150000] = 100.0f;
    if (what == "tie across groups") x[2047] = x[2048] = x[200000] = 50.0f;
    if (what == "nan") {
      x[10] = nan;
      x[69999] = 60.0f;
      x[0] = nan;
    }
    if (what == "inf") x[4000] = x[4500] = inf;
    if (what == "negative zero") {
      for (auto& v : x) v = -std::fabs(v) - 1.0f;
      x[700] = -0.0f;
      x[1500] = 0.0f;
    }
    sample::Sampler greedy(sample::SamplerParams::greedy());
    const auto want = static_cast<uint32_t>(greedy.sample(x));
    Buf bx(*ctx_, x), bo(*ctx_, 4), bs(*ctx_, argmax_scratch_bytes(c.n));
    Recording rec(*ctx_, 2);
    argmax(*ctx_, rec, bx.view(), bo.view(), bs.view(), c.n);
    rec.submit_and_wait();
    EXPECT_EQ(bo.read<uint32_t>(1)[0], want) << what << ", " << c.n << " values";
  }
  // Nothing to draw (the sampler throws): every value -inf or NaN.
  for (const float fill : {-inf, nan}) {
    std::vector<float> x(3000, fill);
    x[2999] = -inf;
    sample::Sampler greedy(sample::SamplerParams::greedy());
    EXPECT_THROW(greedy.sample(x), Error);
    Buf bx(*ctx_, x), bo(*ctx_, 4), bs(*ctx_, argmax_scratch_bytes(3000));
    argmax(*ctx_, ctx_->immediate(), bx.view(), bo.view(), bs.view(), 3000);
    EXPECT_EQ(bo.read<uint32_t>(1)[0], 0xffffffffu) << (fill < 0 ? "all -inf" : "NaN and -inf");
  }
}

}  // namespace
}  // namespace zinc::backend::vk
