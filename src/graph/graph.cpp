#include "graph/graph.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "core/error.h"

namespace zinc::graph {

const char* op_name(Op op) {
  switch (op) {
    case Op::Embed: return "embed";
    case Op::RmsNorm: return "rms_norm";
    case Op::MatMul: return "matmul";
    case Op::Add: return "add";
    case Op::Mul: return "mul";
    case Op::Rope: return "rope";
    case Op::Attention: return "attention";
    case Op::SwiGLU: return "swiglu";
    case Op::GeGLU: return "geglu";
    case Op::Softcap: return "softcap";
    case Op::SelectLast: return "select_last";
    case Op::MoE: return "moe";
    case Op::Split: return "split";
    case Op::Concat: return "concat";
    case Op::SigmoidMul: return "sigmoid_mul";
    case Op::SsmConv: return "ssm_conv";
    case Op::DeltaNet: return "delta_net";
    case Op::Scale: return "scale";
    case Op::Input: return "input";
  }
  return "?";
}

std::string Graph::dump() const {
  std::string out;
  for (const Node& n : nodes) {
    out += fmt::format("{:<12} {:<28} <-", op_name(n.op), tensor(n.out).name);
    for (TensorId i : n.in) out += " " + tensor(i).name;
    out += "\n";
  }
  return out;
}

TensorId Builder::weight(const std::string& name, gguf::TensorType type, std::array<int64_t, 4> ne, int layer) {
  g_.tensors.push_back({name, TensorKind::Weight, type, ne, layer});
  return static_cast<TensorId>(g_.tensors.size() - 1);
}

TensorId Builder::act(const std::string& name, int64_t w, int layer) {
  g_.tensors.push_back({name, TensorKind::Act, gguf::TensorType::F32, {w, 1, 1, 1}, layer});
  return static_cast<TensorId>(g_.tensors.size() - 1);
}

int64_t Builder::width(TensorId id) const { return g_.tensor(id).ne[0]; }

Node& Builder::emit(Op op, TensorId out, std::vector<TensorId> in) {
  Node n{};
  n.op = op;
  n.out = out;
  n.in = std::move(in);
  n.layer = g_.tensor(out).layer;
  g_.nodes.push_back(std::move(n));
  return g_.nodes.back();
}

TensorId Builder::embed(TensorId w, float scale, const std::string& name) {
  const TensorId out = act(name, g_.tensor(w).ne[0]);
  emit(Op::Embed, out, {w}).params = EmbedParams{scale};
  return out;
}

TensorId Builder::input(int64_t width, const std::string& name) {
  const TensorId out = act(name, width);
  emit(Op::Input, out, {});
  return out;
}

TensorId Builder::rms_norm(TensorId x, TensorId w, float eps, float offset, const std::string& name, int layer) {
  if (w >= 0 && g_.tensor(w).ne[0] != width(x)) {
    throw Error(fmt::format("{}: norm weight has {} elements, the input row {}", name, g_.tensor(w).ne[0], width(x)));
  }
  const TensorId out = act(name, width(x), layer);
  Node& n = emit(Op::RmsNorm, out, w >= 0 ? std::vector<TensorId>{x, w} : std::vector<TensorId>{x});
  n.small_f32 = w >= 0 ? 1u << 1 : 0;
  n.params = NormParams{eps, offset, 0};
  return out;
}

TensorId Builder::rms_norm_heads(TensorId x, TensorId w, int head_dim, float eps, const std::string& name, int layer) {
  if (head_dim <= 0 || width(x) % head_dim != 0 || (w >= 0 && g_.tensor(w).ne[0] != head_dim)) {
    throw Error(fmt::format("{}: per-head norm of width {} over rows of {}", name, head_dim, width(x)));
  }
  const TensorId out = act(name, width(x), layer);
  Node& n = emit(Op::RmsNorm, out, w >= 0 ? std::vector<TensorId>{x, w} : std::vector<TensorId>{x});
  n.small_f32 = w >= 0 ? 1u << 1 : 0;
  n.params = NormParams{eps, 0, head_dim};
  return out;
}

TensorId Builder::matmul(TensorId w, TensorId x, const std::string& name, int layer, TensorId bias) {
  const Tensor& wt = g_.tensor(w);
  if (wt.ne[0] != width(x)) {
    throw Error(fmt::format("{}: weight '{}' has rows of {} but its input has {}", name, wt.name, wt.ne[0], width(x)));
  }
  const TensorId out = act(name, wt.ne[1], layer);
  emit(Op::MatMul, out, bias >= 0 ? std::vector<TensorId>{w, x, bias} : std::vector<TensorId>{w, x}).small_f32 =
      bias >= 0 ? 1u << 2 : 0;
  return out;
}

TensorId Builder::add(TensorId a, TensorId b, const std::string& name, int layer) {
  if (width(a) != width(b)) throw Error(fmt::format("{}: adding rows of {} and {}", name, width(a), width(b)));
  const TensorId out = act(name, width(a), layer);
  emit(Op::Add, out, {a, b});
  return out;
}

TensorId Builder::mul(TensorId a, TensorId b, const std::string& name, int layer) {
  if (width(a) != width(b)) throw Error(fmt::format("{}: multiplying rows of {} and {}", name, width(a), width(b)));
  const TensorId out = act(name, width(a), layer);
  emit(Op::Mul, out, {a, b});
  return out;
}

TensorId Builder::rope(TensorId x, int n_head, int head_dim, int n_rot, RopeMode mode, const RopeParams& params,
                       const std::string& name, int layer, TensorId factors) {
  if (width(x) != static_cast<int64_t>(n_head) * head_dim || n_rot > head_dim || n_rot % 2) {
    throw Error(fmt::format("{}: rope over {} heads of {} (rotating {}) does not fit rows of {}", name, n_head,
                            head_dim, n_rot, width(x)));
  }
  if (factors >= 0 && g_.tensor(factors).ne[0] != n_rot / 2) {
    throw Error(fmt::format("{}: rope frequency factors '{}' must hold {} values", name, g_.tensor(factors).name,
                            n_rot / 2));
  }
  if (!(params.base > 0) || !(params.freq_scale > 0) || (params.ext_factor != 0 && params.n_ctx_orig <= 0)) {
    throw Error(fmt::format("{}: rope base {} / frequency scale {} / YaRN context {} are not usable", name, params.base,
                            params.freq_scale, params.n_ctx_orig));
  }
  const TensorId out = act(name, width(x), layer);
  Node& n = emit(Op::Rope, out, factors >= 0 ? std::vector<TensorId>{x, factors} : std::vector<TensorId>{x});
  n.small_f32 = factors >= 0 ? 1u << 1 : 0;
  n.params = RopeOpParams{n_head, head_dim, n_rot, mode, params};
  return out;
}

TensorId Builder::attention(TensorId q, TensorId k, TensorId v, int n_head, int n_head_kv, int head_dim, float scale,
                            int sliding_window, float softcap, const std::string& name, int layer, TensorId sinks) {
  if (width(q) != static_cast<int64_t>(n_head) * head_dim || width(k) != static_cast<int64_t>(n_head_kv) * head_dim ||
      width(v) != width(k) || n_head_kv <= 0 || n_head % n_head_kv) {
    throw Error(fmt::format("{}: q/k/v rows {}/{}/{} do not match {} heads ({} KV) of {}", name, width(q), width(k),
                            width(v), n_head, n_head_kv, head_dim));
  }
  if (sinks >= 0 && (g_.tensor(sinks).ne[0] != n_head || g_.tensor(sinks).type != gguf::TensorType::F32)) {
    throw Error(fmt::format("{}: attention sinks '{}' must be {} F32 values", name, g_.tensor(sinks).name, n_head));
  }
  g_.kv_width = std::max(g_.kv_width, width(k));
  if (layer >= 0) {
    if (g_.layer_kv_width.size() <= static_cast<size_t>(layer)) g_.layer_kv_width.resize(static_cast<size_t>(layer) + 1, 0);
    g_.layer_kv_width[static_cast<size_t>(layer)] = width(k);
  }
  const TensorId out = act(name, width(q), layer);
  Node& n = emit(Op::Attention, out, sinks >= 0 ? std::vector<TensorId>{q, k, v, sinks} : std::vector<TensorId>{q, k, v});
  n.small_f32 = sinks >= 0 ? 1u << 3 : 0;
  n.params = AttentionParams{n_head, n_head_kv, head_dim, scale, sliding_window, softcap};
  n.layer = layer;
  return out;
}

TensorId Builder::swiglu(TensorId gate, TensorId up, const std::string& name, int layer) {
  if (width(gate) != width(up)) throw Error(fmt::format("{}: gate {} and up {} differ", name, width(gate), width(up)));
  const TensorId out = act(name, width(gate), layer);
  emit(Op::SwiGLU, out, {gate, up});
  return out;
}

TensorId Builder::geglu(TensorId gate, TensorId up, const std::string& name, int layer) {
  if (width(gate) != width(up)) throw Error(fmt::format("{}: gate {} and up {} differ", name, width(gate), width(up)));
  const TensorId out = act(name, width(gate), layer);
  emit(Op::GeGLU, out, {gate, up});
  return out;
}

TensorId Builder::softcap(TensorId x, float cap, const std::string& name, int layer) {
  const TensorId out = act(name, width(x), layer);
  emit(Op::Softcap, out, {x}).params = SoftcapParams{cap};
  return out;
}

TensorId Builder::select_last(TensorId x, const std::string& name) {
  const TensorId out = act(name, width(x));
  emit(Op::SelectLast, out, {x});
  return out;
}

TensorId Builder::moe(TensorId x, TensorId router, TensorId gate_exps, TensorId up_exps, TensorId down_exps,
                      int n_expert_used, bool norm_topk, const std::string& name, int layer) {
  MoeVariant v;
  v.norm_topk = norm_topk;
  return moe(x, router, gate_exps, up_exps, down_exps, n_expert_used, v, name, layer);
}

TensorId Builder::moe(TensorId x, TensorId router, TensorId gate_exps, TensorId up_exps, TensorId down_exps,
                      int n_expert_used, const MoeVariant& variant, const std::string& name, int layer) {
  const auto& r = g_.tensor(router);
  const auto& gt = g_.tensor(gate_exps);
  const auto& ut = g_.tensor(up_exps);
  const auto& dt = g_.tensor(down_exps);
  // gate_exps == up_exps: one fused tensor {in, 2 * ff, n_expert}, each expert's gate rows first.
  const bool fused = gate_exps == up_exps;
  const int64_t d = width(x), n_expert = r.ne[1], ff = fused ? gt.ne[1] / 2 : gt.ne[1];
  if (r.ne[0] != d || gt.ne[0] != d || gt.ne[2] != n_expert || ut.ne != gt.ne || dt.ne[0] != ff || dt.ne[1] != d ||
      (fused && gt.ne[1] != 2 * ff) ||
      dt.ne[2] != n_expert || n_expert_used < 1 || n_expert_used > n_expert) {
    throw Error(fmt::format("{}: experts do not fit: router {}x{}, gate {}x{}x{}, down {}x{}x{}, {} of {} used", name,
                            r.ne[0], r.ne[1], gt.ne[0], gt.ne[1], gt.ne[2], dt.ne[0], dt.ne[1], dt.ne[2], n_expert_used,
                            n_expert));
  }
  const int n_bias = (variant.router_b >= 0) + (variant.gate_b >= 0) + (variant.up_b >= 0) + (variant.down_b >= 0);
  if (n_bias != 0 && n_bias != 4) throw Error(fmt::format("{}: expert biases come all four or none", name));
  if (variant.router_in >= 0 && width(variant.router_in) != d) {
    throw Error(fmt::format("{}: the router's input has rows of {}, the experts' {}", name, width(variant.router_in), d));
  }
  if (variant.expert_scale >= 0 && g_.tensor(variant.expert_scale).ne[0] != n_expert) {
    throw Error(fmt::format("{}: per-expert scale '{}' must hold {} values", name, g_.tensor(variant.expert_scale).name,
                            n_expert));
  }
  std::vector<TensorId> in{x, router, gate_exps, up_exps, down_exps};
  int8_t router_in_at = -1, expert_scale_at = -1, bias_at = -1;
  if (variant.router_in >= 0) {
    router_in_at = static_cast<int8_t>(in.size());
    in.push_back(variant.router_in);
  }
  if (variant.expert_scale >= 0) {
    expert_scale_at = static_cast<int8_t>(in.size());
    in.push_back(variant.expert_scale);
  }
  if (n_bias == 4) {
    bias_at = static_cast<int8_t>(in.size());
    const std::pair<TensorId, std::array<int64_t, 2>> biases[] = {
        {variant.router_b, {n_expert, 1}}, {variant.gate_b, {ff, n_expert}}, {variant.up_b, {ff, n_expert}},
        {variant.down_b, {d, n_expert}}};
    for (const auto& [id, shape] : biases) {
      const auto& t = g_.tensor(id);
      if (t.type != gguf::TensorType::F32 || t.ne[0] != shape[0] || t.ne[1] != shape[1]) {
        throw Error(fmt::format("{}: bias '{}' must be F32 of {}x{}", name, t.name, shape[0], shape[1]));
      }
      in.push_back(id);
    }
  }
  if (variant.glu == MoeGlu::SwiGLUClamped && !(variant.glu_limit > 0 && variant.glu_alpha > 0)) {
    throw Error(fmt::format("{}: the clamped SwiGLU needs a positive alpha and limit", name));
  }
  const TensorId out = act(name, d, layer);
  Node& n = emit(Op::MoE, out, std::move(in));
  MoeParams mp;
  mp.n_expert = static_cast<int>(n_expert);
  mp.n_expert_used = n_expert_used;
  mp.norm_topk = variant.norm_topk;
  mp.routing = variant.routing;
  mp.glu = variant.glu;
  mp.glu_alpha = variant.glu_alpha;
  mp.glu_limit = variant.glu_limit;
  mp.logit_scale = variant.logit_scale;
  mp.router_in = router_in_at;
  mp.expert_scale = expert_scale_at;
  mp.bias = bias_at;
  n.params = mp;
  if (expert_scale_at >= 0) n.small_f32 |= 1u << expert_scale_at;
  if (bias_at >= 0) n.small_f32 |= 0xfu << bias_at;
  return out;
}

TensorId Builder::scale(TensorId x, TensorId w, const std::string& name, int layer) {
  const int64_t n = g_.tensor(w).ne[0] * g_.tensor(w).ne[1] * g_.tensor(w).ne[2] * g_.tensor(w).ne[3];
  if (n != 1 && n != width(x)) {
    throw Error(fmt::format("{}: scale '{}' has {} elements for rows of {}", name, g_.tensor(w).name, n, width(x)));
  }
  const TensorId out = act(name, width(x), layer);
  emit(Op::Scale, out, {x, w}).small_f32 = 1u << 1;
  return out;
}

TensorId Builder::split(TensorId x, int n_groups, int64_t stride, int64_t offset, int64_t w, const std::string& name,
                        int layer) {
  if (n_groups <= 0 || stride * n_groups != width(x) || offset < 0 || w <= 0 || offset + w > stride) {
    throw Error(fmt::format("{}: columns {}..{} of {} groups of {} do not fit rows of {}", name, offset, offset + w,
                            n_groups, stride, width(x)));
  }
  const TensorId out = act(name, w * n_groups, layer);
  Node& n = emit(Op::Split, out, {x});
  n.params = SplitParams{n_groups, stride, offset};
  return out;
}

TensorId Builder::concat(std::vector<TensorId> parts, const std::string& name, int layer) {
  int64_t total = 0;
  for (TensorId p : parts) total += width(p);
  if (parts.size() < 2) throw Error(fmt::format("{}: concatenation of fewer than two rows", name));
  const TensorId out = act(name, total, layer);
  emit(Op::Concat, out, std::move(parts));
  return out;
}

TensorId Builder::sigmoid_mul(TensorId a, TensorId b, const std::string& name, int layer) {
  if (width(b) != width(a) && width(b) != 1) {
    throw Error(fmt::format("{}: gating rows of {} by rows of {}", name, width(a), width(b)));
  }
  const TensorId out = act(name, width(a), layer);
  emit(Op::SigmoidMul, out, {a, b});
  return out;
}

TensorId Builder::ssm_conv(TensorId x, TensorId w, const std::string& name, int layer) {
  const Tensor& wt = g_.tensor(w);
  if (wt.ne[1] != width(x) || wt.ne[0] < 1 || wt.type != gguf::TensorType::F32) {
    throw Error(fmt::format("{}: convolution weight '{}' must be F32 {{kernel, {}}}", name, wt.name, width(x)));
  }
  const TensorId out = act(name, width(x), layer);
  emit(Op::SsmConv, out, {x, w}).small_f32 = 1u << 1;
  return out;
}

TensorId Builder::delta_net(TensorId q, TensorId k, TensorId v, TensorId a, TensorId b, TensorId A, TensorId dt_bias,
                            int n_head_k, int n_head_v, int dk, int dv, bool tiled_heads, const std::string& name,
                            int layer) {
  if (n_head_k <= 0 || n_head_v % n_head_k || width(q) != int64_t{n_head_k} * dk || width(k) != width(q) ||
      width(v) != int64_t{n_head_v} * dv || width(a) != n_head_v || width(b) != n_head_v ||
      g_.tensor(A).ne[0] != n_head_v || g_.tensor(dt_bias).ne[0] != n_head_v) {
    throw Error(fmt::format("{}: q/k/v/a/b rows {}/{}/{}/{}/{} do not match {} key heads of {} and {} value heads of {}",
                            name, width(q), width(k), width(v), width(a), width(b), n_head_k, dk, n_head_v, dv));
  }
  const TensorId out = act(name, width(v), layer);
  Node& n = emit(Op::DeltaNet, out, {q, k, v, a, b, A, dt_bias});
  n.small_f32 = 1u << 5 | 1u << 6;
  n.params = DeltaNetParams{n_head_k, n_head_v, dk, dv, tiled_heads};
  return out;
}

std::vector<const Node*> nodes_with_head(const Graph& g) {
  std::vector<const Node*> out;
  for (const Node& n : g.nodes) out.push_back(&n);
  if (g.mtp) {
    for (const Node& n : g.mtp->nodes) out.push_back(&n);
  }
  return out;
}

int64_t state_size(const Graph& g, const Node& n) {
  switch (n.op) {
    case Op::SsmConv: return (g.tensor(n.in[1]).ne[0] - 1) * g.tensor(n.in[1]).ne[1];
    case Op::DeltaNet: return int64_t{n.delta_net().n_head_v} * n.delta_net().dk * n.delta_net().dv;
    default: return 0;
  }
}

}  // namespace zinc::graph
