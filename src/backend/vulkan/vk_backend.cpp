// The Vulkan backend's executor: a graph compiled into dispatches of the kernels in shaders/vulkan.
//
// Memory: weights are uploaded once into device-local buffers (VulkanWeights, shared by every context
// instantiated from them; small float weights such as norms and biases converted to F32 on the way);
// each context's activations share one device arena planned like the CPU
// executor's (a tensor's range is reused once its last reader has run); each attending layer has its
// K and V cache on the device; recurrent state lives in a device buffer per node. What changes per
// step (n_past, the token ids, the rotation angles) is written by the host into a small host-visible
// step buffer that the kernels read, so the command buffer of a step shape (its token count and
// whether every row's logits are wanted) is recorded once and replayed: decode replays one command
// buffer per token with a single submit. Barriers are inserted only where a dispatch reads or
// overwrites a range an earlier dispatch since the last barrier wrote (or read).
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <numeric>
#include <mutex>
#include <optional>

#include "backend/backend.h"
#include "backend/exec_common.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/vulkan/vk_attention.h"
#include "backend/vulkan/vk_context.h"
#include "backend/vulkan/vk_gemm.h"
#include "backend/vulkan/vk_misc.h"
#include "backend/vulkan/vk_ops.h"
#include "backend/vulkan/vk_quant.h"
#include "core/error.h"
#include "quant/quant.h"

namespace zinc::backend {

namespace {

using graph::Node;
using graph::Op;
using graph::TensorId;
using graph::TensorKind;
using vk::View;

constexpr uint32_t kMvMaxTokens = 8;      // experts: steps up to this many tokens take the CPU's arithmetic
// Products of steps up to this many rows multiply by the weights directly (the kernels take up to 8 rows
// per pass over a weight, so 32 rows read it 4 times); longer steps expand the weights to f16 a slab at
// a time for the GEMM, a cost per step that only many rows repay (measured on an H100, 8B Q4_K_M: 9.6 ms
// for 8 rows directly, about 60 ms for the GEMM at 16).
constexpr uint32_t kDirectMaxTokens = 32;
constexpr uint32_t kSlabBytes = 64u << 20;  // the f16 slab a quantized weight is expanded into for prefill

size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

// Which inputs of a node are small float weights read as F32 (norms, biases, scales, gates).
bool reads_as_f32(const Node& n, size_t k) {
  switch (n.op) {
    case Op::RmsNorm: case Op::Rope: case Op::SsmConv: case Op::Scale: return k == 1;
    case Op::MatMul: return k == 2;
    case Op::Attention: return k == 3;
    case Op::DeltaNet: return k >= 5;
    case Op::MoE:
      return (n.moe_expert_scale >= 0 && k == static_cast<size_t>(n.moe_expert_scale)) ||
             (n.moe_bias >= 0 && k >= static_cast<size_t>(n.moe_bias));
    default: return false;
  }
}

// Why the Vulkan kernels cannot run a node ("" when they can): every weight a kernel reads raw must be
// in a format the kernels decode.
std::string vulkan_unsupported(const graph::Graph& g, const Node& n) {
  for (size_t k = 0; k < n.in.size(); ++k) {
    const auto& t = g.tensor(n.in[k]);
    if (t.kind != TensorKind::Weight || reads_as_f32(n, k)) continue;
    if (!quant::can_dequantize(t.type)) {
      return fmt::format("its weight '{}' is stored as {}, which the Vulkan kernels do not read", t.name,
                         gguf::tensor_type_name(t.type));
    }
    if (std::string why = vk::rows_unsupported(t.type, t.ne[0]); !why.empty()) {
      return fmt::format("its weight '{}': {}", t.name, why);
    }
  }
  return "";
}

// The weights on the device, uploaded once: quantized tensors as they are in the file, small float
// weights (norms, biases, scales; read by the kernels as F32) converted, and a host copy of those the
// host reads per step (rotation frequency factors).
class VulkanWeights final : public Weights {
 public:
  VulkanWeights(std::shared_ptr<vk::Context> ctx, const graph::Graph& g, const gguf::File& file,
                const LoadProgress& progress)
      : Weights(g), ctx_(std::move(ctx)) {
    try {
      upload(file, progress);
    } catch (...) {
      release();
      throw;
    }
  }
  ~VulkanWeights() override { release(); }
  std::unique_ptr<Executable> instantiate(const ExecOptions& opts) override;
  uint64_t device_bytes() const override { return bytes_ + slab_bytes(); }
  uint64_t slab_bytes() const { return slabs_[0].device_bytes + slabs_[1].device_bytes; }

  vk::Context& ctx() const { return *ctx_; }
  // The two f16 slabs prefill's products expand weights into, in turn: scratch within a step, so the
  // contexts share them (their steps are serialised by step_mutex). Made by the first context that
  // prefills, sized for the widest product.
  std::array<vk::Buffer, 2>& slabs(size_t bytes) {
    std::lock_guard<std::mutex> lock(slab_mutex_);
    if (!slabs_[0].buffer || slabs_[0].size < bytes) {
      for (vk::Buffer& slab : slabs_) {
        ctx_->release(slab);
        slab = ctx_->device_buffer(bytes);
      }
    }
    return slabs_;
  }
  std::mutex step_mutex;  // held for a step: contexts share the slabs and the one queue
  View raw(TensorId id) const { return View{&raw_[static_cast<size_t>(id)], 0, 0}; }
  View f32(TensorId id) const { return View{&f32_[static_cast<size_t>(id)], 0, 0}; }
  const std::vector<float>& host_f32(TensorId id) const { return host_f32_.at(id); }

 private:
  void upload(const gguf::File& file, const LoadProgress& progress) {
    const graph::Graph& g = graph();
    std::vector<bool> as_f32(g.tensors.size(), false), raw(g.tensors.size(), false);
    for (const Node& n : g.nodes) {
      if (std::string why = vulkan_unsupported(g, n); !why.empty()) {
        throw Error(fmt::format("Vulkan cannot run {}: {}", g.tensor(n.out).name, why));
      }
      for (size_t k = 0; k < n.in.size(); ++k) {
        const auto id = static_cast<size_t>(n.in[k]);
        if (g.tensors[id].kind != TensorKind::Weight) continue;
        (reads_as_f32(n, k) ? as_f32 : raw)[id] = true;
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
        raw_[i] = ctx_->device_buffer(align_up(bytes.size(), 4) + 16);  // kernels read whole words
        ctx_->upload(raw_[i], 0, bytes.data(), bytes.size());
        bytes_ += raw_[i].device_bytes;
      }
      if (as_f32[i]) {
        const int64_t count = t.ne[0] * t.ne[1] * t.ne[2] * t.ne[3];
        std::vector<float> f(static_cast<size_t>(count));
        if (t.type == gguf::TensorType::F32) std::memcpy(f.data(), bytes.data(), f.size() * 4);
        else quant::dequantize_row(t.type, bytes.data(), f.data(), count);
        f32_[i] = ctx_->device_buffer(f.size() * 4);
        ctx_->upload(f32_[i], 0, f.data(), f.size() * 4);
        bytes_ += f32_[i].device_bytes;
        host_f32_.emplace(static_cast<TensorId>(i), std::move(f));
      }
      if (progress) progress(done, total);
    }
  }
  void release() {
    for (auto& b : raw_) ctx_->release(b);
    for (auto& b : f32_) ctx_->release(b);
    for (auto& b : slabs_) ctx_->release(b);
  }

  std::shared_ptr<vk::Context> ctx_;
  std::vector<vk::Buffer> raw_, f32_;  // per tensor (empty where not read that way)
  std::map<TensorId, std::vector<float>> host_f32_;
  uint64_t bytes_ = 0;
  std::mutex slab_mutex_;
  std::array<vk::Buffer, 2> slabs_;
};

class VulkanExecutable final : public Executable {
 public:
  VulkanExecutable(std::shared_ptr<VulkanWeights> weights, const ExecOptions& opts)
      : weights_(std::move(weights)), ctx_(weights_->ctx()), g_(weights_->graph()), opts_(opts),
        align_(ctx_.features().offset_alignment) {
    if (opts_.max_tokens < 1 || opts_.n_ctx < 1 || opts_.n_seq < 1) {
      throw Error("context size, step size and sequence count must be positive");
    }
    row_pad_ = opts_.n_seq > 1 ? part_row_alignment() : 1;
    max_rows_ = static_cast<uint32_t>(opts_.max_tokens) + static_cast<uint32_t>(opts_.n_seq - 1) * (row_pad_ - 1);
    state_pos_.assign(static_cast<size_t>(opts_.n_seq), 0);
    kv_type_ = opts_.kv_type == KvType::F32 ? vk::KvCacheType::F32
               : opts_.kv_type == KvType::F16 ? vk::KvCacheType::F16
                                              : vk::KvCacheType::Q8_0;
    // Its own bytes: what the device holds more after it is made, but for the slabs it shares.
    const uint64_t before = ctx_.device_bytes_in_use() - weights_->slab_bytes();
    try {
      plan_fusions();
      plan_arena();
      make_caches();
      make_step_buffer();
      make_scratch();
      device_bytes_ = ctx_.device_bytes_in_use() - weights_->slab_bytes() - before;
    } catch (...) {
      release_all();
      throw;
    }
  }
  ~VulkanExecutable() override { release_all(); }

  bool can_rewind() const override { return !recurrent_; }
  uint64_t device_bytes() const override { return device_bytes_; }
  int64_t n_vocab() const override { return g_.n_vocab; }
  const ExecOptions& options() const override { return opts_; }

  using Executable::argmax;
  int32_t argmax(int64_t row) const override {
    for (size_t k = 0; k < argmax_rows_.size(); ++k) {
      if (argmax_rows_[k] == row) return *reinterpret_cast<const int32_t*>(static_cast<const uint8_t*>(argmax_.mapped) + k * align_);
    }
    return Executable::argmax(row);
  }

  std::vector<float> activation(TensorId id) const override {
    check_activation(g_, opts_, id);
    if (!last_rows_) throw Error("no step has run yet");
    const View v = act(id, (*last_rows_)[static_cast<size_t>(id)]);
    std::vector<float> out(v.bytes / 4);
    ctx_.download(*v.buffer, v.offset, out.data(), v.bytes);
    return out;
  }

  std::span<const float> logits() const override {
    return {static_cast<const float*>(logits_.mapped), static_cast<size_t>(logit_rows_ * g_.n_vocab)};
  }

  void run(const graph::StepParams& step) override {
    check_step(g_, opts_, step);
    const std::lock_guard<std::mutex> lock(weights_->step_mutex);
    // Each sequence's part of the step, at a row of the step's activations that starts a view
    // (row_pad_); nothing changes before every part is known to fit.
    std::vector<Part> parts;
    uint32_t row = 0;
    for (const graph::SeqStep& s : step.seqs) {
      const auto q = static_cast<size_t>(s.seq);
      if (s.n_past > blocks_->length(s.seq)) {
        throw Error(fmt::format("sequence {} holds {} positions; a step cannot start at {}", s.seq, blocks_->length(s.seq), s.n_past));
      }
      if (recurrent_) (void)recurrent_restart(state_pos_[q], s.n_past);  // throws for a position it cannot resume at
      row = static_cast<uint32_t>(align_up(row, row_pad_));
      parts.push_back({s.seq, s.n_past, static_cast<uint32_t>(s.n_tokens), s.all_logits, row});
      row += static_cast<uint32_t>(s.n_tokens);
    }
    // The cache blocks each part's rows go to (a block shared with another sequence that the part
    // writes into is copied first).
    for (const Part& p : parts) {
      blocks_->prepare(p.seq, p.n_past, static_cast<int32_t>(p.n), [this](int32_t from, int32_t to, int32_t rows) {
        for (size_t l = 0; l < k_.size(); ++l) {
          if (kv_row_bytes_[l] == 0) continue;
          const size_t block = kv_row_bytes_[l] * kKvBlock;
          for (vk::Buffer* c : {&k_[l], &v_[l]}) {
            ctx_.copy(*c, static_cast<size_t>(from) * block, *c, static_cast<size_t>(to) * block,
                      kv_row_bytes_[l] * static_cast<size_t>(rows));
          }
        }
      });
    }
    if (recurrent_) {
      for (const Part& p : parts) {
        if (p.n_past == 0) {
          for (size_t i = 0; i < state_.size(); ++i) {
            if (state_[i].buffer) ctx_.fill_zero(state_[i], state_offset(i, p.seq), state_floats_[i] * 4);
          }
        }
        state_pos_[static_cast<size_t>(p.seq)] = -1;
      }
    }
    write_step(step, parts);
    // Recordings are keyed by the step's shape: which sequences, how many tokens each, which want
    // every row's logits (their cache and state offsets are recorded; positions come from the step
    // buffer).
    std::vector<uint32_t> key;
    for (const Part& p : parts) key.insert(key.end(), {static_cast<uint32_t>(p.seq), p.n, p.all ? 1u : 0u});
    auto it = recordings_.find(key);
    if (it == recordings_.end()) {
      // Keep the decode shapes (one token per sequence) and a few others; a new shape beyond that
      // evicts the others (and every shape, when decode shapes alone fill the table).
      if (recordings_.size() >= kMaxRecordings) {
        for (auto r = recordings_.begin(); r != recordings_.end();) r = decode_shape(r->first) ? std::next(r) : recordings_.erase(r);
        if (recordings_.size() >= kMaxRecordings) recordings_.clear();
        last_rows_ = nullptr;
      }
      it = recordings_.emplace(key, record(parts)).first;
    }
    it->second.rec->submit_and_wait();
    logit_rows_ = it->second.logit_rows;
    last_rows_ = &it->second.rows;
    argmax_rows_ = it->second.argmax_rows;
    if (recurrent_) {
      for (const Part& p : parts) state_pos_[static_cast<size_t>(p.seq)] = p.n_past + static_cast<int32_t>(p.n);
    }
  }

  void seq_clear(int32_t seq) override {
    check_seq(seq);
    blocks_->clear(seq);
    state_pos_[static_cast<size_t>(seq)] = 0;
  }

  // The cache blocks are shared (no rows are copied until one of the two writes into a shared block);
  // the recurrent state is copied on the device.
  void seq_copy(int32_t src, int32_t dst, int32_t n_tokens) override {
    check_seq(src);
    check_seq(dst);
    const auto s = static_cast<size_t>(src), d = static_cast<size_t>(dst);
    if (n_tokens < 0 || n_tokens > blocks_->length(src) || (recurrent_ && n_tokens != state_pos_[s])) {
      throw Error(fmt::format("sequence {} holds {} positions; it cannot give {}", src, blocks_->length(src), n_tokens));
    }
    blocks_->share(src, dst, n_tokens);
    if (src != dst) {
      const std::lock_guard<std::mutex> lock(weights_->step_mutex);
      for (size_t i = 0; i < state_.size(); ++i) {
        if (state_[i].buffer) ctx_.copy(state_[i], state_offset(i, src), state_[i], state_offset(i, dst), state_floats_[i] * 4);
      }
    }
    state_pos_[d] = recurrent_ ? n_tokens : 0;
  }

  std::vector<uint8_t> save_state(int32_t n_past, int32_t seq) const override {
    check_seq(seq);
    if (n_past > blocks_->length(seq)) {
      throw Error(fmt::format("cannot save the state at position {} (sequence {} holds {})", n_past, seq, blocks_->length(seq)));
    }
    std::vector<uint8_t> out = layout_.begin_save(n_past, recurrent_, state_pos_[static_cast<size_t>(seq)]);
    size_t at = SavedStateLayout::kHeaderBytes;
    for (size_t l = 0; l < k_.size(); ++l) {
      if (kv_row_bytes_[l] == 0) continue;  // a layer without attention
      for (const vk::Buffer* c : {&k_[l], &v_[l]}) {
        for_each_block(l, seq, n_past, [&](size_t offset, size_t bytes) {
          ctx_.download(*c, offset, out.data() + at, bytes);
          at += bytes;
        });
      }
    }
    for (size_t i = 0; i < state_.size(); ++i) {
      ctx_.download(state_[i], state_offset(i, seq), out.data() + at, state_floats_[i] * 4);
      at += state_floats_[i] * 4;
    }
    return out;
  }

  void load_state(std::span<const uint8_t> bytes, int32_t seq) override {
    check_seq(seq);
    const auto n_past = static_cast<int32_t>(layout_.check(bytes));
    blocks_->clear(seq);
    blocks_->prepare(seq, 0, n_past, [](int32_t, int32_t, int32_t) {});
    size_t at = SavedStateLayout::kHeaderBytes;
    for (size_t l = 0; l < k_.size(); ++l) {
      if (kv_row_bytes_[l] == 0) continue;
      for (vk::Buffer* c : {&k_[l], &v_[l]}) {
        for_each_block(l, seq, n_past, [&](size_t offset, size_t n) {
          ctx_.upload(*c, offset, bytes.data() + at, n);
          at += n;
        });
      }
    }
    for (size_t i = 0; i < state_.size(); ++i) {
      ctx_.upload(state_[i], state_offset(i, seq), bytes.data() + at, state_floats_[i] * 4);
      at += state_floats_[i] * 4;
    }
    state_pos_[static_cast<size_t>(seq)] = n_past;
  }

 private:
  static constexpr size_t kMaxRecordings = 16;
  static constexpr int32_t kKvBlock = 32;  // positions per cache block (kv_rows.glsl's KV_BLOCK)

  // A sequence's part of a step: its first row among the step's activations and its token count.
  struct Part {
    int32_t seq, n_past;
    uint32_t n;
    bool all;  // every row's logits
    uint32_t row;
  };

  void check_seq(int32_t seq) const {
    if (seq < 0 || seq >= opts_.n_seq) {
      throw Error(fmt::format("sequence {} is not one of the context's {} (0..{})", seq, opts_.n_seq, opts_.n_seq - 1));
    }
  }

  static bool decode_shape(const std::vector<uint32_t>& key) {
    for (size_t i = 1; i < key.size(); i += 3) {
      if (key[i] != 1) return false;
    }
    return true;
  }

  // A step of several sequences runs the per-sequence ops (cache append, attention, recurrent state)
  // on each part's rows, through views that must start at the device's offset alignment: each part
  // starts at a multiple of this many rows (1 where every such row's bytes are a multiple of the
  // alignment; rows between parts are padding that the row-wise ops compute and nothing reads).
  uint32_t part_row_alignment() const {
    size_t a = 1;
    const auto need = [&](TensorId t) {
      const size_t row = static_cast<size_t>(g_.tensor(t).ne[0]) * 4;
      a = std::max(a, align_ / std::gcd(align_, row));
    };
    for (const Node& n : g_.nodes) {
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

  // Calls f(offset, bytes) for each run of sequence `seq`'s first n rows in layer l's cache, in order of
  // position (one run per block).
  template <class F>
  void for_each_block(size_t l, int32_t seq, int32_t n, const F& f) const {
    for (int32_t pos = 0; pos < n; pos += kKvBlock) {
      const size_t block = static_cast<size_t>(blocks_->block(seq, pos));
      f(block * kKvBlock * kv_row_bytes_[l], kv_row_bytes_[l] * static_cast<size_t>(std::min(kKvBlock, n - pos)));
    }
  }
  // Where sequence `seq`'s state of node i starts.
  size_t state_offset(size_t i, int32_t seq) const { return static_cast<size_t>(seq) * state_seq_bytes_[i]; }
  View state(size_t i, int32_t seq) const { return View{&state_[i], state_offset(i, seq), state_seq_bytes_[i]}; }
  // Part p's header in the step buffer: {n_past, n_tokens, 0, 0}, then its sequence's block table.
  View header(size_t p) const { return View{&step_dev_, p * header_stride_, 16 + 4 * static_cast<size_t>(blocks_per_seq_)}; }
  // The rows of `v` (an activation of tensor t) that part p holds.
  View part_rows(View v, TensorId t, const Part& p) const {
    const size_t row = static_cast<size_t>(g_.tensor(t).ne[0]) * 4;
    return View{v.buffer, v.offset + p.row * row, p.n * row};
  }

  struct Recorded {
    std::unique_ptr<vk::Recording> rec;
    int64_t logit_rows = 0;
    std::vector<int64_t> argmax_rows;  // per part: its last logits row, whose argmax the device takes
    std::vector<int64_t> rows;  // rows each activation holds after the step
  };

  // ---- memory -------------------------------------------------------------------------------

  // Offsets in one arena for every activation: a tensor keeps its range from the node that writes it
  // to the last node that reads it; first fit over the ranges live at the time.
  // Decode's dispatches fused across graph nodes, decided once per graph (plan_arena keeps what they
  // read alive): a per-head norm whose one reader is a rotation is done by the rotation's dispatch, and
  // the rotation of an attention's k also appends k and v to the cache when v is computed by then. Not
  // with keep_activations: every tensor is then written where zinc validate reads it.
  void plan_fusions() {
    const size_t nn = g_.nodes.size();
    rope_norm_.assign(nn, -1);
    rope_store_.assign(nn, -1);
    skip_.assign(nn, false);
    kv_stored_.assign(nn, false);
    if (opts_.keep_activations) return;
    std::vector<int> readers(g_.tensors.size(), 0), producer(g_.tensors.size(), -1);
    for (size_t i = 0; i < nn; ++i) {
      for (TensorId t : g_.nodes[i].in) ++readers[static_cast<size_t>(t)];
      producer[static_cast<size_t>(g_.nodes[i].out)] = static_cast<int>(i);
    }
    for (size_t r = 0; r < nn; ++r) {
      const Node& rope = g_.nodes[r];
      if (rope.op != Op::Rope || !vk::rope_heads_fit(static_cast<uint32_t>(rope.head_dim), false, kv_type_)) continue;
      const int np = producer[static_cast<size_t>(rope.in[0])];
      if (np >= 0) {
        const Node& norm = g_.nodes[static_cast<size_t>(np)];
        if (norm.op == Op::RmsNorm && norm.head_dim == rope.head_dim && readers[static_cast<size_t>(norm.out)] == 1) {
          rope_norm_[r] = np;
          skip_[static_cast<size_t>(np)] = true;
        }
      }
      for (size_t a = r + 1; a < nn; ++a) {
        const Node& at = g_.nodes[a];
        if (at.op != Op::Attention || at.in[1] != rope.out) continue;
        const int vp = producer[static_cast<size_t>(at.in[2])];
        if (vk::rope_heads_fit(static_cast<uint32_t>(rope.head_dim), true, kv_type_) && vp >= 0 && vp < static_cast<int>(r) &&
            at.head_dim == rope.head_dim && at.n_head_kv == rope.n_head &&
            g_.kv_width_of(at.layer) == static_cast<int64_t>(rope.n_head) * rope.head_dim &&
            g_.tensor(at.in[2]).ne[0] == g_.kv_width_of(at.layer)) {
          rope_store_[r] = static_cast<int>(a);
          kv_stored_[a] = true;
        }
        break;
      }
    }
  }

  void plan_arena() {
    std::vector<int> last_use(g_.tensors.size(), -1);
    for (size_t n = 0; n < g_.nodes.size(); ++n) {
      for (TensorId i : g_.nodes[n].in) last_use[static_cast<size_t>(i)] = static_cast<int>(n);
    }
    for (size_t r = 0; r < rope_norm_.size(); ++r) {  // a fused norm's input is read by the rotation
      if (rope_norm_[r] >= 0) {
        auto& u = last_use[static_cast<size_t>(g_.nodes[static_cast<size_t>(rope_norm_[r])].in[0])];
        u = std::max(u, static_cast<int>(r));
      }
    }
    act_offset_.assign(g_.tensors.size(), 0);
    struct Live {
      size_t offset, bytes;
      int until;
    };
    std::vector<Live> live;
    size_t top = 0;
    for (size_t n = 0; n < g_.nodes.size(); ++n) {
      const TensorId out = g_.nodes[n].out;
      if (out == g_.logits) continue;  // logits go to their own host-visible buffer
      live.erase(std::remove_if(live.begin(), live.end(), [&](const Live& l) { return l.until < static_cast<int>(n); }),
                 live.end());
      const size_t need = align_up(static_cast<size_t>(g_.tensor(out).ne[0]) * max_rows_ * 4, align_);
      std::sort(live.begin(), live.end(), [](const Live& a, const Live& b) { return a.offset < b.offset; });
      size_t at = 0;
      for (const Live& l : live) {
        if (l.offset >= at + need) break;
        at = std::max(at, l.offset + l.bytes);
      }
      act_offset_[static_cast<size_t>(out)] = at;
      const int until = opts_.keep_activations ? static_cast<int>(g_.nodes.size())
                                               : std::max(last_use[static_cast<size_t>(out)], static_cast<int>(n));
      live.push_back({at, need, until});
      top = std::max(top, at + need);
    }
    arena_ = ctx_.device_buffer(std::max<size_t>(top, 4));
    logits_ = ctx_.host_buffer(static_cast<size_t>(g_.n_vocab) * static_cast<size_t>(opts_.max_tokens) * 4);
  }

  void make_caches() {
    const gguf::TensorType elt = kv_storage_type(opts_.kv_type);
    kv_row_bytes_ = kv_row_bytes(g_, elt);
    k_.resize(kv_row_bytes_.size());
    v_.resize(kv_row_bytes_.size());
    // The cache: blocks of kKvBlock rows that any sequence's table may name (as many as every sequence
    // filling its context takes); each sequence's recurrent state in its own aligned region.
    const auto n_seq = static_cast<size_t>(opts_.n_seq);
    blocks_per_seq_ = (opts_.n_ctx + kKvBlock - 1) / kKvBlock;
    blocks_ = std::make_unique<KvBlocks>(blocks_per_seq_ * opts_.n_seq, kKvBlock, opts_.n_seq);
    for (size_t l = 0; l < kv_row_bytes_.size(); ++l) {
      if (kv_row_bytes_[l] == 0) continue;  // a layer without attention
      const size_t bytes = align_up(kv_row_bytes_[l] * kKvBlock * static_cast<size_t>(blocks_->n_blocks()), 4);
      k_[l] = ctx_.device_buffer(bytes);
      v_[l] = ctx_.device_buffer(bytes);
      ctx_.fill_zero(k_[l], 0, bytes);
      ctx_.fill_zero(v_[l], 0, bytes);
    }
    state_.resize(g_.nodes.size());
    state_floats_.assign(g_.nodes.size(), 0);
    state_seq_bytes_.assign(g_.nodes.size(), 0);
    for (const Node& node : g_.nodes) {
      if (const int64_t st = graph::state_size(g_, node); st > 0) {
        const auto i = static_cast<size_t>(&node - g_.nodes.data());
        state_floats_[i] = static_cast<size_t>(st);
        state_seq_bytes_[i] = align_up(static_cast<size_t>(st) * 4, align_);
        state_[i] = ctx_.device_buffer(state_seq_bytes_[i] * n_seq);
        ctx_.fill_zero(state_[i], 0, state_[i].size);
        recurrent_ = true;
      }
    }
    // Saved contexts in the CPU backend's layout: either backend loads the other's.
    layout_ = {elt, opts_.n_ctx, kv_row_bytes_, state_floats_};
  }

  // The step buffer: a header (n_past, n_tokens) and block table per part (sequence) of the step, the
  // token ids of the step's rows, then one (cos, sin) table per distinct rotation.
  void make_step_buffer() {
    header_stride_ = align_up(16 + 4 * static_cast<size_t>(blocks_per_seq_), align_);
    size_t at = header_stride_ * static_cast<size_t>(opts_.n_seq);
    tokens_offset_ = at;
    at = align_up(at + static_cast<size_t>(max_rows_) * 4, align_);
    for (const Node& n : g_.nodes) {
      if (n.op != Op::Rope) continue;
      const TensorId factors = n.in.size() > 1 ? n.in[1] : -1;
      if (rope_index(n) >= 0) continue;  // the same rotation as an earlier node
      ropes_.push_back({n.n_rot, n.rope, factors, at});
      at = align_up(at + static_cast<size_t>(n.n_rot) * max_rows_ * 4, align_);
    }
    step_ = ctx_.host_buffer(at);
    std::memset(step_.mapped, 0, at);
    step_dev_ = ctx_.device_buffer(at);  // what the kernels read: record() copies the step's part of step_
  }

  void make_scratch() {
    size_t attn = 0, attn_one = 0, moe_logits = 0, moe_slots = 0, moe_ids = 0, act_q8_bytes = 0, act_q8k_bytes = 0;
    q8k_input_.assign(g_.tensors.size(), false);
    uint32_t mm_cols = 0;
    for (const Node& n : g_.nodes) {
      const auto max_tok = static_cast<uint32_t>(opts_.max_tokens);  // a part's tokens
      const uint32_t max_rows = max_rows_;                            // a step's rows (with padding between parts)
      if (n.op == Op::Attention) {
        attn = std::max(attn, vk::attention_scratch_bytes(ctx_, static_cast<uint32_t>(n.n_head), static_cast<uint32_t>(n.n_head_kv),
                                                          static_cast<uint32_t>(n.head_dim), max_tok,
                                                          static_cast<uint32_t>(opts_.n_ctx)));
        attn_one = std::max(attn_one, vk::attention_scratch_bytes(ctx_, static_cast<uint32_t>(n.n_head),
                                                                  static_cast<uint32_t>(n.n_head_kv),
                                                                  static_cast<uint32_t>(n.head_dim), 1,
                                                                  static_cast<uint32_t>(opts_.n_ctx)));
      }
      if (n.op == Op::MoE) {
        const auto& gt = g_.tensor(n.in[2]);
        const int64_t d = g_.tensor(n.in[1]).ne[0];
        const int64_t ff = n.in[2] == n.in[3] ? gt.ne[1] / 2 : gt.ne[1];
        moe_logits = std::max(moe_logits, static_cast<size_t>(n.n_expert) * max_rows * 4);
        moe_ids = std::max(moe_ids, static_cast<size_t>(n.n_expert_used) * max_rows * 4);
        moe_slots = std::max(moe_slots, static_cast<size_t>(n.n_expert_used) * max_rows * static_cast<size_t>(std::max(2 * ff, d)) * 4);
        // Experts of the 32-element formats (mul_mv_q8_id): activation codes for the decode-sized steps
        // (the down projection's x per slot).
        const size_t q8_rows = static_cast<size_t>(std::min<uint32_t>(max_rows, kMvMaxTokens)) * static_cast<size_t>(n.n_expert_used);
        act_q8_bytes = std::max({act_q8_bytes, vk::mul_mv_q8_bytes(static_cast<uint32_t>(d)) * q8_rows,
                                 vk::mul_mv_q8_bytes(static_cast<uint32_t>(ff)) * q8_rows});
        act_q8k_bytes = std::max({act_q8k_bytes, vk::q8k_row_bytes(static_cast<uint32_t>(d)) * q8_rows,
                                  vk::q8k_row_bytes(static_cast<uint32_t>(ff)) * q8_rows});
      }
      if (n.op == Op::MatMul && vk::has_mul_mv_k(ctx_, g_.tensor(n.in[0]).type) && g_.tensor(n.in[0]).ne[0] % 256 == 0) {
        q8k_input_[static_cast<size_t>(n.in[1])] = true;
        act_q8k_bytes = std::max(act_q8k_bytes, vk::q8k_row_bytes(static_cast<uint32_t>(g_.tensor(n.in[0]).ne[0])) *
                                                    std::min<uint32_t>(max_rows, kDirectMaxTokens));
      }
      if (n.op == Op::MatMul && vk::has_mul_mv_q8(g_.tensor(n.in[0]).type)) {
        const size_t q8 = vk::mul_mv_q8_bytes(static_cast<uint32_t>(g_.tensor(n.in[0]).ne[0])) *
                          std::min<uint32_t>(max_rows, kDirectMaxTokens);
        act_q8_bytes = std::max(act_q8_bytes, q8);
      }
      if (n.op == Op::MatMul && max_rows > kDirectMaxTokens) {
        mm_cols = std::max(mm_cols, static_cast<uint32_t>(g_.tensor(n.in[0]).ne[0]));
      }
    }
    const auto scratch = [&](size_t bytes) { return bytes > 0 ? ctx_.device_buffer(bytes) : vk::Buffer{}; };
    // One slot per sequence for its one-token parts (decode steps of many sequences).
    attn_slot_bytes_ = opts_.n_seq > 1 ? align_up(attn_one, align_) : 0;
    attn_scratch_ = scratch(attn_slot_bytes_ * static_cast<size_t>(opts_.n_seq) + attn);
    act_q8_ = scratch(act_q8_bytes);
    act_q8k_ = scratch(act_q8k_bytes);
    moe_logits_ = scratch(moe_logits);
    moe_ids_ = scratch(moe_ids);
    moe_weights_ = scratch(moe_ids);
    moe_gate_ = scratch(moe_slots);
    moe_up_ = scratch(moe_slots);
    moe_down_ = scratch(moe_slots);
    if (mm_cols > 0) {
      slab_ = &weights_->slabs(std::max<size_t>(kSlabBytes, static_cast<size_t>(mm_cols) * 2 * 64));
      if (const size_t xs = vk::mul_mm_scratch_bytes(mm_cols, max_rows_); xs > 0) {
        x_f16_ = ctx_.device_buffer(xs);
      }
    }
    // Each part's greedy id (at a multiple of the alignment), each from its own scratch.
    argmax_scratch_bytes_ = align_up(vk::argmax_scratch_bytes(static_cast<uint32_t>(g_.n_vocab)), align_);
    argmax_ = ctx_.host_buffer(align_ * static_cast<size_t>(opts_.n_seq));
    argmax_scratch_ = ctx_.device_buffer(argmax_scratch_bytes_ * static_cast<size_t>(opts_.n_seq));
  }

  void release_all() {
    recordings_.clear();
    for (auto& b : k_) ctx_.release(b);
    for (auto& b : v_) ctx_.release(b);
    for (auto& b : state_) ctx_.release(b);
    for (vk::Buffer* b : {&arena_, &logits_, &step_, &step_dev_, &attn_scratch_, &moe_logits_, &moe_ids_, &moe_weights_, &moe_gate_,
                          &moe_up_, &moe_down_, &x_f16_, &argmax_, &argmax_scratch_, &act_q8_, &act_q8k_}) {
      ctx_.release(*b);
    }
  }

  // ---- per step -----------------------------------------------------------------------------

  struct RopeTable {
    int n_rot;
    graph::RopeParams params;
    TensorId factors;
    size_t offset;
  };

  int rope_index(const Node& n) const {
    const TensorId factors = n.in.size() > 1 ? n.in[1] : -1;
    for (size_t i = 0; i < ropes_.size(); ++i) {
      const auto& r = ropes_[i];
      const graph::RopeParams& a = r.params;
      const graph::RopeParams& b = n.rope;
      if (r.n_rot == n.n_rot && r.factors == factors && a.base == b.base && a.freq_scale == b.freq_scale &&
          a.ext_factor == b.ext_factor && a.attn_factor == b.attn_factor && a.beta_fast == b.beta_fast &&
          a.beta_slow == b.beta_slow && a.n_ctx_orig == b.n_ctx_orig && a.yarn_truncate == b.yarn_truncate) {
        return static_cast<int>(i);
      }
    }
    return -1;
  }

  void write_step(const graph::StepParams& step, const std::vector<Part>& parts) {
    auto* base = static_cast<uint8_t*>(step_.mapped);
    for (size_t i = 0; i < parts.size(); ++i) {
      const uint32_t h[4] = {static_cast<uint32_t>(parts[i].n_past), parts[i].n, 0, 0};
      std::memcpy(base + i * header_stride_, h, sizeof(h));
      const std::vector<int32_t>& table = blocks_->table(parts[i].seq);
      std::memcpy(base + i * header_stride_ + sizeof(h), table.data(), table.size() * 4);
    }
    const uint32_t rows = parts.back().row + parts.back().n;
    auto* ids = reinterpret_cast<int32_t*>(base + tokens_offset_);
    std::fill(ids, ids + rows, 0);  // padding rows embed token 0
    size_t t = 0;
    for (const Part& p : parts) {
      std::memcpy(ids + p.row, step.tokens.data() + t, p.n * 4);
      t += p.n;
    }
    for (const RopeTable& r : ropes_) {
      const float* f = r.factors >= 0 ? weights_->host_f32(r.factors).data() : nullptr;
      auto* cs = reinterpret_cast<float*>(base + r.offset);
      for (const Part& p : parts) {
        for (uint32_t j = 0; j < p.n; ++j) {
          cpu::rope_cos_sin(r.n_rot, r.params, f, p.n_past + static_cast<int32_t>(j),
                            cs + static_cast<size_t>(p.row + j) * static_cast<size_t>(r.n_rot));
        }
      }
    }
  }

  // ---- recording ----------------------------------------------------------------------------

  // Hazard tracking: the ranges written and read since the last barrier.
  struct Range {
    VkBuffer buffer;
    size_t lo, hi;
  };
  static bool overlaps(const std::vector<Range>& set, const Range& r) {
    return std::any_of(set.begin(), set.end(), [&](const Range& s) { return s.buffer == r.buffer && s.lo < r.hi && r.lo < s.hi; });
  }

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

  View act(TensorId id, int64_t rows) const {
    const size_t bytes = static_cast<size_t>(g_.tensor(id).ne[0] * rows) * 4;
    if (id == g_.logits) return View{&logits_, 0, bytes};
    return View{&arena_, act_offset_[static_cast<size_t>(id)], bytes};
  }
  View weight(TensorId id) const { return weights_->raw(id); }
  View weight_f32(TensorId id) const { return weights_->f32(id); }

  Recorded record(const std::vector<Part>& parts) {
    const uint32_t n_tok = parts.back().row + parts.back().n;
    parts_ = &parts;
    multi_ = parts.size() > 1;
    Recorded out;
    out.rec = std::make_unique<vk::Recording>(ctx_, g_.nodes.size() * 8 + 64);
    vk::Recording& rec = *out.rec;
    Tracker tr(rec);
    q8k_of_ = -1;
    x16_of_ = -1;
    slab_next_ = 0;
    done_.assign(g_.nodes.size(), false);
    // The step's parameters as the host wrote them, into device memory first: the kernels read them
    // (block tables per key tile, rotation tables per row) at device latency, not across the bus.
    const auto mirror = [&](size_t offset, size_t bytes) {
      const auto words = static_cast<uint32_t>(bytes / 4), at = static_cast<uint32_t>(offset / 4);
      vk::copy_rows(ctx_, rec, View{&step_}, View{&step_dev_}, 1, 0, words, at, words, 1, words, words, at);
    };
    mirror(0, parts.size() * header_stride_);
    mirror(tokens_offset_, static_cast<size_t>(n_tok) * 4);
    for (const RopeTable& r : ropes_) mirror(r.offset, static_cast<size_t>(r.n_rot) * n_tok * 4);
    tr.full();
    std::vector<int64_t> rows(g_.tensors.size(), 0);
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      const Node& node = g_.nodes[i];
      if (done_[i] || skip_[i]) {  // recorded by a dispatch of a node before it, or by the rotation after it
        rows[static_cast<size_t>(node.out)] = step_rows(node, n_tok, rows);
        continue;
      }
      rows[static_cast<size_t>(node.out)] = emit(rec, tr, node, i, n_tok, rows);
    }
    out.logit_rows = rows[static_cast<size_t>(g_.logits)];
    out.rows = rows;
    out.argmax_rows = std::move(recorded_argmax_rows_);
    recorded_argmax_rows_.clear();
    rec.finish();
    parts_ = nullptr;
    return out;
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
    switch (node.op) {
      case Op::Embed: {
        const auto& wt = g_.tensor(node.in[0]);
        const View ids{&step_dev_, tokens_offset_, static_cast<size_t>(n_tok) * 4};
        tr.before({ids}, {out});
        vk::get_rows(ctx_, rec, wt.type, weight(node.in[0]), ids, out, static_cast<uint32_t>(wt.ne[0]), n_tok, node.scale);
        break;
      }
      case Op::RmsNorm: {
        const View w = node.in.size() > 1 ? weight_f32(node.in[1]) : View{};
        const uint32_t group = node.head_dim > 0 ? static_cast<uint32_t>(node.head_dim) : width;
        if (group == width && vk::rms_norm_row_fits(width)) {
          const View xq = q8k_out(node.out, width, nu);
          tr.before({in(0)}, {out, xq});
          vk::rms_norm_row(ctx_, rec, in(0), View{}, View{}, w, out, xq, width, nu, node.eps, node.offset);
          break;
        }
        tr.before({in(0)}, {out});
        vk::rms_norm(ctx_, rec, in(0), w, out, width, group, nu, node.eps, node.offset);
        break;
      }
      case Op::MatMul:
        matmul(rec, tr, node, in(1), out, nu);
        break;
      case Op::Add: case Op::Mul:
        if (node.op == Op::Add && add_norm(rec, tr, index, in(0), in(1), out, width, nu)) break;
        tr.before({in(0), in(1)}, {out});
        vk::eltwise(ctx_, rec, node.op == Op::Add ? vk::Eltwise::Add : vk::Eltwise::Mul, in(0), in(1), out, width, width, nu);
        break;
      case Op::Rope: {
        const auto& r = ropes_[static_cast<size_t>(rope_index(node))];
        const View cs{&step_dev_, r.offset, static_cast<size_t>(r.n_rot) * n_tok * 4};
        if (rope_norm_[index] >= 0 || (rope_store_[index] >= 0 && !multi_)) {
          rope_heads(rec, tr, node, index, cs, out, rows, nu);
          break;
        }
        tr.before({in(0), cs}, {out});
        vk::rope(ctx_, rec, in(0), cs, out, static_cast<uint32_t>(node.n_head), static_cast<uint32_t>(node.head_dim),
                 static_cast<uint32_t>(node.n_rot), node.rope_mode == graph::RopeMode::NeoX, nu);
        break;
      }
      case Op::Attention: {
        const auto l = static_cast<size_t>(node.layer);
        const auto kw = static_cast<uint32_t>(g_.kv_width_of(node.layer));
        if (!kv_stored_[index] || multi_) {  // else appended by the k rotation
          for (size_t pi = 0; pi < parts.size(); ++pi) {
            const Part& p = parts[pi];
            const View k = part_rows(in(1), node.in[1], p), v = part_rows(in(2), node.in[2], p);
            // Parts write disjoint rows (blocks a sequence holds alone once prepared): no barrier
            // between them.
            const View kc{&k_[l]}, vc{&v_[l]};
            if (pi == 0) tr.before({k, v, header(pi)}, {kc, vc});
            else tr.before({k, v, header(pi)}, {});
            vk::kv_store(ctx_, rec, kv_type_, k, v, kc, vc, header(pi), kw, p.n);
          }
          tr.full();
        }
        // Each part over its own sequence's cache. One part: the whole op. Several: a one-token part
        // has a scratch slot of its own, so every such part's key-range pass is recorded, then one
        // barrier, then every one's merge; a longer part does the whole op in the scratch past the
        // slots (the tracker orders them).
        const auto args = [&](size_t pi) {
          const Part& p = parts[pi];
          vk::AttentionArgs a;
          a.type = kv_type_;
          a.q = part_rows(in(0), node.in[0], p);
          a.k_cache = View{&k_[l]};
          a.v_cache = View{&v_[l]};
          a.sinks = node.in.size() > 3 ? weight_f32(node.in[3]) : View{};
          a.step = header(pi);
          a.out = part_rows(out, node.out, p);
          const size_t slots = multi_ ? attn_slot_bytes_ * static_cast<size_t>(opts_.n_seq) : 0;
          a.scratch = multi_ && p.n == 1 ? View{&attn_scratch_, pi * attn_slot_bytes_, attn_slot_bytes_}
                                         : View{&attn_scratch_, slots, attn_scratch_.size - slots};
          a.n_head = static_cast<uint32_t>(node.n_head);
          a.n_head_kv = static_cast<uint32_t>(node.n_head_kv);
          a.head_dim = static_cast<uint32_t>(node.head_dim);
          a.n_tokens = p.n;
          a.n_ctx = static_cast<uint32_t>(opts_.n_ctx);
          a.sliding_window = static_cast<uint32_t>(std::max(0, node.sliding_window));
          a.scale = node.scale;
          a.softcap = node.cap;
          return a;
        };
        if (!multi_) {
          vk::AttentionArgs a = args(0);
          if (vk::attention_q8k_fits(ctx_, a.n_head, a.head_dim)) a.xq = q8k_out(node.out, width, nu);  // o_proj's codes
          tr.before({a.q, a.k_cache, a.v_cache, a.step}, {a.out, a.scratch, a.xq});
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
        tr.before({in(0), in(1)}, {out, xq});
        vk::eltwise(ctx_, rec, node.op == Op::SwiGLU ? vk::Eltwise::SwiGLU : vk::Eltwise::GeGLU, in(0), in(1), out, width,
                    width, nu, false, 0, 0, xq);
        break;
      }
      case Op::Softcap:
        tr.before({in(0)}, {out});
        vk::eltwise(ctx_, rec, vk::Eltwise::Softcap, in(0), View{}, out, width, width, nu, false, node.cap);
        break;
      case Op::SigmoidMul: {
        const auto bw = static_cast<uint32_t>(g_.tensor(node.in[1]).ne[0]);
        tr.before({in(0), in(1)}, {out});
        vk::eltwise(ctx_, rec, vk::Eltwise::SigmoidMul, in(0), in(1), out, width, bw, nu);
        break;
      }
      case Op::Scale: {
        const auto& st = g_.tensor(node.in[1]);
        const bool one = st.ne[0] * st.ne[1] * st.ne[2] * st.ne[3] == 1;
        tr.before({in(0)}, {out});
        vk::eltwise(ctx_, rec, vk::Eltwise::Mul, in(0), weight_f32(node.in[1]), out, width, one ? 1u : width, nu, true);
        break;
      }
      case Op::Split: {
        const auto in_w = static_cast<uint32_t>(g_.tensor(node.in[0]).ne[0]);
        const auto piece = width / static_cast<uint32_t>(node.n_head);
        tr.before({in(0)}, {out});
        vk::copy_rows(ctx_, rec, in(0), out, nu, 0, in_w, static_cast<uint32_t>(node.group_offset),
                      static_cast<uint32_t>(node.group_stride), static_cast<uint32_t>(node.n_head), piece, width, 0);
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
          tr.before({x, st}, {y, st});
          vk::ssm_conv(ctx_, rec, x, weight_f32(node.in[1]), st, y, width, static_cast<uint32_t>(wt.ne[0]), p.n);
        }
        break;
      }
      case Op::DeltaNet: {
        for (const Part& p : parts) {
          const View st = state(index, p.seq), y = part_rows(out, node.out, p);
          const auto x = [&](size_t k) { return part_rows(in(k), node.in[k], p); };
          tr.before({x(0), x(1), x(2), x(3), x(4), st}, {y, st});
          vk::delta_net(ctx_, rec, x(0), x(1), x(2), x(3), x(4), weight_f32(node.in[5]), weight_f32(node.in[6]), st, y,
                        static_cast<uint32_t>(node.n_head), static_cast<uint32_t>(node.n_head_kv),
                        static_cast<uint32_t>(node.head_dim), static_cast<uint32_t>(node.head_dim_v), node.tiled_heads, p.n);
        }
        break;
      }
      case Op::MoE:
        moe(rec, tr, node, rows, out, nu);
        break;
    }
    // Greedy decoding reads one id per sequence: the argmax of its last logits row, on the device.
    if (node.out == g_.logits) {
      const auto nv = static_cast<size_t>(g_.n_vocab);
      int64_t row = -1;
      for (size_t k = 0; k < parts.size(); ++k) {
        row += parts[k].all ? parts[k].n : 1;
        const View last{&logits_, static_cast<size_t>(row) * nv * 4, nv * 4}, id{&argmax_, k * align_, 4};
        const View scratch{&argmax_scratch_, k * argmax_scratch_bytes_, argmax_scratch_bytes_};
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
    const auto act_of = [&](TensorId t) { return act(t, rows[static_cast<size_t>(t)]); };
    a.x = act_of(node.in[0]);
    a.cs = cs;
    a.y = out;
    a.n_head = static_cast<uint32_t>(node.n_head);
    a.head_dim = static_cast<uint32_t>(node.head_dim);
    a.n_rot = static_cast<uint32_t>(node.n_rot);
    a.n_tokens = n;
    a.neox = node.rope_mode == graph::RopeMode::NeoX;
    if (rope_norm_[index] >= 0) {
      const Node& norm = g_.nodes[static_cast<size_t>(rope_norm_[index])];
      a.x = act_of(norm.in[0]);
      a.norm = true;
      a.norm_w = norm.in.size() > 1 ? weight_f32(norm.in[1]) : View{};
      a.eps = norm.eps;
      a.offset = norm.offset;
    }
    View kc, vc;
    if (rope_store_[index] >= 0 && !multi_) {  // one sequence: its cache rows
      const Node& at = g_.nodes[static_cast<size_t>(rope_store_[index])];
      const auto l = static_cast<size_t>(at.layer);
      kc = View{&k_[l]};
      vc = View{&v_[l]};
      a.store = true;
      a.type = kv_type_;
      a.v = act_of(at.in[2]);
      a.k_cache = kc;
      a.v_cache = vc;
      a.step = header(0);
    }
    tr.before({a.x, cs, a.v, a.step}, {out, kc, vc});
    vk::rope_heads(ctx_, rec, a);
  }

  // Where the K-quant products of a step read `t` (its rows quantized by the op that writes it, q8k_of_
  // set): the region of act_q8k_ for its codes. Else an empty view.
  View q8k_out(TensorId t, uint32_t width, uint32_t n) {
    if (!q8k_input_[static_cast<size_t>(t)] || n > kDirectMaxTokens) return View{};
    q8k_of_ = t;
    return q8k_view(width, n);
  }

  View q8k_view(uint32_t width, uint32_t n) const { return View{&act_q8k_, 0, vk::q8k_row_bytes(width) * n}; }

  // The codes of t (rows x) for a K-quant product: those its producer wrote, else quantized here.
  View q8k_codes(vk::Recording& rec, Tracker& tr, TensorId t, View x, uint32_t width, uint32_t n) {
    if (q8k_of_ != t) {
      tr.before({x}, {q8k_view(width, n)});
      vk::quantize_q8k(ctx_, rec, x, q8k_view(width, n), width, n);
      q8k_of_ = t;
    }
    return q8k_view(width, n);
  }

  // A residual add followed by the whole-row norm of its sum: one dispatch for both (the norm node is
  // then skipped). Not where the norm's output shares memory with an addend other than row for row.
  bool add_norm(vk::Recording& rec, Tracker& tr, size_t index, View a, View b, View sum, uint32_t width, uint32_t n) {
    if (index + 1 >= g_.nodes.size()) return false;
    const Node& norm = g_.nodes[index + 1];
    if (norm.op != Op::RmsNorm || norm.in[0] != g_.nodes[index].out || norm.head_dim > 0 || !vk::rms_norm_row_fits(width) ||
        a.bytes != sum.bytes || b.bytes != sum.bytes) {
      return false;
    }
    const View y = act(norm.out, n);
    const auto clash = [&](const View& v) {
      return v.buffer == y.buffer && v.offset != y.offset && v.offset < y.offset + y.bytes && y.offset < v.offset + v.bytes;
    };
    if (clash(a) || clash(b)) return false;
    const View w = norm.in.size() > 1 ? weight_f32(norm.in[1]) : View{};
    const View xq = q8k_out(norm.out, width, n);
    tr.before({a, b}, {sum, y, xq});
    vk::rms_norm_row(ctx_, rec, a, b, sum, w, y, xq, width, n, norm.eps, norm.offset);
    done_[index + 1] = true;
    return true;
  }

  // Few tokens: the weights multiply the rows directly. Many: the weight is expanded to f16 a slab of
  // rows at a time and multiplied as a matrix (tensor cores where the device has them).
  void matmul(vk::Recording& rec, Tracker& tr, const Node& node, View x, View out, uint32_t n) {
    const auto& wt = g_.tensor(node.in[0]);
    const auto ncols = static_cast<uint32_t>(wt.ne[0]), nrows = static_cast<uint32_t>(wt.ne[1]);
    const View bias = node.in.size() > 2 ? weight_f32(node.in[2]) : View{};
    if (vk::has_mul_mv_q8(wt.type) && n <= kDirectMaxTokens) {
      // The 32-element formats as the CPU computes them (quantized activations, integer sums, its float
      // expression per block): the same greedy tokens.
      const View xq{&act_q8_, 0, vk::mul_mv_q8_bytes(ncols) * n};
      tr.before({x}, {xq, out});
      vk::mul_mv_q8(ctx_, rec, wt.type, weight(node.in[0]), x, xq, out, ncols, nrows, n);
      add_bias(rec, tr, bias, out, nrows, n);
      return;
    }
    if (n <= kDirectMaxTokens && vk::has_mul_mv_k(ctx_, wt.type) && ncols % 256 == 0) {
      // K-quants as the CPU computes them: activations quantized once for every product that reads
      // them (q, k and v; gate and up), integer sums per block.
      const View xq = q8k_codes(rec, tr, node.in[1], x, ncols, n);
      tr.before({xq}, {out});
      vk::mul_mv_k(ctx_, rec, wt.type, weight(node.in[0]), xq, out, ncols, nrows, n);
      add_bias(rec, tr, bias, out, nrows, n);
      return;
    }
    if (n <= kDirectMaxTokens || !slab_ || ncols % 32 != 0) {  // the GEMM takes K in steps of 32
      tr.before({x}, {out});
      vk::mul_mv(ctx_, rec, wt.type, weight(node.in[0]), x, out, bias, ncols, nrows, n);
      return;
    }
    const uint32_t slab_rows = std::max<uint32_t>(64, static_cast<uint32_t>((*slab_)[0].size / (static_cast<size_t>(ncols) * 2)) / 64 * 64);
    const bool coop = vk::mul_mm_kernel(ctx_) == vk::MulMmKernel::CoopMatNV;
    const View xs{&x_f16_, 0, vk::mul_mm_scratch_bytes(ncols, n)};
    if (coop && x16_of_ != node.in[1]) {  // X in f16 once for every product that reads it (q, k and v; gate and up)
      tr.before({x}, {xs});
      vk::mul_mm_convert_x(ctx_, rec, x, xs, ncols, n);
      x16_of_ = node.in[1];
    }
    for (uint32_t r0 = 0; r0 < nrows; r0 += slab_rows) {
      // Slabs in turn: a weight's expansion runs beside the product before it, which reads the other.
      const uint32_t rows = std::min(slab_rows, nrows - r0);
      const View slab{&(*slab_)[slab_next_], 0, 0};
      slab_next_ ^= 1;
      tr.before({}, {slab});
      vk::dequant_f16(ctx_, rec, wt.type, weight(node.in[0]), slab, ncols, r0, rows);
      if (coop) {
        tr.before({slab, xs}, {out});
        vk::mul_mm_f16(ctx_, rec, slab, xs, out, ncols, rows, n, nrows, r0);
      } else {
        tr.before({slab, x}, {out});
        vk::mul_mm(ctx_, rec, slab, x, out, ncols, rows, n, nrows, r0, View{});
      }
    }
    add_bias(rec, tr, bias, out, nrows, n);
  }

  void add_bias(vk::Recording& rec, Tracker& tr, View bias, View out, uint32_t nrows, uint32_t n) {
    if (!bias.buffer) return;
    tr.before({out}, {out});
    vk::eltwise(ctx_, rec, vk::Eltwise::Add, out, bias, out, nrows, nrows, n, true);
  }

  // Mixture of experts: router logits (a mat-vec), routing on the device (ids and weights per token),
  // the selected experts' gate/up products, the activation, their down products, the weighted sum.
  void moe(vk::Recording& rec, Tracker& tr, const Node& node, const std::vector<int64_t>& rows, View out, uint32_t n) {
    const auto& rt = g_.tensor(node.in[1]);
    const auto& gt = g_.tensor(node.in[2]);
    const auto& ut = g_.tensor(node.in[3]);
    const auto& dt = g_.tensor(node.in[4]);
    const bool fused = node.in[2] == node.in[3];
    const auto d = static_cast<uint32_t>(rt.ne[0]);
    const auto ff = static_cast<uint32_t>(fused ? gt.ne[1] / 2 : gt.ne[1]);
    const auto ne = static_cast<uint32_t>(node.n_expert), k = static_cast<uint32_t>(node.n_expert_used);
    const TensorId x_id = node.in[0];
    const View x = act(x_id, rows[static_cast<size_t>(x_id)]);
    const TensorId rin = node.moe_router_in >= 0 ? node.in[static_cast<size_t>(node.moe_router_in)] : x_id;
    const View router_x = act(rin, rows[static_cast<size_t>(rin)]);
    const View logits{&moe_logits_, 0, static_cast<size_t>(ne) * n * 4};
    const View ids{&moe_ids_, 0, static_cast<size_t>(k) * n * 4}, wts{&moe_weights_, 0, static_cast<size_t>(k) * n * 4};
    tr.before({router_x}, {logits});
    vk::mul_mv(ctx_, rec, rt.type, weight(node.in[1]), router_x, logits, View{}, d, ne, n);
    const bool biased = node.moe_bias >= 0;
    const auto bias = [&](int j) {
      return biased ? weight_f32(node.in[static_cast<size_t>(node.moe_bias + j)]) : View{};
    };
    const View escale = node.moe_expert_scale >= 0 ? weight_f32(node.in[static_cast<size_t>(node.moe_expert_scale)]) : View{};
    tr.before({logits}, {ids, wts});
    vk::moe_route(ctx_, rec, logits, bias(0), escale, ids, wts, ne, k, n,
                  node.moe_routing == graph::MoeRouting::TopKSoftmax, node.norm_topk, node.scale);
    const size_t slot_bytes = static_cast<size_t>(k) * n * 4;
    const View g{&moe_gate_, 0, slot_bytes * ff}, u{&moe_up_, 0, slot_bytes * ff}, y{&moe_down_, 0, slot_bytes * d};
    // Experts of the 32-element formats in decode-sized steps: the CPU's arithmetic (quantized
    // activations), as for MatMul.
    const auto exact = [&](gguf::TensorType t) { return vk::has_mul_mv_q8(t) && n <= kMvMaxTokens; };
    const auto expert_product = [&](gguf::TensorType type, View w, View xin, View yout, View b, uint32_t cols,
                                    uint32_t rows_out, bool per_slot) {
      const uint32_t x_rows = n * (per_slot ? k : 1);
      if (n <= kMvMaxTokens && cols % 256 == 0 && vk::has_mul_mv_k(ctx_, type)) {
        const View xq{&act_q8k_, 0, vk::q8k_row_bytes(cols) * x_rows};
        tr.before({xin}, {xq});
        vk::quantize_q8k(ctx_, rec, xin, xq, cols, x_rows);
        q8k_of_ = -1;
        tr.before({xq, ids}, {yout});
        vk::mul_mv_k_id(ctx_, rec, type, w, ids, xq, yout, b, cols, rows_out, ne, k, n, per_slot);
      } else if (exact(type)) {
        const View xq{&act_q8_, 0, vk::mul_mv_q8_bytes(cols) * n * (per_slot ? k : 1)};
        tr.before({xin}, {xq});
        vk::mul_mv_q8_id(ctx_, rec, type, w, ids, xin, xq, yout, b, cols, rows_out, ne, k, n, per_slot);
      } else {
        vk::mul_mv_id(ctx_, rec, type, w, ids, xin, yout, b, cols, rows_out, ne, k, n, per_slot);
      }
    };
    tr.before({ids, x}, {g, u});
    if (fused) {
      // One {d, 2 ff, n_expert} tensor: both halves at once, then split into gate and up.
      const View gu{&moe_down_, 0, slot_bytes * 2 * ff};
      tr.before({ids, x}, {gu});
      expert_product(gt.type, weight(node.in[2]), x, gu, View{}, d, 2 * ff, false);
      tr.before({gu}, {g, u});
      vk::copy_rows(ctx_, rec, gu, g, k * n, 0, 2 * ff, 0, ff, 1, ff, ff, 0);
      vk::copy_rows(ctx_, rec, gu, u, k * n, 0, 2 * ff, ff, ff, 1, ff, ff, 0);
    } else {
      expert_product(gt.type, weight(node.in[2]), x, g, bias(1), d, ff, false);
      tr.before({ids, x}, {g, u});  // the second product's activation codes reuse the same scratch
      expert_product(ut.type, weight(node.in[3]), x, u, bias(2), d, ff, false);
    }
    tr.before({g, u}, {g});
    switch (node.moe_glu) {
      case graph::MoeGlu::SwiGLU: vk::eltwise(ctx_, rec, vk::Eltwise::SwiGLU, g, u, g, ff, ff, k * n); break;
      case graph::MoeGlu::GeGLU: vk::eltwise(ctx_, rec, vk::Eltwise::GeGLU, g, u, g, ff, ff, k * n); break;
      case graph::MoeGlu::SwiGLUClamped:
        vk::eltwise(ctx_, rec, vk::Eltwise::SwiGLUClamped, g, u, g, ff, ff, k * n, false, node.glu_alpha, node.glu_limit);
        break;
    }
    tr.before({g, ids}, {y});
    expert_product(dt.type, weight(node.in[4]), g, y, bias(3), ff, d, true);
    tr.before({y, wts}, {out});
    vk::moe_combine(ctx_, rec, y, wts, out, d, k, n);
  }

  std::shared_ptr<VulkanWeights> weights_;
  vk::Context& ctx_;
  const graph::Graph& g_;
  ExecOptions opts_;
  size_t align_;
  vk::KvCacheType kv_type_ = vk::KvCacheType::F16;
  std::vector<size_t> act_offset_;
  vk::Buffer arena_, logits_, step_, step_dev_;
  size_t tokens_offset_ = 0;
  std::vector<RopeTable> ropes_;
  std::vector<size_t> kv_row_bytes_;
  std::unique_ptr<KvBlocks> blocks_;  // which cache blocks hold each sequence's positions
  int32_t blocks_per_seq_ = 0;        // table entries per sequence (its context in blocks)
  std::vector<vk::Buffer> k_, v_, state_;
  std::vector<size_t> state_floats_, state_seq_bytes_;  // per node: a sequence's state, and its region
  size_t header_stride_ = 16;
  uint32_t row_pad_ = 1;    // parts of a step start at multiples of this row
  uint32_t max_rows_ = 1;   // a step's rows at most: max_tokens and the padding between parts
  const std::vector<Part>* parts_ = nullptr;  // the step being recorded
  bool multi_ = false;      // it has several parts
  vk::Buffer attn_scratch_, moe_logits_, moe_ids_, moe_weights_, moe_gate_, moe_up_, moe_down_, x_f16_, argmax_,
      argmax_scratch_, act_q8_, act_q8k_;
  size_t argmax_scratch_bytes_ = 0;
  size_t attn_slot_bytes_ = 0;  // a one-token part's region of attn_scratch_ (several sequences)
  std::vector<int64_t> recorded_argmax_rows_;  // the recording being made: the logits rows it takes the argmax of
  std::vector<int64_t> argmax_rows_;           // the last step's
  TensorId q8k_of_ = -1;  // the tensor act_q8k_ holds the codes of, in the recording being made
  std::vector<bool> done_;  // per node, in the recording being made: recorded with an earlier node
  TensorId x16_of_ = -1;  // the tensor x_f16_ holds in f16, in the recording being made
  std::array<vk::Buffer, 2>* slab_ = nullptr;  // the weights' slabs (VulkanWeights::slabs), when this context prefills
  int slab_next_ = 0;
  std::vector<bool> q8k_input_;  // per tensor: read by a K-quant product (mul_mv_k) in decode
  // plan_fusions: per node, the norm a rotation does (-1: none), the attention whose k and v it
  // appends (-1: none), whether the node is done by another's dispatch, whether an attention's
  // cache append is done by its k rotation.
  std::vector<int> rope_norm_, rope_store_;
  std::vector<bool> skip_, kv_stored_;
  std::map<std::vector<uint32_t>, Recorded> recordings_;  // by shape: (sequence, tokens, all logits) per part
  int64_t logit_rows_ = 0;
  const std::vector<int64_t>* last_rows_ = nullptr;
  bool recurrent_ = false;
  SavedStateLayout layout_;  // what save_state() writes
  std::vector<int64_t> state_pos_;  // per sequence: tokens its state has absorbed (-1: a step failed part-way)
  uint64_t device_bytes_ = 0;
};

class VulkanBackend final : public Backend {
 public:
  explicit VulkanBackend(int device) : ctx_(vk::Context::shared(device)) {}
  std::string name() const override { return "vulkan"; }
  std::string device_name() const override { return ctx_->device_name(); }
  double measured_bandwidth_gbs() override { return ctx_->copy_bandwidth_gbs(); }
  uint64_t device_bytes_in_use() const override { return ctx_->device_bytes_in_use(); }
  std::string unsupported(const graph::Graph& g, const Node& n) const override { return vulkan_unsupported(g, n); }
  using Backend::load;
  std::shared_ptr<Weights> load(const graph::Graph& g, const gguf::File& file, const LoadProgress& progress) override {
    return std::make_shared<VulkanWeights>(ctx_, g, file, progress);
  }

 private:
  std::shared_ptr<vk::Context> ctx_;
};

std::unique_ptr<Executable> VulkanWeights::instantiate(const ExecOptions& opts) {
  return std::make_unique<VulkanExecutable>(std::static_pointer_cast<VulkanWeights>(shared_from_this()), opts);
}

}  // namespace

std::unique_ptr<Backend> make_vulkan_backend(int device) { return std::make_unique<VulkanBackend>(device); }

}  // namespace zinc::backend
