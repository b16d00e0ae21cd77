// Picks the fastest dot-product implementation the running CPU supports, per weight type.
#include <fmt/format.h>

#include <cstdlib>
#include <string>

#include "core/error.h"
#include "core/knobs.h"
#include "core/system_info.h"
#include "quant/dot.h"

namespace zinc::quant {

namespace {

// ZINC_CPU_ISA=scalar|avx2|avx512|neon caps the instruction sets used (for comparing and debugging).
int isa_cap() {
  const char* v = knob("ZINC_CPU_ISA");
  if (!v) return 3;
  const std::string s(v);
  if (s == "scalar") return 0;
  if (s == "avx2" || s == "neon") return 1;
  if (s == "avx512") return 2;
  throw Error(fmt::format("ZINC_CPU_ISA={}: expected scalar, avx2, avx512 or neon", s));
}

bool runs_avx512(const CpuInfo& cpu) {
  return cpu.avx512f && cpu.avx512bw && cpu.avx512vl && cpu.avx512vnni && cpu.fma && cpu.f16c;
}
bool runs_avx2(const CpuInfo& cpu) { return cpu.avx2 && cpu.fma && cpu.f16c; }

}  // namespace

std::vector<std::string> dot_isas_available() {
  const CpuInfo cpu = cpu_info();
  std::vector<std::string> out;
  if (runs_avx512(cpu)) out.emplace_back("avx512");
  if (runs_avx2(cpu)) out.emplace_back("avx2");
  if (cpu.neon) out.emplace_back("neon");
  out.emplace_back("scalar");
  return out;
}

// Every table covers Q8_0, so the table that type gets is the one in use.
std::string dot_isa_in_use() { return dot_kernel(TensorType::Q8_0).isa; }

DotKernel dot_kernel(TensorType w) {
  static const CpuInfo cpu = cpu_info();
  static const int cap = isa_cap();
  if (cap >= 2 && runs_avx512(cpu)) {
    if (DotFn f = dot_fn_avx512(w)) return {f, dot_tile_fn_avx512(w, kDotTileTokens), dot_tile_fn_avx512(w, kDotFewTokens), "avx512"};
  }
  if (cap >= 1 && runs_avx2(cpu)) {
    if (DotFn f = dot_fn_avx2(w)) return {f, dot_tile_fn_avx2(w, kDotTileTokens), dot_tile_fn_avx2(w, kDotFewTokens), "avx2"};
  }
  if (cap >= 1 && cpu.neon) {
    if (DotFn f = dot_fn_neon(w)) return {f, nullptr, nullptr, "neon"};
  }
  if (DotFn f = dot_fn_scalar(w)) return {f, nullptr, nullptr, "scalar"};
  throw Error(fmt::format("no dot product for {} weights", gguf::tensor_type_name(w)));
}

}  // namespace zinc::quant
