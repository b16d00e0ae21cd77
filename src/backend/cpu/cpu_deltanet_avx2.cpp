// The delta-rule kernels for AVX2 + FMA (8-float registers). Compiled with that set's flags; cpu_deltanet.cpp calls them
// only on CPUs that have it.
#if defined(__x86_64__) && defined(__AVX2__)
#define ZINC_DELTA_ISA(name) name##_avx2
#include "backend/cpu/cpu_deltanet_kernels.h"
#endif
