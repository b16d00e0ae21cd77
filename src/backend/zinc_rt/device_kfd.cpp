#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "backend/zinc_rt/device.h"
#include "backend/zinc_rt/queue.h"
#include "core/error.h"

namespace zinc::backend::zinc_rt {

namespace {

class KfdDevice final : public Device {
 public:
  KfdDevice(KfdSession& s, ComputeQueue& q) : s_(s), q_(q) { fence_ = alloc(4096, false).va; }
  ~KfdDevice() override {
    for (GpuBuffer& b : buffers_) s_.release(b);
  }
  std::string target() const override { return s_.gpu().target(); }
  Buffer alloc(uint64_t bytes, bool executable) override {
    const uint64_t size = (std::max<uint64_t>(bytes, 1) + 4095) / 4096 * 4096;
    const uint32_t flags = mem::kGtt | mem::kCoherent | mem::kUncached | mem::kWritable | (executable ? mem::kExecutable : 0u);
    buffers_.push_back(s_.alloc(size, flags, true));
    std::memset(buffers_.back().cpu<uint8_t>(), 0, size);
    return {buffers_.back().va, size};
  }
  Buffer alloc_device(uint64_t bytes) override {
    const uint64_t size = (std::max<uint64_t>(bytes, 1) + 4095) / 4096 * 4096;
    buffers_.push_back(s_.alloc(size, mem::kVram | mem::kWritable, false));
    return {buffers_.back().va, size};
  }
  void free(const Buffer& b) override {
    if (b.va == 0) return;
    const auto it = std::find_if(buffers_.begin(), buffers_.end(), [&](const GpuBuffer& g) { return g.va == b.va; });
    if (it == buffers_.end()) throw Error(fmt::format("ZINC_RT: freeing {:#x}, not a buffer of this device", b.va));
    s_.release(*it);
    buffers_.erase(it);
  }
  uint64_t fence() const override { return fence_; }
  void run(const pm4::Stream& packets, uint64_t value, int timeout_ms) override {
    if (q_.submit(packets) < 0) throw Error("ZINC_RT: the queue's ring has no room for a step's packets");
    const auto* f = reinterpret_cast<volatile uint64_t*>(static_cast<uintptr_t>(fence_));
    const auto t0 = std::chrono::steady_clock::now();
    while (*f != value) {
      if (std::chrono::steady_clock::now() - t0 > std::chrono::milliseconds(timeout_ms))
        throw Error(fmt::format("ZINC_RT: the fence ({}) was not written within {} ms (read position {} of {})", value, timeout_ms,
                                q_.read_pos(), q_.write_pos()));
      std::this_thread::yield();
    }
  }

 private:
  KfdSession& s_;
  ComputeQueue& q_;
  std::vector<GpuBuffer> buffers_;
  uint64_t fence_ = 0;
};

}  // namespace

std::unique_ptr<Device> kfd_device(KfdSession& session, ComputeQueue& queue) { return std::make_unique<KfdDevice>(session, queue); }

}  // namespace zinc::backend::zinc_rt
