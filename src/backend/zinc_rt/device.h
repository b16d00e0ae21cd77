// Where ZINC_RT runs a plan: memory the CPU and the device reach at one address, memory only the
// device reaches (the weights: VRAM on a GPU, filled by the queue's copies), and a queue that runs a
// step's packets to its fence. The KFD's (kfd_device: a session's GTT memory and compute queue) is
// the GPU's; the tests give one whose packets an interpreter runs on the host with the host build of
// the kernels.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "backend/zinc_rt/pm4.h"

namespace zinc::backend::zinc_rt {

class KfdSession;
class ComputeQueue;

class Device {
 public:
  struct Buffer {
    uint64_t va = 0;  // the device's address, which is also the CPU's
    uint64_t bytes = 0;
    template <class T>
    T* cpu(uint64_t offset = 0) const { return reinterpret_cast<T*>(static_cast<uintptr_t>(va + offset)); }
  };
  virtual ~Device() = default;
  // The code objects' target ("gfx1100").
  virtual std::string target() const = 0;
  // `bytes` of zeroed memory (4096-byte aligned), executable where asked, kept until the device goes.
  // Throws zinc::Error where it cannot.
  virtual Buffer alloc(uint64_t bytes, bool executable) = 0;
  // `bytes` of memory only the device reaches (4096-byte aligned, no initial value): the CPU must not
  // touch it; packets fill it (pm4 dma_copy from memory of alloc's). Throws zinc::Error where it cannot.
  virtual Buffer alloc_device(uint64_t bytes) = 0;
  // Gives back a buffer of alloc's or alloc_device's (nothing for an empty one).
  virtual void free(const Buffer& b) = 0;
  // The fence's address: a step's packets end by writing a value there (pm4 release_mem_fence, 64 bits).
  virtual uint64_t fence() const = 0;
  // Submits `packets` and waits until the fence holds `value`; throws zinc::Error, saying how far the
  // queue read, where it does not within `timeout_ms`.
  virtual void run(const pm4::Stream& packets, uint64_t value, int timeout_ms = 10000) = 0;

  // The value the next submission's fence writes (one counter for every user of the device, so no
  // submission finds its value already there), and the lock its users hold from packets to fence.
  uint64_t next_fence_value() { return ++fence_value_; }
  std::mutex& lock() { return lock_; }

 private:
  uint64_t fence_value_ = 0;
  std::mutex lock_;
};

// A session's GPU as a Device: buffers the CPU reaches in GTT (coherent, uncached), the device's own
// in VRAM, the session's queue. Both must outlive it.
std::unique_ptr<Device> kfd_device(KfdSession& session, ComputeQueue& queue);

}  // namespace zinc::backend::zinc_rt
