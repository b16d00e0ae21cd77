#include "amdgpu_host_run.h"

#include <barrier>
#include <condition_variable>
#include <latch>
#include <mutex>
#include <thread>
#include <vector>

namespace {

struct Item {
  std::array<uint32_t, 3> group{}, item{};
  std::barrier<>* sync = nullptr;
};
thread_local Item tls;

// The work-items' threads, kept from one run to the next (a plan's step is dozens of runs, and making
// hundreds of threads for each costs more than the kernels).
class Pool {
 public:
  ~Pool() {
    {
      std::lock_guard lock(m_);
      stop_ = true;
      ++generation_;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  void run(std::array<uint32_t, 3> groups, std::array<uint32_t, 3> block, const std::function<void()>& kernel) {
    const uint32_t n = block[0] * block[1] * block[2];
    std::barrier<> sync(n);
    std::latch done(n);
    {
      std::lock_guard lock(m_);
      while (threads_.size() < n) {
        const auto index = static_cast<uint32_t>(threads_.size());
        threads_.emplace_back([this, index] { work(index); });
      }
      job_ = {groups, block, &kernel, &sync, &done, n};
      ++generation_;
    }
    cv_.notify_all();
    done.wait();
  }

 private:
  struct Job {
    std::array<uint32_t, 3> groups{}, block{};
    const std::function<void()>* kernel = nullptr;
    std::barrier<>* sync = nullptr;
    std::latch* done = nullptr;
    uint32_t n = 0;
  };
  void work(uint32_t t) {
    uint64_t seen = 0;
    for (;;) {
      Job j;
      {
        std::unique_lock lock(m_);
        cv_.wait(lock, [&] { return generation_ != seen; });
        seen = generation_;
        if (stop_) return;
        j = job_;
      }
      if (t >= j.n) continue;
      const auto& block = j.block;
      tls.item = {t % block[0], t / block[0] % block[1], t / (block[0] * block[1])};
      tls.sync = j.sync;
      for (uint32_t z = 0; z < j.groups[2]; ++z) {
        for (uint32_t y = 0; y < j.groups[1]; ++y) {
          for (uint32_t x = 0; x < j.groups[0]; ++x) {
            tls.group = {x, y, z};
            (*j.kernel)();
            j.sync->arrive_and_wait();  // the workgroup's items are done before the next one's start
          }
        }
      }
      j.done->count_down();
    }
  }
  std::mutex m_;
  std::condition_variable cv_;
  std::vector<std::thread> threads_;
  Job job_;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

}  // namespace

extern "C" {
uint32_t zrt_host_group_id(uint32_t dim) { return tls.group[dim]; }
uint32_t zrt_host_item_id(uint32_t dim) { return tls.item[dim]; }
void zrt_host_barrier() { tls.sync->arrive_and_wait(); }
}

namespace zinc::backend::zinc_rt::host {

void run(std::array<uint32_t, 3> groups, std::array<uint32_t, 3> block, const std::function<void()>& kernel) {
  static Pool pool;
  static std::mutex one_at_a_time;  // (a kernel's __local arrays are one per kernel on the host)
  std::lock_guard lock(one_at_a_time);
  pool.run(groups, block, kernel);
}

}  // namespace zinc::backend::zinc_rt::host
