// Shared by the Vulkan tests: a fixture holding the process's device context, or skipping with the
// reason there is none (no loader, no driver, no device).
#pragma once

#include <gtest/gtest.h>

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

}  // namespace zinc::backend::vk
