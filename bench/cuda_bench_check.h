// The CUDA benches' error check: the failing call named, then exit (a bench has nothing to recover).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}
