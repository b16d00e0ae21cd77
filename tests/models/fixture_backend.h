// The backend a model-fixture test runs on, by name: the CPU on one thread, or the Vulkan device the
// loader offers (the same tests are built for both: tests/models for the CPU, tests/vulkan for the
// device).
#pragma once

#include <filesystem>
#include <memory>
#include <string>

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

// "cpu" or "vulkan"; null, with `why`, where there is no Vulkan device (the test then skips, saying why).
inline std::unique_ptr<backend::Backend> fixture_backend(const std::string& name, std::string& why) {
  if (name != "vulkan") return backend::make_cpu_backend(1);
  try {
    return backend::make_vulkan_backend();
  } catch (const Error& e) {
    why = std::string("no Vulkan device: ") + e.what();
    return nullptr;
  }
}

}  // namespace zinc::test
