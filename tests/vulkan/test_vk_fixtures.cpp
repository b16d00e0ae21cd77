// Every architecture's fixture (tests/models/fixtures: tiny random-weight checkpoints with transformers'
// reference outputs) through a GPU backend (Vulkan; CUDA in tests/cuda), against the CPU backend on the same file: logits at
// every position, by one prefill and by prefill then decode (the recorded decode step replayed), and
// greedy decodes (64 tokens on a GPU) chosen by the device's argmax.
// Built for each GPU backend: Vulkan here (tests/vulkan), CUDA from tests/cuda with these four set.
#ifndef ZINC_GPU_FIXTURE
#define ZINC_GPU_FIXTURE VulkanFixture
#define ZINC_GPU_REAL_WEIGHTS VulkanRealWeights
#define ZINC_GPU_MAKE backend::make_vulkan_backend
#define ZINC_GPU_NAME "Vulkan"
#define ZINC_GPU_IS_VULKAN 1
#endif

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "backend/backend.h"
#if defined(ZINC_GPU_IS_VULKAN)
#include "backend/vulkan/vk_context.h"
#endif
#include "convert/convert.h"
#include "core/error.h"
#include "load_progress.h"
#include "model/model.h"
#include "quant/model_quantize.h"
#include "raw_gguf.h"
#include "seq_schedule.h"
#include "runtime/embed.h"
#include "runtime/session.h"

namespace zinc {
namespace {

const std::filesystem::path kFixtures = ZINC_FIXTURES_DIR;

std::vector<int32_t> ints(const nlohmann::json& j) { return j.get<std::vector<int32_t>>(); }

class ZINC_GPU_FIXTURE : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    try {
      gpu_ = ZINC_GPU_MAKE();
    } catch (const Error& e) {
      GTEST_SKIP() << "no " ZINC_GPU_NAME " device: " << e.what();
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
  // The reference sequence repeated to n tokens.
  std::vector<int32_t> repeated(size_t n) const {
    std::vector<int32_t> text;
    while (text.size() < n) text.insert(text.end(), sequence_.begin(), sequence_.end());
    text.resize(n);
    return text;
  }
  // A context of two sequences of 64 positions, steps of up to 8 tokens, an F32 cache.
  static backend::ExecOptions two_sequences() {
    backend::ExecOptions o;
    o.n_ctx = 64;
    o.n_seq = 2;
    o.max_tokens = 8;
    o.kv_type = backend::KvType::F32;
    return o;
  }
  std::unique_ptr<backend::Backend> cpu_ = backend::make_cpu_backend(), gpu_;
  std::vector<int32_t> sequence_, prompt_;
  test::TempDir tmp_;
};

// The bound for two backends computing the same float32 function (F32 weights, F32 cache), which may
// differ only in the order they sum: a float32 sum of n terms is off by at most n·u of the sum of the
// terms' magnitudes (Higham, Accuracy and Stability of Numerical Algorithms, §4.2; u = 2^-24). The
// fixtures' widest reduction has n = 512 terms: 3.1e-5 per reduction, and a logit passes a handful of
// chained reductions per layer, so 2e-4 of the largest logit. Measured on lavapipe against the CPU's
// AVX-512, AVX2 and scalar kernels: at most 3.2e-6. A wrong formula moves logits by 1e-2 or more.
constexpr double kFloat32Gap = 2e-4;

// Largest difference relative to the largest logit.
double relative_gap(std::span<const float> got, std::span<const float> want) {
  double worst = 0, scale = 1e-6;
  for (size_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
  }
  return worst / scale;
}

TEST_P(ZINC_GPU_FIXTURE, LogitsMatchTheCpu) {
  const gguf::File f = file("F32");
  backend::ExecOptions opts;
  opts.n_ctx = 96;
  opts.max_tokens = 6;  // the sequence in several steps: multi-token steps at positions past 0
  opts.kv_type = backend::KvType::F32;
  runtime::Session cpu(f, *cpu_, opts), gpu(f, *gpu_, opts);
  const auto c = cpu.eval(sequence_, true);
  const std::vector<float> want(c.begin(), c.end());
  const auto g = gpu.eval(sequence_, true);
  ASSERT_EQ(g.size(), want.size());
  EXPECT_LT(relative_gap(g, want), kFloat32Gap) << GetParam() << ": prefill";
  EXPECT_EQ(gpu.last_argmax(), cpu.last_argmax()) << GetParam();

  // Prefill 5 tokens, then one at a time: the decode step's recording is replayed at every position.
  runtime::Session steps(f, *gpu_, opts);
  const auto nv = static_cast<size_t>(steps.n_vocab());
  const auto first = steps.eval(std::span<const int32_t>(sequence_.data(), 5), true);
  EXPECT_LT(relative_gap(first, std::span<const float>(want).first(5 * nv)), kFloat32Gap) << GetParam();
  for (size_t i = 5; i < sequence_.size(); ++i) {
    const auto l = steps.eval(std::span<const int32_t>(&sequence_[i], 1));
    ASSERT_EQ(l.size(), nv);
    EXPECT_LT(relative_gap(l, std::span<const float>(want).subspan(i * nv, nv)), kFloat32Gap) << GetParam() << " at " << i;
  }
}

TEST_P(ZINC_GPU_FIXTURE, ContextsShareOneCopyOfTheWeights) {
  // Three contexts from one load: the device holds the weights once and each context's own memory (cache, arena, scratch) besides. Used in turn, interleaved,
  // each computes exactly the logits of the first: no context reads another's cache or activations.
  // (Against the CPU: LogitsMatchTheCpu; the 40-token steps here take the prefill GEMM, which on a
  // cooperative-matrix device rounds F32 activations to f16.)
  const gguf::File f = file("F32");
  const model::Model m = model::load(f);
  backend::ExecOptions opts;
  opts.n_ctx = 128;
  opts.max_tokens = 40;
  opts.kv_type = backend::KvType::F32;
  const uint64_t start = gpu_->device_bytes_in_use();
  test::LoadProgressLog progress;
  auto weights = gpu_->load(m.graph, f, progress.callback());
  const uint64_t loaded = gpu_->device_bytes_in_use();
  progress.expect_complete(m.graph, f, GetParam());
  EXPECT_EQ(loaded - start, weights->device_bytes()) << GetParam();
  std::vector<std::unique_ptr<runtime::Session>> sessions;
  uint64_t contexts = 0;
  for (int i = 0; i < 3; ++i) {
    sessions.push_back(std::make_unique<runtime::Session>(weights, opts));
    contexts += sessions.back()->executable().device_bytes();
  }
  EXPECT_GT(contexts, 0u);
  EXPECT_EQ(gpu_->device_bytes_in_use() - start, weights->device_bytes() + contexts) << GetParam();
  // Two 40-token steps each (the prefill GEMM), interleaved across the contexts.
  const std::vector<int32_t> text = repeated(80);
  const std::span<const int32_t> head(text.data(), 40), tail(text.data() + 40, text.size() - 40);
  std::vector<std::vector<float>> got(3);
  const auto run = [&](size_t i, std::span<const int32_t> part) {
    const auto l = sessions[i]->eval(part, true);
    got[i].insert(got[i].end(), l.begin(), l.end());
  };
  run(0, head);
  run(0, tail);
  run(1, head);
  run(2, head);
  run(2, tail);
  run(1, tail);
  EXPECT_EQ(got[0].size(), text.size() * static_cast<size_t>(sessions[0]->n_vocab())) << GetParam();
  EXPECT_EQ(got[1], got[0]) << GetParam();
  EXPECT_EQ(got[2], got[0]) << GetParam();
  sessions.clear();
  weights.reset();
  EXPECT_EQ(gpu_->device_bytes_in_use(), start) << GetParam() << ": memory left behind";
}

TEST_P(ZINC_GPU_FIXTURE, BackgroundContextBesideAnotherKeepsEachOnesLogits) {
  // A prompt read in chunks on a background context (ExecOptions::background: on CUDA its steps run
  // beside the other context's, on a stream of its own) while two sequences decode in another context
  // of the same weights, on two threads: every logits row of both is the one each gave alone, bit for
  // bit (the same steps' kernels; neither reads the other's memory). Where contexts take turns (Vulkan),
  // the same holds.
  const gguf::File f = file("F32");
  const model::Model m = model::load(f);
  auto weights = gpu_->load(m.graph, f);
  const std::vector<int32_t> text = repeated(24);
  const backend::ExecOptions d = two_sequences();
  backend::ExecOptions p = d;
  p.n_seq = 1;
  p.background = true;
  const int steps = 12;
  // The decoding context: two sequences' 4-token prompts in one step, then steps of a token each.
  const auto decode = [&](backend::Executable& exe) {
    std::vector<float> rows;
    graph::StepParams first;
    first.add(0, 0, {text.begin(), text.begin() + 4});
    first.add(1, 0, {text.begin() + 4, text.begin() + 8});
    exe.run(first);
    rows.assign(exe.logits().begin(), exe.logits().end());
    for (int k = 0; k < steps; ++k) {
      graph::StepParams step;
      step.add(0, 4 + k, {text[static_cast<size_t>(8 + k)]});
      step.add(1, 4 + k, {text[static_cast<size_t>(9 + k)]});
      exe.run(step);
      rows.insert(rows.end(), exe.logits().begin(), exe.logits().end());
    }
    return rows;
  };
  // The prompt's context: its 24 tokens in chunks of 8, every row's logits kept.
  const auto read = [&](backend::Executable& exe) {
    std::vector<float> rows;
    exe.seq_clear(0);
    for (int32_t at = 0; at < 24; at += 8) {
      exe.run(graph::StepParams::one({text.begin() + at, text.begin() + at + 8}, at, true));
      rows.insert(rows.end(), exe.logits().begin(), exe.logits().end());
    }
    return rows;
  };
  auto dec = weights->instantiate(d);
  auto pre = weights->instantiate(p);
  const std::vector<float> decode_alone = decode(*dec), read_alone = read(*pre);
  ASSERT_EQ(read_alone.size(), 24 * static_cast<size_t>(m.graph.n_vocab));
  dec->seq_clear(0);
  dec->seq_clear(1);
  std::vector<std::vector<float>> reads;
  std::exception_ptr failed;
  std::thread reader([&] {
    try {
      for (int round = 0; round < 2; ++round) reads.push_back(read(*pre));
    } catch (...) {
      failed = std::current_exception();
    }
  });
  const std::vector<float> decode_beside = decode(*dec);
  reader.join();
  if (failed) std::rethrow_exception(failed);
  EXPECT_EQ(decode_beside, decode_alone) << GetParam() << ": the decoding context's logits";
  ASSERT_EQ(reads.size(), 2u);
  for (const auto& r : reads) EXPECT_EQ(r, read_alone) << GetParam() << ": the background context's logits";
}

TEST_P(ZINC_GPU_FIXTURE, SequenceTakenFromAnotherContextContinuesExactly) {
  // 12 tokens read by one context (two steps), then taken (Executable::seq_take: on the device where
  // the backend copies there) into sequence 1 of another over the same weights, whose sequence 0 holds
  // other tokens: it continues bit for bit as the first context continuing itself, KV rows and
  // recurrent state alike, and sequence 0 as it was. Taken from a CPU context instead (through saved
  // bytes), it continues within float32 rounding of that.
  const gguf::File f = file("F32");
  const model::Model m = model::load(f);
  auto weights = gpu_->load(m.graph, f);
  const std::vector<int32_t> text = repeated(16);
  const backend::ExecOptions opts = two_sequences();
  const auto read = [&](backend::Executable& exe, int32_t seq) {
    for (int32_t at = 0; at < 12; at += 6) {
      graph::StepParams step;
      step.add(seq, at, {text.begin() + at, text.begin() + at + 6});
      exe.run(step);
    }
  };
  const auto next = [&](backend::Executable& exe, int32_t seq, int32_t at) {
    graph::StepParams step;
    step.add(seq, at, {text[static_cast<size_t>(at)]});
    exe.run(step);
    return std::vector<float>(exe.logits().begin(), exe.logits().end());
  };
  auto reader = weights->instantiate(opts), both = weights->instantiate(opts);
  read(*reader, 0);
  graph::StepParams other;
  other.add(0, 0, {sequence_.rbegin(), sequence_.rbegin() + 5});
  both->run(other);
  EXPECT_THROW(both->seq_take(*reader, 0, 1, 13), Error) << GetParam();
  both->seq_take(*reader, 0, 1, 12);
  for (int32_t at = 12; at < 15; ++at) EXPECT_EQ(next(*both, 1, at), next(*reader, 0, at)) << GetParam() << " token " << at;
  // Sequence 0: as a context that read only its 5 tokens.
  auto solo = weights->instantiate(opts);
  solo->run(other);
  EXPECT_EQ(next(*both, 0, 5), next(*solo, 0, 5)) << GetParam() << ": sequence 0";
  // From the CPU backend's context of the same file.
  auto cpu_weights = cpu_->load(m.graph, f);
  auto cpu_reader = cpu_weights->instantiate(opts);
  read(*cpu_reader, 0);
  auto fresh = weights->instantiate(opts);
  read(*fresh, 0);
  both->seq_take(*cpu_reader, 0, 1, 12);
  EXPECT_LT(relative_gap(next(*both, 1, 12), next(*fresh, 0, 12)), kFloat32Gap) << GetParam() << ": taken from the CPU";
}

TEST_P(ZINC_GPU_FIXTURE, SavedContextMovesBetweenBackends) {
  // Both backends save a context in one layout: 8 tokens evaluated on one, saved, restored on the other,
  // continue as one session that never moved (KV rows and recurrent state alike).
  const gguf::File f = file("F32");
  backend::ExecOptions opts;
  opts.n_ctx = 64;
  opts.kv_type = backend::KvType::F32;
  const std::span<const int32_t> head(sequence_.data(), 8), tail(sequence_.data() + 8, sequence_.size() - 8);
  runtime::Session whole(f, *cpu_, opts);
  const auto w = whole.eval(sequence_);
  const std::vector<float> want(w.begin(), w.end());
  for (const bool from_gpu : {true, false}) {
    runtime::Session src(f, from_gpu ? *gpu_ : *cpu_, opts), dst(f, from_gpu ? *cpu_ : *gpu_, opts);
    src.eval(head);
    dst.restore(src.save());
    EXPECT_EQ(dst.n_past(), 8);
    const auto got = dst.eval(tail);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_LT(relative_gap(got, want), kFloat32Gap) << GetParam() << (from_gpu ? ": " ZINC_GPU_NAME " to CPU" : ": CPU to " ZINC_GPU_NAME);
  }
}

// The length of the greedy decodes compared: 64 tokens on a GPU; 32 on a software Vulkan device
// (lavapipe, CI's), where a decode step of these tiny models takes ~40 ms (nearly all of it in the
// kernels its compiler made for the CPU: mul_mv_f32 ~2.3 ms a call) and these decodes were ~600 of
// CI's test-seconds. 16 prompt tokens and 32 steps still cross every fixture's sliding window (4
// tokens) many times over; the attention kernels' longer key ranges are the op suite's cases.
int decode_steps() {
  static const int n = ZINC_GPU_MAKE()->software_device() ? 32 : 64;  // asked once a device was found
  return n;
}

// decode_steps() greedy tokens, each chosen on the device (argmax there) and on the CPU.
struct GreedyRun {
  std::vector<int32_t> cpu, gpu;
  double worst_gap = 0;  // largest relative logit gap over the steps (both fed the CPU's tokens)
  int clear_steps = 0, clear_agree = 0;
  int first_unclear = 0;  // the first step whose choice was not clear (the number of steps: none)
};

GreedyRun greedy_pair(const gguf::File& cpu_file, const gguf::File& gpu_file, backend::Backend& cpu_backend,
                      backend::Backend& gpu_backend, const std::vector<int32_t>& prompt, const backend::ExecOptions& opts,
                      bool teacher_forced) {
  runtime::Session cpu(cpu_file, cpu_backend, opts), gpu(gpu_file, gpu_backend, opts);
  cpu.eval(prompt);
  gpu.eval(prompt);
  GreedyRun r;
  const int n = decode_steps();
  r.first_unclear = n;
  for (int i = 0; i < n; ++i) {
    const auto c = cpu.executable().logits(), g = gpu.executable().logits();
    r.cpu.push_back(cpu.last_argmax());
    r.gpu.push_back(gpu.last_argmax());
    r.worst_gap = std::max(r.worst_gap, relative_gap(g, c));
    // A clear choice: the CPU's best logit leads the runner-up by more than twice the largest
    // difference between the two backends' logits at this step (only then must they agree).
    std::vector<float> sorted(c.begin(), c.end());
    std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
    double diff = 0;
    for (size_t v = 0; v < c.size(); ++v) diff = std::max(diff, std::fabs(static_cast<double>(g[v]) - c[v]));
    if (sorted[0] - sorted[1] > 2 * diff) {
      ++r.clear_steps;
      r.clear_agree += r.cpu.back() == r.gpu.back();
    } else {
      r.first_unclear = std::min(r.first_unclear, i);
    }
    const int32_t next_cpu = r.cpu.back(), next_gpu = teacher_forced ? r.cpu.back() : r.gpu.back();
    cpu.eval(std::span<const int32_t>(&next_cpu, 1));
    gpu.eval(std::span<const int32_t>(&next_gpu, 1));
  }
  return r;
}

// How far rounding the cache to F16 moves the CPU's logits: the largest relative gap between an F16-cache
// and an F32-cache session over decode_steps() greedy steps (both fed the F16 session's tokens).
double f16_cache_effect(const gguf::File& f, backend::Backend& cpu, const std::vector<int32_t>& prompt,
                        backend::ExecOptions opts) {
  opts.kv_type = backend::KvType::F16;
  backend::ExecOptions o32 = opts;
  o32.kv_type = backend::KvType::F32;
  runtime::Session s16(f, cpu, opts), s32(f, cpu, o32);
  s16.eval(prompt);
  s32.eval(prompt);
  double rounding = 0;
  for (int i = 0; i < decode_steps(); ++i) {
    rounding = std::max(rounding, relative_gap(s16.executable().logits(), s32.executable().logits()));
    const int32_t next = s16.last_argmax();
    s16.eval(std::span<const int32_t>(&next, 1));
    s32.eval(std::span<const int32_t>(&next, 1));
  }
  if (rounding == 0) throw Error("the F16 cache rounded nothing");
  return rounding;
}

TEST_P(ZINC_GPU_FIXTURE, GreedyTokensMatchTheCpu) {
  // F32 weights and an F32 cache: both backends compute the same float32 function up to summation
  // order, so each follows its own argmax and the greedy tokens are the same up to the first step
  // whose choice is not clear (its margin under twice the logit gap; on these fixtures there is none).
  const gguf::File f = file("F32");
  backend::ExecOptions opts;
  opts.n_ctx = static_cast<int32_t>(prompt_.size()) + 80;
  opts.max_tokens = 8;
  opts.kv_type = backend::KvType::F32;
  const GreedyRun r = greedy_pair(f, f, *cpu_, *gpu_, prompt_, opts, false);
  const auto n = static_cast<size_t>(r.first_unclear);
  EXPECT_EQ(std::vector<int32_t>(r.gpu.begin(), r.gpu.begin() + n), std::vector<int32_t>(r.cpu.begin(), r.cpu.begin() + n))
      << GetParam();
  EXPECT_GE(r.first_unclear, decode_steps() / 2) << GetParam() << ": too few clear choices to judge";
  EXPECT_LT(r.worst_gap, kFloat32Gap) << GetParam();
}

TEST_P(ZINC_GPU_FIXTURE, F16CacheStaysWithinItsRounding) {
  // The default F16 cache: each backend rounds its float keys and values to f16. Where the two floats
  // differ in their last bits they may round to neighbouring f16 values, so the backends' caches
  // differ by at most one f16 ulp per element, while rounding an F32 cache to F16 moves each element
  // by at most half an ulp. To first order the logits then differ between the backends by at most
  // twice as much as F16 rounding moves the CPU's own logits, plus the float32 gap. That effect is
  // measured here on each fixture (from 1e-4 to 5e-3 of the largest logit), not assumed: it depends on
  // the model and the prompt, not on the machine. Fed the same (CPU-chosen) tokens for every step.
  const gguf::File f = file("F32");
  backend::ExecOptions o16;
  o16.n_ctx = static_cast<int32_t>(prompt_.size()) + 80;
  o16.max_tokens = 8;
  const double rounding = f16_cache_effect(f, *cpu_, prompt_, o16);
  const GreedyRun r = greedy_pair(f, f, *cpu_, *gpu_, prompt_, o16, true);
  std::printf("%s: F16 cache: worst logit gap %.2e, F16 rounding's own effect %.2e\n", GetParam().c_str(), r.worst_gap,
              rounding);
  EXPECT_LT(r.worst_gap, 2 * rounding + kFloat32Gap) << GetParam() << ": F16 rounding alone moves logits " << rounding;
  EXPECT_EQ(r.clear_agree, r.clear_steps) << GetParam();
  EXPECT_GE(r.clear_steps, decode_steps() / 2) << GetParam() << ": too few clear choices to judge";
}

// Quantized weights: the device computes as the CPU does (activations quantized to the same 8-bit codes,
// integer block sums) for Q8_0 (experts included) and the K-quants, so the logits agree to float
// rounding until a value the two sum in different orders lands one ulp across a code's rounding
// boundary; on these random-weight fixtures that moves the logits by 1-4% (measured on lavapipe), up to
// 7% on the gemma4 fixtures on an H200 (CUDA; where a code flips is a matter of summation order). Fed
// the same (CPU-chosen) tokens at every step, the logits stay within 8%, and wherever the CPU's choice
// leads its runner-up by more than the two backends differ, the device makes the same choice.
[[maybe_unused]] void expect_close_quantized_decode(const gguf::File& f, backend::Backend& cpu, backend::Backend& gpu,
                                   const std::vector<int32_t>& prompt, const std::string& what) {
  backend::ExecOptions opts;
  opts.n_ctx = static_cast<int32_t>(prompt.size()) + 80;
  opts.max_tokens = 8;  // prompt steps small enough for the decode kernels (the CPU's arithmetic)
  const GreedyRun r = greedy_pair(f, f, cpu, gpu, prompt, opts, true);
  EXPECT_LT(r.worst_gap, 0.08) << what;
  EXPECT_EQ(r.clear_agree, r.clear_steps) << what;
  EXPECT_GE(r.clear_steps, decode_steps() / 2) << what << ": too few clear choices to judge";
  std::printf("%s: worst logit gap %.2e, %d of %d steps clear, greedy identical for %td steps\n", what.c_str(),
              r.worst_gap, r.clear_steps, decode_steps(), std::mismatch(r.cpu.begin(), r.cpu.end(), r.gpu.begin()).first - r.cpu.begin());
}

#if defined(ZINC_GPU_FLOAT_ACTIVATIONS)
// A backend whose products keep float activations against the stored weight blocks (CUDA's Q8_0)
// computes the float32 function of the dequantized weights: against the CPU on a file holding exactly
// those values as F32 (the quantized file dequantized), the logits agree within kFloat32Gap over the
// decode's steps fed the same tokens, and every clear choice agrees. (Against the CPU on the quantized file they
// differ by the CPU's own rounding of activations to 8-bit codes, 4-13% on these fixtures.)
void expect_dequantized_decode(const gguf::File& quantized, const std::filesystem::path& f32_path, backend::Backend& cpu,
                               backend::Backend& gpu, const std::vector<int32_t>& prompt, const std::string& what) {
  quant::QuantizeOptions qo;
  qo.mixture = *quant::mixture_by_name("F32");
  qo.allow_requantize = true;
  qo.threads = 2;
  quant::quantize_model(quantized, f32_path, qo);
  const gguf::File f32 = gguf::File::open(f32_path);
  backend::ExecOptions opts;
  opts.n_ctx = static_cast<int32_t>(prompt.size()) + 80;
  opts.max_tokens = 8;
  opts.kv_type = backend::KvType::F32;
  const GreedyRun r = greedy_pair(f32, quantized, cpu, gpu, prompt, opts, true);
  EXPECT_LT(r.worst_gap, kFloat32Gap) << what;
  EXPECT_EQ(r.clear_agree, r.clear_steps) << what;
  EXPECT_GE(r.clear_steps, decode_steps() / 2) << what << ": too few clear choices to judge";
  std::printf("%s: worst logit gap to the dequantized weights on the CPU %.2e, %d of %d steps clear\n", what.c_str(),
              r.worst_gap, r.clear_steps, decode_steps());
}

TEST_P(ZINC_GPU_FIXTURE, Q8_0LogitsAreThoseOfTheDequantizedWeights) {
  expect_dequantized_decode(file("Q8_0"), tmp_.file("Q8_0-f32.gguf"), *cpu_, *gpu_, prompt_, GetParam() + " Q8_0");
}

TEST_P(ZINC_GPU_FIXTURE, Q4_K_MLogitsStayCloseOverAGreedyDecode) {
  // Decode takes Q4_K and Q6_K against the activations' 8-bit codes, as the CPU does.
  expect_close_quantized_decode(file("Q4_K_M"), *cpu_, *gpu_, prompt_, GetParam() + " Q4_K_M");
}
#else
TEST_P(ZINC_GPU_FIXTURE, Q8_0LogitsStayCloseOverAGreedyDecode) {
  expect_close_quantized_decode(file("Q8_0"), *cpu_, *gpu_, prompt_, GetParam() + " Q8_0");
}

TEST_P(ZINC_GPU_FIXTURE, Q4_K_MLogitsStayCloseOverAGreedyDecode) {
  // Q4_K and Q6_K (the fixtures' 256 and 512 columns take K-quants) through the integer-dot kernels.
  expect_close_quantized_decode(file("Q4_K_M"), *cpu_, *gpu_, prompt_, GetParam() + " Q4_K_M");
}
#endif

#if defined(ZINC_GPU_IS_VULKAN)
// Two sessions fed the prompt and then the first's greedy tokens: the same logits bit for bit at each
// of `steps` steps.
void expect_same_logits(runtime::Session& a, runtime::Session& b, const std::vector<int32_t>& prompt, int steps,
                        const std::string& what) {
  a.eval(prompt);
  b.eval(prompt);
  for (int i = 0; i < steps; ++i) {
    const auto x = a.executable().logits(), y = b.executable().logits();
    ASSERT_EQ(x.size(), y.size()) << what;
    ASSERT_EQ(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)), 0) << what << ", step " << i;
    const int32_t next = a.last_argmax();
    a.eval(std::span<const int32_t>(&next, 1));
    b.eval(std::span<const int32_t>(&next, 1));
  }
}

TEST_P(ZINC_GPU_FIXTURE, DecodeIsTheSameWithTheRotationsInTheProducts) {
  // Decode's q and k products doing their heads' norm and rotation and k's cache append, v's product
  // appending v (mul_mv_k_rope and mul_mv_k_vstore, where the heads have a norm and the products are
  // K-quants: the Q4_K_M files of the fixtures with q and k norms), against the rotations' own
  // dispatches (ZINC_VULKAN_ROPE_TAIL=0): the same logits bit for bit at every step of a greedy decode,
  // with an F16 and an F32 cache.
  const gguf::File f = file("Q4_K_M");
  for (const auto kv : {backend::KvType::F16, backend::KvType::F32}) {
    backend::ExecOptions opts;
    opts.n_ctx = static_cast<int32_t>(prompt_.size()) + 40;
    opts.max_tokens = 8;
    opts.kv_type = kv;
    ::setenv("ZINC_VULKAN_ROPE_TAIL", "0", 1);
    runtime::Session off(f, *gpu_, opts);
    ::unsetenv("ZINC_VULKAN_ROPE_TAIL");
    runtime::Session on(f, *gpu_, opts);
    expect_same_logits(off, on, prompt_, 24, GetParam() + (kv == backend::KvType::F16 ? ", F16 cache" : ", F32 cache"));
  }
}

TEST_P(ZINC_GPU_FIXTURE, Q4_K_MLogitsStayCloseWithoutTheRouterSplit) {
  // By default the mixtures' routers split from the norms they read (ZINC_VULKAN_ROUTER_SPLIT=1: the
  // experts chosen beside o's product from s (R_w r + M a), weighed after it), and the Q4_K_M tests
  // above take it. The router after its norm (=0) stays within the same bounds of the CPU.
  if (GetParam().find("moe") == std::string::npos) GTEST_SKIP() << "not a mixture of experts";
  ::setenv("ZINC_VULKAN_ROUTER_SPLIT", "0", 1);
  expect_close_quantized_decode(file("Q4_K_M"), *cpu_, *gpu_, prompt_, GetParam() + " Q4_K_M, no router split");
  ::unsetenv("ZINC_VULKAN_ROUTER_SPLIT");
}

TEST_P(ZINC_GPU_FIXTURE, NoKernelReadsMemoryNothingWrote) {
  // Every device buffer of a context starting as NaNs (ZINC_VULKAN_POISON=1) instead of whatever the
  // allocation held: the same logits bit for bit over a prompt and a greedy decode, so no kernel of the
  // step reads memory that nothing wrote (padding, stale scratch) on the Q4_K_M file, in prompt steps
  // of the decode kernels (8 rows) and of the matrix products (the whole prompt at once).
  const gguf::File f = file("Q4_K_M");
  for (const int32_t max_tokens : {8, 64}) {
    backend::ExecOptions opts;
    opts.n_ctx = static_cast<int32_t>(prompt_.size()) + 40;
    opts.max_tokens = max_tokens;
    ::unsetenv("ZINC_VULKAN_POISON");
    runtime::Session clean(f, *gpu_, opts);
    ::setenv("ZINC_VULKAN_POISON", "1", 1);
    runtime::Session poisoned(f, *gpu_, opts);
    ::unsetenv("ZINC_VULKAN_POISON");
    expect_same_logits(clean, poisoned, prompt_, 16, GetParam() + ", steps of up to " + std::to_string(max_tokens) + " rows");
  }
}
#endif

TEST_P(ZINC_GPU_FIXTURE, SpeculativeStepsGiveTheOneTokenStepsLogits) {
  // A speculative step (the next token and drafts after it in one step, as `zinc run --spec` and the
  // server verify drafts) against one-token steps: each row the session stands at, after accepting a
  // right draft and after forgetting wrong ones, has the same logits bit for bit as the plain decode's
  // step of that token. Otherwise a greedy text would depend on where drafting happened, which the
  // automatic mode decides by timing (run to run). The Q4_K_M file (the K-quant decode kernels and
  // their fusions; Vulkan's also with each norm a dispatch of its own, ZINC_VULKAN_NORM_TAIL=0, where
  // by default the norms are left to their readers; and with the mixtures' routers after their norms,
  // ZINC_VULKAN_ROUTER_SPLIT=0, where by default they split from them), the Q8_0 one (the 32-element
  // kernels; gpt_oss's router folded into o's dispatch) and the F32 one, an F16 cache.
  for (const std::string mixture : {"Q4_K_M", "Q4_K_M, norm dispatches", "Q4_K_M, no router split", "Q8_0", "F32"}) {
    if (mixture.find("dispatches") != std::string::npos) {
      setenv("ZINC_VULKAN_NORM_TAIL", "0", 1);
    } else {
      unsetenv("ZINC_VULKAN_NORM_TAIL");
    }
    if (mixture.find("split") != std::string::npos) {
      setenv("ZINC_VULKAN_ROUTER_SPLIT", "0", 1);
    } else {
      unsetenv("ZINC_VULKAN_ROUTER_SPLIT");
    }
    const gguf::File f = file(mixture.substr(0, mixture.find(',')));
    backend::ExecOptions opts;
    opts.n_ctx = static_cast<int32_t>(prompt_.size()) + 48;
    opts.max_tokens = 8;
    opts.kept_states = 4;
    runtime::Session plain(f, *gpu_, opts), spec(f, *gpu_, opts);
    constexpr int kSteps = 12;
    std::vector<std::vector<float>> want;
    std::vector<int32_t> greedy;
    plain.eval(prompt_);
    for (int i = 0; i <= kSteps; ++i) {
      const auto x = plain.executable().logits();
      want.emplace_back(x.begin(), x.end());
      greedy.push_back(plain.last_argmax());
      plain.eval(std::span<const int32_t>(&greedy.back(), 1));
    }
    const auto x = plain.executable().logits();
    want.emplace_back(x.begin(), x.end());
    const std::string what = GetParam() + " " + mixture;
    // The logits `y` against the plain decode's at token `at`, bit for bit.
    const auto same = [&](std::span<const float> y, int at, const std::string& where) {
      const std::vector<float>& w = want[static_cast<size_t>(at)];
      ASSERT_EQ(y.size(), w.size()) << what << where;
      ASSERT_EQ(std::memcmp(y.data(), w.data(), y.size() * sizeof(float)), 0) << what << where;
    };
    spec.eval(prompt_);
    same(spec.executable().logits(), 0, ", the prompt");
    // Step i stands after greedy[0..i): the next token, then (every other step) the right draft and a
    // wrong one, else three wrong ones (the step's own token repeated: a draft the model did not make).
    for (int i = 0; i + 2 <= kSteps;) {
      const bool right = i % 2 == 0;
      const int32_t wrong = (greedy[static_cast<size_t>(i) + 1] + 1) % static_cast<int32_t>(spec.n_vocab());
      const std::vector<int32_t> step = right ? std::vector<int32_t>{greedy[static_cast<size_t>(i)], greedy[static_cast<size_t>(i) + 1], wrong}
                                              : std::vector<int32_t>{greedy[static_cast<size_t>(i)], wrong, wrong, wrong};
      spec.eval_speculative(step);
      const auto row = [&](int at) {
        same(spec.last_logits(), at,
             ", the row of token " + std::to_string(at) + " of the decode, " + (right ? "a right draft" : "wrong drafts"));
      };
      row(i + 1);
      if (right) {
        spec.speculative_accept();
        row(i + 2);
      }
      spec.speculative_end();
      i += right ? 2 : 1;
    }
  }
  unsetenv("ZINC_VULKAN_NORM_TAIL");
  unsetenv("ZINC_VULKAN_ROUTER_SPLIT");
}

// Several sequences in one step (the CPU's SequencesSteppedTogetherMatchEachAlone on the device): four
// sequences of different lengths start at different steps, prefill in chunks beside the others'
// decode tokens, then decode decode_steps() greedy tokens together; one is forked from another mid-way and one is
// cleared and reused. Each step's logits, per sequence, against the same sequence run alone in a
// context of its own with the same chunks: both compute the same float32 function (F32 weights and
// cache; steps of at most 8 rows take the decode kernels), so within kFloat32Gap, and each greedy
// token the same wherever the alone run's choice is clear (margin over twice the gap).
TEST_P(ZINC_GPU_FIXTURE, SequencesSteppedTogetherMatchEachAlone) {
  const gguf::File f = file("F32");
  const model::Model m = model::load(f);
  auto weights = gpu_->load(m.graph, f);
  const auto slice = [](const std::vector<int32_t>& v, size_t a, size_t b) { return std::vector<int32_t>(v.begin() + a, v.begin() + b); };
  const std::vector<int32_t>& s = sequence_;
  ASSERT_GE(s.size(), 12u);
  const std::vector<test::SeqPlan> plan = {
      {0, slice(s, 0, 5), {3, 2}, 0},
      {1, slice(s, 1, 7), {2, 2, 2}, 0},
      {2, slice(s, 4, 8), {4}, 1},
      {3, slice(s, 2, 5), {1, 2}, 2},
  };
  const int n_decode = decode_steps();
  backend::ExecOptions opts;
  opts.n_ctx = 96;
  opts.max_tokens = 8;  // at most 8 rows a step: the decode kernels, as alone
  opts.n_seq = 4;
  opts.kv_type = backend::KvType::F32;
  const int64_t nv = m.graph.n_vocab;
  backend::ExecOptions one = opts;
  one.n_seq = 1;

  std::vector<std::vector<std::vector<float>>> alone(plan.size());
  std::vector<std::vector<int32_t>> alone_tokens(plan.size());
  std::vector<uint8_t> alone0;  // sequence 0 alone after its decode, saved
  for (size_t i = 0; i < plan.size(); ++i) {
    test::AloneRun a = test::run_alone(*weights, one, plan[i], n_decode);
    alone[i] = std::move(a.rows);
    alone_tokens[i] = std::move(a.tokens);
    if (i == 0) alone0 = a.exe->save_state(a.pos);
  }

  auto exe = weights->instantiate(opts);
  std::vector<size_t> all_rows;
  for (const auto& a : alone) all_rows.push_back(a.size());
  test::SeqSchedule together(plan, all_rows);
  double worst = 0;
  int clear = 0, clear_agree = 0, steps = 0, rows = 0, device_ids_wrong = 0;
  graph::StepParams step;
  std::vector<size_t> in_step;
  // Decode tokens: the alone run's choices.
  const auto decode = [&](size_t i, size_t row) { return alone_tokens[i][row - plan[i].chunks.size()]; };
  while (together.next(step, in_step, decode)) {
    exe->run(step);
    ++steps;
    const auto l = exe->logits();
    ASSERT_EQ(static_cast<int64_t>(l.size()), static_cast<int64_t>(in_step.size()) * nv);
    for (size_t k = 0; k < in_step.size(); ++k) {
      const size_t i = in_step[k];
      const std::span<const float> row = l.subspan(k * static_cast<size_t>(nv), static_cast<size_t>(nv));
      const std::vector<float>& want = alone[i][together.row(i)];
      const double gap = relative_gap(row, want);
      worst = std::max(worst, gap);
      std::vector<float> sorted(want);
      std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
      double diff = 0;
      for (size_t v = 0; v < want.size(); ++v) diff = std::max(diff, std::fabs(static_cast<double>(row[v]) - want[v]));
      if (sorted[0] - sorted[1] > 2 * diff) {
        ++clear;
        clear_agree += std::max_element(row.begin(), row.end()) - row.begin() ==
                       std::max_element(want.begin(), want.end()) - want.begin();
      }
      // Each part's greedy id, taken on the device, is its row's.
      device_ids_wrong += exe->argmax(static_cast<int64_t>(k)) != std::max_element(row.begin(), row.end()) - row.begin();
      ++rows;
    }
    together.yielded(in_step);
  }
  EXPECT_EQ(device_ids_wrong, 0) << GetParam() << ": device argmax of a part differs from its logits'";
  for (size_t i = 0; i < plan.size(); ++i) EXPECT_EQ(together.got(i), alone[i].size()) << GetParam() << " sequence " << i;
  std::printf("%s: %d steps of up to 4 sequences; worst logit gap to each alone %.2e; %d of %d choices clear\n",
              GetParam().c_str(), steps, worst, clear, rows);
  EXPECT_LT(worst, kFloat32Gap) << GetParam();
  // Bit for bit, in fact (Vulkan and CUDA): the decode kernels' sums in a row do not depend on the
  // step's rows, so a sequence's text does not depend on which others share its steps.
  EXPECT_EQ(worst, 0.0) << GetParam();
  EXPECT_EQ(clear_agree, clear) << GetParam();
  EXPECT_GE(clear, rows * 3 / 4) << GetParam() << ": too few clear choices to judge";

  // The last decode step's argmax is the last part's (sequence 3's) token.
  EXPECT_EQ(exe->argmax(), std::max_element(alone[3].back().begin(), alone[3].back().end()) - alone[3].back().begin());

  // A fork: sequence 3 continues from all of sequence 0, each then takes a different token; both as a
  // context that ran the whole text alone.
  const int32_t n0 = together.pos(0);
  exe->seq_copy(0, 3, n0);
  graph::StepParams fork;
  fork.add(0, n0, {s[10]});
  fork.add(3, n0, {s[11]});
  exe->run(fork);
  const std::vector<float> fl(exe->logits().begin(), exe->logits().end());
  for (int b = 0; b < 2; ++b) {
    auto solo = weights->instantiate(one);
    solo->load_state(alone0, 0);
    solo->run(graph::StepParams::one({s[static_cast<size_t>(10 + b)]}, n0));
    EXPECT_LT(relative_gap(std::span<const float>(fl).subspan(static_cast<size_t>(b * nv), static_cast<size_t>(nv)), solo->logits()),
              kFloat32Gap)
        << GetParam() << " fork branch " << b;
  }
  // A sequence saved from the shared context resumes in a context of its own.
  const auto saved = exe->save_state(n0 + 1, 3);
  auto moved = weights->instantiate(one);
  moved->load_state(saved, 0);
  graph::StepParams cont = graph::StepParams::one({s[3]}, n0 + 1);
  moved->run(cont);
  graph::StepParams cont3;
  cont3.add(3, n0 + 1, {s[3]});
  exe->run(cont3);
  EXPECT_LT(relative_gap(exe->logits(), moved->logits()), kFloat32Gap) << GetParam() << ": a saved sequence";
  // A cleared sequence starts again from nothing.
  exe->seq_clear(1);
  graph::StepParams again;
  again.add(1, 0, slice(plan[0].prompt, 0, 3));
  exe->run(again);
  EXPECT_LT(relative_gap(exe->logits(), alone[0][0]), kFloat32Gap) << GetParam() << ": a cleared sequence";
}

TEST_P(ZINC_GPU_FIXTURE, EmbeddingsMatchTheCpu) {
  // The graph cut after its final norm (the hidden states embeddings pool), each pooling, prefilled in
  // one step and in steps of 3, on both backends with an F32 cache: kFloat32Gap, as for the logits.
  const gguf::File f = file("F32");
  for (int32_t batch : {96, 3}) {
    runtime::Embedder cpu(f, *cpu_, 96, 96, {}, backend::KvType::F32), gpu(f, *gpu_, 96, batch, {}, backend::KvType::F32);
    for (runtime::Pooling p : {runtime::Pooling::Mean, runtime::Pooling::Cls, runtime::Pooling::Last}) {
      const auto want = cpu.embed(sequence_, p, false), got = gpu.embed(sequence_, p, false);
      EXPECT_LT(relative_gap(got, want), kFloat32Gap) << GetParam() << " " << runtime::pooling_name(p) << ", steps of " << batch;
    }
  }
}

TEST(ZINC_GPU_REAL_WEIGHTS, StoriesGreedyTextMatchesTheCpu) {
  // stories260K: trained weights (F32), whose logits have the margins of a real model. Greedy tokens
  // (decode_steps()) after a prompt prefilled in one step (the GEMM) and decoded on the device.
  const auto path = test::testdata_dir() / "models/stories260K.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no test data at " << path;
  std::unique_ptr<backend::Backend> gpu;
  try {
    gpu = ZINC_GPU_MAKE();
  } catch (const Error& e) {
    GTEST_SKIP() << "no " ZINC_GPU_NAME " device: " << e.what();
  }
  const gguf::File f = gguf::File::open(path);
  auto cpu = backend::make_cpu_backend();
  backend::ExecOptions opts;
  opts.n_ctx = 128;
  const std::vector<int32_t> prompt{1, 403, 407, 261, 378, 432, 383, 286};  // "Once upon a time, there was"
  // The default F16 cache, each backend following its own argmax: the bound of
  // F16CacheStaysWithinItsRounding, and the same text up to the first choice that is not clear.
  const double rounding = f16_cache_effect(f, *cpu, prompt, opts);
  const GreedyRun r = greedy_pair(f, f, *cpu, *gpu, prompt, opts, false);
  const auto n = static_cast<size_t>(r.first_unclear);
  EXPECT_EQ(std::vector<int32_t>(r.gpu.begin(), r.gpu.begin() + n), std::vector<int32_t>(r.cpu.begin(), r.cpu.begin() + n));
  EXPECT_GE(r.first_unclear, decode_steps() / 2) << "too few clear choices to judge";
  EXPECT_LT(r.worst_gap, 2 * rounding + kFloat32Gap) << "F16 rounding alone moves logits " << rounding;
}

#if defined(ZINC_GPU_IS_VULKAN)
// A server warms its context up at start (Executable::warm_up): its first requests then wait for no
// pipeline compile. After the warm-up, steps of every size up to max_tokens, of one sequence or of
// several, make no pipeline (a fresh process per test, as ctest runs them: none was made before).
class VulkanWarmUp : public VulkanFixture {};

TEST_P(VulkanWarmUp, StepsOfAnySizeMakeNoPipelineAfterIt) {
  const gguf::File f = file("Q4_K_M");
  const model::Model m = model::load(f);
  backend::ExecOptions opts;
  opts.n_ctx = 64;
  opts.n_seq = 3;
  opts.max_tokens = 40;
  auto weights = gpu_->load(m.graph, f);
  auto exe = weights->instantiate(opts);
  const auto ctx = backend::vk::Context::shared();
  exe->warm_up();
  const uint64_t made = ctx->pipelines_made();
  EXPECT_GT(made, 0u) << GetParam();
  std::vector<int32_t> text;
  while (text.size() < 40) text.insert(text.end(), sequence_.begin(), sequence_.end());
  for (int32_t n = 1; n <= 40; ++n) {
    exe->seq_clear(0);
    graph::StepParams step;
    step.add(0, 0, std::vector<int32_t>(text.begin(), text.begin() + n));
    exe->run(step);
    EXPECT_EQ(ctx->pipelines_made(), made) << GetParam() << ": a step of " << n << " tokens";
  }
  // Several sequences in one step: three decoding, then prompts beside a decode.
  graph::StepParams decode;
  for (int32_t s = 0; s < 3; ++s) decode.add(s, s == 0 ? 40 : 0, {text[0]});
  exe->run(decode);
  graph::StepParams mixed;
  mixed.add(0, 41, {text[1]});
  mixed.add(1, 1, std::vector<int32_t>(text.begin(), text.begin() + 13));
  mixed.add(2, 1, std::vector<int32_t>(text.begin(), text.begin() + 5));
  exe->run(mixed);
  EXPECT_EQ(ctx->pipelines_made(), made) << GetParam() << ": steps of several sequences";
}

INSTANTIATE_TEST_SUITE_P(Architectures, VulkanWarmUp, ::testing::Values("qwen3", "qwen3_moe", "qwen3_5", "gpt_oss"));

// A one-token step (after a 3-token prompt) of f with `knob` off and on: the dispatches its recording
// holds and its logits, [0] off and [1] on.
struct KnobSteps {
  uint64_t recorded[2] = {0, 0};
  std::vector<float> logits[2];
};
KnobSteps one_token_steps(const gguf::File& f, backend::Backend& gpu, std::span<const int32_t> sequence, const char* knob) {
  backend::ExecOptions opts;
  opts.n_ctx = 64;
  opts.max_tokens = 4;
  const auto ctx = backend::vk::Context::shared();
  KnobSteps r;
  for (int on = 0; on < 2; ++on) {
    setenv(knob, on ? "1" : "0", 1);
    runtime::Session s(f, gpu, opts);
    s.eval(sequence.first(3), true);
    const uint64_t before = ctx->dispatches_recorded();
    const auto l = s.eval(sequence.subspan(3, 1));  // the one-token step, recorded here
    r.recorded[on] = ctx->dispatches_recorded() - before;
    r.logits[on].assign(l.begin(), l.end());
  }
  unsetenv(knob);
  return r;
}

// How many mixture-of-experts nodes f's graph has.
uint64_t mixture_layers(const gguf::File& f) {
  const model::Model m = model::load(f);
  const auto moe = [](const graph::Node& n) { return n.op == graph::Op::MoE; };
  return static_cast<uint64_t>(std::count_if(m.graph.nodes.begin(), m.graph.nodes.end(), moe));
}

// Decode's activation codes for the products of the 32-element formats come from the kernel that writes
// their input (the whole-row norm, the GLU, the attention merge), not from quantizing dispatches of
// their own: a one-token step of a Q8_0 model records at least two dispatches a layer fewer (its two
// norms') than with ZINC_VULKAN_NORM_Q8=0, and gives the same logits.
class VulkanDecodeCodes : public VulkanFixture {};

TEST_P(VulkanDecodeCodes, ComeFromTheOpBeforeTheProducts) {
  const gguf::File f = file("Q8_0");
  const model::Model m = model::load(f);
  const auto [recorded, logits] = one_token_steps(f, *gpu_, sequence_, "ZINC_VULKAN_NORM_Q8");
  EXPECT_GT(recorded[1], 0u) << GetParam();
  EXPECT_GE(recorded[0], recorded[1] + 2 * static_cast<uint64_t>(m.graph.n_layer))
      << GetParam() << ": " << recorded[0] << " dispatches with the quantizations, " << recorded[1] << " without";
  EXPECT_EQ(logits[0], logits[1]) << GetParam();
}

INSTANTIATE_TEST_SUITE_P(Architectures, VulkanDecodeCodes, ::testing::Values("qwen3", "gpt_oss"));

// Decode's residual add and whole-row norm done by the K-quant product before them, the norm's scale
// left to its readers (ZINC_VULKAN_NORM_TAIL, Plan::mm_norm): on the Q4_K_M files whose rows are whole
// 256-value blocks (qwen2's o and down products before the norms; qwen3_moe's mixture and o before
// them), a one-token step records at least one dispatch a layer fewer than with the norms' own
// dispatches, and over a greedy decode fed the same tokens the logits stay within a few code
// roundings of those (the codes of the unscaled row may round the other way: 1-2% on these random
// weights) and every clear choice is the same.
class VulkanNormTails : public VulkanFixture {};

TEST_P(VulkanNormTails, LeaveTheNormToItsReaders) {
  const gguf::File f = file("Q4_K_M");
  const model::Model m = model::load(f);
  backend::ExecOptions opts;
  opts.n_ctx = static_cast<int32_t>(prompt_.size()) + 40;
  opts.max_tokens = 8;
  const auto ctx = backend::vk::Context::shared();
  uint64_t recorded[2] = {0, 0};
  std::vector<std::vector<float>> logits[2];
  std::vector<int32_t> fed;
  for (int tails = 0; tails < 2; ++tails) {
    setenv("ZINC_VULKAN_NORM_TAIL", tails ? "1" : "0", 1);
    runtime::Session s(f, *gpu_, opts);
    s.eval(prompt_);
    for (int i = 0; i < 24; ++i) {
      const auto l = s.executable().logits();
      logits[tails].emplace_back(l.begin(), l.end());
      if (tails == 0) fed.push_back(s.last_argmax());
      const uint64_t before = ctx->dispatches_recorded();
      s.eval(std::span<const int32_t>(&fed[static_cast<size_t>(i)], 1));
      if (i == 0) recorded[tails] = ctx->dispatches_recorded() - before;  // the one-token step, recorded here
    }
  }
  unsetenv("ZINC_VULKAN_NORM_TAIL");
  EXPECT_GT(recorded[1], 0u) << GetParam();
  EXPECT_GE(recorded[0], recorded[1] + static_cast<uint64_t>(m.graph.n_layer))
      << GetParam() << ": " << recorded[0] << " dispatches with the norms', " << recorded[1] << " with them in the products";
  double worst = 0;
  int clear = 0, agree = 0;
  for (size_t i = 0; i < logits[0].size(); ++i) {
    const std::vector<float>& a = logits[0][i];
    const std::vector<float>& b = logits[1][i];
    double gap = 0, scale = 0;
    for (size_t v = 0; v < a.size(); ++v) {
      gap = std::max(gap, std::fabs(static_cast<double>(a[v]) - b[v]));
      scale = std::max(scale, std::fabs(static_cast<double>(a[v])));
    }
    worst = std::max(worst, gap / scale);
    std::vector<float> sorted = a;
    std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
    if (sorted[0] - sorted[1] > 2 * gap) {
      ++clear;
      agree += std::max_element(a.begin(), a.end()) - a.begin() == std::max_element(b.begin(), b.end()) - b.begin();
    }
  }
  std::printf("%s: %llu dispatches a one-token step with the norms' own, %llu with them in the products; worst logit gap %.2e, "
              "%d of %zu steps clear\n",
              GetParam().c_str(), static_cast<unsigned long long>(recorded[0]), static_cast<unsigned long long>(recorded[1]), worst,
              clear, logits[0].size());
  EXPECT_LT(worst, 0.05) << GetParam();
  EXPECT_EQ(agree, clear) << GetParam();
  EXPECT_GE(clear, 12) << GetParam() << ": too few clear choices to judge";
}

INSTANTIATE_TEST_SUITE_P(Architectures, VulkanNormTails, ::testing::Values("qwen2", "qwen3_moe"));

// A shared expert's gated output and its add to the experts' output (SigmoidMul, then Add) as one
// dispatch (sigmoid_mul_add). The plan keeps the gate's inputs alive until the add, so the sum never
// takes the gate's memory and the recorder can fuse them. A one-token step of the F32 file records at
// least one dispatch a mixture layer fewer than with ZINC_VULKAN_GATE_ADD=0, and its logits stay within
// the float32 gap of the two dispatches' (the fused kernel may round the product and the add as one).
// With ZINC_VULKAN_GATE_NORM=0: by default the layers a norm follows take the gated add and norm below.
class VulkanGateAdd : public VulkanFixture {};

TEST_P(VulkanGateAdd, AddsTheSharedExpertInTheGatesDispatch) {
  const gguf::File f = file("F32");
  const uint64_t n_moe = mixture_layers(f);
  ASSERT_GT(n_moe, 0u) << GetParam();
  setenv("ZINC_VULKAN_GATE_NORM", "0", 1);
  const auto [recorded, logits] = one_token_steps(f, *gpu_, sequence_, "ZINC_VULKAN_GATE_ADD");
  unsetenv("ZINC_VULKAN_GATE_NORM");
  EXPECT_GT(recorded[1], 0u) << GetParam();
  EXPECT_GE(recorded[0], recorded[1] + n_moe) << GetParam() << ": " << recorded[0] << " dispatches with the adds' own, "
                                              << recorded[1] << " with them in the gates'";
  EXPECT_LT(relative_gap(logits[1], logits[0]), kFloat32Gap) << GetParam();
}

INSTANTIATE_TEST_SUITE_P(Architectures, VulkanGateAdd, ::testing::Values("qwen3_5_moe", "qwen3_next"));

// A shared expert's gated output added to the experts', that sum added to the residual and the next
// layer's norm (SigmoidMul, Add, Add, RmsNorm) as one dispatch: rms_norm_row's gated add (Plan::
// gate_norm). A one-token step of the F32 file records a dispatch fewer for each mixture layer a norm
// follows (all but the last) than with ZINC_VULKAN_GATE_NORM=0 (sigmoid_mul_add, then the add and
// norm), and gives the same logits bit for bit: the same roundings in the same order.
class VulkanGateNorm : public VulkanFixture {};

TEST_P(VulkanGateNorm, AddsTheResidualAndNormalisesInTheGatesDispatch) {
  const gguf::File f = file("F32");
  const uint64_t n_moe = mixture_layers(f);
  ASSERT_GE(n_moe, 2u) << GetParam();
  const auto [recorded, logits] = one_token_steps(f, *gpu_, sequence_, "ZINC_VULKAN_GATE_NORM");
  EXPECT_GT(recorded[1], 0u) << GetParam();
  EXPECT_GE(recorded[0], recorded[1] + n_moe - 1) << GetParam() << ": " << recorded[0] << " dispatches with the norms' own, "
                                                  << recorded[1] << " with them in the gates'";
  ASSERT_EQ(logits[0].size(), logits[1].size()) << GetParam();
  EXPECT_EQ(std::memcmp(logits[0].data(), logits[1].data(), logits[0].size() * sizeof(float)), 0) << GetParam();
}

INSTANTIATE_TEST_SUITE_P(Architectures, VulkanGateNorm, ::testing::Values("qwen3_5_moe", "qwen3_next"));

// A recurrent layer's work after its products in fewer dispatches, each with the same roundings in the
// same order: a one-token step records a dispatch fewer a recurrent layer than with the knob at 0, and
// the same logits bit for bit.
// - ZINC_VULKAN_CONV_TAIL (a K-quant file): the short convolution by its q, k and v product (mul_mv_k_cnv).
// - ZINC_VULKAN_DELTA_NORM (the F32 file): the per-head norm and the output gate by the last workgroup
//   of each 256 values of the delta rule's dispatch (delta_net's NORM_GLU tail).
class VulkanRecurrentTails : public VulkanFixture {
 protected:
  void check(const std::string& mixture, const char* knob) {
    const gguf::File f = file(mixture);
    const model::Model m = model::load(f);
    const auto recurrent = static_cast<uint64_t>(std::count_if(m.graph.nodes.begin(), m.graph.nodes.end(),
                                                               [](const graph::Node& n) { return n.op == graph::Op::DeltaNet; }));
    ASSERT_GE(recurrent, 1u) << GetParam();
    const auto [recorded, logits] = one_token_steps(f, *gpu_, sequence_, knob);
    EXPECT_GT(recorded[1], 0u) << GetParam();
    EXPECT_GE(recorded[0], recorded[1] + recurrent) << GetParam() << " " << knob << ": " << recorded[0] << " dispatches at 0, "
                                                    << recorded[1] << " at 1";
    ASSERT_EQ(logits[0].size(), logits[1].size()) << GetParam();
    EXPECT_EQ(std::memcmp(logits[0].data(), logits[1].data(), logits[0].size() * sizeof(float)), 0) << GetParam() << " " << knob;
  }
};

TEST_P(VulkanRecurrentTails, TheConvolutionInTheProductsDispatch) { check("Q4_K_M", "ZINC_VULKAN_CONV_TAIL"); }

TEST_P(VulkanRecurrentTails, TheNormAndGateInTheDeltaRulesDispatch) { check("F32", "ZINC_VULKAN_DELTA_NORM"); }

INSTANTIATE_TEST_SUITE_P(Architectures, VulkanRecurrentTails, ::testing::Values("qwen3_5", "qwen3_5_moe", "qwen3_next"));

#endif

INSTANTIATE_TEST_SUITE_P(Architectures, ZINC_GPU_FIXTURE,
                         ::testing::Values("llama", "qwen2", "qwen3", "gemma3", "llama_rope_llama3", "qwen3_yarn", "qwen3_moe",
                                           "qwen3_next", "qwen3_5", "qwen3_5_moe", "gpt_oss", "gemma4", "gemma4_moe",
                                           "gemma4_global_kv"));

}  // namespace
}  // namespace zinc
