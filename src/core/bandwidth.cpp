#include "core/bandwidth.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "core/system_info.h"

namespace zinc {

double measure_read_bandwidth(ThreadPool& pool) {
  using Clock = std::chrono::steady_clock;
  const size_t n = size_t{1} << 26;  // 512 MiB of 64-bit words
  std::vector<uint64_t> buf(n, 0x0123456789abcdefull);
  std::vector<uint64_t> partial(pool.size() * 8, 0);
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = Clock::now();
    // XOR is associative: the compiler vectorizes the loop, which is then bound by memory alone.
    pool.parallel_for(static_cast<int64_t>(pool.size()), [&](int64_t b, int64_t e) {
      for (int64_t part = b; part < e; ++part) {
        const size_t lo = n / pool.size() * static_cast<size_t>(part), hi = lo + n / pool.size();
        uint64_t acc = 0;
        for (size_t i = lo; i < hi; ++i) acc ^= buf[i];
        partial[static_cast<size_t>(part) * 8] = acc;
      }
    });
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::max(best, static_cast<double>(n * sizeof(uint64_t)) / s / 1e9);
  }
  return best;
}

namespace {

double cached(ThreadPool& pool, bool refresh) {
  const auto path = std::filesystem::path(zinc_home()) / "bandwidth.txt";
  const std::string key = fmt::format("{}|{}", cpu_info().name, pool.size());
  // One "key<TAB>GB/s" line per CPU and thread count.
  std::vector<std::string> lines;
  {
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
      const auto tab = line.find('\t');
      if (tab != std::string::npos && line.substr(0, tab) == key) {
        if (refresh) continue;
        try {
          const double v = std::stod(line.substr(tab + 1));
          if (v > 0) return v;
        } catch (const std::exception&) {
        }
        continue;
      }
      lines.push_back(line);
    }
  }
  const double v = measure_read_bandwidth(pool);
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  std::ofstream out(path, std::ios::trunc);
  for (const auto& l : lines) out << l << "\n";
  out << key << "\t" << v << "\n";
  return v;
}

}  // namespace

double cached_read_bandwidth(ThreadPool& pool) { return cached(pool, false); }
double refresh_read_bandwidth(ThreadPool& pool) { return cached(pool, true); }

}  // namespace zinc
