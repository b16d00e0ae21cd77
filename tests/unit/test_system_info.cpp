// CPU feature detection against the kernel's own view (/proc/cpuinfo flags), memory against sysconf.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <set>
#include <sstream>

#include "core/system_info.h"

namespace zinc {
namespace {

std::set<std::string> kernel_cpu_flags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) == 0 || line.rfind("Features", 0) == 0) {
      std::istringstream words(line.substr(line.find(':') + 1));
      std::set<std::string> out;
      for (std::string w; words >> w;) out.insert(w);
      return out;
    }
  }
  return {};
}

TEST(SystemInfo, CpuFeaturesMatchTheKernel) {
  const CpuInfo cpu = cpu_info();
  const auto flags = kernel_cpu_flags();
  if (flags.empty()) GTEST_SKIP() << "/proc/cpuinfo has no flags line on this system";
#if defined(__x86_64__)
  EXPECT_EQ(cpu.arch, "x86_64");
  EXPECT_EQ(cpu.avx, flags.count("avx") == 1);
  EXPECT_EQ(cpu.avx2, flags.count("avx2") == 1);
  EXPECT_EQ(cpu.fma, flags.count("fma") == 1);
  EXPECT_EQ(cpu.f16c, flags.count("f16c") == 1);
  EXPECT_EQ(cpu.avx512f, flags.count("avx512f") == 1);
  EXPECT_EQ(cpu.avx512bw, flags.count("avx512bw") == 1);
  EXPECT_EQ(cpu.avx512vl, flags.count("avx512vl") == 1);
  EXPECT_EQ(cpu.avx512vnni, flags.count("avx512_vnni") == 1);
  EXPECT_EQ(cpu.avxvnni, flags.count("avx_vnni") == 1);
#elif defined(__aarch64__)
  EXPECT_TRUE(cpu.neon);
  EXPECT_EQ(cpu.arm_dotprod, flags.count("asimddp") == 1);
  EXPECT_EQ(cpu.arm_i8mm, flags.count("i8mm") == 1);
#endif
  EXPECT_FALSE(cpu.name.empty());
  EXPECT_GE(cpu.logical_cores, 1u);
  EXPECT_GE(cpu.logical_cores, cpu.physical_cores);
}

TEST(SystemInfo, MemoryMatchesSysconf) {
  const MemoryInfo m = memory_info();
  const uint64_t pages = static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES));
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  // /proc/meminfo reports in KiB; sysconf in pages: equal to within a page rounding.
  EXPECT_NEAR(static_cast<double>(m.total_bytes), static_cast<double>(pages * page), 1024.0 * 1024.0);
  EXPECT_GT(m.available_bytes, 0u);
  EXPECT_LE(m.available_bytes, m.total_bytes);
}

}  // namespace
}  // namespace zinc
