// Which of a kernel's per-instruction-set builds the CPU backend calls: the set the CPU kernels use
// (quant::dot_isa_in_use, which ZINC_CPU_ISA caps). Off x86-64 only the baseline build exists.
#pragma once

#include <string>

#include "quant/dot.h"

namespace zinc::backend::cpu {

template <class Fn>
Fn by_isa([[maybe_unused]] Fn avx512, [[maybe_unused]] Fn avx2, Fn base) {
#if defined(__x86_64__)
  const std::string isa = quant::dot_isa_in_use();
  return isa == "avx512" ? avx512 : isa == "avx2" ? avx2 : base;
#else
  return base;
#endif
}

}  // namespace zinc::backend::cpu
