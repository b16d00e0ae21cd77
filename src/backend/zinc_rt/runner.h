// A decode plan on a Device: the model's weights in the device's own memory (DeviceWeights, one copy
// for every context of the model), the context's region allocated, each kernel the plan launches
// loaded (its code object for the device's target), the graph encoded once into packets in device
// memory with its arguments; then a step is one submission (dispatch.h step_stream: the parameters,
// the graph as an indirect buffer, the fence) and the logits are read where the plan put them.
#pragma once

#include <cstdint>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/zinc_rt/device.h"
#include "backend/zinc_rt/plan.h"

namespace zinc::backend::zinc_rt {

// A model's weights in memory only the device reaches (Device::alloc_device), as the plans of its
// graph lay them out, copied there once by the device's queue (pm4 dma_copy) through a staging buffer
// the CPU fills (kStagingBytes, a multiple of 4096), several copies a submission. Freed with it; the
// device must outlive it.
class DeviceWeights {
 public:
  static constexpr uint64_t kStagingBytes = uint64_t{8} << 20;
  DeviceWeights(Device& d, const graph::Graph& g, const gguf::File& f, uint64_t staging_bytes = kStagingBytes);
  ~DeviceWeights();
  DeviceWeights(const DeviceWeights&) = delete;
  DeviceWeights& operator=(const DeviceWeights&) = delete;
  const Device::Buffer& buffer() const { return buffer_; }
  const DecodePlan& layout() const { return *layout_; }  // (a plan of one position: its weights' layout)
  int submissions() const { return submissions_; }       // the copies' submissions it took

 private:
  Device& d_;
  Device::Buffer buffer_;
  std::unique_ptr<DecodePlan> layout_;
  int submissions_ = 0;
};

class PlanRunner {
 public:
  // With `weights` (the model's, shared by its contexts), or null to upload its own. Throws
  // zinc::Error where the graph cannot be planned, a kernel has no code object for the device's
  // target, the weights are laid out for another graph, or memory cannot be had.
  PlanRunner(Device& d, const graph::Graph& g, const gguf::File& f, int32_t n_ctx, std::shared_ptr<const DeviceWeights> weights = nullptr);
  ~PlanRunner();  // its buffers back to the device
  PlanRunner(const PlanRunner&) = delete;
  PlanRunner& operator=(const PlanRunner&) = delete;
  // Runs `token` at position `pos` (0 <= pos < n_ctx; the cache's rows before pos from the steps
  // before) and returns the logits, valid until the next step.
  std::span<const float> step(int32_t token, int32_t pos);
  const DecodePlan& plan() const { return *plan_; }
  uint64_t region() const { return region_.va; }
  const DeviceWeights& weights() const { return *weights_; }

 private:
  Device::Buffer own(Device::Buffer b) { return owned_.push_back(b), b; }
  Device& d_;
  std::shared_ptr<const DeviceWeights> weights_;
  std::vector<Device::Buffer> owned_;  // what it allocated, freed when it goes
  Device::Buffer region_, graph_;
  std::unique_ptr<DecodePlan> plan_;
  uint32_t graph_dwords_ = 0;
};

// The ladder's decode rungs (zinc rt-selftest), on `d` against the CPU backend on the same file with
// the same F16 cache: one token (graph false: position 0), or the decode graph over 24
// positions, 8 prompt tokens then the CPU's greedy choices fed to both (true). Each step's logits within 8% of the CPU's largest
// (the GPU backends' bound for K-quant decode: the activations' 8-bit codes can round across a
// boundary where the two sum in different orders), and wherever the CPU's choice leads its runner-up
// by more than twice the two differ, the same choice. `model`: a GGUF the plan can run; empty: a
// synthetic two-layer Qwen3-0.6B (Q4_K_M) written to the temporary directory and removed after.
// Returns what was measured; throws zinc::Error saying where it differs.
std::string decode_rung(Device& d, bool graph, const std::filesystem::path& model = {});

// The zinc_rt backend on `device`: contexts of one sequence, one token a step, for the graphs the plan
// runs (DecodePlan::unsupported names what it cannot), the model's weights once in the device's own
// memory, each context holding its own region and an F16 cache. backend.h make_zinc_rt_backend gives it the KFD's first supported GPU.
std::unique_ptr<Backend> make_zinc_rt_backend(std::unique_ptr<Device> device, std::string device_name);

}  // namespace zinc::backend::zinc_rt
