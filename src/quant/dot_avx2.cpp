// avx2 dot-product kernels (compiled with the avx2 instruction set; only called when the CPU has it).
#include "quant/dot.h"

namespace zinc::quant {

DotFn dot_fn_avx2(TensorType) { return nullptr; }

}  // namespace zinc::quant
