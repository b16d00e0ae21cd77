// avx512 dot-product kernels (compiled with the avx512 instruction set; only called when the CPU has it).
#include "quant/dot.h"

namespace zinc::quant {

DotFn dot_fn_avx512(TensorType) { return nullptr; }

}  // namespace zinc::quant
