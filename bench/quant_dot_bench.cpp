// Dot-kernel benchmark: one thread, a rows×cols matrix-vector product per weight type, through every
// kernel table this CPU runs (scalar reference, AVX2, AVX-512/VNNI, NEON). Reports weight bytes per
// second (the number that bounds batch-1 decode) and the speedup over the scalar reference, as a
// markdown table. The kernel is called directly, row by row, so threading and activation
// quantization are not part of the time.
//
// With --tokens T it measures matrix products of T tokens instead (T > 1: prompt processing), on one
// thread, through the packed kernels (quant/packed.h) and through the row-by-row products for weights
// that are not packed, in GMAC/s; ZINC_CPU_ISA picks the instruction set of both.
//
// Usage: zinc_quant_dot_bench [--rows 4096] [--cols 4096] [--types Q4_0,Q4_K,...] [--min-ms 300] [--tokens T]
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "core/system_info.h"
#include "core/thread_pool.h"
#include "quant/dot.h"
#include "quant/matmul.h"
#include "quant/packed.h"
#include "quant/quant.h"

using namespace zinc;
using gguf::TensorType;
using Clock = std::chrono::steady_clock;

namespace {

const TensorType kAllTypes[] = {TensorType::F32,  TensorType::F16,  TensorType::BF16,   TensorType::Q4_0,
                                TensorType::Q4_1, TensorType::Q5_0, TensorType::Q5_1,   TensorType::Q8_0,
                                TensorType::Q2_K, TensorType::Q3_K, TensorType::Q4_K,   TensorType::Q5_K,
                                TensorType::Q6_K, TensorType::IQ4_NL, TensorType::IQ4_XS, TensorType::MXFP4};

struct Table {
  const char* name;
  quant::DotFn (*fn)(TensorType);
  bool runs;
};

// Best time of repeated full matvecs, in seconds.
double time_matvec(quant::DotFn fn, const uint8_t* w, size_t wrow, const uint8_t* act, int64_t rows, int64_t cols,
                   std::vector<float>& y, double min_seconds) {
  double best = 1e30, total = 0;
  for (int rep = 0; rep < 3 || total < min_seconds; ++rep) {
    const auto t0 = Clock::now();
    for (int64_t r = 0; r < rows; ++r) y[static_cast<size_t>(r)] = fn(w + static_cast<size_t>(r) * wrow, act, cols);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::min(best, s);
    total += s;
  }
  return best;
}

// Best time of a repeated call, in seconds.
template <class F>
double best_time(F&& f, double min_seconds) {
  double best = 1e30, total = 0;
  for (int rep = 0; rep < 3 || total < min_seconds; ++rep) {
    const auto t0 = Clock::now();
    f();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::min(best, s);
    total += s;
  }
  return best;
}

// Products of `tokens` tokens, packed and row by row, one thread.
int bench_products(const std::vector<TensorType>& types, int64_t rows, int64_t cols, int64_t tokens, double min_ms) {
  ThreadPool pool(1);
  fmt::print("CPU: {}; kernels: {}; one thread; {}x{} weights x {} tokens; GMAC/s (best of repeats)\n\n", cpu_info().name,
             quant::dot_isa_in_use(), rows, cols, tokens);
  fmt::print("| type | packed GMAC/s | row products GMAC/s | packed vs rows |\n| --- | ---: | ---: | ---: |\n");
  std::mt19937 rng(1);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (TensorType type : types) {
    if (cols % quant::block_size(type) != 0) continue;
    const size_t wrow = quant::row_size(type, cols);
    std::vector<uint8_t> w(wrow * static_cast<size_t>(rows));
    std::vector<float> src(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
      for (auto& v : src) v = g(rng);
      quant::quantize_row(type, src.data(), w.data() + static_cast<size_t>(r) * wrow, cols);
    }
    std::vector<float> x(static_cast<size_t>(cols * tokens)), y(static_cast<size_t>(rows * tokens));
    for (auto& v : x) v = g(rng);
    const double macs = static_cast<double>(rows) * static_cast<double>(cols) * static_cast<double>(tokens);
    const double rows_s = best_time([&] { quant::matmul(type, w.data(), rows, cols, x.data(), tokens, y.data(), pool); }, min_ms / 1000);
    std::string packed = "-", ratio = "-";
    if (quant::can_pack(type, rows, cols)) {
      const quant::PackedMatrix p(type, w.data(), rows, cols, pool);
      const double s = best_time([&] { quant::matmul_packed(p.view(), x.data(), tokens, y.data(), pool); }, min_ms / 1000);
      packed = fmt::format("{:.1f}", macs / s / 1e9);
      ratio = fmt::format("{:.2f}x", rows_s / s);
    }
    fmt::print("| {} | {} | {:.1f} | {} |\n", gguf::tensor_type_name(type), packed, macs / rows_s / 1e9, ratio);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t rows = 4096, cols = 4096, tokens = 0;
  double min_ms = 300;
  std::vector<TensorType> types(std::begin(kAllTypes), std::end(kAllTypes));
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (a == "--rows" && v) rows = std::atoll(argv[++i]);
    else if (a == "--cols" && v) cols = std::atoll(argv[++i]);
    else if (a == "--min-ms" && v) min_ms = std::atof(argv[++i]);
    else if (a == "--tokens" && v) tokens = std::max<int64_t>(1, std::atoll(argv[++i]));  // 0: the matvec table
    else if (a == "--types" && v) {
      types.clear();
      std::string list = argv[++i];
      size_t pos = 0;
      while (pos <= list.size()) {
        const size_t end = std::min(list.find(',', pos), list.size());
        const auto t = gguf::tensor_type_from_name(list.substr(pos, end - pos));
        if (!t || !quant::has_dot(*t)) {
          fmt::print(stderr, "unknown or unsupported type '{}'\n", list.substr(pos, end - pos));
          return 2;
        }
        types.push_back(*t);
        pos = end + 1;
      }
    } else {
      fmt::print(stderr, "usage: {} [--rows N] [--cols N] [--types T,T,...] [--min-ms MS] [--tokens T]\n", argv[0]);
      return 2;
    }
  }

  if (tokens > 0) return bench_products(types, rows, cols, tokens, min_ms);

  const CpuInfo cpu = cpu_info();
  const Table tables[] = {
      {"scalar", quant::dot_fn_scalar, true},
      {"avx2", quant::dot_fn_avx2, cpu.avx2 && cpu.fma && cpu.f16c},
      {"avx512", quant::dot_fn_avx512, cpu.avx512f && cpu.avx512bw && cpu.avx512vl && cpu.avx512vnni && cpu.fma && cpu.f16c},
      {"neon", quant::dot_fn_neon, cpu.neon},
  };
  fmt::print("CPU: {}; one thread; {}x{} matrix-vector product; GB/s of weight bytes (best of repeats)\n\n", cpu.name,
             rows, cols);
  std::string head = "| type | bytes/weight |", rule = "| --- | ---: |";
  for (const Table& t : tables) {
    if (!t.runs) continue;
    head += fmt::format(" {} GB/s |", t.name);
    rule += " ---: |";
  }
  head += " best vs scalar |";
  rule += " ---: |";
  fmt::print("{}\n{}\n", head, rule);

  std::mt19937 rng(1);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (TensorType type : types) {
    if (cols % quant::block_size(type) != 0) continue;
    // A few distinct quantized rows, repeated: values do not change the speed, quantizing 16M weights would.
    const size_t wrow = quant::row_size(type, cols);
    constexpr int64_t kDistinct = 8;
    std::vector<uint8_t> w(wrow * static_cast<size_t>(rows));
    std::vector<float> src(static_cast<size_t>(cols));
    for (int64_t r = 0; r < std::min(rows, kDistinct); ++r) {
      for (auto& v : src) v = g(rng);
      quant::quantize_row(type, src.data(), w.data() + static_cast<size_t>(r) * wrow, cols);
    }
    for (int64_t r = kDistinct; r < rows; ++r)
      std::memcpy(w.data() + static_cast<size_t>(r) * wrow, w.data() + static_cast<size_t>(r % kDistinct) * wrow, wrow);
    for (auto& v : src) v = g(rng);
    std::vector<uint8_t> act(quant::activation_row_size(type, cols));
    quant::quantize_activation(type, src.data(), act.data(), cols);
    std::vector<float> y(static_cast<size_t>(rows));

    const double bytes = static_cast<double>(w.size());
    std::string line = fmt::format("| {} | {:.4f} |", gguf::tensor_type_name(type), bytes / static_cast<double>(rows * cols));
    double scalar_gbs = 0, best_gbs = 0;
    for (const Table& t : tables) {
      if (!t.runs) continue;
      const quant::DotFn fn = t.fn(type);
      if (!fn) {
        line += " - |";
        continue;
      }
      const double s = time_matvec(fn, w.data(), wrow, act.data(), rows, cols, y, min_ms / 1000);
      const double gbs = bytes / s / 1e9;
      if (std::string_view(t.name) == "scalar") scalar_gbs = gbs;
      best_gbs = std::max(best_gbs, gbs);
      line += fmt::format(" {:.2f} |", gbs);
    }
    line += fmt::format(" {:.1f}x |", best_gbs / scalar_gbs);
    fmt::print("{}\n", line);
    std::fflush(stdout);
  }
  return 0;
}
