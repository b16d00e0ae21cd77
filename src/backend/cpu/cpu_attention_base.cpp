// The attention kernels for the baseline instruction set of the target (8-float vectors as the
// compiler lays them out; fp16 converted by integer operations).
#define ZINC_ATTEND_ISA(name) name##_base
#include "backend/cpu/cpu_attention_kernels.h"
#include "backend/cpu/cpu_act_kernels.h"
