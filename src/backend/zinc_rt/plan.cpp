#include "backend/zinc_rt/plan.h"

#include <fmt/format.h>

#include <cstring>

#include "backend/cpu/cpu_ops.h"
#include "backend/zinc_rt/dispatch.h"
#include "core/error.h"
#include "quant/quant.h"

namespace zinc::backend::zinc_rt {

using graph::Op;
using graph::TensorId;
using gguf::TensorType;

namespace {

constexpr uint64_t kAlign = 256;
constexpr int64_t kQ8KBytes = 292;  // a Q8_K block of 256 activations (quantize_q8_k.cl)

bool kquant(TensorType t) { return t == TensorType::Q4_K || t == TensorType::Q6_K; }
std::string type_name(TensorType t) { return std::string(gguf::tensor_type_name(t)); }

}  // namespace

std::string DecodePlan::unsupported(const graph::Graph& g, const graph::Node& n) {
  const auto w = [&](size_t k) -> const graph::Tensor& { return g.tensor(n.in[k]); };
  switch (n.op) {
    case Op::Embed:
      if (!kquant(w(0).type)) return fmt::format("embeddings of {} (ZINC_RT reads Q4_K and Q6_K rows)", type_name(w(0).type));
      if (w(0).ne[0] % 256 != 0) return "embedding rows not a whole number of 256-element blocks";
      if (n.embed().scale != 1.0f) return "scaled embeddings";
      return "";
    case Op::RmsNorm:
      if (n.in.size() < 2) return "an RMS norm without a weight";
      if (n.norm().offset != 0.0f) return "an RMS norm with a weight offset";
      return "";
    case Op::MatMul:
      if (n.in.size() > 2) return "a product with a bias";
      if (!kquant(w(0).type)) return fmt::format("products of {} weights (ZINC_RT's are Q4_K and Q6_K)", type_name(w(0).type));
      if (w(0).ne[0] % 256 != 0) return "product rows not a whole number of 256-element blocks";
      return "";
    case Op::Rope:
      return "";
    case Op::Attention: {
      const graph::AttentionParams& a = n.attention();
      if (n.in.size() > 3) return "attention with sinks";
      if (a.sliding_window > 0) return "sliding-window attention";
      if (a.softcap > 0) return "capped attention scores";
      if (a.head_dim > static_cast<int>(2 * kAttentionDecodeGroup)) return "attention heads wider than 256";
      if (a.n_head_kv <= 0 || a.n_head % a.n_head_kv != 0) return "query heads not a multiple of the KV heads";
      if (g.kv_width_of(n.layer) != int64_t{a.n_head_kv} * a.head_dim) return "a cache row other than the KV heads side by side";
      return "";
    }
    case Op::Add:
    case Op::SwiGLU:
    case Op::SelectLast:
      return "";
    default:
      return fmt::format("the {} op", graph::op_name(n.op));
  }
}

// `bytes` at the end of a space `end` long (kAlign apart), which grows by them.
static uint64_t take_from(uint64_t& end, uint64_t bytes) {
  const uint64_t at = end;
  end += (bytes + kAlign - 1) / kAlign * kAlign;
  return at;
}

uint64_t DecodePlan::take(uint64_t bytes) { return take_from(bytes_, bytes); }

uint64_t DecodePlan::weight(const graph::Graph& g, const gguf::File& file, TensorId id, bool as_f32) {
  const graph::Tensor& t = g.tensor(id);
  const gguf::TensorInfo& info = file.tensor(t.name);
  for (const Weight& w : weights_)
    if (w.info == &info && w.as_f32 == as_f32) return weights_base_ + w.offset;
  const uint64_t bytes = as_f32 ? info.n_elements * sizeof(float) : info.n_bytes;
  weights_.push_back({take_from(weights_bytes_, bytes), &info, as_f32});
  return weights_base_ + weights_.back().offset;
}

uint64_t DecodePlan::act(const graph::Graph& g, TensorId id) {
  int64_t& at = act_at_[static_cast<size_t>(id)];
  if (at < 0) at = static_cast<int64_t>(take(static_cast<uint64_t>(g.tensor(id).ne[0]) * sizeof(float)));
  return base_ + static_cast<uint64_t>(at);
}

uint32_t DecodePlan::rope_table(const graph::Graph& g, const gguf::File& file, const graph::Node& n, bool add) {
  const graph::RopeOpParams& r = n.rope();
  std::vector<float> factors;
  if (n.in.size() > 1) {
    const gguf::TensorInfo& info = file.tensor(g.tensor(n.in[1]).name);
    factors.resize(info.n_elements);
    quant::dequantize_row(info.type, file.tensor_data(info).data(), factors.data(), static_cast<int64_t>(info.n_elements));
  }
  const auto same = [&](const RopeTable& t) {
    return t.n_rot == r.n_rot && t.factors == factors && t.params == r.rope;
  };
  for (const RopeTable& t : ropes_)
    if (same(t)) return t.word;
  if (!add) throw Error(fmt::format("ZINC_RT: {}'s rotation table was not laid out with the parameters", g.tensor(n.out).name));
  ropes_.push_back({r.n_rot, r.rope, std::move(factors), param_words_});
  param_words_ += static_cast<uint32_t>(r.n_rot);
  return ropes_.back().word;
}

template <class Args>
void DecodePlan::launch(const char* kernel, const Args& args, std::array<uint32_t, 3> groups, uint32_t block) {
  Launch l;
  l.kernel = kernel;
  l.args.resize(sizeof args);
  std::memcpy(l.args.data(), &args, sizeof args);
  l.groups = groups;
  l.block = {block, 1, 1};
  launches_.push_back(std::move(l));
}

DecodePlan::DecodePlan(const graph::Graph& g, const gguf::File& file, int32_t n_ctx, uint64_t base, uint64_t weights_base)
    : base_(base), weights_base_(weights_base), n_ctx_(n_ctx), n_vocab_(g.n_vocab) {
  if (n_ctx <= 0) throw Error("a ZINC_RT context needs at least one position");
  for (const graph::Node& n : g.nodes) {
    if (std::string why = unsupported(g, n); !why.empty())
      throw Error(fmt::format("ZINC_RT cannot run {} ({}): {}", g.tensor(n.out).name, graph::op_name(n.op), why));
  }
  // The parameters come first, sized once the rotations' tables are known.
  for (const graph::Node& n : g.nodes)
    if (n.op == Op::Rope) rope_table(g, file, n, true);
  take(uint64_t{param_words_} * 4);
  const uint64_t params = base_;
  act_at_.assign(g.tensors.size(), -1);
  codes_at_.assign(g.tensors.size(), -1);
  caches_.assign(g.tensors.size(), {});
  const auto u32 = [](int64_t v) { return static_cast<uint32_t>(v); };
  const auto groups_of = [](int64_t n, uint32_t per) { return std::array<uint32_t, 3>{static_cast<uint32_t>((n + per - 1) / per), 1, 1}; };
  for (const graph::Node& n : g.nodes) {
    const int64_t width = g.tensor(n.out).ne[0];
    switch (n.op) {
      case Op::Embed: {
        const graph::Tensor& w = g.tensor(n.in[0]);
        const GetRowsArgs a{weight(g, file, n.in[0], false), params, act(g, n.out), u32(w.ne[0]), u32(quant::row_size(w.type, w.ne[0]))};
        launch(w.type == TensorType::Q4_K ? "get_rows_q4_k" : "get_rows_q6_k", a, {1, 1, 1}, kGetRowsGroup);
        break;
      }
      case Op::RmsNorm: {
        const int64_t group = n.norm().group > 0 ? n.norm().group : width;
        const RmsNormArgs a{act(g, n.in[0]), weight(g, file, n.in[1], true), act(g, n.out), u32(group), n.norm().eps};
        launch("rms_norm", a, {u32(width / group), 1, 1}, kRmsNormGroup);
        break;
      }
      case Op::MatMul: {
        const graph::Tensor& w = g.tensor(n.in[0]);
        const TensorId x = n.in[1];
        const int64_t ncols = w.ne[0];
        if (codes_at_[static_cast<size_t>(x)] < 0) {
          codes_at_[static_cast<size_t>(x)] = static_cast<int64_t>(take(static_cast<uint64_t>(ncols / 256 * kQ8KBytes)));
          launch("quantize_q8_k", QuantizeQ8KArgs{act(g, x), base_ + static_cast<uint64_t>(codes_at_[static_cast<size_t>(x)])},
                 {u32(ncols / 256), 1, 1}, kQuantizeQ8KGroup);
        }
        const uint64_t out = n.out == g.logits ? (logits_ = take(static_cast<uint64_t>(w.ne[1]) * 4)) + base_
                                                                              : act(g, n.out);
        const MulMvKArgs a{weight(g, file, n.in[0], false), base_ + static_cast<uint64_t>(codes_at_[static_cast<size_t>(x)]), out, u32(ncols),
                           u32(quant::row_size(w.type, ncols))};
        launch(w.type == TensorType::Q4_K ? "mul_mv_q4_k" : "mul_mv_q6_k", a, {u32(w.ne[1]), 1, 1}, kMulMvKGroup);
        break;
      }
      case Op::Add:
        launch("add", AddArgs{act(g, n.in[0]), act(g, n.in[1]), act(g, n.out), u32(width)}, groups_of(width, kAddGroup), kAddGroup);
        break;
      case Op::SwiGLU:
        launch("swiglu", SwigluArgs{act(g, n.in[0]), act(g, n.in[1]), act(g, n.out), u32(width)}, groups_of(width, kSwigluGroup), kSwigluGroup);
        break;
      case Op::Rope: {
        const graph::RopeOpParams& r = n.rope();
        const RopeArgs a{act(g, n.in[0]), params + uint64_t{rope_table(g, file, n, false)} * 4, act(g, n.out), u32(r.n_head), u32(r.head_dim),
                         u32(r.n_rot), r.mode == graph::RopeMode::NeoX ? 1u : 0u};
        launch("rope", a, {u32(r.n_head), 1, 1}, kRopeGroup);
        break;
      }
      case Op::Attention: {
        const graph::AttentionParams& p = n.attention();
        const int64_t kv_width = int64_t{p.n_head_kv} * p.head_dim;
        const uint64_t cache = uint64_t(n_ctx) * static_cast<uint64_t>(kv_width) * 2;
        const uint64_t kc = base_ + take(cache), vc = base_ + take(cache);
        caches_[static_cast<size_t>(n.out)] = {kc - base_, vc - base_};
        launch("kv_store", KvStoreArgs{act(g, n.in[1]), act(g, n.in[2]), kc, vc, params + 4, u32(kv_width)}, groups_of(kv_width, kKvStoreGroup),
               kKvStoreGroup);
        const AttentionDecodeArgs a{act(g, n.in[0]), kc, vc, act(g, n.out), params + 8, u32(p.n_head), u32(p.n_head_kv), u32(p.head_dim),
                                    u32(kv_width), p.scale};
        launch("attention_decode", a, {u32(p.n_head), 1, 1}, kAttentionDecodeGroup);
        break;
      }
      case Op::SelectLast:  // one token a step: the last row is the row
        act_at_[static_cast<size_t>(n.out)] = static_cast<int64_t>(act(g, n.in[0]) - base_);
        break;
      default:
        break;  // (refused above)
    }
  }
  if (g.logits < 0 || logits_ == 0) throw Error("ZINC_RT runs graphs whose logits come from a product");
}

void DecodePlan::each_weight(const gguf::File& file, const std::function<void(uint64_t, std::span<const uint8_t>)>& fn) const {
  std::vector<float> floats;
  for (const Weight& w : weights_) {
    if (&file.tensor(w.info->name) != w.info) throw Error("a ZINC_RT plan's weights are written from the file it was made from");
    const std::span<const uint8_t> src = file.tensor_data(*w.info);
    if (w.as_f32) {
      floats.resize(w.info->n_elements);
      quant::dequantize_row(w.info->type, src.data(), floats.data(), static_cast<int64_t>(w.info->n_elements));
      fn(w.offset, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(floats.data()), floats.size() * sizeof(float)));
    } else {
      fn(w.offset, src);
    }
  }
}

void DecodePlan::write_weights(const gguf::File& file, uint8_t* weights) const {
  each_weight(file, [&](uint64_t offset, std::span<const uint8_t> bytes) { std::memcpy(weights + offset, bytes.data(), bytes.size()); });
}

bool DecodePlan::same_weights(const DecodePlan& other) const {
  if (weights_bytes_ != other.weights_bytes_ || weights_.size() != other.weights_.size()) return false;
  for (size_t i = 0; i < weights_.size(); ++i) {
    const Weight &a = weights_[i], &b = other.weights_[i];
    if (a.offset != b.offset || a.info != b.info || a.as_f32 != b.as_f32) return false;
  }
  return true;
}

std::vector<uint32_t> DecodePlan::params(int32_t token, int32_t pos) const {
  if (pos < 0 || pos >= n_ctx_) throw Error(fmt::format("position {} is outside the context of {}", pos, n_ctx_));
  std::vector<uint32_t> w(param_words_, 0);
  w[0] = static_cast<uint32_t>(token);
  w[1] = static_cast<uint32_t>(pos);
  w[2] = static_cast<uint32_t>(pos + 1);
  for (const RopeTable& t : ropes_) {
    std::vector<float> cs(static_cast<size_t>(t.n_rot));
    cpu::rope_cos_sin(t.n_rot, t.params, t.factors.empty() ? nullptr : t.factors.data(), pos, cs.data());
    std::memcpy(w.data() + t.word, cs.data(), cs.size() * sizeof(float));
  }
  return w;
}

GraphPackets encode_graph(const std::vector<Launch>& launches, const std::function<const LoadedKernel*(std::string_view)>& kernel,
                          uint64_t kernarg_base) {
  constexpr uint64_t kKernargAlign = 64;
  if (kernarg_base % kKernargAlign != 0) throw Error(fmt::format("ZINC_RT: kernel arguments at {:#x} (64-byte aligned)", kernarg_base));
  GraphPackets p;
  for (size_t i = 0; i < launches.size(); ++i) {
    const Launch& l = launches[i];
    const LoadedKernel* k = kernel(l.kernel);
    if (!k) throw Error(fmt::format("ZINC_RT: kernel {} is not loaded", l.kernel));
    if (k->info.kernarg_bytes > l.args.size())
      throw Error(fmt::format("ZINC_RT: {} reads {} bytes of arguments, the launch gives {}", l.kernel, k->info.kernarg_bytes, l.args.size()));
    const uint64_t at = (p.kernargs.size() + kKernargAlign - 1) / kKernargAlign * kKernargAlign;
    p.kernargs.resize(at);
    p.kernargs.insert(p.kernargs.end(), l.args.begin(), l.args.end());
    p.kernarg_offsets.push_back(at);
    if (i > 0) {
      p.stream.event_write(pm4::kEventCsPartialFlush, pm4::kEventIndexPartialFlush);
      p.stream.acquire_mem(pm4::kAcquireInvalidateL0L1);
    }
    DispatchArgs a;
    a.code_base = k->code_base;
    a.kernarg = kernarg_base + at;
    a.groups = l.groups;
    a.block = l.block;
    (void)emit_dispatch(p.stream, k->info, a);
  }
  return p;
}

}  // namespace zinc::backend::zinc_rt
