// What the host CPU and memory offer: the facts `zinc check` prints and the CPU kernels dispatch on.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace zinc {

struct CpuInfo {
  std::string arch;            // "x86_64", "aarch64"
  std::string name;            // brand string
  unsigned logical_cores = 0;
  unsigned physical_cores = 0;
  // Instruction-set features usable by this process (CPU support and OS-enabled register state).
  bool sse3 = false, avx = false, avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512vnni = false, avx512bf16 = false;
  bool avxvnni = false, amx_int8 = false;
  bool neon = false, arm_dotprod = false, arm_i8mm = false, sve = false;

  std::vector<std::string> feature_names() const;  // the features that are present, lower case
};

struct MemoryInfo {
  uint64_t total_bytes = 0;
  uint64_t available_bytes = 0;
};

CpuInfo cpu_info();
MemoryInfo memory_info();

}  // namespace zinc
