// Whether a prompt's products and decode's run side by side on the GPU: a 1,024-token product (gate
// 12288x4096 Q4_K on the prompt tiles) and an 8-token one (the same shape, weights cycled through
// copies larger than L2, so every launch reads them from memory), each replayed from a graph on a
// stream of its own, alone and then both at once: on two streams at the same priority, with the
// prompt's at the least, and parted by green contexts (the prompt's on about N multiprocessors, the
// decode's on the rest). Both at once in the time of the longer alone: they overlap; in the sum of
// both: they take turns.
// Usage: zinc_cuda_overlap_bench [milliseconds each alone, 200] [multiprocessors of the prompt's part ...]
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_kernels.h"
#include "cuda_bench_check.h"
#include "backend/cuda/cuda_weights.h"
#include "gguf/types.h"
#include "quant/quant.h"

namespace ck = zinc::backend::cuda;
using zinc::gguf::TensorType;

namespace {

constexpr int64_t kRows = 12288, kCols = 4096;

// A product's launches as a graph on one stream: `launches` of mul_mat over n tokens, launch i on
// weight copy i.
struct Work {
  cudaStream_t s = nullptr;
  cudaGraphExec_t exec = nullptr;
  cudaEvent_t begin = nullptr, end = nullptr;
};

Work record(cudaStream_t s, int n, int launches, const std::vector<void*>& copies, const float* x, float* out, void* q8) {
  Work w;
  w.s = s;
  const size_t rb = zinc::quant::row_size(TensorType::Q4_K, kCols);
  cudaGraph_t g;
  check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "capture");
  for (int i = 0; i < launches; ++i)
    ck::mul_mat(s, static_cast<int>(TensorType::Q4_K), copies[static_cast<size_t>(i) % copies.size()], rb, kRows, kCols, x, kCols, n, out,
                kRows, nullptr, q8, false);
  check(cudaStreamEndCapture(s, &g), "capture end");
  check(cudaGraphInstantiate(&w.exec, g, 0), "instantiate");
  cudaGraphDestroy(g);
  check(cudaEventCreate(&w.begin), "event");
  check(cudaEventCreate(&w.end), "event");
  return w;
}

void start(const Work& w) {
  check(cudaEventRecord(w.begin, w.s), "event");
  check(cudaGraphLaunch(w.exec, w.s), "launch");
  check(cudaEventRecord(w.end, w.s), "event");
}

double ms(const Work& w) {
  check(cudaEventSynchronize(w.end), "sync");
  float t = 0;
  check(cudaEventElapsedTime(&t, w.begin, w.end), "elapsed");
  return t;
}

// Each alone (best of three), then both at once (best of three by the later end).
void measure(const char* name, Work a, Work b) {
  double alone_a = 1e30, alone_b = 1e30, both_a = 0, both_b = 0, both = 1e30;
  for (int k = 0; k < 3; ++k) {
    start(a);
    alone_a = std::min(alone_a, ms(a));
    start(b);
    alone_b = std::min(alone_b, ms(b));
  }
  for (int k = 0; k < 3; ++k) {
    const auto t0 = std::chrono::steady_clock::now();
    start(b);
    start(a);
    const double ta = ms(a), tb = ms(b);
    const double wall = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (wall < both) both = wall, both_a = ta, both_b = tb;
  }
  std::printf("| %s | %.1f | %.1f | %.1f (%.2fx) | %.1f (%.2fx) | %.1f | %.2f |\n", name, alone_a, alone_b, both_a, both_a / alone_a, both_b,
              both_b / alone_b, both, both / (alone_a + alone_b));
}

}  // namespace

int main(int argc, char** argv) {
  const double target_ms = argc > 1 ? std::atof(argv[1]) : 200;
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "device");
  check(cudaFree(nullptr), "context");
  // Weights: random Q4_K rows, copied until the copies outgrow L2 four times over.
  const size_t rb = zinc::quant::row_size(TensorType::Q4_K, kCols), bytes = rb * kRows;
  std::vector<uint8_t> host(bytes);
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> row(kCols);
  for (int64_t r = 0; r < kRows; ++r) {
    if (r < 64) {
      for (float& v : row) v = dist(rng);
      zinc::quant::quantize_row(TensorType::Q4_K, row.data(), host.data() + static_cast<size_t>(r) * rb, kCols);
    } else {
      std::copy_n(host.data() + static_cast<size_t>(r % 64) * rb, rb, host.data() + static_cast<size_t>(r) * rb);
    }
  }
  std::vector<void*> copies(std::max<size_t>(2, 4 * static_cast<size_t>(prop.l2CacheSize) / bytes + 1));
  for (void*& p : copies) {
    check(cudaMalloc(&p, bytes), "cudaMalloc");
    check(cudaMemcpy(p, host.data(), bytes, cudaMemcpyHostToDevice), "upload");
  }
  constexpr int kPrompt = 1024, kDecode = 8;
  float *xa, *xb, *oa, *ob;
  void *qa, *qb;
  for (float** p : {&xa, &xb}) {
    check(cudaMalloc(reinterpret_cast<void**>(p), kPrompt * kCols * 4), "cudaMalloc");
    check(cudaMemset(*p, 0, kPrompt * kCols * 4), "memset");
  }
  for (float** p : {&oa, &ob}) check(cudaMalloc(reinterpret_cast<void**>(p), kPrompt * kRows * 4), "cudaMalloc");
  for (void** p : {&qa, &qb}) check(cudaMalloc(p, ck::q8_bytes(kPrompt, kCols)), "cudaMalloc");
  void *split_part, *split_count;
  check(cudaMalloc(&split_part, ck::kSplitBytes), "cudaMalloc");
  check(cudaMalloc(&split_count, static_cast<size_t>(ck::kSplitCounters) * sizeof(unsigned)), "cudaMalloc");
  check(cudaMemset(split_count, 0, static_cast<size_t>(ck::kSplitCounters) * sizeof(unsigned)), "memset");
  ck::set_split_scratch({split_part, ck::kSplitBytes, static_cast<unsigned*>(split_count), ck::kSplitCounters});

  int least = 0, greatest = 0;
  check(cudaDeviceGetStreamPriorityRange(&least, &greatest), "priorities");
  const auto stream = [&](int priority) {
    cudaStream_t s;
    check(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, priority), "stream");
    return s;
  };
  // Launches per graph: about target_ms alone each.
  const auto per_launch = [&](int n) {
    const Work w = record(stream(greatest), n, 10, copies, n == kPrompt ? xa : xb, n == kPrompt ? oa : ob, n == kPrompt ? qa : qb);
    start(w);
    (void)ms(w);
    start(w);
    return ms(w) / 10;
  };
  const double prompt_ms = per_launch(kPrompt), decode_ms = per_launch(kDecode);
  const int na = std::max(1, static_cast<int>(target_ms / prompt_ms)), nb = std::max(1, static_cast<int>(target_ms / decode_ms));
  std::printf("%s, %d SMs; gate 12288x4096 Q4_K: %d tokens %.1f us a launch (%d launches), %d tokens %.1f us (%d launches, weights "
              "from memory)\n\n",
              prop.name, prop.multiProcessorCount, kPrompt, 1e3 * prompt_ms, na, kDecode, 1e3 * decode_ms, nb);
  std::printf("| streams | prompt alone ms | decode alone ms | prompt beside ms | decode beside ms | both ms | of the sum |\n"
              "|---|---|---|---|---|---|---|\n");
  const auto pair = [&](cudaStream_t sa, cudaStream_t sb) {
    return std::pair{record(sa, kPrompt, na, copies, xa, oa, qa), record(sb, kDecode, nb, copies, xb, ob, qb)};
  };
  {
    const auto [a, b] = pair(stream(greatest), stream(greatest));
    measure("same priority", a, b);
  }
  {
    const auto [a, b] = pair(stream(least), stream(greatest));
    measure("the prompt's at the least priority", a, b);
  }
  for (int i = 2; i < argc; ++i) {
    const int sms = std::atoi(argv[i]);
    const ck::GreenPair g = ck::make_green_pair(sms);
    if (!g.error.empty()) {
      std::printf("| green %d: %s | | | | | | |\n", sms, g.error.c_str());
      continue;
    }
    cudaStream_t sa = ck::green_stream(g.part, greatest), sb = ck::green_stream(g.rest, greatest);
    if (!sa || !sb) {
      std::printf("| green %d: no stream | | | | | | |\n", sms);
      continue;
    }
    const auto [a, b] = pair(sa, sb);
    const std::string name = "green: the prompt's on " + std::to_string(g.part_sms) + ", the decode's on " + std::to_string(g.rest_sms);
    measure(name.c_str(), a, b);
  }
  check(cudaGetLastError(), "kernels");
  return 0;
}
