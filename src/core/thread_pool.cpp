#include "core/thread_pool.h"

#include <algorithm>

namespace zinc {

ThreadPool::ThreadPool(unsigned n_threads) {
  if (n_threads == 0) n_threads = std::max(1u, std::thread::hardware_concurrency());
  for (unsigned i = 1; i < n_threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
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

}  // namespace

void ThreadPool::worker_loop(unsigned index) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int64_t, int64_t)>* job;
    int64_t n;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
      n = job_n_;
    }
    int64_t b, e;
    chunk_of(n, size(), index, &b, &e);
    try {
      if (b < e) (*job)(b, e);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!error_) error_ = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (--pending_ == 0) done_.notify_one();
    }
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  if (workers_.empty() || n == 1) {
    fn(0, n);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job_ = &fn;
    job_n_ = n;
    pending_ = static_cast<unsigned>(workers_.size());
    error_ = nullptr;
    ++generation_;
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
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [&] { return pending_ == 0; });
  job_ = nullptr;
  if (mine) std::rethrow_exception(mine);
  if (error_) std::rethrow_exception(error_);
}

}  // namespace zinc
