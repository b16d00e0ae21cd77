// Shared by the Vulkan tests: a fixture holding the process's device context, or skipping with the
// reason there is none (no loader, no driver, no device), and the timing of the throughput tables.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>

#include "backend/vulkan/vk_context.h"
#include "core/error.h"

namespace zinc::backend::vk {

class VulkanTest : public ::testing::Test {
 protected:
  void SetUp() override {
    try {
      ctx_ = Context::shared();
    } catch (const Error& e) {
      GTEST_SKIP() << "no Vulkan device: " << e.what();
    }
  }
  std::shared_ptr<Context> ctx_;
};

// Seconds per repetition of `record` (at most `dispatches` dispatches), recorded `reps` times with a
// barrier after each and replayed: the best of 3 wall times after a warm-up, divided by reps.
inline double seconds_per_rep(Context& ctx, int reps, size_t dispatches, const std::function<void(Recording&)>& record) {
  Recording rec(ctx, static_cast<size_t>(reps) * dispatches);
  for (int i = 0; i < reps; ++i) {
    record(rec);
    rec.barrier();
  }
  rec.finish();
  rec.submit_and_wait();  // warm-up
  double best = 1e30;
  for (int i = 0; i < 3; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    rec.submit_and_wait();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps);
  }
  return best;
}

}  // namespace zinc::backend::vk
