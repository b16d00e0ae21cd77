// Picks the fastest dot-product implementation the running CPU supports, per weight type.
#include <fmt/format.h>

#include "core/error.h"
#include "core/system_info.h"
#include "quant/dot.h"

namespace zinc::quant {

DotKernel dot_kernel(TensorType w) {
  static const CpuInfo cpu = cpu_info();
  if (cpu.avx512f && cpu.avx512bw && cpu.avx512vl && cpu.fma && cpu.f16c) {
    if (DotFn f = dot_fn_avx512(w)) return {f, "avx512"};
  }
  if (cpu.avx2 && cpu.fma && cpu.f16c) {
    if (DotFn f = dot_fn_avx2(w)) return {f, "avx2"};
  }
  if (cpu.neon) {
    if (DotFn f = dot_fn_neon(w)) return {f, "neon"};
  }
  if (DotFn f = dot_fn_scalar(w)) return {f, "scalar"};
  throw Error(fmt::format("no dot product for {} weights", gguf::tensor_type_name(w)));
}

}  // namespace zinc::quant
