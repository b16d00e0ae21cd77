// Every architecture's fixture (tests/models/fixtures: tiny random-weight checkpoints with transformers'
// reference outputs) through the Vulkan backend, against the CPU backend on the same file: logits at
// every position, by one prefill and by prefill then decode (the recorded decode step replayed), and
// 64 greedy tokens on Q8_0 weights chosen by the device's argmax.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "convert/convert.h"
#include "core/error.h"
#include "quant/model_quantize.h"
#include "raw_gguf.h"
#include "runtime/session.h"

namespace zinc {
namespace {

const std::filesystem::path kFixtures = ZINC_FIXTURES_DIR;

std::vector<int32_t> ints(const nlohmann::json& j) { return j.get<std::vector<int32_t>>(); }

class VulkanFixture : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    try {
      gpu_ = backend::make_vulkan_backend();
    } catch (const Error& e) {
      GTEST_SKIP() << "no Vulkan device: " << e.what();
    }
    std::ifstream in(kFixtures / GetParam() / "reference.json");
    const auto j = nlohmann::json::parse(in);
    sequence_ = ints(j["sequences"][2]);
    prompt_ = ints(j["greedy_prompt"]);
  }
  // The fixture converted to F32, or quantized to `mixture` from that.
  gguf::File file(const std::string& mixture) {
    convert::ConvertOptions copts;
    copts.outtype = "f32";
    const auto f32 = tmp_.file("f32.gguf");
    if (!std::filesystem::exists(f32)) convert::convert_hf(kFixtures / GetParam(), f32, copts);
    if (mixture == "F32") return gguf::File::open(f32);
    quant::QuantizeOptions qo;
    qo.mixture = *quant::mixture_by_name(mixture);
    qo.threads = 2;
    const auto path = tmp_.file(mixture + ".gguf");
    quant::quantize_model(gguf::File::open(f32), path, qo);
    return gguf::File::open(path);
  }
  std::unique_ptr<backend::Backend> cpu_ = backend::make_cpu_backend(), gpu_;
  std::vector<int32_t> sequence_, prompt_;
  test::TempDir tmp_;
};

// Largest difference relative to the largest logit.
double relative_gap(std::span<const float> got, std::span<const float> want) {
  double worst = 0, scale = 1e-6;
  for (size_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
  }
  return worst / scale;
}

TEST_P(VulkanFixture, LogitsMatchTheCpu) {
  const gguf::File f = file("F32");
  backend::ExecOptions opts;
  opts.n_ctx = 96;
  opts.max_tokens = 32;
  opts.kv_type = backend::KvType::F32;
  runtime::Session cpu(f, *cpu_, opts), gpu(f, *gpu_, opts);
  const auto c = cpu.eval(sequence_, true);
  const std::vector<float> want(c.begin(), c.end());
  const auto g = gpu.eval(sequence_, true);
  ASSERT_EQ(g.size(), want.size());
  EXPECT_LT(relative_gap(g, want), 2e-4) << GetParam() << ": one prefill";
  EXPECT_EQ(gpu.last_argmax(), cpu.last_argmax()) << GetParam();

  // Prefill 5 tokens, then one at a time: the decode step's recording is replayed at every position.
  runtime::Session steps(f, *gpu_, opts);
  const auto nv = static_cast<size_t>(steps.n_vocab());
  const auto first = steps.eval(std::span<const int32_t>(sequence_.data(), 5), true);
  EXPECT_LT(relative_gap(first, std::span<const float>(want).first(5 * nv)), 2e-4) << GetParam();
  for (size_t i = 5; i < sequence_.size(); ++i) {
    const auto l = steps.eval(std::span<const int32_t>(&sequence_[i], 1));
    ASSERT_EQ(l.size(), nv);
    EXPECT_LT(relative_gap(l, std::span<const float>(want).subspan(i * nv, nv)), 2e-4) << GetParam() << " at " << i;
  }
}

TEST_P(VulkanFixture, GreedyTokensMatchTheCpuOnQ8_0) {
  const gguf::File f = file("Q8_0");
  backend::ExecOptions opts;
  opts.n_ctx = static_cast<int32_t>(prompt_.size()) + 80;
  opts.max_tokens = 16;
  runtime::Session cpu(f, *cpu_, opts), gpu(f, *gpu_, opts);
  std::vector<int32_t> a, b;
  cpu.eval(prompt_);
  gpu.eval(prompt_);
  for (int i = 0; i < 64; ++i) {
    a.push_back(cpu.last_argmax());
    b.push_back(gpu.last_argmax());
    cpu.eval(std::span<const int32_t>(&a.back(), 1));
    gpu.eval(std::span<const int32_t>(&b.back(), 1));
  }
  EXPECT_EQ(b, a) << GetParam();
}

INSTANTIATE_TEST_SUITE_P(Architectures, VulkanFixture,
                         ::testing::Values("llama", "qwen2", "qwen3", "gemma3", "llama_rope_llama3", "qwen3_yarn", "qwen3_moe",
                                           "qwen3_next", "qwen3_5", "qwen3_5_moe", "gpt_oss", "gemma4", "gemma4_moe",
                                           "gemma4_global_kv"));

}  // namespace
}  // namespace zinc
