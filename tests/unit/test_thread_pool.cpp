// The thread pool: every index of a loop runs exactly once, across the spinning and the sleeping
// hand-over paths, and exceptions from any chunk reach the caller without breaking the pool.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/thread_pool.h"

namespace zinc {
namespace {

void expect_each_index_once(ThreadPool& pool, int64_t n) {
  std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
  pool.parallel_for(n, [&](int64_t b, int64_t e) {
    ASSERT_LE(0, b);
    ASSERT_LE(b, e);
    ASSERT_LE(e, n);
    for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
  });
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "index " << i << " of " << n;
}

TEST(ThreadPool, EveryIndexRunsOnceBackToBack) {
  for (unsigned threads : {1u, 2u, 3u, 8u}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    // Back-to-back loops hand work to spinning workers; sizes below, at and above the thread count.
    for (int rep = 0; rep < 500; ++rep) expect_each_index_once(pool, 1 + rep % 19);
  }
}

TEST(ThreadPool, EveryIndexRunsOnceAfterWorkersSleep) {
  ThreadPool pool(4);
  for (int rep = 0; rep < 5; ++rep) {
    // Longer than the spin: the workers are asleep on the condition variable when the next loop starts.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    expect_each_index_once(pool, 1000);
  }
}

TEST(ThreadPool, ChunksRunConcurrently) {
  // Two chunks that each wait for the other can only finish if they run at the same time.
  ThreadPool pool(2);
  std::atomic<int> arrived{0};
  pool.parallel_for(2, [&](int64_t, int64_t) {
    arrived.fetch_add(1);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (arrived.load() < 2 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  });
  EXPECT_EQ(arrived.load(), 2);
}

TEST(ThreadPool, ExceptionsReachTheCallerAndThePoolKeepsWorking) {
  ThreadPool pool(3);
  for (int64_t bad : {0, 5, 9}) {  // the caller's chunk (index 0) and workers' chunks
    EXPECT_THROW(pool.parallel_for(10, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        if (i == bad) throw std::runtime_error("chunk failed");
      }
    }), std::runtime_error);
    expect_each_index_once(pool, 10);
  }
}

// Time accounting: off, nothing is counted; on, a worker's chunk counts as its busy time and the caller's
// wait for it after a short chunk of its own as the caller's wait; off again, nothing more. Sleeps give
// lower bounds only (a loaded machine makes them longer, never shorter).
TEST(ThreadPool, AccountingCountsWorkersBusyTimeAndTheCallersWait) {
  using namespace std::chrono_literals;
  ThreadPool pool(2);
  // Chunk 0 is the caller's, chunk 1 the worker's.
  const auto worker_sleeps = [](int64_t b, int64_t) {
    if (b == 1) std::this_thread::sleep_for(30ms);
  };
  pool.parallel_for(2, worker_sleeps);
  EXPECT_EQ(pool.usage().worker_busy_ns, 0);
  EXPECT_EQ(pool.usage().caller_wait_ns, 0);
  pool.set_accounting(true);
  pool.parallel_for(2, worker_sleeps);
  const ThreadPool::Usage u = pool.usage();
  EXPECT_GE(u.worker_busy_ns, 30'000'000);
  EXPECT_GE(u.caller_wait_ns, 25'000'000);
  pool.set_accounting(false);
  pool.parallel_for(2, worker_sleeps);
  EXPECT_EQ(pool.usage().worker_busy_ns, u.worker_busy_ns);
  EXPECT_EQ(pool.usage().caller_wait_ns, u.caller_wait_ns);
}

}  // namespace
}  // namespace zinc
