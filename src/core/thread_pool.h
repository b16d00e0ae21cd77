// A fixed set of worker threads for data-parallel loops (quantizing rows, matrix-vector products).
// parallel_for splits [0, n) into contiguous chunks, one per worker, and returns when all are done;
// the calling thread works too. Exceptions thrown by a chunk are rethrown to the caller.
// Workers spin briefly on the job counter before sleeping, and the caller briefly on the count of
// running chunks before blocking: a decode step issues hundreds of small loops a few microseconds
// apart, and waking a sleeping thread costs more than most of them. The spins are short so that a
// busy machine (more threads than free cores) still hands the core to whoever has work.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace zinc {

class ThreadPool {
 public:
  // n_threads counts the caller: 1 means no worker threads. 0 picks the hardware thread count.
  explicit ThreadPool(unsigned n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  unsigned size() const { return static_cast<unsigned>(workers_.size()) + 1; }

  // Calls fn(begin, end) on disjoint chunks covering [0, n), at most size() at once.
  void parallel_for(int64_t n, const std::function<void(int64_t begin, int64_t end)>& fn);

  // Time accounting, off until switched on (two clock reads per chunk): the worker threads' time inside
  // chunks, and the caller's time waiting for them after its own chunk, in nanoseconds since then. Over
  // a stretch of wall time W the threads were idle for (size() − 1)·W − worker_busy + caller_wait.
  struct Usage {
    int64_t worker_busy_ns = 0, caller_wait_ns = 0;
  };
  void set_accounting(bool on) { accounting_.store(on, std::memory_order_relaxed); }
  Usage usage() const {
    return {worker_busy_ns_.load(std::memory_order_relaxed), caller_wait_ns_.load(std::memory_order_relaxed)};
  }

 private:
  void worker_loop(unsigned index);

  std::vector<std::thread> workers_;
  std::mutex mutex_;  // guards sleeping (wake_, done_) and error_
  std::condition_variable wake_, done_;
  std::atomic<bool> caller_waiting_{false};
  // Written by the caller before generation_ is bumped (release), read by workers after (acquire).
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0;
  std::atomic<uint64_t> generation_{0};
  std::atomic<unsigned> pending_{0};  // workers still running the current job
  std::atomic<bool> stop_{false};
  std::exception_ptr error_;
  std::atomic<bool> accounting_{false};
  std::atomic<int64_t> worker_busy_ns_{0}, caller_wait_ns_{0};
};

}  // namespace zinc
