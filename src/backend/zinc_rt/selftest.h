// ZINC_RT's bring-up ladder (`zinc rt-selftest`): each rung needs the ones below it and is checked
// against the CPU where it computes; the ladder stops at the first rung that fails and says why.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace zinc::backend::zinc_rt {

struct Rung {
  std::string name;
  enum class State { Passed, Failed, NotRun } state = State::NotRun;
  std::string detail;
};

// The CPU backend's rms_norm over `rows` rows of `width` floats (the kernel rung's oracle; the caller
// links the CPU backend, which this library does not).
using RmsNormOracle = std::function<void(const float* x, const float* w, float* out, int64_t width, int64_t rows, float eps)>;

class Device;
// The decode rungs (one token: graph false; the decode graph: true) on the session's GPU: runner.h
// decode_rung, which the caller passes (it links the plan, the CPU backend and the models, which this
// library does not). Returns the rung's detail; throws zinc::Error where it fails.
using DecodeRung = std::function<std::string(Device& device, bool graph)>;

struct SelftestOptions {
  std::string device = "/dev/kfd";
  std::string topology = "/sys/devices/virtual/kfd/kfd/topology";
  std::string dri = "/dev/dri";  // the render nodes' directory
  RmsNormOracle rms_norm;        // without it the kernel rung fails, saying so
  DecodeRung decode;             // without it the decode rungs fail, saying so
};

std::vector<Rung> run_selftest(const SelftestOptions& o);

}  // namespace zinc::backend::zinc_rt
