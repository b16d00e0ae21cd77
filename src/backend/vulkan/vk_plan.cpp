#include "backend/vulkan/vk_plan.h"

#include <algorithm>
#include <numeric>

#include "backend/exec_common.h"
#include "backend/vulkan/vk_gemm.h"
#include "backend/vulkan/vk_misc.h"
#include "backend/vulkan/vk_ops.h"
#include "backend/vulkan/vk_quant.h"
#include "core/knobs.h"
#include "quant/quant.h"

namespace zinc::backend::vk {

using graph::Node;
using graph::Op;
using graph::TensorId;

namespace {

// A step of several sequences runs the per-sequence ops (cache append, attention, recurrent state)
// on each part's rows, through views that must start at the device's offset alignment: each part
// starts at a multiple of this many rows (1 where every such row's bytes are a multiple of the
// alignment; rows between parts are padding that the row-wise ops compute and nothing reads).
uint32_t part_row_alignment(const graph::Graph& g, size_t align) {
  size_t a = 1;
  const auto need = [&](TensorId t) {
    const size_t row = static_cast<size_t>(g.tensor(t).ne[0]) * 4;
    a = std::max(a, align / std::gcd(align, row));
  };
  for (const Node& n : g.nodes) {
    if (n.op == Op::Attention) {
      for (size_t k = 0; k < 3; ++k) need(n.in[k]);
      need(n.out);
    }
    if (n.op == Op::SsmConv) {
      need(n.in[0]);
      need(n.out);
    }
    if (n.op == Op::DeltaNet) {
      for (size_t k = 0; k < 5; ++k) need(n.in[k]);
      need(n.out);
    }
  }
  return static_cast<uint32_t>(a);
}

// Per tensor: how many node inputs name it.
std::vector<int> reader_counts(const graph::Graph& g) {
  std::vector<int> readers(g.tensors.size(), 0);
  for (const Node& n : g.nodes) {
    for (TensorId t : n.in) ++readers[static_cast<size_t>(t)];
  }
  return readers;
}

// Per tensor: the node that writes it (-1: none, an input or a weight).
std::vector<int> producers(const graph::Graph& g) {
  std::vector<int> producer(g.tensors.size(), -1);
  for (size_t i = 0; i < g.nodes.size(); ++i) producer[static_cast<size_t>(g.nodes[i].out)] = static_cast<int>(i);
  return producer;
}

// A per-head norm whose one reader is a rotation is done by the rotation's dispatch, and the rotation
// of an attention's k also appends k and v to the cache when v is computed by then.
void plan_fusions(Plan& p, const graph::Graph& g, const ExecOptions& opts) {
  const size_t nn = g.nodes.size();
  p.rope_norm.assign(nn, -1);
  p.rope_store.assign(nn, -1);
  p.skip.assign(nn, false);
  p.kv_stored.assign(nn, false);
  p.delta_qkv.assign(nn, {});
  if (opts.keep_activations) return;
  const std::vector<int> readers = reader_counts(g), producer = producers(g);
  for (size_t i = 0; i < nn; ++i) {
    const Node& dn = g.nodes[i];
    if (dn.op != Op::DeltaNet) continue;
    Plan::DeltaQkv d;
    bool ok = true;
    for (size_t k = 0; k < 3 && ok; ++k) {
      const int sp = producer[static_cast<size_t>(dn.in[k])];
      const Node* s = sp >= 0 ? &g.nodes[static_cast<size_t>(sp)] : nullptr;
      ok = s && s->op == Op::Split && s->split().n_groups == 1 && readers[static_cast<size_t>(dn.in[k])] == 1 &&
           (k == 0 || s->in[0] == d.src) && s->split().stride == g.tensor(s->in[0]).ne[0];
      if (!ok) break;
      d.src = s->in[0];
      d.off[k] = static_cast<uint32_t>(s->split().offset);
    }
    if (!ok) continue;
    p.delta_qkv[i] = d;
    for (size_t k = 0; k < 3; ++k) p.skip[static_cast<size_t>(producer[static_cast<size_t>(dn.in[k])])] = true;
  }
  for (size_t r = 0; r < nn; ++r) {
    const Node& rot = g.nodes[r];
    if (rot.op != Op::Rope) continue;
    const graph::RopeOpParams& rp = rot.rope();
    if (!rope_heads_fit(static_cast<uint32_t>(rp.head_dim), false, p.kv_type)) continue;
    const int np = producer[static_cast<size_t>(rot.in[0])];
    if (np >= 0) {
      const Node& norm = g.nodes[static_cast<size_t>(np)];
      if (norm.op == Op::RmsNorm && norm.norm().group == rp.head_dim && readers[static_cast<size_t>(norm.out)] == 1) {
        p.rope_norm[r] = np;
        p.skip[static_cast<size_t>(np)] = true;
      }
    }
    for (size_t a = r + 1; a < nn; ++a) {
      const Node& at = g.nodes[a];
      if (at.op != Op::Attention || at.in[1] != rot.out) continue;
      const int vp = producer[static_cast<size_t>(at.in[2])];
      if (rope_heads_fit(static_cast<uint32_t>(rp.head_dim), true, p.kv_type) && vp >= 0 && vp < static_cast<int>(r) &&
          at.attention().head_dim == rp.head_dim && at.attention().n_head_kv == rp.n_head &&
          g.kv_width_of(at.layer) == static_cast<int64_t>(rp.n_head) * rp.head_dim &&
          g.tensor(at.in[2]).ne[0] == g.kv_width_of(at.layer)) {
        p.rope_store[r] = static_cast<int>(a);
        p.kv_stored[a] = true;
      }
      break;
    }
  }
}

// An attention's q and k rotations (with plan_fusions' per-head norms where they have them) done by
// the products they read (mul_mv_k_rope, mul_mv_q8_rope), and v appended by its product where the k
// rotation appends k and v (mul_mv_k_vstore, mul_mv_q8_vstore): both rotations or neither (one left would keep the stage its dispatch is, and
// cost the counts; on an H200 qwen3-30b-a3b with only q's taken: 286.0 -> 278.1 tok/s, with both
// 285.6 -> 291.6). ZINC_VULKAN_ROPE_TAIL=0 keeps the rotations' own dispatches, for measurements.
void plan_tails(Plan& p, const Context& ctx, const graph::Graph& g, const ExecOptions& opts) {
  const size_t nn = g.nodes.size();
  p.mm_rope.assign(nn, -1);
  p.mm_vstore.assign(nn, -1);
  p.mm_count_base.assign(nn, 0);
  if (opts.keep_activations || knob_u32("ZINC_VULKAN_ROPE_TAIL", 1, 0, 1) == 0) return;
  const std::vector<int> readers = reader_counts(g), producer = producers(g);
  // The one-token product writing t (a K-quant's without a bias; a 32-element format's, with one or
  // not), with workgroups that fit heads of hd, and (rows_only false) t's one reader; its node, else -1.
  const auto product = [&](TensorId t, uint32_t hd, bool rows_only) {
    const int m = producer[static_cast<size_t>(t)];
    if (m < 0 || (!rows_only && readers[static_cast<size_t>(t)] != 1)) return -1;
    const Node& mm = g.nodes[static_cast<size_t>(m)];
    if (mm.op != Op::MatMul || mm.in.size() > 3 || p.skip[static_cast<size_t>(m)]) return -1;
    const auto& wt = g.tensor(mm.in[0]);
    const auto ncols = static_cast<uint32_t>(wt.ne[0]), nrows = static_cast<uint32_t>(wt.ne[1]);
    if (has_mul_mv_q8(wt.type)) return mul_mv_q8_tail_fits(ctx, wt.type, ncols, nrows, hd) ? m : -1;
    return mm.in.size() == 2 && mul_mv_k_tail_fits(ctx, wt.type, ncols, nrows, hd) ? m : -1;
  };
  // The product a rotation reads (through its per-head norm where it has one), where it can take
  // them; else -1.
  const auto rotating = [&](TensorId t) {
    const int r = producer[static_cast<size_t>(t)];
    if (r < 0 || g.nodes[static_cast<size_t>(r)].op != Op::Rope) return -1;
    const Node& rot = g.nodes[static_cast<size_t>(r)];
    const graph::RopeOpParams& rp = rot.rope();
    if (rp.n_rot > rp.head_dim || rp.n_rot % 2 != 0 || p.rope_index(rot) < 0) return -1;
    const int norm = p.rope_norm[static_cast<size_t>(r)];
    return product(norm >= 0 ? g.nodes[static_cast<size_t>(norm)].in[0] : rot.in[0], static_cast<uint32_t>(rp.head_dim), false);
  };
  uint32_t counters = 0;
  for (size_t a = 0; a < nn; ++a) {
    const Node& at = g.nodes[a];
    if (at.op != Op::Attention) continue;
    const int qm = rotating(at.in[0]), km = rotating(at.in[1]);
    if (qm < 0 || km < 0) continue;
    const int qr = producer[static_cast<size_t>(at.in[0])], kr = producer[static_cast<size_t>(at.in[1])];
    int vm = -1;
    if (p.rope_store[static_cast<size_t>(kr)] == static_cast<int>(a)) {  // v's product appends v, or neither is taken
      vm = product(at.in[2], static_cast<uint32_t>(g.nodes[static_cast<size_t>(kr)].rope().head_dim), true);
      if (vm < 0) continue;
    }
    for (const auto& [m, r] : {std::pair{qm, qr}, std::pair{km, kr}}) {
      p.mm_rope[static_cast<size_t>(m)] = r;
      p.mm_count_base[static_cast<size_t>(m)] = counters;
      counters += static_cast<uint32_t>(g.nodes[static_cast<size_t>(r)].rope().n_head);
    }
    if (vm >= 0) p.mm_vstore[static_cast<size_t>(vm)] = static_cast<int>(a);
  }
  p.head_count_bytes = size_t{4} * counters;
}

// Whether every reader of t (a norm's output) takes the norm's scale instead of its rows (Plan::mm_norm).
bool scale_readers(const Context& ctx, const graph::Graph& g, TensorId t) {
  if (t == g.hidden || t == g.logits) return false;
  bool any = false;
  for (const Node& n : g.nodes) {
    if (std::find(n.in.begin(), n.in.end(), t) == n.in.end()) continue;
    any = true;
    if (n.op == Op::MatMul) {
      const auto& wt = g.tensor(n.in[0]);
      const auto ncols = static_cast<uint32_t>(wt.ne[0]);
      if (n.in[0] == t || !((has_mul_mv_k(ctx, wt.type) && ncols % 256 == 0) || mul_mv_norm_fits(wt.type, ncols))) return false;
      continue;
    }
    if (n.op != Op::MoE || n.in[0] != t) return false;
    const graph::MoeParams& mp = n.moe();
    const MoeShape shape = moe_shape(g, n);
    const auto& gt = g.tensor(n.in[2]);
    const auto d = static_cast<uint32_t>(shape.d), ff = static_cast<uint32_t>(shape.ff);
    const bool router_x = mp.router_in < 0 || n.in[static_cast<size_t>(mp.router_in)] == t;
    for (size_t k = 1; k < n.in.size(); ++k) {
      if (n.in[k] == t && !(mp.router_in >= 0 && k == static_cast<size_t>(mp.router_in))) return false;
    }
    if (!router_x || g.tensor(n.in[1]).type != gguf::TensorType::F32 || shape.fused || mp.bias >= 0 ||
        mp.glu != graph::MoeGlu::SwiGLU || gt.type != g.tensor(n.in[3]).type || mp.n_expert_used > 32 ||
        !mul_mv_k_id_glu_fits(ctx, gt.type, d, ff) || !has_mul_mv_k(ctx, g.tensor(n.in[4]).type) || ff % 256 != 0) {
      return false;
    }
  }
  return any;
}

// Plan::mm_norm: a one-token K-quant product (or a mixture whose down product combines its slots),
// the residual add of its output as the next node (its output's one reader), and the whole-row norm
// of the sum as the node after, every reader of which takes the norm's scale.
void plan_norm_tails(Plan& p, const Context& ctx, const graph::Graph& g, const ExecOptions& opts) {
  const size_t nn = g.nodes.size();
  p.mm_norm.assign(nn, -1);
  if (opts.keep_activations || knob_u32("ZINC_VULKAN_NORM_TAIL", 1, 0, 1) == 0) return;
  const std::vector<int> readers = reader_counts(g);
  uint32_t blocks = 0;
  for (size_t m = 0; m + 2 < nn; ++m) {
    const Node& mm = g.nodes[m];
    const Node& add = g.nodes[m + 1];
    const Node& norm = g.nodes[m + 2];
    if (p.skip[m] || p.skip[m + 1] || p.skip[m + 2] || p.mm_rope[m] >= 0 || p.mm_vstore[m] >= 0) continue;
    if (add.op != Op::Add || add.in.size() != 2 || (add.in[0] == mm.out) == (add.in[1] == mm.out) ||
        readers[static_cast<size_t>(mm.out)] != 1 || mm.out == g.hidden) {
      continue;
    }
    if (norm.op != Op::RmsNorm || norm.in[0] != add.out || norm.norm().group > 0) continue;
    const auto width = static_cast<uint32_t>(g.tensor(add.out).ne[0]);
    // (rms_norm_row_factored_fits: steps of several tokens must take the same arithmetic)
    if (!rms_norm_row_factored_fits(ctx, width) || g.tensor(norm.out).ne[0] != width) continue;
    if (norm.in.size() > 1 && g.tensor(norm.in[1]).ne[0] != width) continue;
    bool fits = false;
    if (mm.op == Op::MatMul && mm.in.size() == 2) {
      const auto& wt = g.tensor(mm.in[0]);
      fits = wt.ne[1] == width && mul_mv_k_norm_fits(ctx, wt.type, static_cast<uint32_t>(wt.ne[0]), width);
    } else if (mm.op == Op::MoE && mm.moe().bias < 0) {
      const MoeShape shape = moe_shape(g, mm);
      fits = shape.d == width && mul_mv_k_id_combine_norm_fits(ctx, g.tensor(mm.in[4]).type, static_cast<uint32_t>(shape.ff),
                                                                width, static_cast<uint32_t>(mm.moe().n_expert_used));
    }
    if (!fits || !scale_readers(ctx, g, norm.out)) continue;
    p.mm_norm[m] = static_cast<int>(m + 2);
    blocks = std::max(blocks, width / 256);
  }
  p.norm_blocks = blocks;
  // A counter per block, then the partial sums per block of each row of a decode-sized step.
  p.norm_tail_bytes = size_t{4} * blocks * (1 + kMvMaxTokens);
}

// Plan::mm_row_norm: a one-token K-quant or 32-element product that no other tail takes, the residual add of its
// output as the next node (its output's one reader), and the whole-row norm of the sum after it, whose
// readers take floats or the 32-element formats' codes (not Q8_K codes, which the tail does not write).
// ZINC_VULKAN_ROW_NORM=0 keeps the norm's own dispatch, for measurements.
void plan_row_norms(Plan& p, const Context& ctx, const graph::Graph& g, const ExecOptions& opts) {
  const size_t nn = g.nodes.size();
  p.mm_row_norm.assign(nn, -1);
  if (opts.keep_activations || knob_u32("ZINC_VULKAN_ROW_NORM", 1, 0, 1) == 0) return;
  const std::vector<int> readers = reader_counts(g);
  const auto float_weight = [](gguf::TensorType t) { return quant::block_size(t) == 1; };
  // Whether every reader of t takes floats or 32-element codes.
  const auto coded_readers = [&](TensorId t) {
    for (const Node& n : g.nodes) {
      if (std::find(n.in.begin(), n.in.end(), t) == n.in.end()) continue;
      if (n.op == Op::MatMul) {
        const gguf::TensorType wt = g.tensor(n.in[0]).type;
        if (n.in[0] == t || !(has_mul_mv_q8(wt) || float_weight(wt))) return false;
      } else if (n.op == Op::MoE) {
        for (const size_t k : {size_t{2}, size_t{3}}) {
          const gguf::TensorType et = g.tensor(n.in[k]).type;
          if (!(has_mul_mv_q8(et) || float_weight(et))) return false;
        }
      } else {
        return false;
      }
    }
    return true;
  };
  bool any = false;
  for (size_t m = 0; m + 2 < nn; ++m) {
    const Node &mm = g.nodes[m], &add = g.nodes[m + 1], &norm = g.nodes[m + 2];
    if ((mm.op != Op::MatMul && mm.op != Op::MoE) || p.skip[m] || p.skip[m + 1] || p.skip[m + 2] || p.mm_norm[m] >= 0) continue;
    if (mm.op == Op::MatMul && (mm.in.size() > 3 || p.mm_rope[m] >= 0 || p.mm_vstore[m] >= 0)) continue;
    if (add.op != Op::Add || add.in.size() != 2 || (add.in[0] == mm.out) == (add.in[1] == mm.out) ||
        readers[static_cast<size_t>(mm.out)] != 1 || mm.out == g.hidden) {
      continue;
    }
    if (norm.op != Op::RmsNorm || norm.in[0] != add.out || norm.norm().group > 0 || norm.out == g.logits) continue;
    const auto width = static_cast<uint32_t>(g.tensor(add.out).ne[0]);
    if (g.tensor(norm.out).ne[0] != width || (norm.in.size() > 1 && g.tensor(norm.in[1]).ne[0] != width) ||
        !rms_norm_row_fits(width) || !coded_readers(norm.out)) {
      continue;
    }
    if (mm.op == Op::MatMul) {
      const auto& wt = g.tensor(mm.in[0]);
      const auto ncols = static_cast<uint32_t>(wt.ne[0]);
      if (wt.ne[1] != width ||
          !(mul_mv_k_row_norm_fits(ctx, wt.type, ncols, width) || mul_mv_q8_row_norm_fits(ctx, wt.type, ncols, width))) {
        continue;
      }
    } else {
      // The 32-element formats' experts whose down product adds the slots (mul_mv_q8_id_combine):
      // their gate and up products (mul_mv_q8_id_glu) leave it the codes.
      const MoeShape shape = moe_shape(g, mm);
      const gguf::TensorType gt = g.tensor(mm.in[2]).type;
      if (shape.fused || shape.d != width || shape.ff % 32 != 0 || gt != g.tensor(mm.in[3]).type || !has_mul_mv_q8(gt) ||
          !has_mul_mv_q8(g.tensor(mm.in[4]).type) || p.moe_early[m] > 0 || p.gated_tail[m] >= 0 ||
          !mul_mv_q8_combine_row_norm_fits(ctx, width)) {
        continue;
      }
    }
    p.mm_row_norm[m] = static_cast<int>(m + 2);
    any = true;
  }
  if (any) {
    p.row_norm_counter = static_cast<uint32_t>(p.head_count_bytes / 4);
    p.head_count_bytes += size_t{4} * kMvMaxTokens;  // (a counter a token: mul_mv_q8_row_norm takes decode-sized steps)
  }
}

void plan_gate_norms(Plan& p, const graph::Graph& g, const ExecOptions& opts) {
  const size_t nn = g.nodes.size();
  p.gate_norm.assign(nn, false);
  if (opts.keep_activations || knob_u32("ZINC_VULKAN_GATE_NORM", 1, 0, 1) == 0) return;
  const std::vector<int> readers = reader_counts(g);
  const auto once = [&](const Node& n, TensorId t) { return (n.in[0] == t) != (n.in[1] == t) && readers[static_cast<size_t>(t)] == 1; };
  for (size_t i = 0; i + 3 < nn; ++i) {
    const Node &gate = g.nodes[i], &add1 = g.nodes[i + 1], &add2 = g.nodes[i + 2], &norm = g.nodes[i + 3];
    if (gate.op != Op::SigmoidMul || add1.op != Op::Add || add2.op != Op::Add || norm.op != Op::RmsNorm) continue;
    if (p.skip[i] || p.skip[i + 1] || p.skip[i + 2] || p.skip[i + 3]) continue;
    if (add1.in.size() != 2 || add2.in.size() != 2 || !once(add1, gate.out) || !once(add2, add1.out) || norm.in[0] != add2.out) continue;
    const int64_t width = g.tensor(norm.out).ne[0], gw = g.tensor(gate.in[1]).ne[0];
    if (norm.norm().group > 0 && norm.norm().group != width) continue;
    if (!rms_norm_row_fits(static_cast<uint32_t>(width)) || (gw != 1 && gw != width)) continue;
    bool same = norm.in.size() < 2 || g.tensor(norm.in[1]).ne[0] == width;
    for (const TensorId t : {gate.in[0], gate.out, add1.in[0], add1.in[1], add2.in[0], add2.in[1], add2.out}) {
      same = same && g.tensor(t).ne[0] == width;
    }
    for (const TensorId t : {gate.out, add1.out}) same = same && t != g.logits && t != g.hidden;
    p.gate_norm[i] = same;
  }
}

// Plan::gated_tail: a gate_norm (SigmoidMul s, its adds, the norm) whose gated row is a shared
// expert's K-quant down product D and whose other addend is a mixture m's output, both of the
// mixture's early run (moe_early, with D's gate product G reading only the mixture's input, so it can
// go first), every reader of the norm taking its scale.
void plan_gated_tails(Plan& p, const Context& ctx, const graph::Graph& g, const ExecOptions& opts) {
  const size_t nn = g.nodes.size();
  p.gated_tail.assign(nn, -1);
  if (opts.keep_activations || knob_u32("ZINC_VULKAN_NORM_TAIL", 1, 0, 1) == 0 || knob_u32("ZINC_VULKAN_GATE_TAIL", 1, 0, 1) == 0 ||
      ctx.features().max_bindings < 15) {
    return;
  }
  const std::vector<int> readers = reader_counts(g), producer = producers(g);
  uint32_t blocks = p.norm_blocks;
  for (size_t s = 0; s + 3 < nn; ++s) {
    if (!p.gate_norm[s]) continue;
    const Node &sig = g.nodes[s], &add1 = g.nodes[s + 1], &norm = g.nodes[s + 3];
    const TensorId a = sig.in[0], gate = sig.in[1], c = add1.in[0] == sig.out ? add1.in[1] : add1.in[0];
    const auto width = static_cast<uint32_t>(g.tensor(norm.out).ne[0]);
    const int m = producer[static_cast<size_t>(c)], dn = producer[static_cast<size_t>(a)], gn = producer[static_cast<size_t>(gate)];
    if (m < 0 || dn < 0 || gn < 0 || g.tensor(gate).ne[0] != 1 || readers[static_cast<size_t>(a)] != 1 ||
        readers[static_cast<size_t>(c)] != 1 || !rms_norm_row_factored_fits(ctx, width)) {
      continue;
    }
    const Node &moe = g.nodes[static_cast<size_t>(m)], &down = g.nodes[static_cast<size_t>(dn)], &gp = g.nodes[static_cast<size_t>(gn)];
    const int last = m + p.moe_early[static_cast<size_t>(m)];
    if (moe.op != Op::MoE || moe.moe().bias >= 0 || last == m || dn <= m || dn > last || gn <= m || gn > last) continue;
    if (down.op != Op::MatMul || down.in.size() != 2 || p.skip[static_cast<size_t>(dn)] || p.dense_glu[static_cast<size_t>(dn)] ||
        p.mm_norm[static_cast<size_t>(dn)] >= 0) {
      continue;
    }
    if (gp.op != Op::MatMul || std::any_of(gp.in.begin() + 1, gp.in.end(), [&](TensorId t) { return t != moe.in[0]; })) continue;
    const auto& dw = g.tensor(down.in[0]);
    const MoeShape shape = moe_shape(g, moe);
    if (dw.ne[1] != width || has_mul_mv_q8(dw.type) || !mul_mv_k_norm_fits(ctx, dw.type, static_cast<uint32_t>(dw.ne[0]), width) ||
        shape.d != width ||
        !mul_mv_k_id_combine_norm_fits(ctx, g.tensor(moe.in[4]).type, static_cast<uint32_t>(shape.ff), width,
                                       static_cast<uint32_t>(moe.moe().n_expert_used)) ||
        !scale_readers(ctx, g, norm.out)) {
      continue;
    }
    p.gated_tail[s] = m;
    p.gated_tail[static_cast<size_t>(m)] = static_cast<int>(s);
    p.gated_tail[static_cast<size_t>(dn)] = static_cast<int>(s);
    blocks = std::max(blocks, width / 256);
  }
  p.norm_blocks = blocks;
  p.norm_tail_bytes = size_t{4} * blocks * (1 + kMvMaxTokens);
}

void plan_dense_glus(Plan& p, const Context& ctx, const graph::Graph& g, const ExecOptions& opts) {
  const size_t nn = g.nodes.size();
  p.dense_glu.assign(nn, false);
  // 1 (the default): GLUs of at most kNarrowGlu rows (a shared expert's: on an H100 qwen3.6-35b-a3b
  // tg64 265.0 -> 281.7 tok/s); 2: every width (qwen3-8b's 12,288 rows: 299.4 -> 288.7, so not by
  // default); 0: none.
  const uint32_t mode = knob_u32("ZINC_VULKAN_DENSE_GLU", 1, 0, 2);
  if (opts.keep_activations || mode == 0) return;
  constexpr uint32_t kNarrowGlu = 4096;
  const std::vector<int> readers = reader_counts(g);
  uint32_t widest = 0;
  for (size_t j = 0; j + 2 < nn; ++j) {
    const Node &a = g.nodes[j], &b = g.nodes[j + 1], &glu = g.nodes[j + 2];
    if (a.op != Op::MatMul || b.op != Op::MatMul || glu.op != Op::SwiGLU || a.in.size() != 2 || b.in.size() != 2) continue;
    if (p.skip[j] || p.skip[j + 1] || p.skip[j + 2] || a.in[1] != b.in[1] || glu.in.size() != 2) continue;
    const bool pair = (glu.in[0] == a.out && glu.in[1] == b.out) || (glu.in[0] == b.out && glu.in[1] == a.out);
    if (!pair || readers[static_cast<size_t>(a.out)] != 1 || readers[static_cast<size_t>(b.out)] != 1) continue;
    const auto &wa = g.tensor(a.in[0]), &wb = g.tensor(b.in[0]);
    const auto d = static_cast<uint32_t>(wa.ne[0]), ff = static_cast<uint32_t>(wa.ne[1]);
    if (wa.type != wb.type || wb.ne[0] != wa.ne[0] || wb.ne[1] != wa.ne[1] || g.tensor(glu.out).ne[0] != wa.ne[1]) continue;
    if (!has_mul_mv_k(ctx, wa.type) || has_mul_mv_q8(wa.type) || d % 256 != 0 || !mul_mv_k_id_glu_fits(ctx, wa.type, d, ff)) continue;
    if (mode == 1 && ff > kNarrowGlu) continue;
    p.dense_glu[j] = true;
    widest = std::max(widest, ff);
  }
  if (widest == 0) return;
  // The zero ids of a step's tokens, then a counter per token and 256 rows.
  p.glu_count_bytes = size_t{4} * kMvMaxTokens * (1 + (widest + 255) / 256);
}

void plan_conv_tails(Plan& p, const Context& ctx, const graph::Graph& g, const ExecOptions& opts) {
  const size_t nn = g.nodes.size();
  p.mm_conv.assign(nn, -1);
  if (opts.keep_activations || knob_u32("ZINC_VULKAN_CONV_TAIL", 1, 0, 1) == 0) return;
  const std::vector<int> readers = reader_counts(g), producer = producers(g);
  for (size_t c = 0; c < nn; ++c) {
    const Node& conv = g.nodes[c];
    if (conv.op != Op::SsmConv || p.skip[c] || conv.in.size() != 2) continue;
    const int m = producer[static_cast<size_t>(conv.in[0])];
    if (m < 0 || readers[static_cast<size_t>(conv.in[0])] != 1) continue;
    const auto mi = static_cast<size_t>(m);
    const Node& mm = g.nodes[mi];
    if (mm.op != Op::MatMul || mm.in.size() != 2 || p.skip[mi] || p.mm_rope[mi] >= 0 || p.mm_vstore[mi] >= 0 ||
        p.mm_norm[mi] >= 0 || p.dense_glu[mi]) {
      continue;
    }
    const auto& wt = g.tensor(mm.in[0]);
    const auto& cw = g.tensor(conv.in[1]);
    if (!has_mul_mv_k(ctx, wt.type) || wt.ne[0] % 256 != 0 || cw.ne[0] < 1 || cw.ne[1] != wt.ne[1]) continue;
    p.mm_conv[mi] = static_cast<int>(c);
  }
}

void plan_delta_norms(Plan& p, const Context& ctx, const graph::Graph& g, const ExecOptions& opts) {
  const size_t nn = g.nodes.size();
  p.delta_norm_glu.assign(nn, false);
  if (opts.keep_activations || knob_u32("ZINC_VULKAN_DELTA_NORM", 1, 0, 1) == 0) return;
  const std::vector<int> readers = reader_counts(g);
  size_t blocks = 0;
  for (size_t i = 0; i + 2 < nn; ++i) {
    const Node &dn = g.nodes[i], &norm = g.nodes[i + 1], &glu = g.nodes[i + 2];
    if (dn.op != Op::DeltaNet || norm.op != Op::RmsNorm || glu.op != Op::SwiGLU || p.skip[i] || p.skip[i + 1] || p.skip[i + 2]) continue;
    const auto hv = static_cast<uint32_t>(dn.delta_net().n_head_v), dv = static_cast<uint32_t>(dn.delta_net().dv);
    if (norm.in[0] != dn.out || norm.norm().group != static_cast<int64_t>(dv) || glu.in.size() != 2 || glu.in[1] != norm.out ||
        glu.in[0] == norm.out || g.tensor(glu.out).ne[0] != g.tensor(dn.out).ne[0] || !delta_norm_glu_fits(ctx, hv, dv)) {
      continue;
    }
    if (norm.in.size() > 1 && g.tensor(norm.in[1]).ne[0] != static_cast<int64_t>(dv)) continue;
    if (readers[static_cast<size_t>(norm.out)] != 1 || p.delta_qkv[i].src < 0) continue;  // (the norm's rows are not written)
    p.delta_norm_glu[i] = true;
    blocks = std::max<size_t>(blocks, size_t{hv} * dv / 256);
  }
  p.delta_count_bytes = 4 * blocks;
}

void plan_moe_early(Plan& p, const graph::Graph& g, const ExecOptions& opts) {
  const size_t nn = g.nodes.size();
  p.moe_early.assign(nn, 0);
  if (opts.keep_activations || knob_u32("ZINC_VULKAN_SHARED_EARLY", 1, 0, 1) == 0) return;
  for (size_t m = 0; m < nn; ++m) {
    if (g.nodes[m].op != Op::MoE) continue;
    std::vector<TensorId> ready{g.nodes[m].in[0]};  // what the run may read
    int run = 0;
    bool product = false;
    for (size_t j = m + 1; j < nn && run < 6; ++j) {
      const Node& n = g.nodes[j];
      if (p.skip[j] || p.gate_norm[j] || (n.op != Op::MatMul && n.op != Op::SwiGLU && n.op != Op::GeGLU)) break;
      const bool reads_ready = std::all_of(n.in.begin(), n.in.end(), [&](TensorId t) {
        return g.tensor(t).kind != graph::TensorKind::Act || std::find(ready.begin(), ready.end(), t) != ready.end();
      });
      if (!reads_ready || n.out == g.logits || n.out == g.hidden) break;
      ready.push_back(n.out);
      product = product || n.op == Op::MatMul;
      ++run;
    }
    if (product) p.moe_early[m] = run;
  }
}

// The arena (plan_arena), reading a fused norm's input alive until its rotation runs; the logits have a
// host-visible buffer of their own.
void plan_activations(Plan& p, const graph::Graph& g, const ExecOptions& opts) {
  std::vector<int> last_use = last_uses(g);
  for (size_t r = 0; r < p.rope_norm.size(); ++r) {
    if (p.rope_norm[r] >= 0) {
      auto& u = last_use[static_cast<size_t>(g.nodes[static_cast<size_t>(p.rope_norm[r])].in[0])];
      if (u >= 0) u = std::max(u, static_cast<int>(r));  // (-1: kept to the end already)
    }
    if (p.delta_qkv[r].src >= 0) {  // read by the DeltaNet itself
      auto& u = last_use[static_cast<size_t>(p.delta_qkv[r].src)];
      if (u >= 0) u = std::max(u, static_cast<int>(r));
    }
  }
  // A split's input (an attention's q and gate from one product) lives until three nodes after the
  // split, so the products recorded next (k and v) do not take its memory and run beside the split's
  // copies instead of behind a barrier.
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (g.nodes[i].op != Op::Split || p.skip[i]) continue;
    auto& u = last_use[static_cast<size_t>(g.nodes[i].in[0])];
    if (u >= 0) u = std::max(u, static_cast<int>(i + 3));
  }
  // A gate whose output is added to another row next (a shared expert's gated output added to the
  // experts': the recorder's sigmoid_mul_add, one dispatch for both): the gate's inputs live until the
  // add, so the sum never takes their memory (each invocation reads its row's gate while the others
  // write the sum).
  for (size_t i = 0; i + 1 < g.nodes.size(); ++i) {
    if (!gate_then_add(g, i)) continue;
    for (const TensorId t : g.nodes[i].in) {
      auto& u = last_use[static_cast<size_t>(t)];
      if (u >= 0) u = std::max(u, static_cast<int>(i + 1));
    }
  }
  // The gated add and norm (gate_norm): every input of the four nodes lives until the norm, so neither
  // the sum nor the norm's rows take their memory.
  for (size_t i = 0; i < p.gate_norm.size(); ++i) {
    if (!p.gate_norm[i]) continue;
    for (size_t k = i; k <= i + 2; ++k) {
      for (const TensorId t : g.nodes[k].in) {
        auto& u = last_use[static_cast<size_t>(t)];
        if (u >= 0) u = std::max(u, static_cast<int>(i + 3));
      }
    }
  }
  // A mixture whose next nodes may record before its down product (moe_early), those reading only its
  // input first: what the mixture and they read or write lives until the last of them, so none of
  // their outputs takes the memory of what another still reads. With a gated tail (gated_tail) the
  // sum is written by the down products: what the nodes from the mixture to the norm read or write
  // lives until the norm.
  for (size_t m = 0; m < p.moe_early.size(); ++m) {
    if (p.moe_early[m] == 0) continue;
    const int s = g.nodes[m].op == Op::MoE ? p.gated_tail[m] : -1;
    const size_t until = s >= 0 ? static_cast<size_t>(s) + 3 : m + static_cast<size_t>(p.moe_early[m]);
    for (size_t k = m; k <= until; ++k) {
      std::vector<TensorId> ts = g.nodes[k].in;
      if (k > m) ts.push_back(g.nodes[k].out);
      for (const TensorId t : ts) {
        if (g.tensor(t).kind != graph::TensorKind::Act) continue;
        auto& u = last_use[static_cast<size_t>(t)];
        if (u >= 0) u = std::max(u, static_cast<int>(until));
      }
    }
  }
  // A convolution done by its product (plan_conv_tails) writes its output at the product: what the
  // nodes from the product to the convolution read or write lives until the convolution.
  for (size_t m = 0; m < p.mm_conv.size(); ++m) {
    if (p.mm_conv[m] < 0) continue;
    const auto c = static_cast<size_t>(p.mm_conv[m]);
    for (size_t k = m; k < c; ++k) {
      std::vector<TensorId> ts = g.nodes[k].in;
      ts.push_back(g.nodes[k].out);
      for (const TensorId t : ts) {
        if (g.tensor(t).kind != graph::TensorKind::Act) continue;
        auto& u = last_use[static_cast<size_t>(t)];
        if (u >= 0) u = std::max(u, static_cast<int>(c));
      }
    }
  }
  // A rotation done in place by its product (plan_tails): the product's rows live as long as the
  // rotation's, which take no memory of their own.
  std::vector<bool> in_place(g.tensors.size(), false);
  for (size_t m = 0; m < p.mm_rope.size(); ++m) {
    if (p.mm_rope[m] < 0) continue;
    const TensorId from = g.nodes[m].out, to = g.nodes[static_cast<size_t>(p.mm_rope[m])].out;
    auto& u = last_use[static_cast<size_t>(from)];
    const int v = last_use[static_cast<size_t>(to)];
    u = (u < 0 || v < 0) ? -1 : std::max(u, v);
    in_place[static_cast<size_t>(to)] = true;
  }
  const ArenaPlan arena = plan_arena(
      g, last_use,
      [&](TensorId t) {
        return t == g.logits || in_place[static_cast<size_t>(t)] ? 0 : static_cast<size_t>(g.tensor(t).ne[0]) * p.max_rows * 4;
      },
      p.align, opts.keep_activations);
  p.act_offset = arena.offset;
  for (size_t m = 0; m < p.mm_rope.size(); ++m) {
    if (p.mm_rope[m] >= 0) p.act_offset[static_cast<size_t>(g.nodes[static_cast<size_t>(p.mm_rope[m])].out)] = p.act_offset[static_cast<size_t>(g.nodes[m].out)];
  }
  p.arena_bytes = std::max<size_t>(arena.bytes, 4);
  p.logits_bytes = static_cast<size_t>(g.tensor(g.logits).ne[0]) * static_cast<size_t>(opts.max_tokens) * 4;
  if (g.hidden >= 0) p.hidden_bytes = static_cast<size_t>(g.tensor(g.hidden).ne[0]) * static_cast<size_t>(opts.max_tokens) * 4;
}

void plan_step_buffer(Plan& p, const graph::Graph& g, const ExecOptions& opts) {
  p.blocks_per_seq = (opts.n_ctx + kKvBlockRows - 1) / kKvBlockRows;
  p.header_stride = align_up(16 + 4 * static_cast<size_t>(p.blocks_per_seq), p.align);
  size_t at = p.header_stride * static_cast<size_t>(opts.n_seq);
  p.tokens_offset = at;
  at = align_up(at + static_cast<size_t>(p.max_rows) * 4, p.align);
  for (const Node& n : g.nodes) {
    if (n.op == Op::Input) p.input_width = static_cast<uint32_t>(g.tensor(n.out).ne[0]);
  }
  p.inputs_offset = at;
  at = align_up(at + static_cast<size_t>(p.input_width) * p.max_rows * 4, p.align);
  for (const Node& n : g.nodes) {
    if (n.op != Op::Rope || p.rope_index(n) >= 0) continue;  // (the same rotation as an earlier node)
    const TensorId factors = n.in.size() > 1 ? n.in[1] : -1;
    p.ropes.push_back({n.rope().n_rot, n.rope().rope, factors, at});
    at = align_up(at + static_cast<size_t>(n.rope().n_rot) * p.max_rows * 4, p.align);
  }
  p.step_bytes = at;
}

void plan_scratch(Plan& p, const Context& ctx, const graph::Graph& g, const ExecOptions& opts) {
  size_t attn = 0, attn_one = 0;
  p.q8k_input.assign(g.tensors.size(), false);
  p.q8_input.assign(g.tensors.size(), -1);
  std::vector<bool> q8_mixed(g.tensors.size(), false);
  const auto q8_reader = [&](TensorId t, gguf::TensorType type) {
    const auto f = static_cast<int8_t>(q8_act_format(type));
    auto& in = p.q8_input[static_cast<size_t>(t)];
    if (q8_mixed[static_cast<size_t>(t)] || (in >= 0 && in != f)) {
      q8_mixed[static_cast<size_t>(t)] = true;
      in = -1;
      return;
    }
    in = f;
  };
  uint32_t mm_cols = 0;
  const auto max_tok = static_cast<uint32_t>(opts.max_tokens);  // a part's tokens
  const uint32_t max_rows = p.max_rows;                           // a step's rows (with padding between parts)
  for (const Node& n : g.nodes) {
    if (n.op == Op::Attention) {
      const auto nh = static_cast<uint32_t>(n.attention().n_head), nkv = static_cast<uint32_t>(n.attention().n_head_kv);
      const auto hd = static_cast<uint32_t>(n.attention().head_dim), ctx_len = static_cast<uint32_t>(opts.n_ctx);
      attn = std::max(attn, attention_scratch_bytes(ctx, nh, nkv, hd, max_tok, ctx_len));
      attn_one = std::max(attn_one, attention_scratch_bytes(ctx, nh, nkv, hd, 1, ctx_len));
    }
    if (n.op == Op::MoE) {
      const auto& gt = g.tensor(n.in[2]);
      const int64_t d = g.tensor(n.in[1]).ne[0];
      const int64_t ff = n.in[2] == n.in[3] ? gt.ne[1] / 2 : gt.ne[1];
      p.moe_logits_bytes = std::max(p.moe_logits_bytes, static_cast<size_t>(n.moe().n_expert) * max_rows * 4);
      p.moe_ids_bytes = std::max(p.moe_ids_bytes, static_cast<size_t>(n.moe().n_expert_used) * max_rows * 4);
      // A token's counter (moe_router), or one per slot and 256 rows of the activation (mul_mv_k_id_glu).
      p.moe_count_bytes = std::max(p.moe_count_bytes, size_t{4} * kMvMaxTokens *
                                                          std::max<size_t>(1, static_cast<size_t>(n.moe().n_expert_used) * ((ff + 255) / 256)));
      // The 32-element formats' down product adding its slots (mul_mv_q8_id_combine): a counter per
      // token and group of rows.
      if (has_mul_mv_q8(g.tensor(n.in[4]).type)) {
        p.moe_count_bytes = std::max(p.moe_count_bytes, 4 * mul_mv_q8_combine_counts(static_cast<uint32_t>(d), kMvMaxTokens));
      }
      // Their gate and up products with the GLU and the down product's codes (mul_mv_q8_id_glu): one
      // per pair and 32 rows.
      if (has_mul_mv_q8(gt.type) && ff % 32 == 0) {
        p.moe_count_bytes = std::max(p.moe_count_bytes, 4 * mul_mv_q8_glu_counts(static_cast<uint32_t>(ff),
                                                                                 kMvMaxTokens * static_cast<uint32_t>(n.moe().n_expert_used)));
      }
      p.moe_slot_bytes = std::max(p.moe_slot_bytes, static_cast<size_t>(n.moe().n_expert_used) * max_rows *
                                                        static_cast<size_t>(std::max(2 * ff, d)) * 4);
      // Experts of the 32-element formats (mul_mv_q8_id): activation codes for the decode-sized steps
      // (the down projection's x per slot).
      const size_t q8_rows = static_cast<size_t>(std::min<uint32_t>(max_rows, kMvMaxTokens)) * static_cast<size_t>(n.moe().n_expert_used);
      p.act_q8_bytes = std::max({p.act_q8_bytes, mul_mv_q8_bytes(static_cast<uint32_t>(d)) * q8_rows,
                                 mul_mv_q8_bytes(static_cast<uint32_t>(ff)) * q8_rows});
      p.act_q8k_bytes = std::max({p.act_q8k_bytes, q8k_row_bytes(static_cast<uint32_t>(d)) * q8_rows,
                                  q8k_row_bytes(static_cast<uint32_t>(ff)) * q8_rows});
      // A block-format router takes codes of its input in steps of up to kDirectMaxTokens (as MatMul).
      const auto& rt = g.tensor(n.in[1]);
      const size_t direct_rows = std::min<uint32_t>(max_rows, kDirectMaxTokens);
      if (has_mul_mv_q8(rt.type)) p.act_q8_bytes = std::max(p.act_q8_bytes, mul_mv_q8_bytes(static_cast<uint32_t>(d)) * direct_rows);
      if (has_mul_mv_k(ctx, rt.type) && d % 256 == 0) {
        p.act_q8k_bytes = std::max(p.act_q8k_bytes, q8k_row_bytes(static_cast<uint32_t>(d)) * direct_rows);
      }
      // Decode-sized steps read x's codes as its norm writes them.
      if (has_mul_mv_q8(gt.type) && has_mul_mv_q8(g.tensor(n.in[3]).type)) {
        q8_reader(n.in[0], gt.type);
        q8_reader(n.in[0], g.tensor(n.in[3]).type);
      }
      if (has_mul_mv_k(ctx, gt.type) && has_mul_mv_k(ctx, g.tensor(n.in[3]).type) && d % 256 == 0) {
        p.q8k_input[static_cast<size_t>(n.in[0])] = true;
        p.act_q8k_bytes = std::max(p.act_q8k_bytes, q8k_row_bytes(static_cast<uint32_t>(d)) * std::min<uint32_t>(max_rows, kDirectMaxTokens));
      }
      // Longer steps: the slots grouped by expert, x in f16 for the gate and up products (the down
      // product's goes in moe_up, free by then).
      if (max_rows > kMvMaxTokens) {
        p.moe_route_bytes = std::max(p.moe_route_bytes, moe_route_bytes(max_rows, static_cast<uint32_t>(n.moe().n_expert_used),
                                                                        static_cast<uint32_t>(n.moe().n_expert)));
        mm_cols = std::max(mm_cols, static_cast<uint32_t>(d));
      }
    }
    if (n.op != Op::MatMul) continue;
    const auto& wt = g.tensor(n.in[0]);
    const auto ncols = static_cast<uint32_t>(wt.ne[0]);
    if (has_mul_mv_k(ctx, wt.type) && ncols % 256 == 0) {
      p.q8k_input[static_cast<size_t>(n.in[1])] = true;
      p.act_q8k_bytes = std::max(p.act_q8k_bytes, q8k_row_bytes(ncols) * std::min<uint32_t>(max_rows, kDirectMaxTokens));
    }
    if (has_mul_mv_q8(wt.type)) {
      q8_reader(n.in[1], wt.type);
      p.act_q8_bytes = std::max(p.act_q8_bytes, mul_mv_q8_bytes(ncols) * std::min<uint32_t>(max_rows, kDirectMaxTokens));
    }
    if (max_rows > kDirectMaxTokens) mm_cols = std::max(mm_cols, ncols);
  }
  // One slot per sequence for its one-token parts (decode steps of many sequences).
  p.attn_slot_bytes = opts.n_seq > 1 ? align_up(attn_one, p.align) : 0;
  p.attn_scratch_bytes = p.attn_slot_bytes * static_cast<size_t>(opts.n_seq) + attn;
  if (mm_cols > 0 && mul_mm_kernel(ctx) == MulMmKernel::CoopMatNV) p.x_f16_bytes = mul_mm_scratch_bytes(mm_cols, max_rows);
  p.argmax_scratch_bytes = align_up(argmax_scratch_bytes(static_cast<uint32_t>(g.tensor(g.logits).ne[0])), p.align);
}

}  // namespace

bool gate_then_add(const graph::Graph& g, size_t i) {
  if (i + 1 >= g.nodes.size() || g.nodes[i].op != Op::SigmoidMul) return false;
  const Node& add = g.nodes[i + 1];
  const TensorId me = g.nodes[i].out;
  if (add.op != Op::Add || (add.in[0] == me) == (add.in[1] == me) || g.tensor(add.out).ne[0] != g.tensor(me).ne[0]) return false;
  // (where the add's sum is normalised next, the add goes with the norm instead: add_norm)
  return !(i + 2 < g.nodes.size() && g.nodes[i + 2].op == Op::RmsNorm && g.nodes[i + 2].in[0] == add.out);
}

int Plan::rope_index(const Node& n) const {
  const TensorId factors = n.in.size() > 1 ? n.in[1] : -1;
  for (size_t i = 0; i < ropes.size(); ++i) {
    const auto& r = ropes[i];
    const graph::RopeParams& a = r.params;
    const graph::RopeParams& b = n.rope().rope;
    if (r.n_rot == n.rope().n_rot && r.factors == factors && a.base == b.base && a.freq_scale == b.freq_scale &&
        a.ext_factor == b.ext_factor && a.attn_factor == b.attn_factor && a.beta_fast == b.beta_fast &&
        a.beta_slow == b.beta_slow && a.n_ctx_orig == b.n_ctx_orig && a.yarn_truncate == b.yarn_truncate) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

Plan make_plan(const Context& ctx, const graph::Graph& g, const ExecOptions& opts, const std::vector<size_t>& state_floats) {
  Plan p;
  p.kv_type = opts.kv_type == KvType::F32 ? KvCacheType::F32 : opts.kv_type == KvType::F16 ? KvCacheType::F16 : KvCacheType::Q8_0;
  p.align = ctx.features().offset_alignment;
  p.row_pad = opts.n_seq > 1 ? part_row_alignment(g, p.align) : 1;
  p.max_rows = static_cast<uint32_t>(opts.max_tokens) + static_cast<uint32_t>(opts.n_seq - 1) * (p.row_pad - 1);
  plan_fusions(p, g, opts);
  plan_step_buffer(p, g, opts);  // (the rotation tables plan_tails needs)
  plan_tails(p, ctx, g, opts);
  plan_norm_tails(p, ctx, g, opts);
  plan_gate_norms(p, g, opts);
  plan_moe_early(p, g, opts);
  plan_dense_glus(p, ctx, g, opts);
  plan_conv_tails(p, ctx, g, opts);
  plan_delta_norms(p, ctx, g, opts);
  plan_gated_tails(p, ctx, g, opts);
  plan_row_norms(p, ctx, g, opts);
  plan_activations(p, g, opts);
  plan_scratch(p, ctx, g, opts);
  if (p.norm_blocks > 0) {  // the norm's codes after the product's own input codes
    for (size_t m = 0; m < p.mm_norm.size(); ++m) {  // (steps of several tokens: the factored norm's codes)
      const bool gated = p.gated_tail[m] >= 0 && g.nodes[m].op == Op::SigmoidMul;
      if (p.mm_norm[m] < 0 && !gated) continue;
      const TensorId y = g.nodes[gated ? m + 3 : static_cast<size_t>(p.mm_norm[m])].out;
      p.q8k_input[static_cast<size_t>(y)] = true;
      p.act_q8k_bytes = std::max(p.act_q8k_bytes, q8k_row_bytes(static_cast<uint32_t>(g.tensor(y).ne[0])) *
                                                      std::min<uint32_t>(p.max_rows, kMvMaxTokens));
    }
    p.norm_codes_offset = align_up(p.act_q8k_bytes, p.align);
    p.act_q8k_bytes = p.norm_codes_offset + q8k_row_bytes(p.norm_blocks * 256);
  }
  if (p.glu_count_bytes > 0) {  // the dense GLUs' codes after everything else's in act_q8k
    uint32_t widest = 0;
    for (size_t j = 0; j < p.dense_glu.size(); ++j) {
      if (p.dense_glu[j]) widest = std::max(widest, static_cast<uint32_t>(g.tensor(g.nodes[j].in[0]).ne[1]));
    }
    p.glu_codes_offset = align_up(p.act_q8k_bytes, p.align);
    p.act_q8k_bytes = p.glu_codes_offset + q8k_row_bytes(widest) * std::min<uint32_t>(p.max_rows, kMvMaxTokens);
  }
  p.state_seq_bytes.assign(state_floats.size(), 0);
  for (size_t i = 0; i < state_floats.size(); ++i) {
    if (state_floats[i] > 0) p.state_seq_bytes[i] = align_up(state_floats[i] * 4, p.align);
  }
  return p;
}

}  // namespace zinc::backend::vk
