// The delta-rule kernels for AVX-512 (16-float registers). Compiled with that set's flags; cpu_deltanet.cpp calls them
// only on CPUs that have it.
#if defined(__x86_64__) && defined(__AVX512F__)
#define ZINC_DELTA_ISA(name) name##_avx512
#include "backend/cpu/cpu_deltanet_kernels.h"
#endif
