// ZINC_RT's decode plan (src/backend/zinc_rt/plan.h) run on the host: every launch of the Qwen3 and
// Llama fixtures' steps (tests/models/fixtures, converted and quantized to Q4_K_M here) by the host
// build of its kernel, over a region of host memory, against the CPU backend on the same file with the
// same F16 cache. What this tests is the plan (which kernels, their arguments, the buffers, the step's
// parameters, the caches from step to step) and the kernels' logic; an AMD GPU runs the same launches
// from the packets a queue encodes (none here).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <span>
#include <cstring>
#include <filesystem>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/zinc_rt/plan.h"
#include "convert/convert.h"
#include "core/error.h"
#include "host_kernels.h"
#include "model/model.h"
#include "quant/model_quantize.h"
#include "quant/dot.h"
#include "quant/fp16.h"
#include "quant/quant.h"
#include "raw_gguf.h"

namespace zinc::backend::zinc_rt {
namespace {

const std::filesystem::path kFixtures = ZINC_FIXTURES_DIR;

// The fixture converted to F32 and quantized to `mixture` in `tmp`, opened.
gguf::File quantized(const std::string& fixture, const std::string& mixture, const test::TempDir& tmp) {
  convert::ConvertOptions copts;
  copts.outtype = "f32";
  convert::convert_hf(kFixtures / fixture, tmp.file("f32.gguf"), copts);
  const gguf::File f32 = gguf::File::open(tmp.file("f32.gguf"));
  quant::QuantizeOptions qo;
  qo.mixture = *quant::mixture_by_name(mixture);
  qo.threads = 2;
  quant::quantize_model(f32, tmp.file("q.gguf"), qo);
  return gguf::File::open(tmp.file("q.gguf"));
}

// A plan over host memory: built once to learn its size, then again at the memory's address.
struct HostPlan {
  std::vector<uint64_t> memory;
  std::unique_ptr<DecodePlan> plan;
  HostPlan(const graph::Graph& g, const gguf::File& f, int32_t n_ctx) {
    memory.resize((DecodePlan(g, f, n_ctx, 0).bytes() + 7) / 8);
    plan = std::make_unique<DecodePlan>(g, f, n_ctx, reinterpret_cast<uintptr_t>(memory.data()));
    plan->write_weights(f, reinterpret_cast<uint8_t*>(memory.data()));
  }
  std::vector<float> step(int32_t token, int32_t pos) {
    const std::vector<uint32_t> p = plan->params(token, pos);
    std::memcpy(reinterpret_cast<uint8_t*>(memory.data()) + plan->params_offset(), p.data(), p.size() * 4);
    for (const Launch& l : plan->launches()) host::run_launch(l);
    const float* logits = reinterpret_cast<const float*>(reinterpret_cast<const uint8_t*>(memory.data()) + plan->logits_offset());
    return {logits, logits + plan->n_vocab()};
  }
};

// Each node of the step just run against the CPU's definition, on the plan's own inputs (every
// activation keeps its own memory, so after a step each holds this step's value): the embedding row,
// the norms, the products (the CPU's Q8_K codes of the plan's input, quant::dot_ref of each row), the
// rotations and the adds bit for bit; the SwiGLU within 2e-6 relative; the attention's cache row at
// the position the step's own key and value rounded to half, and its output within 2e-5 of the softmax
// in double over the cache's rows 0..pos. A rounding difference never carries from one node to the
// next here, so these bounds are those of the kernels alone.
void expect_each_node(const graph::Graph& g, const gguf::File& f, const HostPlan& rt, int32_t tok, int32_t pos, const std::string& what) {
  const auto* region = reinterpret_cast<const uint8_t*>(rt.memory.data());
  const auto at = [&](graph::TensorId id) -> const float* {
    if (id == g.logits) return reinterpret_cast<const float*>(region + rt.plan->logits_offset());
    const int64_t off = rt.plan->activation_offset(id);
    return off < 0 ? nullptr : reinterpret_cast<const float*>(region + off);
  };
  const auto floats = [&](graph::TensorId id) {
    const gguf::TensorInfo& info = f.tensor(g.tensor(id).name);
    std::vector<float> v(info.n_elements);
    quant::dequantize_row(info.type, f.tensor_data(info).data(), v.data(), static_cast<int64_t>(v.size()));
    return v;
  };
  for (const graph::Node& n : g.nodes) {
    const std::string name = what + " position " + std::to_string(pos) + " " + g.tensor(n.out).name;
    const float* out = at(n.out);
    ASSERT_NE(out, nullptr) << name;
    const int64_t width = g.tensor(n.out).ne[0];
    std::vector<float> want(static_cast<size_t>(width));
    float bound = 0;  // relative; 0: equal floats
    switch (n.op) {
      case graph::Op::Embed: {
        const gguf::TensorInfo& w = f.tensor(g.tensor(n.in[0]).name);
        quant::dequantize_row(w.type, f.tensor_data(w).data() + static_cast<size_t>(tok) * quant::row_size(w.type, width), want.data(), width);
        break;
      }
      case graph::Op::RmsNorm: {
        const std::vector<float> w = floats(n.in[1]);
        cpu::rms_norm(at(n.in[0]), w.data(), want.data(), width, n.norm().group > 0 ? n.norm().group : width, 1, n.norm().eps, 0.0f);
        break;
      }
      case graph::Op::MatMul: {
        const gguf::TensorInfo& w = f.tensor(g.tensor(n.in[0]).name);
        const auto ncols = static_cast<int64_t>(w.ne[0]);
        std::vector<uint8_t> codes(quant::activation_row_size(w.type, ncols));
        quant::quantize_activation(w.type, at(n.in[1]), codes.data(), ncols);
        const size_t row = quant::row_size(w.type, ncols);
        for (int64_t r = 0; r < width; ++r) want[static_cast<size_t>(r)] = quant::dot_ref(w.type, f.tensor_data(w).data() + static_cast<size_t>(r) * row, codes.data(), ncols);
        break;
      }
      case graph::Op::Add:
        for (int64_t i = 0; i < width; ++i) want[static_cast<size_t>(i)] = at(n.in[0])[i] + at(n.in[1])[i];
        break;
      case graph::Op::SwiGLU:
        cpu::swiglu(at(n.in[0]), at(n.in[1]), want.data(), width);
        bound = 2e-6f;
        break;
      case graph::Op::Rope: {
        const graph::RopeOpParams& r = n.rope();
        const std::vector<float> factors = n.in.size() > 1 ? floats(n.in[1]) : std::vector<float>();
        cpu::rope(at(n.in[0]), want.data(), 1, r.n_head, r.head_dim, r.n_rot, r.mode, r.rope, factors.empty() ? nullptr : factors.data(), pos);
        break;
      }
      case graph::Op::SelectLast:
        std::copy(at(n.in[0]), at(n.in[0]) + width, want.begin());
        break;
      case graph::Op::Attention: {
        const graph::AttentionParams& a = n.attention();
        const int64_t kvw = int64_t{a.n_head_kv} * a.head_dim;
        const DecodePlan::Cache c = rt.plan->cache(n.out);
        const auto* kc = reinterpret_cast<const uint16_t*>(region + c.k);
        const auto* vc = reinterpret_cast<const uint16_t*>(region + c.v);
        int wrong_row = 0;
        for (int64_t i = 0; i < kvw; ++i) {
          wrong_row += kc[pos * kvw + i] != quant::f32_to_fp16(at(n.in[1])[i]);
          wrong_row += vc[pos * kvw + i] != quant::f32_to_fp16(at(n.in[2])[i]);
        }
        EXPECT_EQ(wrong_row, 0) << name << ": the cache's row at the position";
        const float* q = at(n.in[0]);
        for (int h = 0; h < a.n_head; ++h) {
          const int64_t off = int64_t{h / (a.n_head / a.n_head_kv)} * a.head_dim;
          std::vector<double> s(static_cast<size_t>(pos) + 1);
          double mx = -1e300, sum = 0;
          for (int32_t j = 0; j <= pos; ++j) {
            double d = 0;
            for (int i = 0; i < a.head_dim; ++i) d += double{q[h * a.head_dim + i]} * quant::fp16_to_f32(kc[j * kvw + off + i]);
            mx = std::max(mx, s[static_cast<size_t>(j)] = d * a.scale);
          }
          for (double& x : s) sum += (x = std::exp(x - mx));
          for (int i = 0; i < a.head_dim; ++i) {
            double o = 0;
            for (int32_t j = 0; j <= pos; ++j) o += s[static_cast<size_t>(j)] * quant::fp16_to_f32(vc[j * kvw + off + i]);
            want[static_cast<size_t>(h * a.head_dim + i)] = static_cast<float>(o / sum);
          }
        }
        bound = -2e-5f;  // absolute (the values' scale is about 1)
        break;
      }
      default:
        FAIL() << name << ": a node the plan should have refused";
    }
    int outside = 0;
    for (int64_t i = 0; i < width; ++i) {
      const float w = want[static_cast<size_t>(i)], o = out[i];
      outside += bound == 0 ? o != w : !(std::fabs(o - w) <= (bound > 0 ? bound * std::fabs(w) : -bound));
    }
    EXPECT_EQ(outside, 0) << name << " (" << graph::op_name(n.op) << ")";
  }
}

int32_t argmax(std::span<const float> v) { return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin()); }

class ZincRtHostPlan : public ::testing::TestWithParam<std::string> {};

TEST_P(ZincRtHostPlan, DecodesAsTheCpuBackend) {
  // A prompt of 8 tokens fed one a step, then 16 steps of the CPU's greedy choices fed to both (the
  // logits then compare position by position). The plan's kernels compute what the CPU computes (the
  // activations' Q8_K codes, integer block sums, the CPU's norm and rotation bit for bit, the same F16
  // cache), so the logits agree to float rounding until a value the two sum in different orders lands
  // across the rounding boundary of an 8-bit code or of a half in the cache, which on these fixtures
  // moves them by up to a few percent from then on (the bound of the Vulkan and CUDA backends' same
  // test: 8%). Wherever the CPU's choice leads its runner-up by more than twice the two differ, the
  // plan makes the same choice; most steps are such clear choices.
  if (!host::kBuilt) GTEST_SKIP() << "ZINC_RT's kernels were not built (no clang-19 or later with ld.lld: install clang-19 lld-19)";
  test::TempDir tmp;
  const gguf::File f = quantized(GetParam(), "Q4_K_M", tmp);
  const model::Model m = model::load(f);
  auto cpu = make_cpu_backend(1);
  ExecOptions opts;
  opts.n_ctx = 64;
  opts.kv_type = KvType::F16;
  auto exec = cpu->load(m.graph, f, {})->instantiate(opts);
  HostPlan rt(m.graph, f, opts.n_ctx);
  std::vector<int32_t> tokens = {0, 17, 300, 42, 7, 99, 256, 3};
  constexpr int32_t kSteps = 24;
  double worst = 0;
  int clear = 0, exact_steps = 0;
  for (int32_t pos = 0; pos < kSteps; ++pos) {
    const int32_t tok = tokens[static_cast<size_t>(pos)];
    exec->run(graph::StepParams::one({tok}, pos));
    const std::span<const float> want = exec->logits();
    const std::vector<float> got = rt.step(tok, pos);
    expect_each_node(m.graph, f, rt, tok, pos, GetParam());
    ASSERT_EQ(want.size(), got.size());
    float scale = 0, diff = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      scale = std::max(scale, std::fabs(want[i]));
      diff = std::max(diff, std::fabs(got[i] - want[i]));
    }
    worst = std::max(worst, double{diff / scale});
    exact_steps += diff <= 1e-5f * scale;
    EXPECT_LE(diff, 0.08f * scale) << GetParam() << " position " << pos;
    std::vector<float> sorted(want.begin(), want.end());
    std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
    if (sorted[0] - sorted[1] > 2 * diff) {
      ++clear;
      EXPECT_EQ(argmax(got), argmax(want)) << GetParam() << " position " << pos << ": a clear choice";
    }
    if (pos + 1 >= static_cast<int32_t>(tokens.size())) tokens.push_back(argmax(want));
  }
  EXPECT_GE(clear, kSteps / 2) << GetParam() << ": too few clear choices to judge";
  std::printf("%s Q4_K_M: %d steps, logits within %.2e of the largest (within 1e-5 at %d steps), %d clear choices, all agreeing\n",
              GetParam().c_str(), kSteps, worst, exact_steps, clear);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ZincRtHostPlan, ::testing::Values("qwen3", "llama"));

TEST(ZincRtPlan, RefusesWhatItsKernelsCannotRunNamingTheNode) {
  // An F32 file: its products are no K-quant, and the plan says which node and why.
  test::TempDir tmp;
  convert::ConvertOptions copts;
  copts.outtype = "f32";
  convert::convert_hf(kFixtures / "qwen3", tmp.file("f32.gguf"), copts);
  const gguf::File f = gguf::File::open(tmp.file("f32.gguf"));
  const model::Model m = model::load(f);
  try {
    DecodePlan(m.graph, f, 16, 0);
    FAIL() << "an F32 graph was planned";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ZINC_RT cannot run"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("F32"), std::string::npos) << e.what();
  }
  const gguf::File q = quantized("qwen3", "Q4_K_M", tmp);
  const DecodePlan p(model::load(q).graph, q, 16, 0);
  EXPECT_THROW(p.params(0, 16), Error);
  EXPECT_THROW(p.params(0, -1), Error);
}

}  // namespace
}  // namespace zinc::backend::zinc_rt
