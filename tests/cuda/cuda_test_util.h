// What the CUDA kernel tests share: device buffers and the skip where no CUDA device is visible.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstddef>

#include "backend/cuda/cuda_kernels.h"
#include "core/error.h"

namespace zinc::test_cuda {

// Device memory for a test's buffers.
struct Dev {
  void* p = nullptr;
  explicit Dev(size_t bytes) {
    if (cudaMalloc(&p, bytes) != cudaSuccess) throw Error("cudaMalloc failed");
    if (cudaMemset(p, 0, bytes) != cudaSuccess) throw Error("cudaMemset failed");  // (buffers compared whole: no stale bytes)
  }
  ~Dev() { cudaFree(p); }
  template <class T>
  T* as() const { return static_cast<T*>(p); }
};

inline void upload(Dev& d, const void* h, size_t bytes) { ASSERT_EQ(cudaMemcpy(d.p, h, bytes, cudaMemcpyHostToDevice), cudaSuccess); }

// The prompt tiles' split scratch as a context holds it, the test thread's while this lives (its
// counters zeroed); then none again, and the split back to by the shape.
struct SplitScratch {
  Dev part{backend::cuda::kSplitBytes}, count{static_cast<size_t>(backend::cuda::kSplitCounters) * sizeof(unsigned)};
  SplitScratch() { backend::cuda::set_split_scratch({part.p, backend::cuda::kSplitBytes, count.as<unsigned>(), backend::cuda::kSplitCounters}); }
  ~SplitScratch() {
    backend::cuda::set_split_scratch({});
    backend::cuda::set_split_ways(0);
  }
};

// Skips the test, saying why, where no CUDA device is visible.
#define ZINC_NEED_CUDA_DEVICE()                                    \
  do {                                                             \
    int devices = 0;                                               \
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) { \
      (void)cudaGetLastError();                                    \
      GTEST_SKIP() << "no CUDA device is visible";                 \
    }                                                              \
  } while (0)

}  // namespace zinc::test_cuda
