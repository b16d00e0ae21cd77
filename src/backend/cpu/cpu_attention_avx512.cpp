// The attention kernels for AVX-512 (16-float registers, fp16 keys and values converted by vcvtph2ps).
// Compiled with that set's flags; cpu_attention.cpp calls them only on CPUs that have it.
#if defined(__x86_64__) && defined(__AVX512F__)
#define ZINC_ATTEND_ISA(name) name##_avx512
#include "backend/cpu/cpu_attention_kernels.h"
#include "backend/cpu/cpu_act_kernels.h"
#endif
