#include "core/thread_pool.h"

#include <algorithm>
#include <chrono>

namespace zinc {

ThreadPool::ThreadPool(unsigned n_threads) {
  if (n_threads == 0) n_threads = std::max(1u, std::thread::hardware_concurrency());
  for (unsigned i = 1; i < n_threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_.store(true);
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

namespace {

void chunk_of(int64_t n, unsigned parts, unsigned index, int64_t* begin, int64_t* end) {
  const int64_t per = n / parts, extra = n % parts;
  *begin = static_cast<int64_t>(index) * per + std::min<int64_t>(index, extra);
  *end = *begin + per + (static_cast<int64_t>(index) < extra ? 1 : 0);
}

inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Polling before sleeping: some tens of microseconds (a pause takes 10 to 150 cycles by CPU).
constexpr int kSpins = 2048;

}  // namespace

void ThreadPool::worker_loop(unsigned index) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t g = generation_.load(std::memory_order_acquire);
    for (int i = 0; g == seen && !stop_.load(std::memory_order_relaxed) && i < kSpins; ++i) {
      cpu_relax();
      g = generation_.load(std::memory_order_acquire);
    }
    if (g == seen) {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stop_.load() || generation_.load(std::memory_order_acquire) != seen; });
      g = generation_.load(std::memory_order_acquire);
    }
    if (stop_.load()) return;
    seen = g;
    int64_t b, e;
    chunk_of(job_n_, size(), index, &b, &e);
    const bool timed = accounting_.load(std::memory_order_relaxed);
    const int64_t t0 = timed ? now_ns() : 0;
    try {
      if (b < e) (*job_)(b, e);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!error_) error_ = std::current_exception();
    }
    if (timed) worker_busy_ns_.fetch_add(now_ns() - t0, std::memory_order_relaxed);
    // seq_cst on both sides: either the caller sees pending_ reach 0 before it sleeps, or this sees
    // caller_waiting_ and wakes it.
    if (pending_.fetch_sub(1) == 1 && caller_waiting_.load()) {
      std::lock_guard<std::mutex> lock(mutex_);
      done_.notify_one();
    }
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  if (workers_.empty() || n == 1) {
    fn(0, n);
    return;
  }
  job_ = &fn;
  job_n_ = n;
  error_ = nullptr;
  pending_.store(static_cast<unsigned>(workers_.size()), std::memory_order_relaxed);
  {
    // Under the lock, so a worker between its last check and its sleep cannot miss the bump.
    std::lock_guard<std::mutex> lock(mutex_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  int64_t b, e;
  chunk_of(n, size(), 0, &b, &e);
  std::exception_ptr mine;
  try {
    if (b < e) fn(b, e);
  } catch (...) {
    mine = std::current_exception();
  }
  const bool timed = accounting_.load(std::memory_order_relaxed);
  const int64_t wait_from = timed ? now_ns() : 0;
  for (int i = 0; i < kSpins && pending_.load(std::memory_order_acquire) != 0; ++i) cpu_relax();
  std::unique_lock<std::mutex> lock(mutex_);
  if (pending_.load() != 0) {
    caller_waiting_.store(true);
    done_.wait(lock, [&] { return pending_.load() == 0; });
    caller_waiting_.store(false);
  }
  if (timed) caller_wait_ns_.fetch_add(now_ns() - wait_from, std::memory_order_relaxed);
  job_ = nullptr;
  if (mine) std::rethrow_exception(mine);
  if (error_) std::rethrow_exception(error_);
}

}  // namespace zinc
