// The delta-rule kernels for the baseline instruction set of the target. Compiled with that set's flags; cpu_deltanet.cpp calls them
// only on CPUs that have it.
#define ZINC_DELTA_ISA(name) name##_base
#include "backend/cpu/cpu_deltanet_kernels.h"
