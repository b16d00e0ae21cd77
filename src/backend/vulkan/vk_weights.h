// The Vulkan backend's weights: uploaded once into device-local buffers and shared by every context
// instantiated from them (quantized tensors as they are in the file; small float weights such as norms,
// biases and scales, which the kernels read as F32, converted on the way), with a host copy of those the
// host reads per step (rotation frequency factors).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/vulkan/vk_context.h"

namespace zinc::backend::vk {

// Why the Vulkan kernels cannot run a node ("" when they can): every weight a kernel reads raw must be
// in a format the kernels decode.
std::string unsupported(const graph::Graph& g, const graph::Node& n);

class VulkanWeights final : public Weights {
 public:
  // Throws zinc::Error for a node the kernels cannot run, or when the device runs out of memory.
  VulkanWeights(std::shared_ptr<Context> ctx, const graph::Graph& g, const gguf::File& file, const LoadProgress& progress);
  std::unique_ptr<Executable> instantiate_graph(const ExecOptions& opts, const graph::Graph& g) override;
  uint64_t device_bytes() const override { return bytes_; }

  Context& ctx() const { return *ctx_; }
  std::mutex step_mutex;  // held for a step: contexts share the one queue
  // A weight as stored in the file, or converted to F32 (small float weights).
  View raw(graph::TensorId id) const { return View{raw_[static_cast<size_t>(id)].get(), 0, 0}; }
  View f32(graph::TensorId id) const { return View{f32_[static_cast<size_t>(id)].get(), 0, 0}; }
  const std::vector<float>& host_f32(graph::TensorId id) const { return host_f32_.at(id); }
  // A router split from its norm (vk_router_split.h): R_w and M of the router `router` with the
  // product whose weight is `wo` (nullptr: none made); or, for a 32-element product (biases allowed),
  // its fold (router_fold_matrices) alone.
  struct RouterSplit {
    graph::TensorId wo = -1;
    OwnedBuffer rw, m, fold;
  };
  const RouterSplit* router_split(graph::TensorId router, graph::TensorId wo) const {
    const auto it = splits_.find(router);
    return it != splits_.end() && it->second.wo == wo ? &it->second : nullptr;
  }

 private:
  std::shared_ptr<Context> ctx_;
  std::vector<OwnedBuffer> raw_, f32_;  // per tensor (empty where not read that way)
  std::map<graph::TensorId, std::vector<float>> host_f32_;
  std::map<graph::TensorId, RouterSplit> splits_;  // by router
  void make_router_splits(const graph::Graph& g, const gguf::File& file);
  uint64_t bytes_ = 0;
};

}  // namespace zinc::backend::vk
