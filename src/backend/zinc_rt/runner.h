// A decode plan on a Device: the region allocated and the weights written, each kernel the plan
// launches loaded (its code object for the device's target), the graph encoded once into packets in
// device memory with its arguments; then a step is one submission (dispatch.h step_stream: the
// parameters, the graph as an indirect buffer, the fence) and the logits are read where the plan put
// them.
#pragma once

#include <cstdint>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>

#include "backend/backend.h"
#include "backend/zinc_rt/device.h"
#include "backend/zinc_rt/plan.h"

namespace zinc::backend::zinc_rt {

class PlanRunner {
 public:
  // Throws zinc::Error where the graph cannot be planned, a kernel has no code object for the
  // device's target, or memory cannot be had.
  PlanRunner(Device& d, const graph::Graph& g, const gguf::File& f, int32_t n_ctx);
  // Runs `token` at position `pos` (0 <= pos < n_ctx; the cache's rows before pos from the steps
  // before) and returns the logits, valid until the next step.
  std::span<const float> step(int32_t token, int32_t pos);
  const DecodePlan& plan() const { return *plan_; }
  uint64_t region() const { return region_.va; }

 private:
  Device& d_;
  Device::Buffer region_, graph_;
  std::unique_ptr<DecodePlan> plan_;
  uint32_t graph_dwords_ = 0;
};

// The ladder's decode rungs (zinc rt-selftest), on `d` against the CPU backend on the same file with
// the same F16 cache: one token (graph false: position 0), or the decode graph over 8 prompt tokens and
// 16 of the CPU's greedy choices fed to both (true). Each step's logits within 8% of the CPU's largest
// (the GPU backends' bound for K-quant decode: the activations' 8-bit codes can round across a
// boundary where the two sum in different orders), and wherever the CPU's choice leads its runner-up
// by more than twice the two differ, the same choice. `model`: a GGUF the plan can run; empty: a
// synthetic two-layer Qwen3-0.6B (Q4_K_M) written to the temporary directory and removed after.
// Returns what was measured; throws zinc::Error saying where it differs.
std::string decode_rung(Device& d, bool graph, const std::filesystem::path& model = {});

// The zinc_rt backend on `device`: contexts of one sequence, one token a step, for the graphs the plan
// runs (DecodePlan::unsupported names what it cannot), each context holding its own region (weights
// included) and an F16 cache. backend.h make_zinc_rt_backend gives it the KFD's first supported GPU.
std::unique_ptr<Backend> make_zinc_rt_backend(std::unique_ptr<Device> device, std::string device_name);

}  // namespace zinc::backend::zinc_rt
