// The CUDA backend's host side shared by its two halves: cuda_weights.cpp (the device, its memory and
// the weights every context shares) and cuda_backend.cpp (a context: its buffers, its steps and their
// launches). Errors thrown as zinc::Error; device memory counted in g_allocated.
#pragma once

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"
#include "graph/graph.h"

namespace zinc::backend::cuda {

// Throws zinc::Error naming `what` when e is not cudaSuccess.
void check(cudaError_t e, const char* what);

// Bytes allocated by this process's CUDA backend (device_bytes_in_use).
extern std::atomic<uint64_t> g_allocated;

// Memory owned by one object and freed with it: device memory (kDevice; counted in g_allocated), or
// page-locked host memory (copies to and from it run at full speed, asynchronously).
template <bool kDevice>
class Owned {
 public:
  Owned() = default;
  explicit Owned(size_t bytes) : bytes_(bytes) {
    if (bytes == 0) return;
    void* p = nullptr;
    const cudaError_t e = kDevice ? cudaMalloc(&p, bytes) : cudaMallocHost(&p, bytes);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      throw Error(fmt::format("CUDA: cannot allocate {:.1f} MiB of {} memory: {}", static_cast<double>(bytes) / (1 << 20),
                              kDevice ? "device" : "page-locked host", cudaGetErrorString(e)));
    }
    ptr_ = p;
    if (kDevice) g_allocated += bytes;
  }
  Owned(Owned&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = nullptr, o.bytes_ = 0; }
  Owned& operator=(Owned&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  ~Owned() {
    if (!ptr_) return;
    if (kDevice) {
      cudaFree(ptr_);
      g_allocated -= bytes_;
    } else {
      cudaFreeHost(ptr_);
    }
  }
  template <class T = void>
  T* get() const { return static_cast<T*>(ptr_); }
  uint8_t* bytes() const { return static_cast<uint8_t*>(ptr_); }
  size_t size() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};
using DeviceBuffer = Owned<true>;
using HostBuffer = Owned<false>;

inline int64_t elements(const graph::Tensor& t) { return t.ne[0] * t.ne[1] * t.ne[2] * t.ne[3]; }

// Green contexts: the device's multiprocessors parted into about `sms` of them (the driver rounds to
// its granularity) and the rest; part and rest are CUgreenCtx handles, error says why not (then both
// null). A stream on one of them runs its blocks on its multiprocessors only.
struct GreenPair {
  void* part = nullptr;
  void* rest = nullptr;
  int part_sms = 0, rest_sms = 0;
  std::string error;
};
GreenPair make_green_pair(int sms);
cudaStream_t green_stream(void* green, int priority);  // null where it cannot be made
void destroy_green(void* green);

// Why the kernels cannot run node `n`, or "".
std::string cuda_unsupported(const graph::Graph& g, const graph::Node& n);

// The weights of one model on the device, shared by every context: matrices as the file stores them
// (a product's rows of other lengths as float32 padded to a multiple of 32), the small float weights
// (norms, biases, gates) as F32, also kept on the host.
class CudaWeights final : public Weights {
 public:
  CudaWeights(const graph::Graph& g, const gguf::File& file, const LoadProgress& progress);

  uint64_t device_bytes() const override { return bytes_; }
  bool steps_side_by_side() const override { return true; }  // (streams of their own; a background one's steps take no lock)
  const void* raw(graph::TensorId id) const { return raw_[static_cast<size_t>(id)].get(); }
  const float* f32(graph::TensorId id) const { return f32_[static_cast<size_t>(id)].get<float>(); }
  const float* f32_or_null(const graph::Node& n, size_t k) const { return k < n.in.size() ? f32(n.in[k]) : nullptr; }
  const std::vector<float>& host_f32(graph::TensorId id) const { return host_f32_.at(id); }
  // The padded row length of a product's weight stored as padded float32 rows, or 0.
  int64_t padded_cols(graph::TensorId id) const {
    const auto it = padded_.find(id);
    return it == padded_.end() ? 0 : it->second;
  }
  std::mutex step_mutex;  // one step at a time on the device (a background context's steps besides)
  // A context's stream: the others' at the greatest priority; a background context's at the least
  // (ZINC_CUDA_LANE_PRIORITY=1: the greatest too) on a green context of 8 in 11 of the
  // multiprocessors (ZINC_CUDA_LANE_SMS=N: about N; 0: every one), made once for the weights: a long
  // prompt's compute-bound steps there and the decoding contexts' memory-bound ones on the rest run
  // side by side (measured in bench/README.md).
  cudaStream_t make_stream(bool background);
  // A stream on the multiprocessors a background context leaves (a foreground context's steps while
  // one runs: background_steps > 0), else null (no green contexts, or ZINC_CUDA_LANE_SMS=0).
  cudaStream_t make_side_stream();
  std::atomic<int> background_steps{0};
  ~CudaWeights() override;

 protected:
  std::unique_ptr<Executable> instantiate_graph(const ExecOptions& opts, const graph::Graph& g) override;

 private:
  std::vector<DeviceBuffer> raw_, f32_;
  std::map<graph::TensorId, std::vector<float>> host_f32_;
  std::map<graph::TensorId, int64_t> padded_;
  uint64_t bytes_ = 0;
  GreenPair green_;  // (the background's multiprocessors, and the others': made once, by green())
  std::once_flag green_once_;
  const GreenPair& green();
};

}  // namespace zinc::backend::cuda
