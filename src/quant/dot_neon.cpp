// neon dot-product kernels (compiled with the neon instruction set; only called when the CPU has it).
#include "quant/dot.h"

namespace zinc::quant {

DotFn dot_fn_neon(TensorType) { return nullptr; }

}  // namespace zinc::quant
