#include "backend/vulkan/vk_weights.h"

#include <fmt/format.h>

#include <cstring>

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
  std::vector<bool> as_f32(g.tensors.size(), false), raw(g.tensors.size(), false);
  for (const Node* np : graph::nodes_with_head(g)) {
    const Node& n = *np;
    if (std::string why = unsupported(g, n); !why.empty()) {
      throw Error(fmt::format("Vulkan cannot run {}: {}", g.tensor(n.out).name, why));
    }
    for (size_t k = 0; k < n.in.size(); ++k) {
      const auto id = static_cast<size_t>(n.in[k]);
      if (g.tensors[id].kind != TensorKind::Weight) continue;
      (n.small_f32_input(k) ? as_f32 : raw)[id] = true;
    }
  }
  raw_.resize(g.tensors.size());
  f32_.resize(g.tensors.size());
  uint64_t total = 0, done = 0;
  for (const auto& t : g.tensors) {
    if (t.kind == TensorKind::Weight) total += file.tensor(t.name).n_bytes;
  }
  for (size_t i = 0; i < g.tensors.size(); ++i) {
    const auto& t = g.tensors[i];
    if (t.kind != TensorKind::Weight) continue;
    const auto bytes = file.tensor_data(file.tensor(t.name));
    done += bytes.size();
    if (raw[i]) {
      raw_[i] = ctx_->owned_device_buffer(align_up(bytes.size(), 4) + 16);  // kernels read whole words
      ctx_->upload(*raw_[i], 0, bytes.data(), bytes.size());
      bytes_ += raw_[i]->device_bytes;
    }
    if (as_f32[i]) {
      const int64_t count = t.ne[0] * t.ne[1] * t.ne[2] * t.ne[3];
      std::vector<float> f(static_cast<size_t>(count));
      if (t.type == gguf::TensorType::F32) std::memcpy(f.data(), bytes.data(), f.size() * 4);
      else quant::dequantize_row(t.type, bytes.data(), f.data(), count);
      f32_[i] = ctx_->owned_device_buffer(f.size() * 4);
      ctx_->upload(*f32_[i], 0, f.data(), f.size() * 4);
      bytes_ += f32_[i]->device_bytes;
      host_f32_.emplace(static_cast<TensorId>(i), std::move(f));
    }
    if (progress) progress(done, total);
  }
}

}  // namespace zinc::backend::vk
