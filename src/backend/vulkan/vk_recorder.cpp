#include "backend/vulkan/vk_recorder.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <initializer_list>
#include <map>

#include "backend/exec_common.h"
#include "backend/vulkan/vk_attention.h"
#include "backend/vulkan/vk_gemm.h"
#include "backend/vulkan/vk_misc.h"
#include "backend/vulkan/vk_ops.h"
#include "backend/vulkan/vk_quant.h"
#include "backend/vulkan/vk_router_split.h"
#include "core/error.h"
#include "core/knobs.h"
#include "quant/quant.h"

namespace zinc::backend::vk {

using graph::Node;
using graph::Op;
using graph::TensorId;
using graph::TensorKind;

View activation_view(const graph::Graph& g, const Plan& plan, const Resources& res, TensorId id, int64_t rows) {
  const size_t bytes = static_cast<size_t>(g.tensor(id).ne[0] * rows) * 4;
  if (id == g.logits) return View{res.logits, 0, bytes};
  return View{res.arena, plan.act_offset[static_cast<size_t>(id)], bytes};
}

namespace {

// One recording in the making: the hazard tracker's state and the cursors of what scratch holds.
class Recorder {
 public:
  Recorder(Context& ctx, const graph::Graph& g, const ExecOptions& opts, const Plan& plan, const VulkanWeights& w,
           const Resources& res)
      : ctx_(ctx), g_(g), opts_(opts), plan_(plan), w_(w), res_(res) {
    for (const RouterSite& site : router_sites(g, true)) {
      const VulkanWeights::RouterSplit* rs = w.router_split(g.nodes[site.moe].in[1], g.nodes[site.o].in[0]);
      if (rs && rs->rw) sites_.emplace(site.o, site);
      if (rs && rs->fold) folds_.emplace(site.o, site);
    }
  }

  // Records the step of `parts`.
  Recorded record(const std::vector<Part>& parts) {
    const uint32_t n_tok = parts.back().row + parts.back().n;
    parts_ = &parts;
    multi_ = parts.size() > 1;
    tails_ = !multi_ && n_tok == 1 && res_.head_count != nullptr;  // (plan_tails: one token of one sequence)
    norm_tails_ = !multi_ && n_tok == 1 && res_.norm_tail != nullptr;  // (plan_norm_tails: likewise)
    one_plain_ = !multi_ && n_tok == 1 && !parts.front().keep;  // (plan_conv_tails, plan_delta_norms)
    deferred_ = Deferred{};
    split_moe_ = -1;
    Recorded out;
    out.rec = std::make_unique<vk::Recording>(ctx_, g_.nodes.size() * 8 + 64);
    vk::Recording& rec = *out.rec;
    Tracker tr(rec);
    q8k_of_ = -1;
    q8k_at_ = View{};
    q8_of_ = -1;
    x16_of_ = -1;
    done_.assign(g_.nodes.size(), false);
    // The step's parameters as the host wrote them, into device memory first: the kernels read them
    // (block tables per key tile, rotation tables per row) at device latency, not across the bus.
    const auto mirror = [&](size_t offset, size_t bytes) {
      const auto words = static_cast<uint32_t>(bytes / 4), at = static_cast<uint32_t>(offset / 4);
      vk::copy_rows(ctx_, rec, View{res_.step_host}, View{res_.step_dev}, 1, 0, words, at, words, 1, words, words, at);
    };
    mirror(0, parts.size() * plan_.header_stride);
    mirror(plan_.tokens_offset, static_cast<size_t>(n_tok) * 4);
    for (const RopeTable& r : plan_.ropes) mirror(r.offset, static_cast<size_t>(r.n_rot) * n_tok * 4);
    tr.full();
    std::vector<int64_t> rows(g_.tensors.size(), 0);
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      const Node& node = g_.nodes[i];
      if (done_[i] || plan_.skip[i]) {  // recorded by a dispatch of a node before it, or by the rotation after it
        rows[static_cast<size_t>(node.out)] = step_rows(node, n_tok, rows);
        continue;
      }
      rows[static_cast<size_t>(node.out)] = emit(rec, tr, node, i, n_tok, rows);
      if (down_later_) {
        // A mixture left its down product for after the nodes that read only its input (moe_early):
        // those first, beside its gate and up products, then the down product. Of them, those that
        // read nothing but the mixture's input go first (a shared expert's gate product, before its
        // down product; the plan keeps what they all read or write alive until the last of them).
        const size_t last = i + static_cast<size_t>(plan_.moe_early[i]);
        const auto first = [&](const Node& n) {
          return std::all_of(n.in.begin(), n.in.end(),
                             [&](TensorId t) { return g_.tensor(t).kind != graph::TensorKind::Act || t == node.in[0]; });
        };
        for (const bool pass : {true, false}) {
          for (size_t j = i + 1; j <= last; ++j) {
            const Node& early = g_.nodes[j];
            if (first(early) != pass) continue;
            rows[static_cast<size_t>(early.out)] =
                done_[j] || plan_.skip[j] ? step_rows(early, n_tok, rows) : emit(rec, tr, early, j, n_tok, rows);
            done_[j] = true;
          }
        }
        const auto down = std::move(down_later_);
        down_later_ = nullptr;
        down(rec, tr);
      }
    }
    out.logit_rows = rows[static_cast<size_t>(g_.logits)];
    if (g_.hidden >= 0) out.hidden_rows = copy_hidden(tr, rec, rows[static_cast<size_t>(g_.hidden)], n_tok);
    out.rows = rows;
    out.argmax_rows = std::move(recorded_argmax_rows_);
    recorded_argmax_rows_.clear();
    rec.finish();
    parts_ = nullptr;
    return out;
  }

 private:
  // Hazard tracking: the ranges written and read since the last barrier.
  struct Range {
    VkBuffer buffer;
    size_t lo, hi;
  };
  static bool overlaps(const std::vector<Range>& set, const Range& r) {
    return std::any_of(set.begin(), set.end(), [&](const Range& s) { return s.buffer == r.buffer && s.lo < r.hi && r.lo < s.hi; });
  }
  // For a fused dispatch: whether two views share memory, and whether they share it other than element
  // for element (an invocation reading its element before writing it is fine; anything else is not).
  static bool shares(const View& a, const View& b) {
    return a.buffer == b.buffer && a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes;
  }
  static bool clashes(const View& a, const View& b) { return shares(a, b) && a.offset != b.offset; }

  class Tracker {
   public:
    explicit Tracker(vk::Recording& rec) : rec_(rec) {}
    // Before an op that reads `reads` and writes `writes` (empty views: none).
    void before(std::initializer_list<View> reads, std::initializer_list<View> writes) {
      bool need = false;
      for (const View& v : reads) need = need || (v.buffer && overlaps(written_, range(v)));
      for (const View& v : writes) need = need || (v.buffer && (overlaps(written_, range(v)) || overlaps(read_, range(v))));
      if (need) {
        rec_.barrier();
        written_.clear();
        read_.clear();
      }
      for (const View& v : reads) {
        if (v.buffer) read_.push_back(range(v));
      }
      for (const View& v : writes) {
        if (v.buffer) written_.push_back(range(v));
      }
    }
    // Inside an op: a dependent dispatch follows.
    void full() {
      rec_.barrier();
      written_.clear();
      read_.clear();
    }

   private:
    static Range range(const View& v) {
      return {v.buffer->buffer, v.offset, v.bytes > 0 ? v.offset + v.bytes : v.buffer->size};
    }
    vk::Recording& rec_;
    std::vector<Range> written_, read_;
  };

  View act(TensorId id, int64_t rows) const { return activation_view(g_, plan_, res_, id, rows); }
  // Part p's header in the step buffer: {n_past, n_tokens, 0, 0}, then its sequence's block table.
  View header(size_t p) const {
    return View{res_.step_dev, p * plan_.header_stride, 16 + 4 * static_cast<size_t>(plan_.blocks_per_seq)};
  }
  // The rows of `v` (an activation of tensor t) that part p holds.
  View part_rows(View v, TensorId t, const Part& p) const {
    const size_t row = static_cast<size_t>(g_.tensor(t).ne[0]) * 4;
    return View{v.buffer, v.offset + p.row * row, p.n * row};
  }
  // Sequence `seq`'s recurrent state of node i.
  View state(size_t i, int32_t seq) const {
    return View{res_.state[i], static_cast<size_t>(seq) * plan_.state_seq_bytes[i], plan_.state_seq_bytes[i]};
  }
  // Where node i writes the states after each token of part p (nowhere unless the part keeps them).
  Kept kept(size_t i, const Part& p) const {
    if (!p.keep) return {};
    const size_t region = plan_.state_seq_bytes[i], per_seq = region * static_cast<size_t>(opts_.kept_states);
    if (i >= res_.kept.size() || !res_.kept[i] || p.n > static_cast<uint32_t>(opts_.kept_states)) {
      throw Error("Vulkan: a step keeps more recurrent states than the context has room for");
    }
    return {View{res_.kept[i], static_cast<size_t>(p.seq) * per_seq, per_seq}, static_cast<uint32_t>(region)};
  }

  // The graph's `hidden` rows into the host buffer, in token order without the padding between parts
  // (a tensor of every token's row holds n_tok rows, padding included; one after SelectLast is compact
  // already). Returns the rows copied.
  int64_t copy_hidden(Tracker& tr, vk::Recording& rec, int64_t rows, uint32_t n_tok) {
    const auto width = static_cast<uint32_t>(g_.tensor(g_.hidden).ne[0]);
    const View from = act(g_.hidden, rows), to{res_.hidden, 0, static_cast<size_t>(rows) * width * 4};
    tr.before({from}, {to});
    if (rows != static_cast<int64_t>(n_tok)) {
      vk::copy_rows(ctx_, rec, from, to, static_cast<uint32_t>(rows), 0, width, 0, width, 1, width, width, 0);
      return rows;
    }
    uint32_t at = 0;
    for (const Part& p : *parts_) {
      vk::copy_rows(ctx_, rec, from, to, p.n, p.row, width, 0, width, 1, width, width, at * width);
      at += p.n;
    }
    return at;
  }

  // The rows a node's output holds in a step of n_tok tokens (SelectLast: see emit).
  int64_t step_rows(const Node& node, uint32_t n_tok, const std::vector<int64_t>& rows) const {
    if (node.op == Op::MatMul) return rows[static_cast<size_t>(node.in[1])];
    if (node.op != Op::Embed && !node.in.empty() && g_.tensor(node.in[0]).kind == TensorKind::Act) {
      return rows[static_cast<size_t>(node.in[0])];
    }
    return n_tok;
  }

  // Records one node; returns the rows its output holds.
  int64_t emit(vk::Recording& rec, Tracker& tr, const Node& node, size_t index, uint32_t n_tok,
               const std::vector<int64_t>& rows) {
    const auto width = static_cast<uint32_t>(g_.tensor(node.out).ne[0]);
    const auto in_rows = [&](size_t k) { return rows[static_cast<size_t>(node.in[k])]; };
    const std::vector<Part>& parts = *parts_;
    int64_t n = step_rows(node, n_tok, rows);
    if (node.op == Op::SelectLast) {  // each part's last row, or all its rows
      n = 0;
      for (const Part& p : parts) n += p.all ? p.n : 1;
    }
    const auto nu = static_cast<uint32_t>(n);
    const View out = act(node.out, n);
    const auto in = [&](size_t k) { return act(node.in[k], in_rows(k)); };
    if (deferred_.active && node.op != Op::MoE && reads(node, deferred_.y) && !takes_scale(node)) materialize(rec, tr);
    switch (node.op) {
      case Op::Embed: {
        const auto& wt = g_.tensor(node.in[0]);
        const View ids{res_.step_dev, plan_.tokens_offset, static_cast<size_t>(n_tok) * 4};
        tr.before({ids}, {out});
        vk::get_rows(ctx_, rec, wt.type, w_.raw(node.in[0]), ids, out, static_cast<uint32_t>(wt.ne[0]), n_tok, node.embed().scale);
        break;
      }
      case Op::RmsNorm: {
        const View w = node.in.size() > 1 ? w_.f32(node.in[1]) : View{};
        const uint32_t group = node.norm().group > 0 ? static_cast<uint32_t>(node.norm().group) : width;
        if (group == width && vk::rms_norm_row_fits(width)) {
          const View xq = q8k_out(node.out, width, nu);
          const View q8 = xq.buffer ? View{} : q8_out(node.out, width, nu, vk::rms_norm_row_q8_fits(ctx_, width));
          tr.before({in(0)}, {out, xq, q8});
          vk::rms_norm_row(ctx_, rec, in(0), View{}, View{}, w, out, xq, width, nu, node.norm().eps, node.norm().offset, q8,
                           q8_format_);
          break;
        }
        if (norm_glu(rec, tr, index, in(0), w, out, width, group, nu, rows)) break;
        tr.before({in(0)}, {out});
        vk::rms_norm(ctx_, rec, in(0), w, out, width, group, nu, node.norm().eps, node.norm().offset);
        break;
      }
      case Op::MatMul: {
        const View split_codes = router_base(rec, tr, node, index, rows, nu);
        if (norm_tails_ && plan_.mm_norm[index] >= 0 && norm_product(rec, tr, node, index, rows)) {
        } else if (gated_.active && gated_.down == index && gated_down(rec, tr, node)) {
        } else if (dense_glu(rec, tr, index, rows, nu)) {
        } else if (plan_.mm_row_norm[index] >= 0 && row_norm_product(rec, tr, node, index, in(1), out, nu)) {
        } else if (tails_ && (plan_.mm_rope[index] >= 0 || plan_.mm_vstore[index] >= 0)) {
          tail_product(rec, tr, node, index, in(1), out);
        } else if (one_plain_ && plan_.mm_conv[index] >= 0) {
          conv_product(rec, tr, node, index, in(1));
        } else {
          matmul(rec, tr, node, in(1), out, nu);
        }
        if (split_codes.buffer) router_slots(rec, tr, index, split_codes, nu);
        break;
      }
      case Op::Add: case Op::Mul:
        if (node.op == Op::Add && add_norm(rec, tr, index, in(0), in(1), out, width, nu)) break;
        tr.before({in(0), in(1)}, {out});
        vk::eltwise(ctx_, rec, node.op == Op::Add ? vk::Eltwise::Add : vk::Eltwise::Mul, in(0), in(1), out, width, width, nu);
        break;
      case Op::Rope: {
        const auto& r = plan_.ropes[static_cast<size_t>(plan_.rope_index(node))];
        const View cs{res_.step_dev, r.offset, static_cast<size_t>(r.n_rot) * n_tok * 4};
        // (In place where a one-token step's product rotates it (plan_tails): rope_heads stages each
        // head before it writes, rope.comp would read partners already rotated.)
        const bool in_place = in(0).buffer == out.buffer && in(0).offset == out.offset;
        if (plan_.rope_norm[index] >= 0 || (plan_.rope_store[index] >= 0 && !multi_) || in_place) {
          rope_heads(rec, tr, node, index, cs, out, rows, nu);
          break;
        }
        tr.before({in(0), cs}, {out});
        const graph::RopeOpParams& rp = node.rope();
        vk::rope(ctx_, rec, in(0), cs, out, static_cast<uint32_t>(rp.n_head), static_cast<uint32_t>(rp.head_dim),
                 static_cast<uint32_t>(rp.n_rot), rp.mode == graph::RopeMode::NeoX, nu);
        break;
      }
      case Op::Attention: {
        const auto l = static_cast<size_t>(node.layer);
        const auto kw = static_cast<uint32_t>(g_.kv_width_of(node.layer));
        if (!plan_.kv_stored[index] || multi_) {  // else appended by the k rotation
          for (size_t pi = 0; pi < parts.size(); ++pi) {
            const Part& p = parts[pi];
            const View k = part_rows(in(1), node.in[1], p), v = part_rows(in(2), node.in[2], p);
            // Parts write disjoint rows (blocks a sequence holds alone once prepared): no barrier
            // between them.
            const View kc{res_.k[l]}, vc{res_.v[l]};
            if (pi == 0) tr.before({k, v, header(pi)}, {kc, vc});
            else tr.before({k, v, header(pi)}, {});
            vk::kv_store(ctx_, rec, plan_.kv_type, k, v, kc, vc, header(pi), kw, p.n);
          }
          tr.full();
        }
        // Each part over its own sequence's cache. One part: the whole op. Several: a one-token part
        // has a scratch slot of its own, so every such part's key-range pass is recorded, then one
        // barrier, then every one's merge; a longer part does the whole op in the scratch past the
        // slots (the tracker orders them).
        const graph::AttentionParams& ap = node.attention();
        const auto args = [&](size_t pi) {
          const Part& p = parts[pi];
          vk::AttentionArgs a;
          a.type = plan_.kv_type;
          a.q = part_rows(in(0), node.in[0], p);
          a.k_cache = View{res_.k[l]};
          a.v_cache = View{res_.v[l]};
          a.sinks = node.in.size() > 3 ? w_.f32(node.in[3]) : View{};
          a.step = header(pi);
          a.out = part_rows(out, node.out, p);
          const size_t slots = multi_ ? plan_.attn_slot_bytes * static_cast<size_t>(opts_.n_seq) : 0;
          a.scratch = multi_ && p.n == 1 ? View{res_.attn_scratch, pi * plan_.attn_slot_bytes, plan_.attn_slot_bytes}
                                         : View{res_.attn_scratch, slots, res_.attn_scratch->size - slots};
          a.n_head = static_cast<uint32_t>(ap.n_head);
          a.n_head_kv = static_cast<uint32_t>(ap.n_head_kv);
          a.head_dim = static_cast<uint32_t>(ap.head_dim);
          a.n_tokens = p.n;
          a.n_ctx = static_cast<uint32_t>(opts_.n_ctx);
          a.max_keys = p.max_keys;
          a.sliding_window = static_cast<uint32_t>(std::max(0, ap.sliding_window));
          a.scale = ap.scale;
          a.softcap = ap.softcap;
          return a;
        };
        if (!multi_) {
          vk::AttentionArgs a = args(0);
          if (vk::attention_q8k_fits(ctx_, a.n_head, a.head_dim)) a.xq = q8k_out(node.out, width, nu);  // o_proj's codes
          if (!a.xq.buffer) {  // or the 32-element formats'
            a.q8 = q8_out(node.out, width, nu, vk::attention_q8_fits(ctx_, a));
            a.q8_format = q8_format_;
          }
          tr.before({a.q, a.k_cache, a.v_cache, a.step}, {a.out, a.scratch, a.xq, a.q8});
          vk::attention(ctx_, rec, a);
          break;
        }
        for (size_t pi = 0; pi < parts.size(); ++pi) {
          vk::AttentionArgs a = args(pi);
          a.phase = parts[pi].n == 1 ? 1 : 0;
          tr.before({a.q, a.k_cache, a.v_cache, a.step}, {a.out, a.scratch});
          vk::attention(ctx_, rec, a);
          if (a.phase == 0) tr.full();  // its merge read the scratch after a barrier of its own
        }
        tr.full();
        for (size_t pi = 0; pi < parts.size(); ++pi) {
          if (parts[pi].n != 1) continue;
          vk::AttentionArgs a = args(pi);
          a.phase = 2;
          tr.before({a.scratch}, {a.out});
          vk::attention(ctx_, rec, a);
        }
        break;
      }
      case Op::SwiGLU: case Op::GeGLU: {
        const View xq = width % 256 == 0 ? q8k_out(node.out, width, nu) : View{};  // the down projection's codes
        const View q8 = xq.buffer ? View{} : q8_out(node.out, width, nu, vk::eltwise_q8_fits(ctx_, width));
        tr.before({in(0), in(1)}, {out, xq, q8});
        vk::eltwise(ctx_, rec, node.op == Op::SwiGLU ? vk::Eltwise::SwiGLU : vk::Eltwise::GeGLU, in(0), in(1), out, width,
                    width, nu, false, 0, 0, xq, q8, q8_format_);
        break;
      }
      case Op::Softcap:
        tr.before({in(0)}, {out});
        vk::eltwise(ctx_, rec, vk::Eltwise::Softcap, in(0), View{}, out, width, width, nu, false, node.softcap().cap);
        break;
      case Op::SigmoidMul: {
        const auto bw = static_cast<uint32_t>(g_.tensor(node.in[1]).ne[0]);
        if (gate_add_norm(rec, tr, index, in(0), in(1), bw, nu, rows)) break;
        if (sigmoid_mul_add(rec, tr, index, in(0), in(1), out, width, bw, nu, rows)) break;
        // (the codes of a K-quant product reading it, in this dispatch: an attention's output gate's, o's)
        const View xq = width % 256 == 0 ? q8k_out(node.out, width, nu) : View{};
        tr.before({in(0), in(1)}, {out, xq});
        vk::eltwise(ctx_, rec, vk::Eltwise::SigmoidMul, in(0), in(1), out, width, bw, nu, false, 0, 0, xq);
        break;
      }
      case Op::Scale: {
        const auto& st = g_.tensor(node.in[1]);
        const bool one = st.ne[0] * st.ne[1] * st.ne[2] * st.ne[3] == 1;
        tr.before({in(0)}, {out});
        vk::eltwise(ctx_, rec, vk::Eltwise::Mul, in(0), w_.f32(node.in[1]), out, width, one ? 1u : width, nu, true);
        break;
      }
      case Op::Split: {
        const auto in_w = static_cast<uint32_t>(g_.tensor(node.in[0]).ne[0]);
        const auto piece = width / static_cast<uint32_t>(node.split().n_groups);
        tr.before({in(0)}, {out});
        vk::copy_rows(ctx_, rec, in(0), out, nu, 0, in_w, static_cast<uint32_t>(node.split().offset),
                      static_cast<uint32_t>(node.split().stride), static_cast<uint32_t>(node.split().n_groups), piece, width, 0);
        break;
      }
      case Op::Concat: {
        uint32_t at = 0;
        for (size_t k = 0; k < node.in.size(); ++k) {
          const auto pw = static_cast<uint32_t>(g_.tensor(node.in[k]).ne[0]);
          tr.before({in(k)}, {out});
          vk::copy_rows(ctx_, rec, in(k), out, nu, 0, pw, 0, pw, 1, pw, width, at);
          at += pw;
        }
        break;
      }
      case Op::Input: {  // the rows the host wrote into the step buffer, padding rows included
        const View rows_in{res_.step_host, plan_.inputs_offset, static_cast<size_t>(n_tok) * width * 4};
        tr.before({rows_in}, {out});
        vk::copy_rows(ctx_, rec, rows_in, out, n_tok, 0, width, 0, width, 1, width, width, 0);
        break;
      }
      case Op::SelectLast: {
        tr.before({in(0)}, {out});
        uint32_t at = 0;  // rows written (the parts write disjoint rows)
        for (const Part& p : parts) {
          const uint32_t take = p.all ? p.n : 1;
          vk::copy_rows(ctx_, rec, in(0), out, take, p.row + p.n - take, width, 0, width, 1, width, width, at * width);
          at += take;
        }
        break;
      }
      case Op::SsmConv: {  // each part through its own sequence's state
        const auto& wt = g_.tensor(node.in[1]);
        for (const Part& p : parts) {
          const View st = state(index, p.seq), x = part_rows(in(0), node.in[0], p), y = part_rows(out, node.out, p);
          const Kept kp = kept(index, p);
          tr.before({x, st}, {y, st, kp.stride_bytes > 0 ? kp.view : st});
          vk::ssm_conv(ctx_, rec, x, w_.f32(node.in[1]), st, y, width, static_cast<uint32_t>(wt.ne[0]), p.n, kp);
        }
        break;
      }
      case Op::DeltaNet: {
        // q, k and v straight from the conv's rows when the plan skipped their splits, in decode-sized
        // steps; a prompt's are split here first (its many tokens run faster over dense rows: H200,
        // qwen3.6-35b-a3b pp512 2% slower without).
        const Plan::DeltaQkv& dq = plan_.delta_qkv[index];
        const bool from_src = dq.src >= 0 && n <= kMvMaxTokens;
        vk::DeltaNetRows qkv_rows;
        if (dq.src >= 0) {
          const auto w = static_cast<uint32_t>(g_.tensor(dq.src).ne[0]);
          const View src = act(dq.src, rows[static_cast<size_t>(dq.src)]);
          if (from_src) {
            qkv_rows = {w, w, dq.off[0], dq.off[1], dq.off[2]};
          } else {
            for (size_t k = 0; k < 3; ++k) {
              const auto piece = static_cast<uint32_t>(g_.tensor(node.in[k]).ne[0]);
              tr.before({src}, {in(k)});
              vk::copy_rows(ctx_, rec, src, in(k), nu, 0, w, dq.off[k], w, 1, piece, piece, 0);
            }
          }
        }
        if (one_plain_ && plan_.delta_norm_glu[index] && res_.delta_count &&
            delta_norm(rec, tr, node, index, from_src ? act(dq.src, rows[static_cast<size_t>(dq.src)]) : View{}, qkv_rows, out)) {
          break;
        }
        for (const Part& p : parts) {
          const View st = state(index, p.seq), y = part_rows(out, node.out, p);
          const auto x = [&](size_t k) {
            return k < 3 && from_src ? part_rows(act(dq.src, rows[static_cast<size_t>(dq.src)]), dq.src, p)
                                     : part_rows(in(k), node.in[k], p);
          };
          const Kept kp = kept(index, p);
          tr.before({x(0), x(1), x(2), x(3), x(4), st}, {y, st, kp.stride_bytes > 0 ? kp.view : st});
          vk::delta_net(ctx_, rec, x(0), x(1), x(2), x(3), x(4), w_.f32(node.in[5]), w_.f32(node.in[6]), st, y,
                        static_cast<uint32_t>(node.delta_net().n_head_k), static_cast<uint32_t>(node.delta_net().n_head_v),
                        static_cast<uint32_t>(node.delta_net().dk), static_cast<uint32_t>(node.delta_net().dv), node.delta_net().tiled_heads, p.n, kp,
                        qkv_rows);
        }
        break;
      }
      case Op::MoE:
        moe(rec, tr, node, index, rows, out, nu);
        break;
    }
    // Greedy decoding reads one id per sequence: the argmax of its last logits row, on the device.
    if (node.out == g_.logits) {
      const auto nv = static_cast<size_t>(g_.tensor(g_.logits).ne[0]);
      int64_t row = -1;
      for (size_t k = 0; k < parts.size(); ++k) {
        row += parts[k].all ? parts[k].n : 1;
        const View last{res_.logits, static_cast<size_t>(row) * nv * 4, nv * 4}, id{res_.argmax, k * plan_.align, 4};
        const View scratch{res_.argmax_scratch, k * plan_.argmax_scratch_bytes, plan_.argmax_scratch_bytes};
        tr.before({last}, {id, scratch});
        vk::argmax(ctx_, rec, last, id, scratch, static_cast<uint32_t>(nv));
        recorded_argmax_rows_.push_back(row);
      }
    }
    return n;
  }

  // A rotation with the norm before it and the cache append after it (plan_fusions).
  void rope_heads(vk::Recording& rec, Tracker& tr, const Node& node, size_t index, View cs, View out,
                  const std::vector<int64_t>& rows, uint32_t n) {
    vk::RopeHeadsArgs a;
    const graph::RopeOpParams& rp = node.rope();
    const auto act_of = [&](TensorId t) { return act(t, rows[static_cast<size_t>(t)]); };
    a.x = act_of(node.in[0]);
    a.cs = cs;
    a.y = out;
    a.n_head = static_cast<uint32_t>(rp.n_head);
    a.head_dim = static_cast<uint32_t>(rp.head_dim);
    a.n_rot = static_cast<uint32_t>(rp.n_rot);
    a.n_tokens = n;
    a.neox = rp.mode == graph::RopeMode::NeoX;
    if (plan_.rope_norm[index] >= 0) {
      const Node& norm = g_.nodes[static_cast<size_t>(plan_.rope_norm[index])];
      a.x = act_of(norm.in[0]);
      a.norm = true;
      a.norm_w = norm.in.size() > 1 ? w_.f32(norm.in[1]) : View{};
      a.eps = norm.norm().eps;
      a.offset = norm.norm().offset;
    }
    View kc, vc;
    if (plan_.rope_store[index] >= 0 && !multi_) {  // one sequence: its cache rows
      const Node& at = g_.nodes[static_cast<size_t>(plan_.rope_store[index])];
      const auto l = static_cast<size_t>(at.layer);
      kc = View{res_.k[l]};
      vc = View{res_.v[l]};
      a.store = true;
      a.type = plan_.kv_type;
      a.v = act_of(at.in[2]);
      a.k_cache = kc;
      a.v_cache = vc;
      a.step = header(0);
    }
    tr.before({a.x, cs, a.v, a.step}, {out, kc, vc});
    vk::rope_heads(ctx_, rec, a);
  }

  // Where the K-quant products of a step read `t` (its rows quantized by the op that writes it, q8k_of_
  // set): the region of the Q8_K scratch for its codes. Else an empty view.
  View q8k_out(TensorId t, uint32_t width, uint32_t n) {
    if (!plan_.q8k_input[static_cast<size_t>(t)] || n > kDirectMaxTokens) return View{};
    q8k_of_ = t;
    q8k_at_ = q8k_view(width, n);
    return q8k_at_;
  }

  View q8k_view(uint32_t width, uint32_t n) const { return View{res_.act_q8k, 0, vk::q8k_row_bytes(width) * n}; }

  // Whether the 32-element formats' activation codes in decode come from the kernel that writes the
  // products' input (ZINC_VULKAN_NORM_Q8=0: from quantize_q8 dispatches of their own, for measurements).
  static bool codes_from_producer() { return knob_u32("ZINC_VULKAN_NORM_Q8", 1, 0, 1) == 1; }

  // Where the 32-element formats' products of a step read `t` (their activation codes written by the
  // norm or activation that writes t, where `fits` says its kernel can; q8_of_ and q8_format_ set): the
  // region of act_q8 for its codes. Else empty.
  View q8_out(TensorId t, uint32_t width, uint32_t n, bool fits) {
    const int8_t format = plan_.q8_input[static_cast<size_t>(t)];
    if (format < 0 || n > kMvMaxTokens || !fits || !codes_from_producer()) return View{};
    q8_of_ = t;
    q8_format_ = static_cast<uint32_t>(format);
    return View{res_.act_q8, 0, vk::mul_mv_q8_bytes(width) * n};
  }

  // The codes of t (rows x) for a product of the 32-element formats of `type`: quantized here unless
  // the scratch holds t's codes in that activation format already.
  View q8_codes(vk::Recording& rec, Tracker& tr, gguf::TensorType type, TensorId t, View x, uint32_t width, uint32_t n) {
    const View xq{res_.act_q8, 0, vk::mul_mv_q8_bytes(width) * n};
    const uint32_t format = vk::q8_act_format(type);
    if (q8_of_ != t || q8_format_ != format) {
      tr.before({x}, {xq});
      vk::quantize_q8_act(ctx_, rec, type, x, xq, width, n);
      q8_of_ = t;
      q8_format_ = format;
    }
    return xq;
  }

  // The codes of t (rows x) for a K-quant product: those its producer wrote, else quantized here (a
  // norm left to its readers written first: its rows were not).
  View q8k_codes(vk::Recording& rec, Tracker& tr, TensorId t, View x, uint32_t width, uint32_t n) {
    if (q8k_of_ != t && deferred_.active && deferred_.y == t) materialize(rec, tr);
    if (q8k_of_ != t) {
      tr.before({x}, {q8k_view(width, n)});
      vk::quantize_q8k(ctx_, rec, x, q8k_view(width, n), width, n);
      q8k_of_ = t;
      q8k_at_ = q8k_view(width, n);
    }
    return q8k_at_;
  }

  // --- A residual add and whole-row norm left to the readers of the norm (Plan::mm_norm) ---

  static bool reads(const Node& node, TensorId t) { return std::find(node.in.begin(), node.in.end(), t) != node.in.end(); }

  // The scale of the norm whose unscaled codes the Q8_K scratch holds for t (none: empty).
  vk::NormScale scale_of(TensorId t) const {
    return deferred_.active && deferred_.y == t && q8k_of_ == t ? deferred_.ns : vk::NormScale{};
  }

  // Whether node (not a MoE: moe() decides) reads the deferred norm through its scale: a K-quant
  // product on its codes, or a float weight's on the residual sum.
  bool takes_scale(const Node& node) const {
    if (node.op != Op::MatMul || node.in[1] != deferred_.y || node.in[0] == deferred_.y) return false;
    const auto& wt = g_.tensor(node.in[0]);
    const auto ncols = static_cast<uint32_t>(wt.ne[0]);
    return (vk::has_mul_mv_k(ctx_, wt.type) && ncols % 256 == 0 && !vk::has_mul_mv_q8(wt.type)) ||
           vk::mul_mv_norm_fits(wt.type, ncols);
  }

  // The deferred norm's rows (and codes) written by the norm's own kernel from the residual sum, for a
  // reader that takes rows: the norm is no longer left to anyone.
  void materialize(vk::Recording& rec, Tracker& tr) {
    if (!deferred_.active) return;
    deferred_.active = false;
    const TensorId t = deferred_.y;
    const uint32_t width = deferred_.width, n = deferred_.rows;
    const View y = act(t, n);
    const View xq = q8k_out(t, width, n);
    const View q8 = xq.buffer ? View{} : q8_out(t, width, n, vk::rms_norm_row_q8_fits(ctx_, width));
    if (!xq.buffer && q8k_of_ == t) q8k_of_ = -1;  // (the unscaled codes are no codes of t)
    tr.before({deferred_.h}, {y, xq, q8});
    vk::rms_norm_row(ctx_, rec, deferred_.h, View{}, View{}, deferred_.ns.weights, y, xq, width, n, deferred_.ns.eps,
                     deferred_.ns.offset, q8, q8_format_);
  }

  // The residual add after node `index` and the norm after that, as the product records them.
  struct NormTail {
    TensorId y = -1;
    View res, h, codes, count;
    vk::NormScale ns;
    uint32_t width = 0;
  };
  bool norm_tail(size_t index, const std::vector<int64_t>& rows, NormTail& nt) const {
    const Node& add = g_.nodes[index + 1];
    const Node& norm = g_.nodes[static_cast<size_t>(plan_.mm_norm[index])];
    const TensorId r = add.in[0] == g_.nodes[index].out ? add.in[1] : add.in[0];
    if (rows[static_cast<size_t>(r)] != 1) return false;
    nt.width = static_cast<uint32_t>(g_.tensor(add.out).ne[0]);
    nt.res = act(r, 1);
    nt.h = act(add.out, 1);
    if (clashes(nt.res, nt.h)) return false;
    tail_views(nt, norm);
    return true;
  }
  // A one-token norm tail's output (nt.width wide): the norm's codes, counters, partial sums and scale.
  void tail_views(NormTail& nt, const Node& norm) const {
    const uint32_t blocks = nt.width / 256;
    nt.y = norm.out;
    nt.codes = View{res_.act_q8k, plan_.norm_codes_offset, vk::q8k_row_bytes(nt.width)};
    nt.count = View{res_.norm_tail, 0, size_t{4} * blocks};
    nt.ns = factored_scale(norm, norm.in.size() > 1 ? w_.f32(norm.in[1]) : View{}, nt.width, 1);
  }
  // After the product: the add and the norm recorded, the norm left to its readers.
  void norm_tail_done(size_t index, const NormTail& nt) {
    done_[index + 1] = true;
    done_[static_cast<size_t>(plan_.mm_norm[index])] = true;
    defer_norm(nt);
  }
  // The scale of a norm (weights w) that rms_norm_row's factored form leaves to its readers in a
  // decode-sized step of n rows: its partial sums where the one-token tails put theirs.
  vk::NormScale factored_scale(const Node& norm, View w, uint32_t width, uint32_t n) const {
    vk::NormScale ns;
    ns.partials = View{res_.norm_tail, size_t{4} * plan_.norm_blocks, size_t{4} * (width / 256) * n};
    ns.weights = w;
    ns.blocks = width / 256;
    ns.eps = norm.norm().eps;
    ns.offset = norm.norm().offset;
    return ns;
  }
  // A one-token norm tail's norm left to its readers, its unscaled codes where the tail wrote them.
  void defer_norm(const NormTail& nt) {
    deferred_ = Deferred{nt.y, nt.h, nt.ns, nt.width, 1, true};
    q8k_of_ = nt.y;
    q8k_at_ = nt.codes;
  }

  // A MatMul with the residual add and norm after it (Plan::mm_norm); false where this step cannot.
  bool norm_product(vk::Recording& rec, Tracker& tr, const Node& node, size_t index, const std::vector<int64_t>& rows) {
    NormTail nt;
    if (rows[static_cast<size_t>(node.in[1])] != 1 || !norm_tail(index, rows, nt)) return false;
    const auto& wt = g_.tensor(node.in[0]);
    const auto ncols = static_cast<uint32_t>(wt.ne[0]);
    if (deferred_.active && deferred_.y == node.in[1]) materialize(rec, tr);  // (reads a norm left to it: rows)
    const View xq = q8k_codes(rec, tr, node.in[1], act(node.in[1], 1), ncols, 1);
    tr.before({xq, nt.res}, {nt.h, nt.codes, nt.count, nt.ns.partials});
    vk::mul_mv_k_norm(ctx_, rec, wt.type, w_.raw(node.in[0]), xq, nt.h, ncols, nt.width,
                      vk::MulMvKNorm{nt.res, nt.ns.weights, nt.codes, nt.count, nt.ns.partials, nt.ns.offset});
    norm_tail_done(index, nt);
    return true;
  }

  // A gate followed by an add of its output to another row of its width (a shared expert's gated output
  // added to the experts'): one dispatch for both, the add node then skipped. Not where that add would
  // take the norm after it (add_norm), nor where the sum overlaps the per-row gate or another row of a
  // row-wise input (element for element in place is fine: each invocation reads its element first).
  bool sigmoid_mul_add(vk::Recording& rec, Tracker& tr, size_t index, View a, View b, View out, uint32_t width, uint32_t bw,
                       uint32_t n, const std::vector<int64_t>& rows) {
    if (!vk::gate_then_add(g_, index) || knob_u32("ZINC_VULKAN_GATE_ADD", 1, 0, 1) == 0) return false;
    const Node& add = g_.nodes[index + 1];
    const TensorId me = g_.nodes[index].out;
    const TensorId other = add.in[0] == me ? add.in[1] : add.in[0];
    if (rows[static_cast<size_t>(other)] != static_cast<int64_t>(n)) return false;
    const View c = act(other, n), sum = act(add.out, n);
    if (clashes(a, sum) || shares(b, sum) || clashes(out, sum) || clashes(c, sum)) return false;
    tr.before({a, b, c}, {out, sum});
    vk::sigmoid_mul_add(ctx_, rec, a, b, c, out, sum, width, bw, n);
    done_[index + 1] = true;
    return true;
  }

  // Two K-quant products of the same rows and the SwiGLU of theirs (Plan::dense_glu) in a decode-sized
  // step: one dispatch of the experts' GLU kernel as a single expert (ids all 0), which also writes the
  // down product's codes (at glu_codes_offset: x's codes stay where they are). The next two nodes are
  // then skipped. False where the step is longer.
  bool dense_glu(vk::Recording& rec, Tracker& tr, size_t index, const std::vector<int64_t>& rows, uint32_t n) {
    if (!plan_.dense_glu[index] || n > kMvMaxTokens || !res_.glu_count) return false;
    const Node &a = g_.nodes[index], &glu = g_.nodes[index + 2];
    const Node& up = g_.nodes[glu.in[1] == a.out ? index : index + 1];
    const Node& gate = g_.nodes[glu.in[0] == a.out ? index : index + 1];
    const TensorId x_id = a.in[1];
    if (rows[static_cast<size_t>(x_id)] != static_cast<int64_t>(n)) return false;
    const auto& wt = g_.tensor(a.in[0]);
    const auto d = static_cast<uint32_t>(wt.ne[0]), ff = static_cast<uint32_t>(wt.ne[1]);
    const View xq = q8k_codes(rec, tr, x_id, act(x_id, n), d, n);
    const vk::NormScale ns = scale_of(x_id);
    const View ids{res_.glu_count, 0, size_t{4} * kMvMaxTokens};
    const View count{res_.glu_count, size_t{4} * kMvMaxTokens, res_.glu_count->size - size_t{4} * kMvMaxTokens};
    const View out = act(glu.out, n), codes{res_.act_q8k, plan_.glu_codes_offset, vk::q8k_row_bytes(ff) * n};
    tr.before({xq, ids, ns.partials}, {out, codes, count});
    vk::mul_mv_k_id_glu(ctx_, rec, wt.type, w_.raw(gate.in[0]), w_.raw(up.in[0]), ids, xq, out, codes, count, d, ff, 1, 1, n, ns);
    done_[index + 1] = done_[index + 2] = true;
    q8k_of_ = glu.out;
    q8k_at_ = codes;
    return true;
  }

  // --- A shared expert's gated add and the norm after it by the two down products (Plan::gated_tail) ---

  struct GatedState {
    bool active = false, down_done = false;
    size_t sig = 0, down = 0;  // the SigmoidMul's node, the shared down product's
    NormTail nt;               // the residual, the sum, the norm's codes, counters and sums
    View shared_part, experts_part, gate;
    uint32_t arrivals = 0;
  };

  // The mixture at `moe` (writing `out`) takes the gated tail of its SigmoidMul: the state both down
  // products record from; false where the rows or the memory do not allow it.
  bool gated_tail(size_t moe, const std::vector<int64_t>& rows, View out, uint32_t ff, uint32_t n_used) {
    const auto sig = static_cast<size_t>(plan_.gated_tail[moe]);
    const Node &sn = g_.nodes[sig], &add1 = g_.nodes[sig + 1], &add2 = g_.nodes[sig + 2], &norm = g_.nodes[sig + 3];
    const TensorId r = add2.in[0] == add1.out ? add2.in[1] : add2.in[0];
    int down = -1;
    for (size_t j = moe + 1; j < sig; ++j) {
      if (g_.nodes[j].out == sn.in[0]) down = static_cast<int>(j);
    }
    if (down < 0 || rows[static_cast<size_t>(r)] != 1 || done_[static_cast<size_t>(down)]) return false;
    GatedState gs;
    gs.sig = sig;
    gs.down = static_cast<size_t>(down);
    NormTail& nt = gs.nt;
    nt.width = static_cast<uint32_t>(g_.tensor(norm.out).ne[0]);
    nt.res = act(r, 1);
    nt.h = act(add2.out, 1);
    gs.shared_part = act(sn.in[0], 1);
    gs.experts_part = out;
    gs.gate = act(sn.in[1], 1);
    for (const View& v : {nt.res, gs.shared_part, gs.experts_part, gs.gate}) {
      if (clashes(v, nt.h)) return false;
    }
    tail_views(nt, norm);
    const auto& dw = g_.tensor(g_.nodes[gs.down].in[0]);
    gs.arrivals = vk::mul_mv_k_norm_groups(dw.type, static_cast<uint32_t>(dw.ne[0]), nt.width) +
                  vk::mul_mv_k_id_combine_norm_groups(ff, n_used);
    gs.active = true;
    gated_ = gs;
    return true;
  }

  // The shared expert's down product of a gated tail (gated_tail), first of the two; false where its
  // input is not the one-token step's codes (the experts' product then records the plain way).
  bool gated_down(vk::Recording& rec, Tracker& tr, const Node& node) {
    const auto& wt = g_.tensor(node.in[0]);
    const auto ncols = static_cast<uint32_t>(wt.ne[0]);
    if (deferred_.active && deferred_.y == node.in[1]) return false;
    const View xq = q8k_codes(rec, tr, node.in[1], act(node.in[1], 1), ncols, 1);
    const NormTail& nt = gated_.nt;
    // This dispatch declares the sum, codes, counters and sums both write; the experts' declares only
    // its part, so no barrier comes between them (neither reads what the other declares).
    tr.before({xq, gated_.gate, nt.res}, {gated_.shared_part, nt.h, nt.codes, nt.count, nt.ns.partials});
    const vk::GatedTail gt{gated_.experts_part, gated_.gate, nt.h, gated_.arrivals, true};
    vk::mul_mv_k_norm(ctx_, rec, wt.type, w_.raw(node.in[0]), xq, gated_.shared_part, ncols, nt.width,
                      vk::MulMvKNorm{nt.res, nt.ns.weights, nt.codes, nt.count, nt.ns.partials, nt.ns.offset}, &gt);
    gated_.down_done = true;
    return true;
  }

  // A gate, the add of its output to a row, that sum's add to the residual and the norm of the result
  // (Plan::gate_norm): one dispatch for all four (rms_norm_row's gated add), the three nodes after the
  // gate then skipped. False where the rows or the memory do not allow it (the plan keeps the inputs
  // apart from the outputs, so the shapes it took record here).
  bool gate_add_norm(vk::Recording& rec, Tracker& tr, size_t index, View a, View gv, uint32_t bw, uint32_t n,
                     const std::vector<int64_t>& rows) {
    if (!plan_.gate_norm[index]) return false;
    const Node &add1 = g_.nodes[index + 1], &add2 = g_.nodes[index + 2], &norm = g_.nodes[index + 3];
    const TensorId e = add1.in[0] == g_.nodes[index].out ? add1.in[1] : add1.in[0];
    const TensorId r = add2.in[0] == add1.out ? add2.in[1] : add2.in[0];
    const auto width = static_cast<uint32_t>(g_.tensor(norm.out).ne[0]);
    for (const TensorId t : {e, r}) {
      if (rows[static_cast<size_t>(t)] != static_cast<int64_t>(n)) return false;
      if (deferred_.active && deferred_.y == t) materialize(rec, tr);  // (a norm left to its readers: its rows)
    }
    const View c = act(e, n), x = act(r, n), sum = act(add2.out, n), y = act(norm.out, n);
    const bool per_row = bw == 1;
    for (const View& out : {sum, y}) {
      if (clashes(a, out) || clashes(c, out) || clashes(x, out) || (per_row ? shares(gv, out) : clashes(gv, out))) return false;
    }
    const View w = norm.in.size() > 1 ? w_.f32(norm.in[1]) : View{};
    const View xq = q8k_out(norm.out, width, n);
    // A gated tail's norm (Plan::gated_tail) where the down products did not take it: in decode-sized
    // steps the same codes and sums as theirs (the factored form), left to the norm's readers.
    if (plan_.gated_tail[index] >= 0 && n <= vk::kMvMaxTokens && xq.buffer && vk::rms_norm_row_factored_fits(ctx_, width)) {
      const vk::NormScale ns = factored_scale(norm, w, width, n);
      tr.before({a, gv, c, x}, {sum, xq, ns.partials});
      vk::rms_norm_row(ctx_, rec, x, c, sum, w, y, xq, width, n, ns.eps, ns.offset, View{}, 0, ns.partials,
                       vk::RowGate{a, gv, per_row});
      for (size_t k = index + 1; k <= index + 3; ++k) done_[k] = true;
      deferred_ = Deferred{norm.out, sum, ns, width, n, true};
      return true;
    }
    const View q8 = xq.buffer ? View{} : q8_out(norm.out, width, n, vk::rms_norm_row_q8_fits(ctx_, width));
    tr.before({a, gv, c, x}, {sum, y, xq, q8});
    vk::rms_norm_row(ctx_, rec, x, c, sum, w, y, xq, width, n, norm.norm().eps, norm.norm().offset, q8, q8_format_, View{},
                     vk::RowGate{a, gv, per_row});
    for (size_t k = index + 1; k <= index + 3; ++k) done_[k] = true;
    return true;
  }

  // A per-head norm followed by the SwiGLU that gates it (a gated DeltaNet's output): one dispatch for
  // both, the SwiGLU node then skipped (the norm's rows are still written). Not where the SwiGLU's
  // output overlaps the norm's input or the gate other than row for row, or the norm's output at all.
  bool norm_glu(vk::Recording& rec, Tracker& tr, size_t index, View x, View w, View y, uint32_t width, uint32_t group, uint32_t n,
                const std::vector<int64_t>& rows) {
    if (index + 1 >= g_.nodes.size() || knob_u32("ZINC_VULKAN_NORM_GLU", 1, 0, 1) == 0) return false;
    const Node& glu = g_.nodes[index + 1];
    const TensorId me = g_.nodes[index].out;
    if (glu.op != Op::SwiGLU || glu.in[1] != me || glu.in[0] == me || !vk::rms_norm_glu_fits(ctx_, width, group)) return false;
    if (g_.tensor(glu.out).ne[0] != width || rows[static_cast<size_t>(glu.in[0])] != static_cast<int64_t>(n)) return false;
    const View z = act(glu.in[0], n), out = act(glu.out, n);
    if (clashes(x, out) || clashes(z, out) || shares(y, out)) return false;
    const View xq = q8k_out(glu.out, width, n);  // the product's codes, where it takes them
    tr.before({x, z}, {y, out, xq});
    const Node& norm = g_.nodes[index];
    vk::rms_norm_glu(ctx_, rec, x, w, z, y, out, xq, width, group, n, norm.norm().eps, norm.norm().offset);
    done_[index + 1] = true;
    return true;
  }

  // A one-token step's DeltaNet with the per-head norm and the SwiGLU after it (Plan::delta_norm_glu)
  // in its dispatch; false where their rows' memory clashes (each then gets its own dispatch).
  bool delta_norm(vk::Recording& rec, Tracker& tr, const Node& node, size_t index, View src, const vk::DeltaNetRows& qkv_rows,
                  View out) {
    const Node &norm = g_.nodes[index + 1], &glu = g_.nodes[index + 2];
    const graph::DeltaNetParams& dp = node.delta_net();
    const auto width = static_cast<uint32_t>(g_.tensor(node.out).ne[0]);
    vk::DeltaNormGlu ng;
    ng.w = norm.in.size() > 1 ? w_.f32(norm.in[1]) : View{};
    ng.z = act(glu.in[0], 1);
    ng.out = act(glu.out, 1);
    if (!src.buffer || clashes(out, ng.out) || clashes(ng.z, ng.out)) return false;
    ng.xq = q8k_out(glu.out, width, 1);
    ng.count = View{res_.delta_count, 0, res_.delta_count->size};
    ng.eps = norm.norm().eps;
    ng.offset = norm.norm().offset;
    const View st = state(index, parts_->front().seq);
    const auto x = [&](size_t k) { return k < 3 ? src : act(node.in[k], 1); };
    tr.before({x(0), x(1), x(2), x(3), x(4), st, ng.z}, {out, st, ng.out, ng.xq, ng.count});
    vk::delta_net(ctx_, rec, x(0), x(1), x(2), x(3), x(4), w_.f32(node.in[5]), w_.f32(node.in[6]), st, out,
                  static_cast<uint32_t>(dp.n_head_k), static_cast<uint32_t>(dp.n_head_v), static_cast<uint32_t>(dp.dk),
                  static_cast<uint32_t>(dp.dv), dp.tiled_heads, 1, {}, qkv_rows, &ng);
    done_[index + 1] = done_[index + 2] = true;
    return true;
  }

  // A residual add followed by the whole-row norm of its sum: one dispatch for both (the norm node is
  // then skipped). Not where the norm's output shares memory with an addend other than row for row.
  bool add_norm(vk::Recording& rec, Tracker& tr, size_t index, View a, View b, View sum, uint32_t width, uint32_t n) {
    if (index + 1 >= g_.nodes.size()) return false;
    const Node& norm = g_.nodes[index + 1];
    if (norm.op != Op::RmsNorm || norm.in[0] != g_.nodes[index].out || norm.norm().group > 0 || !vk::rms_norm_row_fits(width) ||
        a.bytes != sum.bytes || b.bytes != sum.bytes) {
      return false;
    }
    const View y = act(norm.out, n);
    if (clashes(a, y) || clashes(b, y)) return false;
    const View w = norm.in.size() > 1 ? w_.f32(norm.in[1]) : View{};
    // A norm the product before leaves to its readers in one-token steps (Plan::mm_norm): in the other
    // decode-sized steps the same codes and sums from this dispatch (its factored form), so each row's
    // arithmetic is the one-token step's.
    if (index >= 1 && plan_.mm_norm[index - 1] == static_cast<int>(index + 1) && n <= vk::kMvMaxTokens &&
        vk::rms_norm_row_factored_fits(ctx_, width)) {
      const View xq = q8k_out(norm.out, width, n);
      if (xq.buffer) {
        const vk::NormScale ns = factored_scale(norm, w, width, n);
        tr.before({a, b}, {sum, xq, ns.partials});
        vk::rms_norm_row(ctx_, rec, a, b, sum, w, y, xq, width, n, ns.eps, ns.offset, View{}, 0, ns.partials);
        done_[index + 1] = true;
        deferred_ = Deferred{norm.out, sum, ns, width, n, true};
        return true;
      }
    }
    const View xq = q8k_out(norm.out, width, n);
    const View q8 = xq.buffer ? View{} : q8_out(norm.out, width, n, vk::rms_norm_row_q8_fits(ctx_, width));
    tr.before({a, b}, {sum, y, xq, q8});
    vk::rms_norm_row(ctx_, rec, a, b, sum, w, y, xq, width, n, norm.norm().eps, norm.norm().offset, q8, q8_format_);
    done_[index + 1] = true;
    return true;
  }

  // Decode's K-quant or 32-element product with the residual add and whole-row norm after it done by
  // its last workgroup (Plan::mm_row_norm); the norm's codes for the 32-element formats' readers where
  // they share a format. False (nothing recorded) where the product reads a norm left to it.
  // Any decode-sized step, each row as a one-token step makes it.
  bool row_norm_product(vk::Recording& rec, Tracker& tr, const Node& node, size_t index, View x, View out, uint32_t n_tok) {
    const auto& wt = g_.tensor(node.in[0]);
    const auto ncols = static_cast<uint32_t>(wt.ne[0]), nrows = static_cast<uint32_t>(wt.ne[1]);
    if (n_tok > kMvMaxTokens || scale_of(node.in[1]).partials.buffer || (deferred_.active && deferred_.y == node.in[1])) return false;
    const bool k_quant = vk::mul_mv_k_row_norm_fits(ctx_, wt.type, ncols, nrows);
    if (!k_quant && !vk::mul_mv_q8_row_norm_fits(ctx_, wt.type, ncols, nrows)) return false;
    const View xq =
        k_quant ? q8k_codes(rec, tr, node.in[1], x, ncols, n_tok) : q8_codes(rec, tr, wt.type, node.in[1], x, ncols, n_tok);
    const vk::MulMvKRowNorm n = row_norm_views(index, nrows, n_tok);
    const View bias = node.in.size() > 2 ? w_.f32(node.in[2]) : View{};
    // With the mixture's routing after the norm where its router is folded in (the MoE node then takes
    // the ids and weights as they are).
    const vk::RowRoute route = row_route(index, wt.type, k_quant, ncols, nrows, n_tok);
    const vk::RowRoute* rp = route.fold.buffer ? &route : nullptr;
    tr.before({xq, n.res, route.fold}, {out, n.sum, n.y, n.q8, n.count, route.logits, route.ids, route.weights});
    if (k_quant) {
      vk::mul_mv_k_row_norm(ctx_, rec, wt.type, w_.raw(node.in[0]), xq, out, bias, ncols, nrows, n_tok, n, rp);
    } else {
      vk::mul_mv_q8_row_norm(ctx_, rec, wt.type, w_.raw(node.in[0]), xq, out, bias, ncols, nrows, n_tok, n, rp);
    }
    if (rp) folded_moe_ = static_cast<int64_t>(folds_.at(index).moe);
    return true;
  }

  // The routing of the mixture reading the norm after product `index` (a decode-sized step of n
  // tokens), folded into the product's dispatch (vk::RowRoute) where its weights made the fold and the
  // kernel takes it; else empty.
  vk::RowRoute row_route(size_t index, gguf::TensorType type, bool k_quant, uint32_t ncols, uint32_t nrows, uint32_t n) {
    const auto it = folds_.find(index);
    if (it == folds_.end() || it->second.norm != index + 2) return {};
    const Node& moe = g_.nodes[it->second.moe];
    const graph::MoeParams& mp = moe.moe();
    const auto ne = static_cast<uint32_t>(mp.n_expert), k = static_cast<uint32_t>(mp.n_expert_used);
    if (!(k_quant ? vk::mul_mv_k_row_route_fits(ctx_, type, ncols, nrows, ne, k)
                  : vk::mul_mv_q8_row_route_fits(ctx_, type, ncols, nrows, ne, k)) ||
        mp.expert_scale >= 0 || !res_.moe_logits) {
      return {};
    }
    return vk::RowRoute{View{w_.router_split(moe.in[1], g_.nodes[index].in[0])->fold.get(), 0, 0},
                        View{res_.moe_logits, 0, size_t{4} * ne * n},
                        mp.bias >= 0 ? w_.f32(moe.in[static_cast<size_t>(mp.bias)]) : View{},
                        View{res_.moe_ids, 0, size_t{4} * k * n}, View{res_.moe_weights, 0, size_t{4} * k * n}, ne, k,
                        mp.routing == graph::MoeRouting::TopKSoftmax, mp.norm_topk, mp.logit_scale};
  }

  // The add and norm after node `index` (Plan::mm_row_norm) as its product's tail takes them, those
  // two nodes done, the norm's codes (where its readers share a format) in act_q8.
  vk::MulMvKRowNorm row_norm_views(size_t index, uint32_t width, uint32_t n_tok = 1) {
    const Node &add = g_.nodes[index + 1], &norm = g_.nodes[index + 2];
    vk::MulMvKRowNorm n;
    n.res = act(add.in[0] == g_.nodes[index].out ? add.in[1] : add.in[0], n_tok);
    n.sum = act(add.out, n_tok);
    n.y = act(norm.out, n_tok);
    n.norm_w = norm.in.size() > 1 ? w_.f32(norm.in[1]) : View{};
    n.eps = norm.norm().eps;
    n.offset = norm.norm().offset;
    n.count = View{res_.head_count, size_t{4} * plan_.row_norm_counter, size_t{4} * n_tok};
    // (One token: the codes land on the product's input codes once all have read them. Several: a
    // token's tail could overwrite another's still being read; the readers quantize the rows.)
    n.q8 = n_tok == 1 ? q8_out(norm.out, width, 1, true) : View{};
    n.q8_format = q8_format_;
    done_[index + 1] = true;
    done_[index + 2] = true;
    return n;
  }

  // Few tokens: the weights multiply the rows directly. Many: a matrix product that decodes the stored
  // weight as it stages its tiles (tensor cores where the device has them).
  void matmul(vk::Recording& rec, Tracker& tr, const Node& node, View x, View out, uint32_t n) {
    const auto& wt = g_.tensor(node.in[0]);
    const auto ncols = static_cast<uint32_t>(wt.ne[0]), nrows = static_cast<uint32_t>(wt.ne[1]);
    const View bias = node.in.size() > 2 ? w_.f32(node.in[2]) : View{};
    if (deferred_.active && deferred_.y == node.in[1] && vk::mul_mv_norm_fits(wt.type, ncols)) {
      // A float weight on a norm left to its readers: the residual sum, weighted and scaled in the product.
      const vk::NormScale& ns = deferred_.ns;
      tr.before({deferred_.h, ns.partials, ns.weights}, {out});
      vk::mul_mv(ctx_, rec, wt.type, w_.raw(node.in[0]), deferred_.h, out, bias, ncols, nrows, n, ns);
      return;
    }
    if (coded_product(rec, tr, wt.type, w_.raw(node.in[0]), node.in[1], x, out, bias, ncols, nrows, n)) return;
    if (n <= kDirectMaxTokens || ncols % 32 != 0) {  // the matrix product takes K in steps of 32
      tr.before({x}, {out});
      vk::mul_mv(ctx_, rec, wt.type, w_.raw(node.in[0]), x, out, bias, ncols, nrows, n);
      return;
    }
    // Float weights (F32, F16, BF16) stay in float: the tensor-core kernel rounds the activations to
    // f16 (relative 2^-11), against 1e-6 for decode's products, enough to flip greedy tokens at small
    // margins; quantized weights' own error dwarfs it.
    const vk::MulMmKernel kernel = quant::block_size(wt.type) == 1 ? vk::MulMmKernel::Tiled : vk::mul_mm_kernel(ctx_);
    const View xin = gemm_x(rec, tr, kernel, node.in[1], x, ncols, n);
    tr.before({xin}, {out});
    vk::mul_mm_q(ctx_, rec, kernel, wt.type, w_.raw(node.in[0]), xin, out, bias, ncols, nrows, n, nrows, 0);
  }

  // Steps of few tokens over a block format, as the CPU computes them: x (tensor t) quantized to 8-bit
  // codes once for every product that reads it (q, k and v; gate and up; a mixture's router), integer
  // sums per block, the CPU's float expression per block; the same greedy tokens. False where the type
  // or the step takes another product.
  bool coded_product(vk::Recording& rec, Tracker& tr, gguf::TensorType type, View w, TensorId t, View x, View out, View bias,
                     uint32_t ncols, uint32_t nrows, uint32_t n) {
    if (n > kDirectMaxTokens) return false;
    if (vk::has_mul_mv_q8(type)) {  // the 32-element formats; the bias added by the product
      const View xq = q8_codes(rec, tr, type, t, x, ncols, n);
      tr.before({xq}, {out});
      vk::mul_mv_q8_codes(ctx_, rec, type, w, xq, out, bias, ncols, nrows, n);
      return true;
    }
    if (!vk::has_mul_mv_k(ctx_, type) || ncols % 256 != 0) return false;
    const View xq = q8k_codes(rec, tr, t, x, ncols, n);  // the K-quants
    const vk::NormScale ns = scale_of(t);
    tr.before({xq, ns.partials, bias}, {out});
    vk::mul_mv_k(ctx_, rec, type, w, xq, out, ncols, nrows, n, ns, bias);  // the bias added by the product too
    return true;
  }

  // Decode's product with the short convolution that reads it (plan_conv_tails): the convolution's
  // output and its sequence's state, written by the product's dispatch; the convolution's node is done.
  void conv_product(vk::Recording& rec, Tracker& tr, const Node& node, size_t index, View x) {
    const auto c = static_cast<size_t>(plan_.mm_conv[index]);
    const Node& conv = g_.nodes[c];
    const auto& wt = g_.tensor(node.in[0]);
    const auto ncols = static_cast<uint32_t>(wt.ne[0]), nrows = static_cast<uint32_t>(wt.ne[1]);
    const View xq = q8k_codes(rec, tr, node.in[1], x, ncols, 1);
    const vk::NormScale ns = scale_of(node.in[1]);
    const View st = state(c, parts_->front().seq), cw = w_.f32(conv.in[1]), y = act(conv.out, 1);
    tr.before({xq, ns.partials, st}, {y, st});
    vk::mul_mv_k_conv(ctx_, rec, wt.type, w_.raw(node.in[0]), xq, cw, st, y, ncols, nrows,
                      static_cast<uint32_t>(g_.tensor(conv.in[1]).ne[0]), ns);
    done_[c] = true;
  }

  // Decode's q or k product with its heads' norm, rotation (in place: the rotation's output is the
  // product's, plan_activations) and k's cache append; or v's product with its cache append (plan_tails).
  void tail_product(vk::Recording& rec, Tracker& tr, const Node& node, size_t index, View x, View out) {
    const auto& wt = g_.tensor(node.in[0]);
    const auto ncols = static_cast<uint32_t>(wt.ne[0]), nrows = static_cast<uint32_t>(wt.ne[1]);
    const bool q8 = vk::has_mul_mv_q8(wt.type);  // (with its bias, where it has one)
    const View xq = q8 ? q8_codes(rec, tr, wt.type, node.in[1], x, ncols, 1) : q8k_codes(rec, tr, node.in[1], x, ncols, 1);
    const View bias = node.in.size() > 2 ? w_.f32(node.in[2]) : View{};
    const vk::NormScale ns = q8 ? vk::NormScale{} : scale_of(node.in[1]);
    const bool f32_cache = plan_.kv_type == KvCacheType::F32;
    if (plan_.mm_vstore[index] >= 0) {
      const View vc{res_.v[static_cast<size_t>(g_.nodes[static_cast<size_t>(plan_.mm_vstore[index])].layer)]};
      tr.before({xq, header(0), ns.partials}, {out, vc});
      if (q8) {
        vk::mul_mv_q8_vstore(ctx_, rec, wt.type, w_.raw(node.in[0]), xq, out, bias, vc, header(0), f32_cache, ncols, nrows);
      } else {
        vk::mul_mv_k_vstore(ctx_, rec, wt.type, w_.raw(node.in[0]), xq, out, vc, header(0), f32_cache, ncols, nrows, ns);
      }
      return;
    }
    const auto r = static_cast<size_t>(plan_.mm_rope[index]);
    const Node& rot = g_.nodes[r];
    const graph::RopeOpParams& rp = rot.rope();
    const RopeTable& table = plan_.ropes[static_cast<size_t>(plan_.rope_index(rot))];
    vk::MulMvKRope a;
    a.cs = View{res_.step_dev, table.offset, static_cast<size_t>(table.n_rot) * 4};
    a.head_dim = static_cast<uint32_t>(rp.head_dim);
    a.n_rot = static_cast<uint32_t>(rp.n_rot);
    a.neox = rp.mode == graph::RopeMode::NeoX;
    if (plan_.rope_norm[r] >= 0) {  // the heads' norm before the rotation
      const Node& norm = g_.nodes[static_cast<size_t>(plan_.rope_norm[r])];
      a.norm = true;
      a.norm_w = norm.in.size() > 1 ? w_.f32(norm.in[1]) : View{};
      a.eps = norm.norm().eps;
      a.offset = norm.norm().offset;
    }
    a.count = View{res_.head_count, 0, res_.head_count->size};
    a.count_base = plan_.mm_count_base[index];
    if (plan_.rope_store[r] >= 0) {
      a.store = true;
      a.f32_cache = f32_cache;
      a.k_cache = View{res_.k[static_cast<size_t>(g_.nodes[static_cast<size_t>(plan_.rope_store[r])].layer)]};
      a.step = header(0);
    }
    const View counters{res_.head_count, size_t{4} * a.count_base, size_t{4} * rp.n_head};
    tr.before({xq, a.cs, a.step, ns.partials}, {out, a.k_cache, counters});
    if (q8) {
      vk::mul_mv_q8_rope(ctx_, rec, wt.type, w_.raw(node.in[0]), xq, out, bias, ncols, nrows, a);
    } else {
      vk::mul_mv_k_rope(ctx_, rec, wt.type, w_.raw(node.in[0]), xq, out, ncols, nrows, a, ns);
    }
    done_[r] = true;
  }

  // x (tensor t, n rows of ncols) as the matrix product reads it: itself for the portable kernel; in
  // f16 for the tensor-core one, converted once for every product that reads it (q, k and v; gate and
  // up).
  View gemm_x(vk::Recording& rec, Tracker& tr, vk::MulMmKernel kernel, TensorId t, View x, uint32_t ncols, uint32_t n) {
    if (kernel == vk::MulMmKernel::Tiled) return x;
    const View xs{res_.x_f16, 0, vk::mul_mm_scratch_bytes(ncols, n)};
    if (x16_of_ != t) {
      tr.before({x}, {xs});
      vk::mul_mm_convert_x(ctx_, rec, x, xs, ncols, n);
      x16_of_ = t;
    }
    return xs;
  }

  // --- The router split from its norm (vk_router_split.h) ---

  // Before product `index` where it is a split router's o in a decode-sized step: R_w r into the
  // logits, recorded beside the dispatch before (it reads only r, which o's add may then overwrite),
  // and o's input codes made now (o reads the same). Returns those codes (empty: no split here).
  View router_base(vk::Recording& rec, Tracker& tr, const Node& node, size_t index, const std::vector<int64_t>& rows,
                   uint32_t n) {
    // (sites_ holds only the sites the weights made R_w and M for: the knob on at load, o a K-quant
    // product on Q8_K codes.)
    const auto it = sites_.find(index);
    if (it == sites_.end() || n > kMvMaxTokens) return View{};
    const RouterSite& site = it->second;
    const Node& moe = g_.nodes[site.moe];
    if (rows[static_cast<size_t>(site.r)] != int64_t{n} || rows[static_cast<size_t>(node.in[1])] != int64_t{n}) return View{};
    const auto ncols = static_cast<uint32_t>(g_.tensor(node.in[0]).ne[0]);
    const auto ne = static_cast<uint32_t>(moe.moe().n_expert), d = static_cast<uint32_t>(g_.tensor(site.r).ne[0]);
    const VulkanWeights::RouterSplit& rs = *w_.router_split(moe.in[1], node.in[0]);
    const View r = act(site.r, n), logits{res_.moe_logits, 0, size_t{4} * ne * n};
    if (!res_.moe_count || d % 4 != 0) return View{};
    // Only where the mixture takes the norm left to it (its fused gate and up; else moe() would choose
    // the experts again from the norm's rows).
    const MoeShape shape = moe_shape(g_, moe);
    const auto gate = g_.tensor(moe.in[2]).type;
    if (shape.fused || gate != g_.tensor(moe.in[3]).type || moe.moe().glu != graph::MoeGlu::SwiGLU ||
        !vk::mul_mv_k_id_glu_fits(ctx_, gate, d, static_cast<uint32_t>(shape.ff))) {
      return View{};
    }
    tr.before({r}, {logits});
    vk::moe_router_product(ctx_, rec, View{rs.rw.get(), 0, 0}, r, logits, d, ne, n);
    return q8k_codes(rec, tr, node.in[1], act(node.in[1], n), ncols, n);
  }

  // After o: M a added to the logits and the experts chosen (beside o: it reads o's input codes).
  void router_slots(vk::Recording& rec, Tracker& tr, size_t index, View codes, uint32_t n) {
    const RouterSite& site = sites_.at(index);
    const Node& moe = g_.nodes[site.moe];
    const graph::MoeParams& mp = moe.moe();
    const auto ne = static_cast<uint32_t>(mp.n_expert), k = static_cast<uint32_t>(mp.n_expert_used);
    const auto d_in = static_cast<uint32_t>(g_.tensor(g_.nodes[index].in[0]).ne[0]);
    const VulkanWeights::RouterSplit& rs = *w_.router_split(moe.in[1], g_.nodes[index].in[0]);
    const View logits{res_.moe_logits, 0, size_t{4} * ne * n}, ids{res_.moe_ids, 0, size_t{4} * k * n};
    const View count{res_.moe_count, 0, res_.moe_count->size}, m{rs.m.get(), 0, 0};
    tr.before({codes, logits, m}, {logits, ids, count});
    if (!vk::moe_router_split(ctx_, rec, m, codes, logits, ids, count, d_in, ne, k, n,
                              mp.routing == graph::MoeRouting::TopKSoftmax, mp.logit_scale)) {
      throw Error("Vulkan MoE: the router split from its norm did not fit the kernel");
    }
    split_moe_ = static_cast<int64_t>(site.moe);
  }

  // Mixture of experts: router logits (a mat-vec), routing on the device (ids and weights per token),
  // the selected experts' gate/up products, the activation, their down products, the weighted sum.
  void moe(vk::Recording& rec, Tracker& tr, const Node& node, size_t index, const std::vector<int64_t>& rows, View out,
           uint32_t n) {
    const graph::MoeParams& mp = node.moe();
    const auto& rt = g_.tensor(node.in[1]);
    const auto& gt = g_.tensor(node.in[2]);
    const auto& ut = g_.tensor(node.in[3]);
    const auto& dt = g_.tensor(node.in[4]);
    const MoeShape shape = moe_shape(g_, node);
    const bool fused = shape.fused;
    const auto d = static_cast<uint32_t>(shape.d), ff = static_cast<uint32_t>(shape.ff);
    const auto ne = static_cast<uint32_t>(mp.n_expert), k = static_cast<uint32_t>(mp.n_expert_used);
    const TensorId x_id = node.in[0];
    const View x = act(x_id, rows[static_cast<size_t>(x_id)]);
    const TensorId rin = mp.router_in >= 0 ? node.in[static_cast<size_t>(mp.router_in)] : x_id;
    const View router_x = act(rin, rows[static_cast<size_t>(rin)]);
    const View logits{res_.moe_logits, 0, static_cast<size_t>(ne) * n * 4};
    const View ids{res_.moe_ids, 0, static_cast<size_t>(k) * n * 4}, wts{res_.moe_weights, 0, static_cast<size_t>(k) * n * 4};
    const bool biased = mp.bias >= 0;
    const auto bias = [&](int j) {
      return biased ? w_.f32(node.in[static_cast<size_t>(mp.bias + j)]) : View{};
    };
    const View escale = mp.expert_scale >= 0 ? w_.f32(node.in[static_cast<size_t>(mp.expert_scale)]) : View{};
    const bool topk_softmax = mp.routing == graph::MoeRouting::TopKSoftmax;
    const size_t slot_bytes = static_cast<size_t>(k) * n * 4;
    const View g{res_.moe_gate, 0, slot_bytes * ff}, u{res_.moe_up, 0, slot_bytes * ff}, y{res_.moe_down, 0, slot_bytes * d};
    // Steps of many tokens: the slots grouped by expert once, then each expert's weight read once per
    // tile of its tokens (tensor cores where the device has them, but float weights stay in float).
    const bool grouped = n > kMvMaxTokens && ne <= vk::kMoeSortMaxExperts && groupable(gt.type, d) && groupable(ut.type, d) &&
                         groupable(dt.type, ff);
    const auto kdot = [&](gguf::TensorType t, uint32_t cols) {
      return !grouped && n <= kMvMaxTokens && cols % 256 == 0 && vk::has_mul_mv_k(ctx_, t);
    };
    // The down product adds the slots' outputs itself (one dispatch fewer), where its codes come from
    // the activation's kernel.
    const bool fused_down = kdot(dt.type, ff) && k <= 32 && knob_u32("ZINC_VULKAN_MOE_FUSED_DOWN", 1, 0, 1) == 1;
    // With it, gate, up, the SwiGLU and its codes can be one dispatch too (the codes in moe_up, unused
    // then: that kernel reads x's codes in act_q8k).
    const bool glu = fused_down && !fused && mp.glu == graph::MoeGlu::SwiGLU && gt.type == ut.type && kdot(gt.type, d) &&
                     !bias(1).buffer && !bias(2).buffer && res_.moe_count && knob_u32("ZINC_VULKAN_MOE_GLU", 1, 0, 1) == 1 &&
                     vk::mul_mv_k_id_glu_fits(ctx_, gt.type, d, ff);
    // Decode-sized steps with an F32 router: its product and the routing as one dispatch.
    const bool one_router = n <= vk::kMvMaxTokens && rt.type == gguf::TensorType::F32 && res_.moe_count &&
                            knob_u32("ZINC_VULKAN_MOE_ROUTER", 1, 0, 1) == 1;
    // x a norm the product before left to its readers: the router (reading the residual sum and the
    // norm's weights) and the gate and up products take its scale; any other form reads its rows.
    if (deferred_.active && deferred_.y == x_id &&
        !(glu && one_router && rin == x_id && d % 4 == 0 && ne <= 256 && k <= 16 && k <= ne)) {
      materialize(rec, tr);
    }
    if (deferred_.active && reads(node, deferred_.y) && deferred_.y != x_id) materialize(rec, tr);
    const vk::NormScale xs = deferred_.active && deferred_.y == x_id ? deferred_.ns : vk::NormScale{};
    const View count{res_.moe_count, 0, res_.moe_count ? res_.moe_count->size : 0};
    const View rx = xs.partials.buffer ? deferred_.h : router_x;
    // The experts chosen beside o's product (router_slots): their weights, now the norm's scale is known.
    const bool split = split_moe_ == static_cast<int64_t>(index) && xs.partials.buffer && n <= vk::kMvMaxTokens;
    split_moe_ = -1;
    // Or routed by o's dispatch, its router folded in (row_route): ids and weights written.
    const bool folded = folded_moe_ == static_cast<int64_t>(index);
    folded_moe_ = -1;
    if (split) {
      tr.before({logits, ids, xs.partials}, {wts});
      vk::moe_route(ctx_, rec, logits, View{}, escale, ids, wts, ne, k, n, topk_softmax, mp.norm_topk, mp.logit_scale, xs);
    } else if (!folded) {
      tr.before({rx, xs.partials, xs.weights}, {logits, ids, wts, count});
    }
    const bool routed = split || folded || (one_router && vk::moe_router(ctx_, rec, w_.raw(node.in[1]), rx, logits, bias(0), escale, ids, wts, count,
                                                     d, ne, k, n, topk_softmax, mp.norm_topk, mp.logit_scale, xs));
    if (xs.partials.buffer && !routed) throw Error("Vulkan MoE: the router did not take the norm left to it");
    if (!routed) {
      // A block-format router (files of older converters) as the CPU computes it, else float activations.
      if (!coded_product(rec, tr, rt.type, w_.raw(node.in[1]), rin, router_x, logits, View{}, d, ne, n)) {
        vk::mul_mv(ctx_, rec, rt.type, w_.raw(node.in[1]), router_x, logits, View{}, d, ne, n);
      }
      tr.before({logits}, {ids, wts});
      vk::moe_route(ctx_, rec, logits, bias(0), escale, ids, wts, ne, k, n, topk_softmax, mp.norm_topk, mp.logit_scale);
    }
    const bool float_experts =
        quant::block_size(gt.type) == 1 || quant::block_size(ut.type) == 1 || quant::block_size(dt.type) == 1;
    const vk::MulMmKernel kernel = grouped && !float_experts ? vk::mul_mm_kernel(ctx_) : vk::MulMmKernel::Tiled;
    const View route{res_.moe_route, 0, grouped ? vk::moe_route_bytes(n, k, ne) : 0};
    View gemm_in{};  // x as the grouped gate and up products read it
    if (grouped) {
      tr.before({ids}, {route});
      vk::moe_sort(ctx_, rec, kernel, ids, route, n, k, ne);
      gemm_in = gemm_x(rec, tr, kernel, x_id, x, d, n);
    }
    // Experts of the 32-element formats in decode-sized steps: the CPU's arithmetic (quantized
    // activations), as for MatMul.
    const auto exact = [&](gguf::TensorType t) { return vk::has_mul_mv_q8(t) && n <= kMvMaxTokens; };
    // The down product's codes written by the GLU itself (one dispatch fewer, and none between them).
    const bool down_codes = kdot(dt.type, ff);
    const View down_xq = down_codes ? View{res_.act_q8k, 0, vk::q8k_row_bytes(ff) * k * n} : View{};
    // Or the 32-element formats' codes of it, likewise (ZINC_VULKAN_NORM_Q8=0: a dispatch of their own).
    const bool down_q8 = !down_codes && exact(dt.type) && vk::eltwise_q8_fits(ctx_, ff) && codes_from_producer();
    View down_q8v = down_q8 ? View{res_.act_q8, 0, vk::mul_mv_q8_bytes(ff) * n * k} : View{};
    const uint32_t down_format = down_q8 ? vk::q8_act_format(dt.type) : 0;
    const auto expert_product = [&](gguf::TensorType type, View w, View xin, View yout, View b, uint32_t cols,
                                    uint32_t rows_out, bool per_slot) {
      const uint32_t x_rows = n * (per_slot ? k : 1);
      if (grouped) {
        View xm = per_slot ? xin : gemm_in;
        if (per_slot && kernel == vk::MulMmKernel::CoopMatNV) {  // the down product's x (the activation) in f16
          xm = View{res_.moe_up, 0, vk::mul_mm_scratch_bytes(cols, x_rows)};
          tr.before({xin}, {xm});
          vk::mul_mm_convert_x(ctx_, rec, xin, xm, cols, x_rows);
        }
        tr.before({xm, route}, {yout});
        vk::mul_mm_q_id(ctx_, rec, kernel, type, w, route, xm, yout, b, cols, rows_out, ne, k, n, per_slot);
      } else if (kdot(type, cols)) {
        // Activation codes: x's from its norm (or quantized once for gate and up), the activation's
        // from the GLU that wrote it.
        View xq{res_.act_q8k, 0, vk::q8k_row_bytes(cols) * x_rows};
        if (!per_slot) {
          xq = q8k_codes(rec, tr, x_id, x, cols, n);
        } else if (!down_codes) {
          tr.before({xin}, {xq});
          vk::quantize_q8k(ctx_, rec, xin, xq, cols, x_rows);
          q8k_of_ = -1;
        }
        tr.before({xq, ids}, {yout});
        vk::mul_mv_k_id(ctx_, rec, type, w, ids, xq, yout, b, cols, rows_out, ne, k, n, per_slot);
      } else if (exact(type)) {
        // x's codes once for gate and up; the activation's per slot.
        View xq{res_.act_q8, 0, vk::mul_mv_q8_bytes(cols) * n * (per_slot ? k : 1)};
        if (per_slot && down_q8) xq = down_q8v;  // (where the GLU wrote them)
        if (per_slot) {
          if (!down_q8) {
            tr.before({xin}, {xq});
            vk::quantize_q8_act(ctx_, rec, type, xin, xq, cols, n * k);
          }
          q8_of_ = -1;
        } else {
          xq = q8_codes(rec, tr, type, x_id, x, cols, n);
        }
        tr.before({xq, ids}, {yout});
        vk::mul_mv_q8_id_codes(ctx_, rec, type, w, ids, xq, yout, b, cols, rows_out, ne, k, n, per_slot);
      } else {
        tr.before({xin, ids}, {yout});
        vk::mul_mv_id(ctx_, rec, type, w, ids, xin, yout, b, cols, rows_out, ne, k, n, per_slot);
      }
    };
    View dxq = down_xq;
    if (glu) {
      const View xq = q8k_codes(rec, tr, x_id, x, d, n);
      const vk::NormScale ns = scale_of(x_id);
      dxq = View{res_.moe_up, 0, vk::q8k_row_bytes(ff) * k * n};
      tr.before({xq, ids, ns.partials}, {g, dxq, count});
      vk::mul_mv_k_id_glu(ctx_, rec, gt.type, w_.raw(node.in[2]), w_.raw(node.in[3]), ids, xq, g, dxq, count, d, ff, ne, k, n,
                          ns);
    } else if (const View glu_codes{res_.moe_up, 0, vk::mul_mv_q8_bytes(ff) * n * k};
               down_q8 && q8_glu(rec, tr, node, x_id, x, g, ids, glu_codes, down_format, d, ff, ne, k, n)) {
      down_q8v = glu_codes;  // (in moe_up, unused then: that kernel reads x's codes in act_q8)
    } else {
      // Each product waits only for what it reads and writes: gate and up from the same codes run
      // side by side.
      if (fused) {
        // One {d, 2 ff, n_expert} tensor: both halves at once, then split into gate and up.
        const View gu{res_.moe_down, 0, slot_bytes * 2 * ff};
        tr.before({ids, x}, {gu});
        expert_product(gt.type, w_.raw(node.in[2]), x, gu, View{}, d, 2 * ff, false);
        tr.before({gu}, {g, u});
        vk::copy_rows(ctx_, rec, gu, g, k * n, 0, 2 * ff, 0, ff, 1, ff, ff, 0);
        vk::copy_rows(ctx_, rec, gu, u, k * n, 0, 2 * ff, ff, ff, 1, ff, ff, 0);
      } else {
        expert_product(gt.type, w_.raw(node.in[2]), x, g, bias(1), d, ff, false);
        expert_product(ut.type, w_.raw(node.in[3]), x, u, bias(2), d, ff, false);
      }
      tr.before({g, u}, {g, down_xq, down_q8v});
      const bool clamped = mp.glu == graph::MoeGlu::SwiGLUClamped;
      const vk::Eltwise op = clamped ? vk::Eltwise::SwiGLUClamped
                             : mp.glu == graph::MoeGlu::GeGLU ? vk::Eltwise::GeGLU
                                                              : vk::Eltwise::SwiGLU;
      vk::eltwise(ctx_, rec, op, g, u, g, ff, ff, k * n, false, clamped ? mp.glu_alpha : 0, clamped ? mp.glu_limit : 0, down_xq,
                  down_q8v, down_format);
    }
    // The scratch holds the activation's codes, no graph tensor's (the fused GLU writes them in moe_up:
    // x's codes stay, for a shared expert's products that read x too).
    if (down_codes && !glu) q8k_of_ = -1;
    NormTail nt;
    if (fused_down && norm_tails_ && plan_.mm_norm[index] >= 0 && n == 1 && !bias(3).buffer && norm_tail(index, rows, nt)) {
      // The residual add and the norm after the mixture, left to the norm's readers.
      tr.before({dxq, ids, wts, nt.res}, {nt.h, nt.codes, nt.count, nt.ns.partials});
      vk::mul_mv_k_id_combine_norm(ctx_, rec, dt.type, w_.raw(node.in[4]), ids, wts, dxq, nt.h, ff, d, ne, k,
                                   vk::MulMvKNorm{nt.res, nt.ns.weights, nt.codes, nt.count, nt.ns.partials, nt.ns.offset});
      norm_tail_done(index, nt);
      return;
    }
    // The down product with the combine folded in; false where its kernel does not fit.
    const gguf::TensorType type = dt.type;
    const View dw = w_.raw(node.in[4]), db = bias(3);
    const auto combine = [=, this](vk::Recording& r, Tracker& t) {
      t.before({dxq, ids, wts}, {out});
      const bool ran = vk::mul_mv_k_id_combine(ctx_, r, type, dw, ids, wts, dxq, out, db, ff, d, ne, k, n);
      if (!ran && glu) throw Error("Vulkan MoE: the down product of the fused activation did not run");
      return ran;
    };
    if (fused_down && glu && plan_.moe_early[index] > 0 && plan_.gated_tail[index] >= 0 && norm_tails_ && n == 1 && !db.buffer &&
        gated_tail(index, rows, out, ff, k)) {
      // The shared expert's down product and this one side by side, the gated add and norm by the
      // last workgroups of either (Plan::gated_tail): the shared one records first (gated_down).
      down_later_ = [=, this](vk::Recording& r, Tracker& t) {
        if (!gated_.down_done) {  // (the shared product took its own dispatch: the gated add and norm take theirs)
          gated_.active = false;
          combine(r, t);
          return;
        }
        const GatedState& gs = gated_;
        // (what the shared product's dispatch declared covers the sum, codes, counts and sums both write)
        t.before({dxq, ids, wts}, {out});
        const vk::GatedTail tail{gs.shared_part, gs.gate, gs.nt.h, gs.arrivals, false};
        vk::mul_mv_k_id_combine_norm(ctx_, r, type, dw, ids, wts, dxq, out, ff, d, ne, k,
                                     vk::MulMvKNorm{gs.nt.res, gs.nt.ns.weights, gs.nt.codes, gs.nt.count, gs.nt.ns.partials,
                                                    gs.nt.ns.offset},
                                     &tail);
        for (size_t j = gs.sig; j <= gs.sig + 3; ++j) done_[j] = true;
        defer_norm(gs.nt);
        gated_.active = false;
      };
      return;
    }
    if (fused_down && glu && plan_.moe_early[index] > 0) {
      // The nodes after the mixture that read only its input go first (record()); the fused GLU left
      // its codes in moe_up, which they do not touch.
      down_later_ = [combine](vk::Recording& r, Tracker& t) { combine(r, t); };
      return;
    }
    if (fused_down && combine(rec, tr)) return;
    // The 32-element formats' down product from the GLU's codes, adding the slots itself.
    if (down_q8 && res_.moe_count && res_.moe_count->size >= 4 * vk::mul_mv_q8_combine_counts(d, n)) {
      const View count{res_.moe_count, 0, res_.moe_count->size};
      q8_of_ = -1;
      // With the residual add and norm after it (Plan::mm_row_norm) in a one-token step.
      vk::MulMvKRowNorm rn;
      const bool row_norm = tails_ && n == 1 && plan_.mm_row_norm[index] >= 0 && vk::mul_mv_q8_combine_row_norm_fits(ctx_, d);
      if (row_norm) rn = row_norm_views(index, d);
      tr.before({down_q8v, ids, wts, db, rn.res}, {y, out, count, rn.sum, rn.y, rn.q8, rn.count});
      if (vk::mul_mv_q8_id_combine(ctx_, rec, dt.type, dw, ids, wts, down_q8v, y, out, count, db, ff, d, ne, k, n,
                                   row_norm ? &rn : nullptr)) {
        return;
      }
      if (row_norm) throw Error("Vulkan: a mixture's row norm planned where its down product does not add its slots");
    }
    tr.before({g, ids}, {y});
    expert_product(dt.type, w_.raw(node.in[4]), g, y, bias(3), ff, d, true);
    tr.before({y, wts}, {out});
    vk::moe_combine(ctx_, rec, y, wts, out, d, k, n);
  }

  // A decode-sized mixture's gate and up products of the 32-element formats, its GLU and the down
  // product's codes (down_q8v, in down_format) as one dispatch; false (nothing recorded) where they
  // do not fit.
  bool q8_glu(vk::Recording& rec, Tracker& tr, const Node& node, TensorId x_id, View x, View g, View ids, View down_q8v,
              uint32_t down_format, uint32_t d, uint32_t ff, uint32_t ne, uint32_t k, uint32_t n) {
    const graph::MoeParams& mp = node.moe();
    const gguf::TensorType type = g_.tensor(node.in[2]).type;
    const bool clamped = mp.glu == graph::MoeGlu::SwiGLUClamped;
    if (!down_q8v.buffer || node.in[2] == node.in[3] || g_.tensor(node.in[3]).type != type || !vk::has_mul_mv_q8(type) ||
        n > kMvMaxTokens || (mp.glu != graph::MoeGlu::SwiGLU && !clamped) || ff % 32 != 0 || !res_.moe_count ||
        res_.moe_count->size < 4 * vk::mul_mv_q8_glu_counts(ff, n * k)) {
      return false;
    }
    const View gb = mp.bias >= 0 ? w_.f32(node.in[static_cast<size_t>(mp.bias + 1)]) : View{};
    const View ub = mp.bias >= 0 ? w_.f32(node.in[static_cast<size_t>(mp.bias + 2)]) : View{};
    const View xq = q8_codes(rec, tr, type, x_id, x, d, n);
    const View count{res_.moe_count, 0, res_.moe_count->size};
    tr.before({xq, ids, gb, ub}, {g, down_q8v, count});
    return vk::mul_mv_q8_id_glu(ctx_, rec, type, w_.raw(node.in[2]), w_.raw(node.in[3]), ids, xq, g, down_q8v, count, gb, ub,
                                d, ff, ne, k, n, clamped, clamped ? mp.glu_alpha : 0, clamped ? mp.glu_limit : 0, down_format);
  }

  // Whether experts of `type` with rows of `cols` can take the grouped matrix product.
  static bool groupable(gguf::TensorType type, uint32_t cols) {
    return cols % 32 == 0 && vk::has_quant_kernels(type) && vk::rows_unsupported(type, cols).empty();
  }

  Context& ctx_;
  const graph::Graph& g_;
  const ExecOptions& opts_;
  const Plan& plan_;
  const VulkanWeights& w_;
  const Resources& res_;
  const std::vector<Part>* parts_ = nullptr;  // the step being recorded
  bool multi_ = false;                         // it has several parts
  bool tails_ = false;                         // one token of one sequence: products may take their rotations (plan_tails)
  std::vector<int64_t> recorded_argmax_rows_;  // the logits rows it takes the argmax of
  TensorId q8k_of_ = -1;    // the tensor the Q8_K scratch holds the codes of,
  View q8k_at_{};           // there (the norm's codes a product wrote sit past the others)
  bool norm_tails_ = false;  // one token of one sequence: products may take the add and norm after them (plan_norm_tails)
  bool one_plain_ = false;   // one token of one sequence keeping no states: the conv and delta tails apply
  // The norm a product left to its readers: its output y (never written while active), the residual
  // sum h it normalises, its scale, width.
  struct Deferred {
    TensorId y = -1;
    View h{};
    vk::NormScale ns{};
    uint32_t width = 0, rows = 0;
    bool active = false;
  };
  Deferred deferred_;
  TensorId q8_of_ = -1;     // the tensor the 32-element formats' scratch (act_q8) holds the codes of,
  uint32_t q8_format_ = 0;  // in this activation format (vk::q8_act_format)
  TensorId x16_of_ = -1;    // the tensor x_f16 holds in f16
  std::vector<bool> done_;  // per node: recorded with an earlier node
  std::map<size_t, RouterSite> sites_;  // routers split from their norms, by their product's node
  int64_t split_moe_ = -1;              // the MoE node whose experts router_slots chose
  std::map<size_t, RouterSite> folds_;  // routers folded into their product's dispatch, by that node
  int64_t folded_moe_ = -1;             // the MoE node a product's dispatch routed (row_route)
  // A mixture's down product, left for after the nodes that read only its input (Plan::moe_early).
  std::function<void(vk::Recording&, Tracker&)> down_later_;
  GatedState gated_;  // a gated tail between its mixture and its experts' down product (Plan::gated_tail)
};

}  // namespace

Recorded record_step(Context& ctx, const graph::Graph& g, const ExecOptions& opts, const Plan& plan,
                     const VulkanWeights& weights, const Resources& res, const std::vector<Part>& parts) {
  return Recorder(ctx, g, opts, plan, weights, res).record(parts);
}

}  // namespace zinc::backend::vk
