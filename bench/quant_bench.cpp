// Quantization benchmark: reconstruction error per type on Gaussian and heavy-tailed data, CPU
// matrix-vector bandwidth (weight bytes / time) and matrix-matrix GFLOP/s per type, next to this
// machine's measured memory read bandwidth. Prints markdown tables; --json for machine output.
//
// Usage: zinc_quant_bench [--rows 4096] [--cols 14336] [--tokens 512] [--threads N] [--types Q4_0,Q4_K,...]
//                         [--skip-matmul] [--json]
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/bandwidth.h"
#include "core/system_info.h"
#include "core/thread_pool.h"
#include "quant/dot.h"
#include "quant/matmul.h"
#include "quant/quant.h"

using namespace zinc;
using gguf::TensorType;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::vector<float> gaussian(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = g(rng);
  return v;
}

// Student-t with 3 degrees of freedom: heavy tails like real weight outliers.
std::vector<float> heavy_tailed(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::student_t_distribution<float> t(3.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = t(rng);
  return v;
}

double relative_rmse(TensorType t, const std::vector<float>& x) {
  const auto n = static_cast<int64_t>(x.size());
  std::vector<uint8_t> q(quant::row_size(t, n));
  quant::quantize_row(t, x.data(), q.data(), n);
  std::vector<float> y(x.size());
  quant::dequantize_row(t, q.data(), y.data(), n);
  double e = 0, s = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    e += (static_cast<double>(x[i]) - y[i]) * (static_cast<double>(x[i]) - y[i]);
    s += static_cast<double>(x[i]) * x[i];
  }
  return std::sqrt(e / s);
}

std::vector<TensorType> parse_types(const std::string& list) {
  std::vector<TensorType> out;
  size_t pos = 0;
  while (pos <= list.size()) {
    const size_t comma = std::min(list.find(',', pos), list.size());
    const auto t = gguf::tensor_type_from_name(list.substr(pos, comma - pos));
    if (!t) throw std::runtime_error("unknown type " + list.substr(pos, comma - pos));
    out.push_back(*t);
    pos = comma + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t rows = 4096, cols = 14336, tokens = 512;
  unsigned threads = 0;
  bool json_out = false, skip_matmul = false;
  std::vector<TensorType> types = {TensorType::F16,  TensorType::BF16, TensorType::Q8_0,   TensorType::Q6_K,
                                   TensorType::Q5_K, TensorType::Q4_K, TensorType::Q4_0,   TensorType::Q5_0,
                                   TensorType::Q3_K, TensorType::Q2_K, TensorType::IQ4_NL, TensorType::IQ4_XS,
                                   TensorType::MXFP4};
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      auto next = [&]() -> std::string {
        if (i + 1 >= argc) throw std::runtime_error(a + " needs a value");
        return argv[++i];
      };
      if (a == "--rows") rows = std::stoll(next());
      else if (a == "--cols") cols = std::stoll(next());
      else if (a == "--tokens") tokens = std::stoll(next());
      else if (a == "--threads") threads = static_cast<unsigned>(std::stoul(next()));
      else if (a == "--types") types = parse_types(next());
      else if (a == "--skip-matmul") skip_matmul = true;
      else if (a == "--json") json_out = true;
      else throw std::runtime_error("unknown argument " + a);
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 2;
  }

  ThreadPool pool(threads);
  const CpuInfo cpu = cpu_info();
  const double peak = measure_read_bandwidth(pool);
  nlohmann::json j;
  j["cpu"] = cpu.name;
  j["threads"] = pool.size();
  j["memory_read_gbs"] = peak;
  j["shape"] = {rows, cols};
  j["tokens"] = tokens;

  const auto g = gaussian(256 * 4096, 1), h = heavy_tailed(256 * 4096, 2);
  const auto weights = gaussian(static_cast<size_t>(rows * cols), 3);
  const auto x = gaussian(static_cast<size_t>(cols * tokens), 4);
  nlohmann::json results = nlohmann::json::array();
  for (TensorType t : types) {
    nlohmann::json r;
    r["type"] = gguf::tensor_type_name(t);
    r["bits_per_weight"] = 8.0 * static_cast<double>(quant::row_size(t, 256 * 32)) / (256.0 * 32.0);
    r["rmse_gaussian"] = relative_rmse(t, g);
    r["rmse_heavy_tailed"] = relative_rmse(t, h);
    const size_t rs = quant::row_size(t, cols);
    std::vector<uint8_t> w(rs * static_cast<size_t>(rows));
    pool.parallel_for(rows, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) quant::quantize_row(t, weights.data() + i * cols, w.data() + i * rs, cols);
    });
    std::vector<float> y(static_cast<size_t>(rows * tokens));
    // Matrix-vector products stream weights from memory in real use. Rotate among copies whose total is
    // far larger than any cache, so every timed product reads its weights from DRAM.
    const size_t copies = std::clamp<size_t>((size_t{768} << 20) / w.size() + 1, 2, 32);
    std::vector<std::vector<uint8_t>> ws(copies, w);
    for (const auto& wc : ws) quant::matvec(t, wc.data(), rows, cols, x.data(), y.data(), pool);  // warm-up
    double best = 1e30;
    for (int rep = 0; rep < 3 * static_cast<int>(copies); ++rep) {
      const auto t0 = Clock::now();
      quant::matvec(t, ws[static_cast<size_t>(rep) % copies].data(), rows, cols, x.data(), y.data(), pool);
      best = std::min(best, seconds_since(t0));
    }
    ws.clear();
    r["kernel"] = quant::dot_kernel(t).isa;
    r["weight_bytes"] = w.size();
    r["matvec_ms"] = best * 1e3;
    r["matvec_gbs"] = static_cast<double>(w.size()) / best / 1e9;
    r["matvec_roofline_pct"] = 100.0 * static_cast<double>(w.size()) / best / 1e9 / peak;
    if (!skip_matmul) {
      const auto t0 = Clock::now();
      quant::matmul(t, w.data(), rows, cols, x.data(), tokens, y.data(), pool);
      const double s = seconds_since(t0);
      r["matmul_ms"] = s * 1e3;
      r["matmul_gflops"] = 2.0 * static_cast<double>(rows) * static_cast<double>(cols) * static_cast<double>(tokens) / s / 1e9;
    }
    results.push_back(r);
    if (!json_out) fmt::print(stderr, "  {} done\n", gguf::tensor_type_name(t));
  }
  j["results"] = results;
  if (json_out) {
    fmt::print("{}\n", j.dump(2));
    return 0;
  }
  fmt::print("CPU: {} · {} threads · measured memory read bandwidth {:.1f} GB/s\n", cpu.name, pool.size(), peak);
  fmt::print("matvec {}×{} (weight bytes / time); matmul {} tokens\n\n", rows, cols, tokens);
  fmt::print("| type | bits/w | rel. RMSE gauss | rel. RMSE t(3) | kernel | matvec ms | matvec GB/s | % of read BW | matmul GFLOP/s |\n");
  fmt::print("|---|---|---|---|---|---|---|---|---|\n");
  for (const auto& r : results) {
    fmt::print("| {} | {:.2f} | {:.4f} | {:.4f} | {} | {:.2f} | {:.1f} | {:.0f}% | {} |\n", r["type"].get<std::string>(),
               r["bits_per_weight"].get<double>(), r["rmse_gaussian"].get<double>(), r["rmse_heavy_tailed"].get<double>(),
               r["kernel"].get<std::string>(), r["matvec_ms"].get<double>(), r["matvec_gbs"].get<double>(),
               r["matvec_roofline_pct"].get<double>(),
               r.contains("matmul_gflops") ? fmt::format("{:.1f}", r["matmul_gflops"].get<double>()) : "-");
  }
  return 0;
}
