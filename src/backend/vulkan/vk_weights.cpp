#include "backend/vulkan/vk_weights.h"

#include <fmt/format.h>

#include <cstring>

#include "backend/exec_common.h"
#include "backend/vulkan/vk_quant.h"
#include "core/error.h"
#include "quant/quant.h"

namespace zinc::backend::vk {

using graph::Node;
using graph::TensorId;
using graph::TensorKind;

std::string unsupported(const graph::Graph& g, const Node& n) {
  for (size_t k = 0; k < n.in.size(); ++k) {
    const auto& t = g.tensor(n.in[k]);
    if (t.kind != TensorKind::Weight || n.small_f32_input(k)) continue;
    if (!quant::can_dequantize(t.type)) {
      return fmt::format("its weight '{}' is stored as {}, which the Vulkan kernels do not read", t.name,
                         gguf::tensor_type_name(t.type));
    }
    if (std::string why = rows_unsupported(t.type, t.ne[0]); !why.empty()) {
      return fmt::format("its weight '{}': {}", t.name, why);
    }
  }
  return "";
}

VulkanWeights::VulkanWeights(std::shared_ptr<Context> ctx, const graph::Graph& g, const gguf::File& file,
                             const LoadProgress& progress)
    : Weights(g), ctx_(std::move(ctx)) {
  const WeightUses uses = weight_uses(g, "Vulkan", [&](const Node& n) { return unsupported(g, n); });
  raw_.resize(g.tensors.size());
  f32_.resize(g.tensors.size());
  read_weights(
      g, file, uses, progress,
      [&](TensorId id, std::span<const uint8_t> bytes) {
        auto& b = raw_[static_cast<size_t>(id)];
        b = ctx_->owned_device_buffer(align_up(bytes.size(), 4) + 16);  // kernels read whole words
        ctx_->upload(*b, 0, bytes.data(), bytes.size());
        bytes_ += b->device_bytes;
      },
      [&](TensorId id, std::vector<float> f) {
        auto& b = f32_[static_cast<size_t>(id)];
        b = ctx_->owned_device_buffer(f.size() * 4);
        ctx_->upload(*b, 0, f.data(), f.size() * 4);
        bytes_ += b->device_bytes;
        host_f32_.emplace(id, std::move(f));
      });
}

}  // namespace zinc::backend::vk
