// Shared by the Vulkan tests: a fixture holding the process's device context, or skipping with the
// reason there is none (no loader, no driver, no device), the timing of the throughput tables, and the
// checks of activation codes (Q8_K, and the 32-element formats') against the CPU's quantizer.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/vulkan/vk_context.h"
#include "backend/vulkan/vk_quant.h"
#include "core/error.h"
#include "quant/blocks.h"
#include "quant/dot.h"
#include "quant/fp16.h"
#include "quant/quant.h"

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
// Sets an environment variable (a launcher's tuning knob) for one scope, or leaves it unset when the
// value is empty; unset again at the end of the scope.
struct ScopedEnv {
  const char* name;
  ScopedEnv(const char* n, const char* value) : name(n) {
    if (value && *value) {
      setenv(n, value, 1);
    } else {
      unsetenv(n);
    }
  }
  ~ScopedEnv() { unsetenv(name); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
};

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

// Q8_K rows from the device (q8k_row_bytes apart) against the CPU's quantizer of the float rows x.
inline void expect_codes_of(const std::vector<float>& x, const std::vector<uint8_t>& codes, uint32_t width, uint32_t rows) {
  const size_t qb = q8k_row_bytes(width);
  std::vector<quant::BlockQ8_K> q(width / 256);
  for (uint32_t r = 0; r < rows; ++r) {
    quant::quantize_activation(gguf::TensorType::Q4_K, x.data() + static_cast<size_t>(r) * width, q.data(), width);
    const uint8_t* row = codes.data() + r * qb;
    for (uint32_t blk = 0; blk < width / 256; ++blk) {
      float d = 0;
      std::memcpy(&d, row + width + width / 4 + 4 * blk, 4);
      EXPECT_EQ(d, q[blk].d) << width << " row " << r << " block " << blk;
      EXPECT_EQ(0, std::memcmp(row + 256 * blk, q[blk].qs, 256)) << width << " row " << r << " block " << blk;
      for (int g = 0; g < 16; ++g) {
        int32_t s16 = 0;
        std::memcpy(&s16, row + width + 4 * (16 * blk + g), 4);
        EXPECT_EQ(s16, q[blk].bsums[g]) << width << " row " << r << " block " << blk << " group " << g;
      }
    }
  }
}

// Blocks of the codes rows of x leave in `got` (mul_mv_q8_bytes(ncols) apart) that differ from the
// CPU's activations of `type`: Q8_1 (Q4_1's pairing) byte for byte the CPU's BlockQ8_1 rows; Q8_0 the
// CPU's codes and the float value of its fp16 d. `first` names the first.
inline int codes_unlike_the_cpus(gguf::TensorType type, const std::vector<float>& x, const std::vector<uint8_t>& got, uint32_t ncols,
                          std::string& first) {
  const auto rows = static_cast<uint32_t>(x.size() / ncols), nb = ncols / 32;
  const size_t qb = mul_mv_q8_bytes(ncols);
  std::vector<uint8_t> want(quant::activation_row_size(type, ncols));
  int bad = 0;
  for (uint32_t r = 0; r < rows; ++r) {
    quant::quantize_activation(type, x.data() + static_cast<size_t>(r) * ncols, want.data(), ncols);
    const uint8_t* row = got.data() + r * qb;
    for (uint32_t blk = 0; blk < nb; ++blk) {
      bool same = false;
      if (quant::activation_row_size(type, 32) == sizeof(quant::BlockQ8_1)) {
        static_assert(sizeof(quant::BlockQ8_1) == 36);
        same = std::memcmp(row + 36 * blk, want.data() + 36 * blk, 36) == 0;
      } else {
        const auto& q = reinterpret_cast<const quant::BlockQ8_0*>(want.data())[blk];
        float d = 0;
        std::memcpy(&d, row + 36 * blk + 32, 4);
        same = d == quant::fp16_to_f32(q.d) && std::memcmp(row + 36 * blk, q.qs, 32) == 0;
      }
      if (!same && bad++ == 0) first = fmt::format("row {} block {}", r, blk);
    }
  }
  return bad;
}

}  // namespace zinc::backend::vk
