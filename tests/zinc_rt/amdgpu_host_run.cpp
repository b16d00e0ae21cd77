#include "amdgpu_host_run.h"

#include <barrier>
#include <thread>
#include <vector>

namespace {

struct Item {
  std::array<uint32_t, 3> group{}, item{};
  std::barrier<>* sync = nullptr;
};
thread_local Item tls;

}  // namespace

extern "C" {
uint32_t zrt_host_group_id(uint32_t dim) { return tls.group[dim]; }
uint32_t zrt_host_item_id(uint32_t dim) { return tls.item[dim]; }
void zrt_host_barrier() { tls.sync->arrive_and_wait(); }
}

namespace zinc::backend::zinc_rt::host {

void run(std::array<uint32_t, 3> groups, std::array<uint32_t, 3> block, const std::function<void()>& kernel) {
  const uint32_t n = block[0] * block[1] * block[2];
  std::barrier<> sync(n);
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (uint32_t t = 0; t < n; ++t) {
    threads.emplace_back([&, t] {
      tls.item = {t % block[0], t / block[0] % block[1], t / (block[0] * block[1])};
      tls.sync = &sync;
      for (uint32_t z = 0; z < groups[2]; ++z) {
        for (uint32_t y = 0; y < groups[1]; ++y) {
          for (uint32_t x = 0; x < groups[0]; ++x) {
            tls.group = {x, y, z};
            kernel();
            sync.arrive_and_wait();  // the workgroup's items are done before the next one's start
          }
        }
      }
    });
  }
  for (auto& th : threads) th.join();
}

}  // namespace zinc::backend::zinc_rt::host
