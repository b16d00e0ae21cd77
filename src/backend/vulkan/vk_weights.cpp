#include "backend/vulkan/vk_weights.h"

#include <fmt/format.h>

#include <cstring>

#include "backend/exec_common.h"
#include "backend/vulkan/vk_quant.h"
#include "backend/vulkan/vk_router_split.h"
#include "core/error.h"
#include "core/knobs.h"
#include "core/thread_pool.h"
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
  make_router_splits(g, file);
}

// R_w and M of each router split from its norm whose product decode reads as Q8_K codes (the only
// form moe_router_split takes; ZINC_VULKAN_ROUTER_SPLIT), and the fold of each other router whose
// product decode takes (the row norm tails' RowRoute; ZINC_VULKAN_ROW_ROUTE), a few layers at a time:
// each thread one, then uploaded in order.
void VulkanWeights::make_router_splits(const graph::Graph& g, const gguf::File& file) {
  const bool split = knob_u32("ZINC_VULKAN_ROUTER_SPLIT", 1, 0, 1) == 1, fold = knob_u32("ZINC_VULKAN_ROW_ROUTE", 1, 0, 1) == 1;
  std::vector<RouterSite> sites;
  std::vector<bool> folded;
  for (const RouterSite& s : router_sites(g, true)) {
    const auto& wo = g.tensor(g.nodes[s.o].in[0]);
    const graph::MoeParams& mp = g.nodes[s.moe].moe();
    if (!quant::can_dequantize(wo.type)) continue;
    if (split && s.o_bias < 0 && !s.router_bias && has_mul_mv_k(*ctx_, wo.type) && wo.ne[0] % 256 == 0) {
      sites.push_back(s);
      folded.push_back(false);
    } else if (fold && mp.expert_scale < 0 && mp.n_expert <= 128 && wo.ne[0] % 32 == 0 &&
               (has_mul_mv_q8(wo.type) ||  // (K-quant products: where the row norm tail, not mm_norm's, takes the norm)
                (has_mul_mv_k(*ctx_, wo.type) && wo.ne[0] % 256 == 0 && wo.ne[1] % 256 != 0))) {
      sites.push_back(s);
      folded.push_back(true);
    }
  }
  if (sites.empty()) return;
  const auto floats = [&](graph::TensorId id) {
    const auto& t = g.tensor(id);
    return weight_floats(t, file.tensor_data(file.tensor(t.name)));
  };
  ThreadPool pool(std::min<unsigned>(8, std::max(1u, std::thread::hardware_concurrency())));
  struct Made {
    std::vector<float> rw, m, fold;
  };
  std::vector<Made> made(pool.size());
  for (size_t b = 0; b < sites.size(); b += made.size()) {
    const size_t n = std::min(made.size(), sites.size() - b);
    pool.parallel_for(static_cast<int64_t>(n), [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        const RouterSite& s = sites[b + static_cast<size_t>(i)];
        const graph::Node& moe = g.nodes[s.moe];
        const graph::Node& norm = g.nodes[s.norm];
        const auto& wo = g.tensor(g.nodes[s.o].in[0]);
        const auto ne = static_cast<size_t>(moe.moe().n_expert), d = static_cast<size_t>(wo.ne[1]),
                   d_in = static_cast<size_t>(wo.ne[0]);
        const std::vector<float> r = floats(moe.in[1]), o = floats(g.nodes[s.o].in[0]);
        const std::vector<float> w = norm.in.size() > 1 ? floats(norm.in[1]) : std::vector<float>{};
        Made& out = made[static_cast<size_t>(i)];
        out = Made{};
        if (folded[b + static_cast<size_t>(i)]) {
          const std::vector<float> bias = s.o_bias >= 0 ? floats(s.o_bias) : std::vector<float>{};
          out.fold.resize(ne * (d_in + d + 1));
          router_fold_matrices(r.data(), w.empty() ? nullptr : w.data(), norm.norm().offset, o.data(),
                               bias.empty() ? nullptr : bias.data(), ne, d, d_in, out.fold.data());
          continue;
        }
        out.rw.resize(ne * d);
        out.m.resize(ne * d_in);
        router_split_matrices(r.data(), w.empty() ? nullptr : w.data(), norm.norm().offset, o.data(), ne, d, d_in,
                              out.rw.data(), out.m.data());
      }
    });
    for (size_t i = 0; i < n; ++i) {
      const RouterSite& s = sites[b + i];
      RouterSplit& rs = splits_[g.nodes[s.moe].in[1]];
      rs.wo = g.nodes[s.o].in[0];
      for (auto [buf, v] : {std::pair{&rs.rw, &made[i].rw}, std::pair{&rs.m, &made[i].m}, std::pair{&rs.fold, &made[i].fold}}) {
        if (v->empty()) continue;
        *buf = ctx_->owned_device_buffer(v->size() * 4);
        ctx_->upload(**buf, 0, v->data(), v->size() * 4);
        bytes_ += (*buf)->device_bytes;
      }
    }
  }
}

}  // namespace zinc::backend::vk
