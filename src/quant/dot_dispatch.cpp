// Picks the fastest dot-product implementation the running CPU supports, per weight type.
#include <fmt/format.h>

#include <cstdlib>
#include <string>

#include "core/error.h"
#include "core/system_info.h"
#include "quant/dot.h"

namespace zinc::quant {

namespace {

// ZINC_CPU_ISA=scalar|avx2|avx512|neon caps the instruction sets used (for comparing and debugging).
int isa_cap() {
  const char* v = std::getenv("ZINC_CPU_ISA");
  if (!v) return 3;
  const std::string s(v);
  return s == "scalar" ? 0 : s == "avx2" || s == "neon" ? 1 : s == "avx512" ? 2 : 3;
}

}  // namespace

DotKernel dot_kernel(TensorType w) {
  static const CpuInfo cpu = cpu_info();
  static const int cap = isa_cap();
  if (cap >= 2 && cpu.avx512f && cpu.avx512bw && cpu.avx512vl && cpu.avx512vnni && cpu.fma && cpu.f16c) {
    if (DotFn f = dot_fn_avx512(w)) return {f, dot_tile_fn_avx512(w), "avx512"};
  }
  if (cap >= 1 && cpu.avx2 && cpu.fma && cpu.f16c) {
    if (DotFn f = dot_fn_avx2(w)) return {f, dot_tile_fn_avx2(w), "avx2"};
  }
  if (cap >= 1 && cpu.neon) {
    if (DotFn f = dot_fn_neon(w)) return {f, nullptr, "neon"};
  }
  if (DotFn f = dot_fn_scalar(w)) return {f, nullptr, "scalar"};
  throw Error(fmt::format("no dot product for {} weights", gguf::tensor_type_name(w)));
}

}  // namespace zinc::quant
