// ZINC_RT's bring-up ladder (`zinc rt-selftest`): each rung needs the ones below it and is checked
// against the CPU where it computes; the ladder stops at the first rung that fails and says why.
#pragma once

#include <string>
#include <vector>

namespace zinc::backend::zinc_rt {

struct Rung {
  std::string name;
  enum class State { Passed, Failed, NotRun } state = State::NotRun;
  std::string detail;
};

struct SelftestOptions {
  std::string device = "/dev/kfd";
  std::string topology = "/sys/devices/virtual/kfd/kfd/topology";
  std::string dri = "/dev/dri";  // the render nodes' directory
};

std::vector<Rung> run_selftest(const SelftestOptions& o);

}  // namespace zinc::backend::zinc_rt
