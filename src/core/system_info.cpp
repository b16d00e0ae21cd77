#include "core/system_info.h"

#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>
#include <utility>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__aarch64__) && defined(__linux__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

namespace zinc {

namespace {

std::string trim(std::string s) {
  const auto b = s.find_first_not_of(" \t");
  const auto e = s.find_last_not_of(" \t\n");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

std::string proc_cpuinfo_field(const std::string& field) {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    const auto colon = line.find(':');
    if (colon != std::string::npos && trim(line.substr(0, colon)) == field) return trim(line.substr(colon + 1));
  }
  return {};
}

unsigned count_physical_cores() {
  // Distinct (package, core) pairs from sysfs topology.
  std::set<std::pair<std::string, std::string>> cores;
  for (unsigned cpu = 0; cpu < 4096; ++cpu) {
    const std::string base = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
    std::ifstream core(base + "core_id"), pkg(base + "physical_package_id");
    if (!core) {
      if (cpu > 0) break;
      continue;
    }
    std::string c, p;
    core >> c;
    pkg >> p;
    cores.emplace(p, c);
  }
  return static_cast<unsigned>(cores.size());
}

#if defined(__x86_64__) || defined(__i386__)
void detect_x86(CpuInfo& info) {
  unsigned a = 0, b = 0, c = 0, d = 0;
  char brand[49] = {};
  if (static_cast<unsigned>(__get_cpuid_max(0x80000000, nullptr)) >= 0x80000004u) {
    for (unsigned i = 0; i < 3; ++i) {
      __get_cpuid(0x80000002 + i, &a, &b, &c, &d);
      const unsigned regs[4] = {a, b, c, d};
      std::memcpy(brand + 16 * i, regs, 16);
    }
    info.name = trim(brand);
  }
  if (!__get_cpuid(1, &a, &b, &c, &d)) return;
  const bool osxsave = c & (1u << 27);
  info.sse3 = c & 1u;
  const bool cpu_avx = c & (1u << 28);
  const bool cpu_fma = c & (1u << 12);
  const bool cpu_f16c = c & (1u << 29);
  // The OS must save the wider registers on context switch, as XCR0 reports.
  uint64_t xcr0 = 0;
  if (osxsave) {
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    xcr0 = (static_cast<uint64_t>(hi) << 32) | lo;
  }
  const bool os_avx = (xcr0 & 0x6) == 0x6;
  const bool os_avx512 = (xcr0 & 0xe6) == 0xe6;
  info.avx = cpu_avx && os_avx;
  info.fma = cpu_fma && os_avx;
  info.f16c = cpu_f16c && os_avx;
  if (static_cast<unsigned>(__get_cpuid_max(0, nullptr)) < 7u) return;
  __cpuid_count(7, 0, a, b, c, d);
  info.avx2 = (b & (1u << 5)) && os_avx;
  info.avx512f = (b & (1u << 16)) && os_avx512;
  info.avx512bw = (b & (1u << 30)) && os_avx512;
  info.avx512vl = (b & (1u << 31)) && os_avx512;
  info.avx512vnni = (c & (1u << 11)) && os_avx512;
  // AMX: the tile unit and its int8 products, with the tile state in XCR0 (bits 17, 18). Linux also
  // asks a process to request the tile data state before its first tile instruction (amx_request()).
  info.amx_int8 = (d & (1u << 24)) && (d & (1u << 25)) && (xcr0 & 0x60000) == 0x60000;
  __cpuid_count(7, 1, a, b, c, d);
  info.avxvnni = (a & (1u << 4)) && os_avx;
  info.avx512bf16 = (a & (1u << 5)) && os_avx512;
}
#endif

}  // namespace

std::vector<std::string> CpuInfo::feature_names() const {
  std::vector<std::string> out;
  const std::pair<bool, const char*> all[] = {
      {sse3, "sse3"},         {avx, "avx"},           {avx2, "avx2"},           {fma, "fma"},
      {f16c, "f16c"},         {avx512f, "avx512f"},   {avx512bw, "avx512bw"},   {avx512vl, "avx512vl"},
      {avx512vnni, "avx512_vnni"}, {avx512bf16, "avx512_bf16"}, {avxvnni, "avx_vnni"}, {amx_int8, "amx_int8"}, {neon, "neon"},
      {arm_dotprod, "dotprod"}, {arm_i8mm, "i8mm"},  {sve, "sve"}};
  for (const auto& [present, feature] : all) {
    if (present) out.emplace_back(feature);
  }
  return out;
}

CpuInfo cpu_info() {
  CpuInfo info;
#if defined(__x86_64__)
  info.arch = "x86_64";
  detect_x86(info);
#elif defined(__aarch64__)
  info.arch = "aarch64";
  info.neon = true;  // Advanced SIMD is mandatory on AArch64
#if defined(__linux__)
  const unsigned long hw = getauxval(AT_HWCAP);
  const unsigned long hw2 = getauxval(AT_HWCAP2);
  info.arm_dotprod = hw & HWCAP_ASIMDDP;
  info.sve = hw & HWCAP_SVE;
  info.arm_i8mm = hw2 & HWCAP2_I8MM;
#endif
#else
  info.arch = "unknown";
#endif
  if (info.name.empty()) info.name = proc_cpuinfo_field("model name");
  if (info.name.empty()) info.name = "unknown CPU";
  info.logical_cores = std::thread::hardware_concurrency();
  info.physical_cores = count_physical_cores();
  if (info.physical_cores == 0) info.physical_cores = info.logical_cores;
  return info;
}

MemoryInfo memory_info() {
  MemoryInfo m;
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (in >> key >> kib) {
    std::getline(in, unit);
    if (key == "MemTotal:") m.total_bytes = kib * 1024;
    if (key == "MemAvailable:") m.available_bytes = kib * 1024;
  }
  return m;
}

}  // namespace zinc
