// The Vulkan backend's contexts: a graph compiled into dispatches of the kernels in shaders/vulkan.
//
// The weights are uploaded once (VulkanWeights, vk_weights.h) and shared by every context. A context is
// planned once (vk_plan.h: fusions, the activation arena, the step buffer's layout, scratch sizes),
// then holds its buffers: the arena, each attending layer's K and V cache in blocks of rows that
// sequences hold through tables (SequencedExecutable), recurrent state per node and sequence, scratch,
// and a host-visible step buffer the host writes per step. Each step shape is recorded once
// (vk_recorder.h) and replayed: decode replays one command buffer per token with a single submit.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

#include "backend/backend.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/exec_common.h"
#include "backend/vulkan/vk_context.h"
#include "backend/vulkan/vk_plan.h"
#include "backend/vulkan/vk_recorder.h"
#include "backend/vulkan/vk_weights.h"
#include "core/error.h"
#include "core/knobs.h"

namespace zinc::backend {

namespace {

using graph::Node;
using graph::TensorId;
using vk::OwnedBuffer;
using vk::View;

using vk::align_up;

class VulkanExecutable final : public SharedDeviceExecutable {
 public:
  VulkanExecutable(std::shared_ptr<vk::VulkanWeights> weights, const graph::Graph& g, const ExecOptions& opts)
      : SharedDeviceExecutable(g, opts, weights->step_mutex), weights_(std::move(weights)), ctx_(weights_->ctx()) {
    static_assert(vk::kKvBlockRows == kKvBlock, "the kernels' cache blocks are the sequences' blocks");
    // Its own bytes: what the device holds more after it is made.
    const uint64_t before = ctx_.device_bytes_in_use();
    plan_ = vk::make_plan(ctx_, g_, opts_, state_floats_);
    allocate();
    device_bytes_ = ctx_.device_bytes_in_use() - before;
  }
  ~VulkanExecutable() override { recordings_.clear(); }  // before the buffers they bind

  uint64_t device_bytes() const override { return device_bytes_; }

  using Executable::argmax;
  int32_t argmax(int64_t row) const override {
    for (size_t k = 0; k < argmax_rows_.size(); ++k) {
      if (argmax_rows_[k] == row) {
        return *reinterpret_cast<const int32_t*>(static_cast<const uint8_t*>(argmax_->mapped) + k * plan_.align);
      }
    }
    return Executable::argmax(row);
  }

  std::vector<float> activation(TensorId id) const override {
    check_activation(g_, opts_, id);
    if (!last_rows_) throw Error("no step has run yet");
    const View v = vk::activation_view(g_, plan_, res_, id, (*last_rows_)[static_cast<size_t>(id)]);
    std::vector<float> out(v.bytes / 4);
    ctx_.download(*v.buffer, v.offset, out.data(), v.bytes);
    return out;
  }

  std::span<const float> logits() const override {
    return {static_cast<const float*>(logits_->mapped), static_cast<size_t>(logit_rows_ * n_vocab())};
  }
  std::span<const float> hidden() const override {
    if (!hidden_) return Executable::hidden();
    return {static_cast<const float*>(hidden_->mapped), static_cast<size_t>(hidden_rows_ * hidden_width())};
  }
  int64_t hidden_width() const override { return g_.hidden < 0 ? 0 : g_.tensor(g_.hidden).ne[0]; }

  void run(const graph::StepParams& step) override {
    const std::lock_guard<std::mutex> lock(weights_->step_mutex);
    begin_step(step);
    // Each sequence's part of the step, at a row of the step's activations that starts a view
    // (row_pad).
    std::vector<vk::Part> parts;
    uint32_t row = 0;
    for (const graph::SeqStep& s : step.seqs) {
      row = static_cast<uint32_t>(align_up(row, plan_.row_pad));
      parts.push_back({s.seq, s.n_past, static_cast<uint32_t>(s.n_tokens), s.all_logits, row, s.keep_states && kept_states() > 0});
      row += static_cast<uint32_t>(s.n_tokens);
    }
    write_step(step, parts);
    // A step of one sequence whose rows all attend few enough keys (the first positions of a
    // sequence) takes its own recording with one attention split and no merge; its rows are the same
    // bits as in a recording of several splits (vk::attention_one_keys).
    if (parts.size() == 1) parts[0].max_keys = vk::attention_keys_bound(static_cast<uint32_t>(parts[0].n_past), parts[0].n);
    // Recordings are keyed by the step's shape: which sequences, how many tokens each, which want
    // every row's logits, which keep their recurrent states (their cache and state offsets are
    // recorded; positions come from the step buffer), and the bound on their keys.
    std::vector<uint32_t> key;
    for (const vk::Part& p : parts) {
      key.insert(key.end(), {static_cast<uint32_t>(p.seq), p.n, p.all ? 1u : 0u, p.keep ? 1u : 0u, p.max_keys});
    }
    auto it = recordings_.find(key);
    if (it == recordings_.end()) {
      // Keep the decode shapes (one token per sequence) and a few others; a new shape beyond that
      // evicts the others (and every shape, when decode shapes alone fill the table).
      if (recordings_.size() >= kMaxRecordings) {
        for (auto r = recordings_.begin(); r != recordings_.end();) r = decode_shape(r->first) ? std::next(r) : recordings_.erase(r);
        if (recordings_.size() >= kMaxRecordings) recordings_.clear();
        last_rows_ = nullptr;
      }
      const auto t0 = std::chrono::steady_clock::now();
      it = recordings_.emplace(key, vk::record_step(ctx_, g_, opts_, plan_, *weights_, res_, parts)).first;
      ctx_.note_recording(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    it->second.rec->submit_and_wait();
    logit_rows_ = it->second.logit_rows;
    hidden_rows_ = it->second.hidden_rows;
    last_rows_ = &it->second.rows;
    argmax_rows_ = it->second.argmax_rows;
    end_step(step);
  }

  // Kernels are chosen by a step's size (the mat-vec's tokens per pass up to 8, attention's query rows
  // per workgroup, the prefill GEMM's tiles) and by whether it has several sequences (their cache
  // appends apart from the rotation): a step of one sequence and each of 1..8 tokens, of 9, 11 and 13
  // (two passes of 5, 6 and 7 tokens: an MoE router's float mat-vec runs from 9 tokens on, its own
  // kernel below) and the powers of two up to max_tokens, and one of two sequences, is recorded and
  // dropped, which makes every pipeline those choices name. A first process on a machine compiles them
  // here (seconds) instead of during requests.
  void warm_up() override {
    const std::lock_guard<std::mutex> lock(weights_->step_mutex);
    std::vector<uint32_t> sizes = {1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 13};
    for (uint32_t n = 16; n < static_cast<uint32_t>(opts_.max_tokens); n *= 2) sizes.push_back(n);
    sizes.push_back(static_cast<uint32_t>(opts_.max_tokens));
    for (uint32_t n : sizes) {
      if (n > static_cast<uint32_t>(opts_.max_tokens)) break;
      (void)vk::record_step(ctx_, g_, opts_, plan_, *weights_, res_, {{0, 0, n, false, 0}});
    }
    if (opts_.n_seq > 1 && opts_.max_tokens > 1) {
      (void)vk::record_step(ctx_, g_, opts_, plan_, *weights_, res_,
                            {{0, 0, 1, false, 0}, {1, 0, 1, false, static_cast<uint32_t>(align_up(1, plan_.row_pad))}});
    }
  }

  // The device's queue is the contexts' one: moving a sequence's bytes waits for any step in flight
  // (SharedDeviceExecutable holds the weights' step mutex).

 private:
  static constexpr size_t kMaxRecordings = 16;

  static bool decode_shape(const std::vector<uint32_t>& key) {
    for (size_t i = 1; i < key.size(); i += 5) {
      if (key[i] != 1) return false;
    }
    return true;
  }

  // The buffers the plan asks for (released with the context, or as soon as one fails). One of no
  // bytes is an empty buffer (no memory), as launchers given unused scratch expect.
  void allocate() {
    // ZINC_VULKAN_POISON=1 (debugging): every device buffer starts as NaNs, so a kernel reading what
    // nothing wrote shows in the results (the buffers that must start at zero are zeroed below).
    const bool poison = knob_u32("ZINC_VULKAN_POISON", 0, 0, 1) == 1;
    const auto device = [&](OwnedBuffer& b, size_t bytes) {
      if (bytes > 0) b = ctx_.owned_device_buffer(bytes);
      if (b && poison) ctx_.fill_words(*b, 0, b->size, 0xffffffffu);
      return b ? b.get() : &empty_;
    };
    res_.arena = device(arena_, plan_.arena_bytes);
    logits_ = ctx_.owned_host_buffer(plan_.logits_bytes);
    res_.logits = logits_.get();
    if (plan_.hidden_bytes > 0) {
      hidden_ = ctx_.owned_host_buffer(plan_.hidden_bytes);
      res_.hidden = hidden_.get();
    }
    step_ = ctx_.owned_host_buffer(plan_.step_bytes);
    std::memset(step_->mapped, 0, plan_.step_bytes);
    res_.step_host = step_.get();
    res_.step_dev = device(step_dev_, plan_.step_bytes);  // what the kernels read: a recording copies the step's part
    // The caches: every block any sequence's table may name; each sequence's recurrent state in its
    // own aligned region.
    k_.resize(kv_row_bytes_.size());
    v_.resize(kv_row_bytes_.size());
    res_.k.assign(kv_row_bytes_.size(), nullptr);
    res_.v.assign(kv_row_bytes_.size(), nullptr);
    for (size_t l = 0; l < kv_row_bytes_.size(); ++l) {
      if (kv_row_bytes_[l] == 0) continue;  // a layer without attention
      const size_t bytes = align_up(kv_row_bytes_[l] * kKvBlock * static_cast<size_t>(blocks_.n_blocks()), 4);
      res_.k[l] = device(k_[l], bytes);
      res_.v[l] = device(v_[l], bytes);
      ctx_.fill_zero(*k_[l], 0, bytes);
      ctx_.fill_zero(*v_[l], 0, bytes);
    }
    state_.resize(g_.nodes.size());
    res_.state.assign(g_.nodes.size(), nullptr);
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      if (plan_.state_seq_bytes[i] == 0) continue;
      res_.state[i] = device(state_[i], plan_.state_seq_bytes[i] * static_cast<size_t>(opts_.n_seq));
      ctx_.fill_zero(*state_[i], 0, state_[i]->size);
    }
    // Room for the states a speculative step keeps after each of its tokens.
    kept_.resize(g_.nodes.size());
    res_.kept.assign(g_.nodes.size(), nullptr);
    for (size_t i = 0; i < g_.nodes.size() && kept_states() > 0; ++i) {
      if (plan_.state_seq_bytes[i] == 0) continue;
      res_.kept[i] = device(kept_[i], plan_.state_seq_bytes[i] * static_cast<size_t>(opts_.n_seq) * static_cast<size_t>(kept_states()));
    }
    res_.attn_scratch = device(attn_scratch_, plan_.attn_scratch_bytes);
    res_.act_q8 = device(act_q8_, plan_.act_q8_bytes);
    res_.act_q8k = device(act_q8k_, plan_.act_q8k_bytes);
    res_.moe_logits = device(moe_logits_, plan_.moe_logits_bytes);
    res_.moe_ids = device(moe_ids_, plan_.moe_ids_bytes);
    res_.moe_weights = device(moe_weights_, plan_.moe_ids_bytes);
    if (plan_.head_count_bytes > 0) {
      res_.head_count = device(head_count_, plan_.head_count_bytes);
      ctx_.fill_zero(*head_count_, 0, plan_.head_count_bytes);
    }
    if (plan_.moe_count_bytes > 0) {
      res_.moe_count = device(moe_count_, plan_.moe_count_bytes);
      ctx_.fill_zero(*moe_count_, 0, plan_.moe_count_bytes);
    }
    if (plan_.norm_tail_bytes > 0) {
      res_.norm_tail = device(norm_tail_, plan_.norm_tail_bytes);
      ctx_.fill_zero(*norm_tail_, 0, plan_.norm_tail_bytes);
    }
    if (plan_.glu_count_bytes > 0) {
      res_.glu_count = device(glu_count_, plan_.glu_count_bytes);
      ctx_.fill_zero(*glu_count_, 0, plan_.glu_count_bytes);
    }
    if (plan_.delta_count_bytes > 0) {
      res_.delta_count = device(delta_count_, plan_.delta_count_bytes);
      ctx_.fill_zero(*delta_count_, 0, plan_.delta_count_bytes);
    }
    res_.moe_gate = device(moe_gate_, plan_.moe_slot_bytes);
    res_.moe_up = device(moe_up_, plan_.moe_slot_bytes);
    res_.moe_down = device(moe_down_, plan_.moe_slot_bytes);
    res_.moe_route = device(moe_route_, plan_.moe_route_bytes);
    res_.x_f16 = device(x_f16_, plan_.x_f16_bytes);
    // Each part's greedy id (at a multiple of the alignment), each from its own scratch.
    argmax_ = ctx_.owned_host_buffer(plan_.align * static_cast<size_t>(opts_.n_seq));
    res_.argmax = argmax_.get();
    res_.argmax_scratch = device(argmax_scratch_, plan_.argmax_scratch_bytes * static_cast<size_t>(opts_.n_seq));
  }

  // The step buffer: each part's header and block table, the token ids of the step's rows, the
  // rotation tables' (cos, sin) for each row's position.
  void write_step(const graph::StepParams& step, const std::vector<vk::Part>& parts) {
    auto* base = static_cast<uint8_t*>(step_->mapped);
    for (size_t i = 0; i < parts.size(); ++i) {
      const uint32_t h[4] = {static_cast<uint32_t>(parts[i].n_past), parts[i].n, 0, 0};
      std::memcpy(base + i * plan_.header_stride, h, sizeof(h));
      const std::vector<int32_t>& table = blocks_.table(parts[i].seq);
      std::memcpy(base + i * plan_.header_stride + sizeof(h), table.data(), table.size() * 4);
    }
    const uint32_t rows = parts.back().row + parts.back().n;
    auto* ids = reinterpret_cast<int32_t*>(base + plan_.tokens_offset);
    std::fill(ids, ids + rows, 0);  // padding rows embed token 0
    size_t t = 0;
    for (const vk::Part& p : parts) {
      std::memcpy(ids + p.row, step.tokens.data() + t, p.n * 4);
      t += p.n;
    }
    if (const size_t w = plan_.input_width; w > 0) {  // input rows at the parts' rows, padding rows zero
      auto* in = reinterpret_cast<float*>(base + plan_.inputs_offset);
      std::fill(in, in + rows * w, 0.0f);
      t = 0;
      for (const vk::Part& p : parts) {
        std::memcpy(in + p.row * w, step.inputs.data() + t * w, p.n * w * 4);
        t += p.n;
      }
    }
    for (const vk::RopeTable& r : plan_.ropes) {
      const float* f = r.factors >= 0 ? weights_->host_f32(r.factors).data() : nullptr;
      auto* cs = reinterpret_cast<float*>(base + r.offset);
      for (const vk::Part& p : parts) {
        for (uint32_t j = 0; j < p.n; ++j) {
          cpu::rope_cos_sin(r.n_rot, r.params, f, p.n_past + static_cast<int32_t>(j),
                            cs + static_cast<size_t>(p.row + j) * static_cast<size_t>(r.n_rot));
        }
      }
    }
  }

  // The hooks of SequencedExecutable, through the device's copies.
  void kv_copy(size_t l, size_t from, size_t to, size_t bytes) override {
    ctx_.copy(*k_[l], from, *k_[l], to, bytes);
    ctx_.copy(*v_[l], from, *v_[l], to, bytes);
  }
  void kv_read(size_t l, bool v, size_t offset, void* out, size_t bytes) const override {
    ctx_.download(*(v ? v_ : k_)[l], offset, out, bytes);
  }
  void kv_write(size_t l, bool v, size_t offset, const void* in, size_t bytes) override {
    ctx_.upload(*(v ? v_ : k_)[l], offset, in, bytes);
  }
  size_t state_offset(size_t node, int32_t seq) const { return static_cast<size_t>(seq) * plan_.state_seq_bytes[node]; }
  void state_read(size_t node, int32_t seq, float* out) const override {
    ctx_.download(*state_[node], state_offset(node, seq), out, state_floats_[node] * 4);
  }
  void state_write(size_t node, int32_t seq, const float* in) override {
    if (in) ctx_.upload(*state_[node], state_offset(node, seq), in, state_floats_[node] * 4);
    else ctx_.fill_zero(*state_[node], state_offset(node, seq), state_floats_[node] * 4);
  }
  void state_copy(size_t node, int32_t src, int32_t dst) override {
    ctx_.copy(*state_[node], state_offset(node, src), *state_[node], state_offset(node, dst), state_floats_[node] * 4);
  }
  // A whole block, or a sequence's whole state, in one submission rather than one per layer or node
  // (what the prefix cache moves to and from host memory).
  std::vector<vk::Context::HostRun> block_runs(int32_t block, uint8_t* host) const {
    std::vector<vk::Context::HostRun> runs;
    for_each_block_run(block, [&](size_t l, bool v, size_t offset, size_t n, size_t at) {
      runs.push_back({(v ? v_ : k_)[l].get(), offset, host + at, n});
    });
    return runs;
  }
  std::vector<vk::Context::HostRun> state_runs(int32_t seq, float* host) const {
    std::vector<vk::Context::HostRun> runs;
    for (size_t i = 0; i < state_floats_.size(); ++i) {
      if (state_floats_[i] == 0) continue;
      runs.push_back({state_[i].get(), state_offset(i, seq), host, state_floats_[i] * 4});
      host += state_floats_[i];
    }
    return runs;
  }
  void kv_block_read(int32_t block, uint8_t* out) const override { ctx_.download(block_runs(block, out)); }
  void kv_block_write(int32_t block, const uint8_t* in) override {
    ctx_.upload(block_runs(block, const_cast<uint8_t*>(in)));  // read from, not written
  }
  void state_from_kept(int32_t seq, int32_t t) override {
    std::vector<vk::Context::CopyRun> runs;
    for (size_t i = 0; i < state_floats_.size(); ++i) {
      if (state_floats_[i] == 0) continue;
      const size_t region = plan_.state_seq_bytes[i];
      const size_t from = (static_cast<size_t>(seq) * static_cast<size_t>(kept_states()) + static_cast<size_t>(t)) * region;
      runs.push_back({kept_[i].get(), from, state_[i].get(), state_offset(i, seq), state_floats_[i] * 4});
    }
    ctx_.copy(runs);
  }
  void states_read(int32_t seq, float* out) const override { ctx_.download(state_runs(seq, out)); }
  void states_write(int32_t seq, const float* in) override { ctx_.upload(state_runs(seq, const_cast<float*>(in))); }

  std::shared_ptr<vk::VulkanWeights> weights_;
  vk::Context& ctx_;
  vk::Plan plan_;
  OwnedBuffer arena_, logits_, hidden_, step_, step_dev_, attn_scratch_, act_q8_, act_q8k_, x_f16_, moe_logits_, moe_ids_,
      moe_count_, head_count_, norm_tail_, glu_count_, delta_count_, moe_weights_, moe_gate_, moe_up_, moe_down_, moe_route_, argmax_, argmax_scratch_;
  std::vector<OwnedBuffer> k_, v_, state_, kept_;  // per layer; per node; per node (ExecOptions::kept_states)
  vk::Buffer empty_;  // what a buffer of no bytes is
  vk::Resources res_;  // the same buffers as the recordings see them
  std::map<std::vector<uint32_t>, vk::Recorded> recordings_;  // by shape: (sequence, tokens, all logits) per part
  int64_t logit_rows_ = 0, hidden_rows_ = 0;
  const std::vector<int64_t>* last_rows_ = nullptr;
  std::vector<int64_t> argmax_rows_;  // the last step's: the logits rows the device took the argmax of
  uint64_t device_bytes_ = 0;
};

class VulkanBackend final : public Backend {
 public:
  explicit VulkanBackend(int device) : ctx_(vk::Context::shared(device)) {}
  std::string name() const override { return "vulkan"; }
  std::string device_name() const override { return ctx_->device_name(); }
  bool software_device() const override { return ctx_->features().cpu_device; }
  double measured_bandwidth_gbs() override { return ctx_->copy_bandwidth_gbs(); }
  uint64_t device_bytes_in_use() const override { return ctx_->device_bytes_in_use(); }
  RecordedCounts recorded_counts() const override { return {ctx_->dispatches_recorded(), ctx_->barriers_recorded()}; }
  std::string unsupported(const graph::Graph& g, const Node& n) const override { return vk::unsupported(g, n); }
  using Backend::load;
  std::shared_ptr<Weights> load(const graph::Graph& g, const gguf::File& file, const LoadProgress& progress) override {
    return std::make_shared<vk::VulkanWeights>(ctx_, g, file, progress);
  }

 private:
  std::shared_ptr<vk::Context> ctx_;
};

}  // namespace

std::unique_ptr<Backend> make_vulkan_backend(int device) { return std::make_unique<VulkanBackend>(device); }

namespace vk {
std::unique_ptr<Executable> VulkanWeights::instantiate_graph(const ExecOptions& opts, const graph::Graph& g) {
  return std::make_unique<VulkanExecutable>(std::static_pointer_cast<VulkanWeights>(shared_from_this()), g, opts);
}
}  // namespace vk

}  // namespace zinc::backend
