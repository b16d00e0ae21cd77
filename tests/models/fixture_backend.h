// The backend a model-fixture test runs on, by name: the CPU on one thread, the Vulkan device the
// loader offers, or the first CUDA device (the same tests are built for each: tests/models for the
// CPU, tests/vulkan and tests/cuda for the devices).
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <tuple>

#include "backend/backend.h"
#include "core/error.h"

// Built twice: into the model tests on the CPU, and into the Vulkan tests (not run by the sanitizer
// build: a driver's own allocations are not ours) on the device the loader offers.
#ifndef ZINC_TEST_BACKEND
#define ZINC_TEST_BACKEND "cpu"
#endif

namespace zinc::test {

// The transformers fixtures (tests/models/fixtures).
inline const std::filesystem::path kFixtures = ZINC_FIXTURES_DIR;

// "cpu", "vulkan" or "cuda"; null, with `why`, where there is no such device (the test then skips,
// saying why).
inline std::unique_ptr<backend::Backend> fixture_backend(const std::string& name, std::string& why) {
  if (name == "cuda") {
    try {
      return backend::make_cuda_backend();
    } catch (const Error& e) {
      why = std::string("no CUDA device: ") + e.what();
      return nullptr;
    }
  }
  if (name != "vulkan") return backend::make_cpu_backend(1);
  try {
    return backend::make_vulkan_backend();
  } catch (const Error& e) {
    why = std::string("no Vulkan device: ") + e.what();
    return nullptr;
  }
}

// A suite over (fixture, backend name) whose tests share one backend, made by the first of them (a
// device's pipelines are compiled once, not in every test).
class FixtureOnBackend : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {
 protected:
  static void TearDownTestSuite() { shared_.reset(); }
  const std::string& fixture() const { return std::get<0>(GetParam()); }
  const std::string& backend_name() const { return std::get<1>(GetParam()); }
  std::string name() const { return fixture() + " on " + backend_name(); }
  // A run's length n, or half of it on a software device (lavapipe, CI's Vulkan device, where every
  // step costs the CPU's time): the cases check the same properties in shorter runs there.
  int32_t length(int32_t n) const { return shared_ && shared_->software_device() ? n / 2 : n; }
  // The suite's backend; null, with `why`, where there is none (the test then skips, saying why).
  backend::Backend* shared_backend(std::string& why) {
    if (!shared_) shared_ = fixture_backend(backend_name(), why);
    return shared_.get();
  }

 private:
  static inline std::unique_ptr<backend::Backend> shared_;
};

}  // namespace zinc::test
