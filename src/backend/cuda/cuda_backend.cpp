// The CUDA backend: the graph's nodes as kernel launches on one stream per context (cuda_kernels.h).
//
// The weights are uploaded once (CudaWeights, cuda_weights.cpp) and shared by every context: matrices as the file stores
// them, the small float weights (norms, biases, gates) as F32. A context holds its activation arena
// (plan_arena), each attending layer's K and V cache in blocks of kKvBlock rows that sequences hold
// through tables (SequencedExecutable), the recurrent state per node and sequence, and a step buffer
// the host fills per step (token ids, each row's position, cache slot and table, the rotation tables,
// the rows that reach the logits) and copies over once. A step is its launches, then one copy of the
// logits back.
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <tuple>
#include <utility>

#include "backend/backend.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_weights.h"
#include "backend/exec_common.h"
#include "core/error.h"
#include "core/knobs.h"
#include "quant/quant.h"

namespace zinc::backend {

namespace {

using graph::Node;
using graph::Op;
using graph::TensorId;
using graph::TensorKind;
namespace ck = cuda;

static_assert(ck::kF32 == static_cast<int>(gguf::TensorType::F32) && ck::kF16 == static_cast<int>(gguf::TensorType::F16) &&
              ck::kQ4_0 == static_cast<int>(gguf::TensorType::Q4_0) && ck::kQ4_1 == static_cast<int>(gguf::TensorType::Q4_1) &&
              ck::kQ5_0 == static_cast<int>(gguf::TensorType::Q5_0) && ck::kQ5_1 == static_cast<int>(gguf::TensorType::Q5_1) &&
              ck::kQ8_0 == static_cast<int>(gguf::TensorType::Q8_0) && ck::kQ2_K == static_cast<int>(gguf::TensorType::Q2_K) &&
              ck::kQ3_K == static_cast<int>(gguf::TensorType::Q3_K) && ck::kQ4_K == static_cast<int>(gguf::TensorType::Q4_K) &&
              ck::kQ5_K == static_cast<int>(gguf::TensorType::Q5_K) && ck::kQ6_K == static_cast<int>(gguf::TensorType::Q6_K) &&
              ck::kIQ4_NL == static_cast<int>(gguf::TensorType::IQ4_NL) &&
              ck::kIQ4_XS == static_cast<int>(gguf::TensorType::IQ4_XS) &&
              ck::kBF16 == static_cast<int>(gguf::TensorType::BF16) && ck::kMXFP4 == static_cast<int>(gguf::TensorType::MXFP4));
static_assert(ck::kKvBlock == SequencedExecutable::kKvBlock, "the kernels' cache blocks are the sequences' blocks");

using cuda::check;
using cuda::CudaWeights;
using cuda::DeviceBuffer;
using cuda::elements;
using cuda::g_allocated;
using cuda::HostBuffer;

class CudaExecutable final : public SharedDeviceExecutable {
 public:
  CudaExecutable(std::shared_ptr<CudaWeights> weights, const graph::Graph& g, const ExecOptions& opts)
      : SharedDeviceExecutable(g, opts, weights->step_mutex), weights_(std::move(weights)) {
    const uint64_t before = g_allocated;
    // (A background context's stream at the least priority, the others' at the greatest: where both
    // have blocks waiting, the multiprocessors take the others' first.)
    stream_ = main_stream_ = weights_->make_stream(opts.background);
    ck::set_programmatic_launch(knob_u32("ZINC_CUDA_PDL", 1, 0, 1) == 1);
    int8_prompts_ = knob_u32("ZINC_CUDA_INT8_PROMPTS", 1, 0, 1) == 1;
    ck::set_int8_prompts(int8_prompts_);
    if (knob_u32("ZINC_CUDA_SPLIT_TILES", 1, 0, 1) == 0) ck::set_split_ways(1);
    ck::set_codes_mma_weights_stage(static_cast<int>(knob_u32("ZINC_CUDA_MMA_WEIGHTS_STAGED", 1, 0, 2)));
    ck::set_codes_mma_glu_capped(static_cast<int>(knob_u32("ZINC_CUDA_MMA_GLU_CAPPED", 1, 0, 2)));
    ck::set_codes_mma_streams(static_cast<int>(knob_u32("ZINC_CUDA_MMA_STREAMS", 0, 0, 4)));
    ck::set_codes_wide(static_cast<int>(knob_u32("ZINC_CUDA_WIDE", 1, 0, 3)));
    ck::set_codes_mma_min(static_cast<int>(knob_u32("ZINC_CUDA_MMA_MIN", 0, 0, ck::kCodesTokens + 1)));
    flash_attention_ = knob_u32("ZINC_CUDA_FLASH_ATTENTION", 1, 0, 1) == 1;
    plan_fusions();
    plan();
    device_bytes_ = g_allocated - before;
  }
  ~CudaExecutable() override {
    for (cudaStream_t s : {main_stream_, side_stream_}) {
      if (!s) continue;
      cudaStreamSynchronize(s);
      cudaStreamDestroy(s);
    }
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
    if (profiling_) std::fputs(profile().c_str(), stderr);
  }

  uint64_t device_bytes() const override { return device_bytes_; }

  // The logits stay on the device until asked for (greedy decoding reads only argmax's ids, taken on
  // the device in each step).
  std::span<const float> logits() const override {
    const size_t count = static_cast<size_t>(logit_rows_ * n_vocab());
    if (!logits_read_ && count > 0) {
      check(cudaMemcpyAsync(logits_host_.get(), act(g_.logits), count * 4, cudaMemcpyDeviceToHost, stream_), "logits read");
      sync("the logits' read");
      logits_read_ = true;
    }
    return {logits_host_.get<float>(), count};
  }
  // Steps of up to ck::kCodesTokens rows take the products of few rows (a mixture's too), at a cost per
  // row that jumps past ck::kFewStepRows.
  int32_t few_rows() const override { return ck::kFewStepRows; }
  int64_t logit_rows() const override { return logit_rows_; }
  using Executable::argmax;
  int32_t argmax(int64_t row) const override {
    if (row >= 0 && row < logit_rows_) {
      const int32_t id = ids_host_.get<int32_t>()[row];
      if (id >= 0) return id;
    }
    return Executable::argmax(row);
  }
  std::span<const float> hidden() const override {
    if (g_.hidden < 0) return Executable::hidden();
    return {hidden_host_.get<float>(), static_cast<size_t>(hidden_rows_ * hidden_width())};
  }
  int64_t hidden_width() const override { return g_.hidden < 0 ? 0 : g_.tensor(g_.hidden).ne[0]; }

  std::vector<float> activation(TensorId id) const override {
    check_activation(g_, opts_, id);
    if (rows_.empty()) throw Error("no step has run yet");
    std::vector<float> out(static_cast<size_t>(rows_[static_cast<size_t>(id)] * g_.tensor(id).ne[0]));
    check(cudaMemcpy(out.data(), act(id), out.size() * 4, cudaMemcpyDeviceToHost), "activation read");
    return out;
  }

  // A step: the step buffer written, then its launches. Each step shape (which sequences, how many
  // tokens each, which want every row's logits, which keep their states) is captured once as a CUDA
  // graph and replayed: everything a step's launches take from the host is fixed by its shape, and
  // the rest (token ids, positions, tables, rotations) is read from the step buffer, which the graph
  // copies in first. A shape is captured the second time it runs: the first runs directly, since a
  // capture costs more than launching a step once (a server's prompt chunks beside decoding
  // sequences come in shapes that seldom repeat). ZINC_CUDA_GRAPHS=0 launches every step directly.
  void run(const graph::StepParams& step) override {
    // (A background context's steps do not wait for the others': everything a step writes is its own
    // context's, and the weights are only read.)
    std::unique_lock<std::mutex> lock(weights_->step_mutex, std::defer_lock);
    if (!opts_.background) lock.lock();
    // (A background context's steps counted while they run; the others' then on the multiprocessors
    // it leaves, where ZINC_CUDA_LANE_SMS split them. Every step ends synchronised, so the stream may
    // change between steps.)
    struct Counted {
      std::atomic<int>* n;
      explicit Counted(std::atomic<int>* count) : n(count) {
        if (n) ++*n;
      }
      ~Counted() {
        if (n) --*n;
      }
    } const counted(opts_.background ? &weights_->background_steps : nullptr);
    // (The side stream made the first time a background context's step runs beside this one's.)
    const bool beside = !opts_.background && weights_->background_steps.load() > 0;
    if (beside && !side_made_) {
      side_stream_ = weights_->make_side_stream();
      side_made_ = true;
    }
    const bool side = beside && side_stream_;
    stream_ = side ? side_stream_ : main_stream_;
    begin_step(step);
    logits_read_ = false;
    write_step(step);
    // (Which sequences: only where their recurrent states' addresses are in the launches; otherwise
    // everything per sequence is in the step buffer, and N decoding sequences are one shape whichever
    // slots they hold.)
    std::vector<int32_t> key;
    for (const graph::SeqStep& s : step.seqs)
      key.insert(key.end(), {recurrent_ ? s.seq : 0, s.n_tokens, s.all_logits ? 1 : 0, s.keep_states ? 1 : 0});
    if (side) key.push_back(-1);  // (a graph's launches run in the context of the stream it was captured on)
    auto it = graphs_.find(key);
    const bool once = use_graphs_ && !profiling_ && it == graphs_.end() && seen_once_.insert(key).second;
    if (!use_graphs_ || profiling_ || once) {
      if (seen_once_.size() > kMaxSeen) seen_once_ = {key};
      record(step);
      sync("a step");
      if (profiling_) account(step);
      end_step(step);
      return;
    }
    if (it == graphs_.end()) {
      seen_once_.erase(key);
      if (graphs_.size() >= kMaxGraphs) {  // keep the decode shapes, drop the others (all, if decode fills it)
        for (auto g = graphs_.begin(); g != graphs_.end();) g = decode_shape(g->first) ? std::next(g) : graphs_.erase(g);
        if (graphs_.size() >= kMaxGraphs) graphs_.clear();
      }
      Captured g;
      check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
      cudaGraph_t captured = nullptr;
      try {
        record(step);
      } catch (...) {
        (void)cudaStreamEndCapture(stream_, &captured);
        if (captured) cudaGraphDestroy(captured);
        (void)cudaGetLastError();
        throw;
      }
      check(cudaStreamEndCapture(stream_, &captured), "cudaStreamEndCapture");
      const cudaError_t e = cudaGraphInstantiate(&g.exec, captured, 0);
      cudaGraphDestroy(captured);
      check(e, "cudaGraphInstantiate");
      g.rows = rows_;
      it = graphs_.emplace(key, std::move(g)).first;
    }
    check(cudaGraphLaunch(it->second.exec, stream_), "cudaGraphLaunch");
    rows_ = it->second.rows;
    logit_rows_ = rows_[static_cast<size_t>(g_.logits)];
    if (g_.hidden >= 0) hidden_rows_ = rows_[static_cast<size_t>(g_.hidden)];
    sync("a step");
    end_step(step);
  }


 private:
  // The step's work on the stream: the step buffer in, every node, the logits (and hidden rows) out.
  void record(const graph::StepParams& step) {
    check(cudaMemcpyAsync(step_dev_.get(), step_host_.get(), step_used_, cudaMemcpyHostToDevice, stream_), "step upload");
    rows_.assign(g_.tensors.size(), 0);
    codes_for_ = {-1, 0};
    // The split tiles' scratch for this step's launches only (none once they are made: the thread may
    // launch for another context, or after this one is gone).
    ck::set_split_scratch({split_part_.get(), split_part_.get() ? ck::kSplitBytes : 0, split_count_.get<unsigned>(),
                           split_part_.get() ? ck::kSplitCounters : 0});
    struct NoScratch {
      ~NoScratch() { ck::set_split_scratch({}); }
    } const no_scratch_after;
    if (profiling_ && events_.empty()) {
      events_.resize(g_.nodes.size() + 1);
      for (cudaEvent_t& e : events_) check(cudaEventCreate(&e), "cudaEventCreate");
    }
    for (size_t i = 0; i < g_.nodes.size();) {
      const size_t fused = fusion(i);
      for (size_t k = i; profiling_ && k < i + std::max<size_t>(fused, 1); ++k) check(cudaEventRecord(events_[k], stream_), "cudaEventRecord");
      if (fused > 0) {
        exec_fused(i, fused);
        i += fused;
      } else {
        exec(i, step);
        ++i;
      }
    }
    if (profiling_) check(cudaEventRecord(events_.back(), stream_), "cudaEventRecord");
    logit_rows_ = rows_[static_cast<size_t>(g_.logits)];
    ck::argmax_rows(stream_, act(g_.logits), n_vocab(), static_cast<int>(logit_rows_), ids_dev_.get<int32_t>(), argmax_scratch_.get());
    check(cudaMemcpyAsync(ids_host_.get(), ids_dev_.get(), static_cast<size_t>(logit_rows_) * 4, cudaMemcpyDeviceToHost, stream_), "ids read");
    if (g_.hidden >= 0) {
      hidden_rows_ = rows_[static_cast<size_t>(g_.hidden)];
      check(cudaMemcpyAsync(hidden_host_.get(), act(g_.hidden), static_cast<size_t>(hidden_rows_ * hidden_width()) * 4,
                            cudaMemcpyDeviceToHost, stream_),
            "hidden read");
    }
  }

  // ZINC_CUDA_PROFILE=1: every step launched directly, each node timed by events; per kind of step
  // (decode: one token per sequence; prompt; mixed: both), per op, the time per step, printed when the
  // context goes.
  void account(const graph::StepParams& step) {
    bool decode = true, some = false;
    for (const graph::SeqStep& s : step.seqs) decode &= s.n_tokens == 1, some |= s.n_tokens == 1;
    const size_t kind = decode ? 0 : some ? 2 : 1;
    ++steps_[kind];
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      float ms = 0;
      check(cudaEventElapsedTime(&ms, events_[i], events_[i + 1]), "cudaEventElapsedTime");
      op_ms_[kind][static_cast<size_t>(g_.nodes[i].op)] += ms;
      op_nodes_[kind][static_cast<size_t>(g_.nodes[i].op)] += 1;
    }
  }
  std::string profile() const {
    std::string out = "CUDA profile (kernel time per op, from events between nodes)\n";
    const char* kinds[] = {"decode", "prompt", "mixed (prompts beside decoding sequences)"};
    for (size_t k = 0; k < 3; ++k) {
      if (steps_[k] == 0) continue;
      double total = 0;
      std::vector<size_t> order;
      for (size_t op = 0; op < op_ms_[k].size(); ++op) {
        total += op_ms_[k][op];
        if (op_nodes_[k][op] > 0) order.push_back(op);
      }
      std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return op_ms_[k][a] > op_ms_[k][b]; });
      out += fmt::format("{} steps: {}, {:.3f} ms per step\n", kinds[k], steps_[k], total / static_cast<double>(steps_[k]));
      for (size_t op : order) {
        out += fmt::format("  {:<12} {:>6} {:>10.3f} ms {:>6.1f}%\n", graph::op_name(static_cast<Op>(op)), op_nodes_[k][op] / steps_[k],
                           op_ms_[k][op] / static_cast<double>(steps_[k]), 100.0 * op_ms_[k][op] / total);
      }
    }
    return out;
  }
  const bool profiling_ = [] {
    const char* v = knob("ZINC_CUDA_PROFILE");
    return v && *v != '0';
  }();
  std::vector<cudaEvent_t> events_;
  std::array<double, 32> op_ms_[3] = {};
  std::array<int64_t, 32> op_nodes_[3] = {};
  int64_t steps_[3] = {};

  static bool decode_shape(const std::vector<int32_t>& key) {
    for (size_t i = 1; i < key.size(); i += 4) {
      if (key[i] != 1) return false;
    }
    return true;
  }
  // A captured step, replayed for every step of its shape.
  struct Captured {
    cudaGraphExec_t exec = nullptr;
    std::vector<int64_t> rows;  // rows each activation holds after it
    Captured() = default;
    Captured(Captured&& o) noexcept : exec(o.exec), rows(std::move(o.rows)) { o.exec = nullptr; }
    Captured& operator=(Captured&&) = delete;
    ~Captured() {
      if (exec) cudaGraphExecDestroy(exec);
    }
  };
  static constexpr size_t kMaxGraphs = 16, kMaxSeen = 256;
  std::set<std::vector<int32_t>> seen_once_;  // shapes run once, not captured yet

  void sync(const char* what) const {
    const cudaError_t e = cudaStreamSynchronize(stream_);
    std::string err = e == cudaSuccess ? ck::last_error() : cudaGetErrorString(e);
    if (!err.empty()) throw Error(fmt::format("CUDA: {} failed: {}", what, err));
  }

  // The arena, caches, states, scratch and the step buffer's layout.
  void plan() {
    // A fused launch reads its nodes' inputs while it writes their outputs: the inputs stay live to
    // the group's last node, so no output takes their place.
    std::vector<int> last = last_uses(g_);
    for (size_t i = 0; i < fuse_.size(); ++i) {
      if (fuse_[i].kind == Fuse::None) continue;
      const int end = static_cast<int>(i + fuse_[i].count - 1);
      for (size_t k = i; k <= static_cast<size_t>(end); ++k)
        for (TensorId t : g_.nodes[k].in)
          if (int& l = last[static_cast<size_t>(t)]; l >= 0 && l < end) l = end;
    }
    const ArenaPlan arena = plan_arena(
        g_, last, [&](TensorId t) { return static_cast<size_t>(g_.tensor(t).ne[0] * opts_.max_tokens) * sizeof(float); },
        kAlign, opts_.keep_activations);
    offset_ = arena.offset;
    arena_ = DeviceBuffer(std::max<size_t>(arena.bytes, kAlign));
    const auto rows = static_cast<size_t>(opts_.max_tokens);
    logits_host_ = HostBuffer(rows * static_cast<size_t>(n_vocab()) * 4);
    ids_host_ = HostBuffer(rows * 4);
    ids_dev_ = DeviceBuffer(rows * 4);
    argmax_scratch_ = DeviceBuffer(ck::argmax_scratch_bytes(opts_.max_tokens));
    check(cudaMemsetAsync(argmax_scratch_.get(), 0, argmax_scratch_.size(), stream_), "cudaMemset");
    if (g_.hidden >= 0) hidden_host_ = HostBuffer(rows * static_cast<size_t>(hidden_width()) * 4);
    // The caches: every block any sequence's table may name.
    k_.resize(kv_row_bytes_.size());
    v_.resize(kv_row_bytes_.size());
    for (size_t l = 0; l < kv_row_bytes_.size(); ++l) {
      if (kv_row_bytes_[l] == 0) continue;
      const size_t bytes = kv_row_bytes_[l] * kKvBlock * static_cast<size_t>(blocks_.n_blocks());
      k_[l] = DeviceBuffer(bytes);
      v_[l] = DeviceBuffer(bytes);
      check(cudaMemsetAsync(k_[l].get(), 0, bytes, stream_), "cudaMemset");
      check(cudaMemsetAsync(v_[l].get(), 0, bytes, stream_), "cudaMemset");
    }
    state_.resize(g_.nodes.size());
    kept_.resize(g_.nodes.size());
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      if (state_floats_[i] == 0) continue;
      state_[i] = DeviceBuffer(state_floats_[i] * 4 * static_cast<size_t>(opts_.n_seq));
      check(cudaMemsetAsync(state_[i].get(), 0, state_[i].size(), stream_), "cudaMemset");
      if (kept_states() > 0) kept_[i] = DeviceBuffer(state_floats_[i] * 4 * static_cast<size_t>(opts_.n_seq * kept_states()));
    }
    // Scratch: the experts' rows, sized for the widest node.
    size_t moe_slots = 0, moe_hidden = 0, moe_out = 0, moe_logits = 0, moe_experts = 0;
    for (const Node& n : g_.nodes) {
      if (n.op == Op::MoE) {
        const MoeShape shape = moe_shape(g_, n);
        const auto ff = static_cast<size_t>(shape.ff), d = static_cast<size_t>(shape.d);
        const auto k = static_cast<size_t>(n.moe().n_expert_used);
        moe_slots = std::max(moe_slots, rows * k);
        moe_hidden = std::max(moe_hidden, rows * k * ff);
        moe_out = std::max(moe_out, rows * k * d);
        moe_logits = std::max(moe_logits, rows * static_cast<size_t>(n.moe().n_expert));
        moe_experts = std::max(moe_experts, static_cast<size_t>(n.moe().n_expert));
      }
    }
    // The activations' 8-bit codes for the products that take them: a step's rows, or every expert
    // slot of a step.
    size_t q8 = 0;
    for (const Node& n : g_.nodes) {
      for (size_t k = 0; k < n.in.size(); ++k) {
        const auto& t = g_.tensor(n.in[k]);
        if (t.kind != TensorKind::Weight || !ck::uses_codes(static_cast<int>(t.type))) continue;
        const int64_t slots = n.op == Op::MoE ? static_cast<int64_t>(rows) * n.moe().n_expert_used : static_cast<int64_t>(rows);
        q8 = std::max(q8, ck::q8_bytes(slots, t.ne[0]));
      }
    }
    q8_ = DeviceBuffer(q8);
    // The prompt tiles' split scratch (ck::SplitScratch), where a step may take the tiles.
    if (q8 > 0 && rows > static_cast<size_t>(ck::kCodesTokens)) {
      split_part_ = DeviceBuffer(ck::kSplitBytes);
      split_count_ = DeviceBuffer(static_cast<size_t>(ck::kSplitCounters) * sizeof(unsigned));
      check(cudaMemsetAsync(split_count_.get(), 0, static_cast<size_t>(ck::kSplitCounters) * sizeof(unsigned), stream_), "cudaMemset");
    }
    // The inputs of products whose weights are padded rows, each row padded with zeros as its weight.
    size_t pad = 0;
    for (const Node& n : g_.nodes)
      if (n.op == Op::MatMul) pad = std::max(pad, rows * static_cast<size_t>(weights_->padded_cols(n.in[0])) * 4);
    if (pad > 0) {
      pad_x_ = DeviceBuffer(pad);
      check(cudaMemsetAsync(pad_x_.get(), 0, pad, stream_), "cudaMemset");
    }
    // Attention's keys split over blocks (ck::AttentionArgs::splits): the partial results of up to
    // kSplitRows decode rows (and of the prompt tiles' rows, ck::kFlashPartRows over their splits) and
    // the decode rows' counts.
    size_t att_part = 0, att_count = 0;
    for (const Node& n : g_.nodes) {
      if (n.op != Op::Attention) continue;
      const auto heads = static_cast<size_t>(n.attention().n_head), hd = static_cast<size_t>(n.attention().head_dim);
      const auto rows_max = static_cast<size_t>(kSplitRows);
      static_assert(kSplitRows * ck::kMaxAttentionSplits >= ck::kFlashPartRows);  // (the prompt tiles' parts too)
      att_part = std::max(att_part, rows_max * heads * ck::kMaxAttentionSplits * (hd + 4) * 4);
      att_count = std::max(att_count, rows_max * heads * 4);
    }
    if (att_count > 0) {
      att_part_ = DeviceBuffer(att_part);
      att_count_ = DeviceBuffer(att_count);
      check(cudaMemsetAsync(att_count_.get(), 0, att_count, stream_), "cudaMemset");
      int dev = 0;
      check(cudaGetDevice(&dev), "cudaGetDevice");
      check(cudaDeviceGetAttribute(&sms_, cudaDevAttrMultiProcessorCount, dev), "cudaDeviceGetAttribute");
    }
    moe_ids_ = DeviceBuffer(moe_slots * 4);
    moe_order_ = DeviceBuffer(moe_slots * 4);
    moe_offsets_ = DeviceBuffer((moe_experts + 1) * 4);
    moe_weights_ = DeviceBuffer(moe_slots * 4);
    moe_gate_ = DeviceBuffer(moe_hidden * 4);
    moe_up_ = DeviceBuffer(moe_hidden * 4);
    moe_y_ = DeviceBuffer(moe_out * 4);
    moe_logits_ = DeviceBuffer(moe_logits * 4);
    if (moe_logits > 0) {
      moe_count_ = DeviceBuffer(static_cast<size_t>(ck::kCodesTokens) * sizeof(unsigned));
      check(cudaMemsetAsync(moe_count_.get(), 0, moe_count_.size(), stream_), "cudaMemset");
    }
    if (moe_logits > 0) moe_shared_g_ = DeviceBuffer(static_cast<size_t>(ck::kCodesTokens) * 4);
    // The step buffer, at its largest (layout).
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      const Node& n = g_.nodes[i];
      if (n.op == Op::Rope) rope_of_.emplace(i, rope_table(n));
      if (n.op == Op::Input) input_width_ = static_cast<size_t>(g_.tensor(n.out).ne[0]);
    }
    step_bytes_ = layout(rows, static_cast<size_t>(opts_.n_seq));
    step_host_ = HostBuffer(step_bytes_);
    step_dev_ = DeviceBuffer(step_bytes_);
    // (The zeroing above on the context's own stream, done before any step: a green context's stream
    // does not wait for the default stream's work.)
    sync("zeroing the context's buffers");
  }

  // Rotations with the same angles share one table of (cos, sin) per row.
  struct RopeTable {
    int n_rot;
    graph::RopeParams params;
    TensorId factors;
    size_t offset;
  };
  size_t rope_table(const Node& n) {
    const graph::RopeOpParams& r = n.rope();
    const TensorId factors = n.in.size() > 1 ? n.in[1] : -1;
    for (size_t i = 0; i < ropes_.size(); ++i) {
      const RopeTable& t = ropes_[i];
      if (t.n_rot == r.n_rot && t.factors == factors && t.params == r.rope) return i;
    }
    ropes_.push_back({r.n_rot, r.rope, factors, 0});
    return ropes_.size() - 1;
  }

  // The step buffer's layout for a step of `rows` rows and `seqs` sequences: ids, positions, cache
  // slots, table offsets, the rows reaching the logits, the sequences' tables, each distinct rotation's
  // table, the inputs. Its bytes, all uploaded with the step. (Every step of one shape has the same
  // layout: a captured graph's launches and its upload hold its offsets and size.)
  size_t layout(size_t rows, size_t seqs) {
    size_t at = 0;
    const auto take = [&](size_t bytes) {
      const size_t o = at;
      at = (at + bytes + kAlign - 1) / kAlign * kAlign;
      return o;
    };
    ids_at_ = take(rows * 4);
    pos_at_ = take(rows * 4);
    slot_at_ = take(rows * 4);
    table_at_ = take(rows * 4);
    select_at_ = take(rows * 4);
    tables_at_ = take(seqs * static_cast<size_t>(blocks_.n_blocks()) * 4);
    for (RopeTable& r : ropes_) r.offset = take(rows * static_cast<size_t>(r.n_rot) * 4);
    inputs_at_ = take(rows * input_width_ * 4);
    return at;
  }

  void write_step(const graph::StepParams& step) {
    step_used_ = layout(step.tokens.size(), step.seqs.size());
    auto* base = step_host_.get<uint8_t>();
    auto* ids = reinterpret_cast<int32_t*>(base + ids_at_);
    auto* pos = reinterpret_cast<int32_t*>(base + pos_at_);
    auto* slot = reinterpret_cast<int32_t*>(base + slot_at_);
    auto* table_at = reinterpret_cast<int32_t*>(base + table_at_);
    auto* select = reinterpret_cast<int32_t*>(base + select_at_);
    auto* tables = reinterpret_cast<int32_t*>(base + tables_at_);
    parts_.clear();
    int64_t row = 0, selected = 0;
    for (size_t pi = 0; pi < step.seqs.size(); ++pi) {
      const graph::SeqStep& s = step.seqs[pi];
      parts_.push_back({s, row});
      const std::vector<int32_t>& table = blocks_.table(s.seq);
      int32_t* mine = tables + pi * static_cast<size_t>(blocks_.n_blocks());
      std::copy(table.begin(), table.end(), mine);
      for (int32_t t = 0; t < s.n_tokens; ++t, ++row) {
        const int32_t p = s.n_past + t;
        ids[row] = step.tokens[static_cast<size_t>(row)];
        pos[row] = p;
        slot[row] = table[static_cast<size_t>(p / kKvBlock)] * kKvBlock + p % kKvBlock;
        table_at[row] = static_cast<int32_t>(pi * static_cast<size_t>(blocks_.n_blocks()));
      }
      for (int32_t t = s.all_logits ? 0 : s.n_tokens - 1; t < s.n_tokens; ++t) select[selected++] = static_cast<int32_t>(row - s.n_tokens + t);
    }
    for (const RopeTable& r : ropes_) {
      const float* f = r.factors >= 0 ? weights_->host_f32(r.factors).data() : nullptr;
      auto* cs = reinterpret_cast<float*>(base + r.offset);
      for (int64_t t = 0; t < row; ++t) cpu::rope_cos_sin(r.n_rot, r.params, f, pos[t], cs + t * r.n_rot);
    }
    if (input_width_ > 0) std::memcpy(base + inputs_at_, step.inputs.data(), step.inputs.size() * 4);
  }

  float* act(TensorId id) const { return reinterpret_cast<float*>(arena_.bytes() + offset_[static_cast<size_t>(id)]); }
  template <class T>
  const T* step_dev(size_t at) const { return reinterpret_cast<const T*>(step_dev_.bytes() + at); }

  void exec(size_t index, const graph::StepParams& step) {
    const Node& node = g_.nodes[index];
    const auto& out_t = g_.tensor(node.out);
    const int64_t width = out_t.ne[0];
    const auto in_rows = [&](size_t k) { return rows_[static_cast<size_t>(node.in[k])]; };
    float* out = act(node.out);
    const auto s = stream_;
    int64_t n = static_cast<int64_t>(step.tokens.size());
    switch (node.op) {
      case Op::Embed: {
        const auto& wt = g_.tensor(node.in[0]);
        ck::embed(s, static_cast<int>(wt.type), weights_->raw(node.in[0]), quant::row_size(wt.type, wt.ne[0]), step_dev<int32_t>(ids_at_),
                  width, static_cast<int>(n), node.embed().scale, out);
        break;
      }
      case Op::RmsNorm:
        n = in_rows(0);
        ck::rms_norm(s, act(node.in[0]), weights_->f32_or_null(node, 1), out, width, node.norm().group > 0 ? node.norm().group : width,
                     static_cast<int>(n), node.norm().eps, node.norm().offset);
        break;
      case Op::MatMul: {
        const auto& wt = g_.tensor(node.in[0]);
        n = in_rows(1);
        if (const int64_t cols = weights_->padded_cols(node.in[0]); cols > 0) {
          // Padded float32 rows: the input copied into rows of the same length (their tails stay zero).
          ck::copy_cols(s, act(node.in[1]), wt.ne[0], 0, 0, 1, pad_x_.get<float>(), cols, 0, wt.ne[0], static_cast<int>(n));
          ck::mul_mat(s, ck::kF32, weights_->raw(node.in[0]), static_cast<size_t>(cols) * 4, wt.ne[1], cols, pad_x_.get<float>(), cols,
                      static_cast<int>(n), out, width, weights_->f32_or_null(node, 2));
          break;
        }
        ck::mul_mat(s, static_cast<int>(wt.type), weights_->raw(node.in[0]), quant::row_size(wt.type, wt.ne[0]), wt.ne[1], wt.ne[0],
                    act(node.in[1]), wt.ne[0], static_cast<int>(n), out, width, weights_->f32_or_null(node, 2), q8_.get(),
                    codes_of(wt.type, node.in[1], 1, n));
        break;
      }
      case Op::Add: case Op::Mul:
        n = in_rows(0);
        ck::elementwise(s, node.op == Op::Add ? ck::Elementwise::Add : ck::Elementwise::Mul, act(node.in[0]), act(node.in[1]), out, n * width);
        break;
      case Op::Rope: {
        n = in_rows(0);
        const graph::RopeOpParams& r = node.rope();
        const RopeTable& t = ropes_[rope_of_.at(index)];
        ck::rope(s, act(node.in[0]), out, step_dev<float>(t.offset), static_cast<int>(n), r.n_head, r.head_dim, r.n_rot,
                 r.mode == graph::RopeMode::NeoX);
        break;
      }
      case Op::Attention:
        n = in_rows(0);
        attention(node, static_cast<int>(n), out);
        break;
      case Op::SwiGLU: case Op::GeGLU:
        n = in_rows(0);
        ck::elementwise(s, node.op == Op::SwiGLU ? ck::Elementwise::SwiGLU : ck::Elementwise::GeGLU, act(node.in[0]), act(node.in[1]), out,
                        n * width);
        break;
      case Op::Softcap:
        n = in_rows(0);
        ck::softcap(s, act(node.in[0]), out, n * width, node.softcap().cap);
        break;
      case Op::MoE:
        n = in_rows(0);
        moe(node, static_cast<int>(n), out);
        break;
      case Op::Split: {
        n = in_rows(0);
        const int groups = node.split().n_groups;
        ck::copy_cols(s, act(node.in[0]), g_.tensor(node.in[0]).ne[0], node.split().offset, node.split().stride, groups, out, width, 0,
                      width / groups, static_cast<int>(n));
        break;
      }
      case Op::Concat: {
        n = in_rows(0);
        int64_t at = 0;
        for (TensorId part : node.in) {
          const int64_t pw = g_.tensor(part).ne[0];
          ck::copy_cols(s, act(part), pw, 0, 0, 1, out, width, at, pw, static_cast<int>(n));
          at += pw;
        }
        break;
      }
      case Op::SigmoidMul:
        n = in_rows(0);
        ck::sigmoid_mul(s, act(node.in[0]), act(node.in[1]), out, width, g_.tensor(node.in[1]).ne[0], static_cast<int>(n));
        break;
      case Op::SsmConv: {
        n = in_rows(0);
        const auto& wt = g_.tensor(node.in[1]);
        for (const Part& p : parts_) {
          ck::ssm_conv(s, act(node.in[0]) + p.first * width, weights_->f32(node.in[1]), state_of(index, p.step.seq), out + p.first * width,
                       width, static_cast<int>(wt.ne[0]), p.step.n_tokens, p.step.keep_states ? kept_of(index, p.step.seq) : nullptr,
                       state_floats_[index]);
        }
        break;
      }
      case Op::DeltaNet: {
        n = in_rows(0);
        const int64_t qw = g_.tensor(node.in[0]).ne[0], vw = g_.tensor(node.in[2]).ne[0];
        delta_net(node, index, out, act(node.in[0]), act(node.in[1]), act(node.in[2]), qw, vw);
        break;
      }
      case Op::Scale: {
        n = in_rows(0);
        ck::scale(s, act(node.in[0]), weights_->f32(node.in[1]), elements(g_.tensor(node.in[1])) == 1, out, width, static_cast<int>(n));
        break;
      }
      case Op::Input:
        check(cudaMemcpyAsync(out, step_dev_.bytes() + inputs_at_, static_cast<size_t>(n * width) * 4, cudaMemcpyDeviceToDevice, s),
              "input copy");
        break;
      case Op::SelectLast: {
        n = 0;
        for (const Part& p : parts_) n += p.step.all_logits ? p.step.n_tokens : 1;
        ck::gather_rows(s, act(node.in[0]), step_dev<int32_t>(select_at_), width, static_cast<int>(n), out);
        break;
      }
    }
    rows_[static_cast<size_t>(node.out)] = n;
  }

  // The delta rule of each sequence of the step (q and k rows qs floats apart, v rows vs), its gates
  // formed in the same launch.
  void delta_net(const Node& node, size_t index, float* out, const float* q, const float* k, const float* v, int64_t qs, int64_t vs) {
    const graph::DeltaNetParams& d = node.delta_net();
    const int64_t width = g_.tensor(node.out).ne[0];
    for (const Part& p : parts_) {
      ck::DeltaArgs a;
      a.q = q + p.first * qs;
      a.k = k + p.first * qs;
      a.v = v + p.first * vs;
      a.alpha = act(node.in[3]) + p.first * d.n_head_v;
      a.beta_in = act(node.in[4]) + p.first * d.n_head_v;
      a.A = weights_->f32(node.in[5]);
      a.dt_bias = weights_->f32(node.in[6]);
      a.state = state_of(index, p.step.seq);
      a.out = out + p.first * width;
      a.n = p.step.n_tokens;
      a.q_stride = qs;
      a.v_stride = vs;
      a.out_stride = width;
      a.hk = d.n_head_k;
      a.hv = d.n_head_v;
      a.dk = d.dk;
      a.dv = d.dv;
      a.tiled = d.tiled_heads;
      a.kept = p.step.keep_states ? kept_of(index, p.step.seq) : nullptr;
      a.kept_stride = state_floats_[index];
      ck::delta_rule(stream_, a);
    }
  }

  // Whether the attention of n rows takes the prompt tiles (else the decode launch).
  bool prompt_tiles(int64_t n, int head_dim) const {
    int64_t covered = 0;
    bool long_part = false;
    for (const Part& part : parts_) covered += part.step.n_tokens, long_part |= part.step.n_tokens >= 16;
    return flash_attention_ && ck::flash_attention_fits(static_cast<int>(kv_storage_), head_dim) && covered == n && long_part;
  }

  void attention(const Node& node, int n, float* out) {
    const auto l = static_cast<size_t>(node.layer);
    const int64_t kw = g_.kv_width_of(node.layer);
    const int kv_type = static_cast<int>(kv_storage_);
    if (!std::exchange(kv_appended_, false)) {  // else stored by the rotation's launch
      ck::kv_append(stream_, kv_type, act(node.in[1]), act(node.in[2]), kw, n, step_dev<int32_t>(slot_at_), kv_row_bytes_[l], k_[l].get(),
                    v_[l].get());
    }
    const graph::AttentionParams& p = node.attention();
    ck::AttentionArgs a;
    a.q = act(node.in[0]);
    a.q_stride = g_.tensor(node.in[0]).ne[0];
    a.k = k_[l].get();
    a.v = v_[l].get();
    a.kv_type = kv_type;
    a.row_bytes = kv_row_bytes_[l];
    a.n = n;
    a.pos = step_dev<int32_t>(pos_at_);
    a.table_at = step_dev<int32_t>(table_at_);
    a.tables = step_dev<int32_t>(tables_at_);
    a.n_head = p.n_head;
    a.n_head_kv = p.n_head_kv;
    a.head_dim = p.head_dim;
    a.window = p.sliding_window;
    a.scale = p.scale;
    a.softcap = p.softcap;
    a.sinks = node.in.size() > 3 ? weights_->f32(node.in[3]) : nullptr;
    a.out = out;
    if (heads_pending_) {  // the heads formed here, from the products' outputs (decode path only)
      a.pre = *std::exchange(heads_pending_, std::nullopt);
      a.q = a.pre.part[0].in;
      a.q_stride = static_cast<int64_t>(a.pre.part[0].n_head) * p.head_dim;
    }
    // Decode rows: each row's keys split over enough blocks to fill the GPU (a block's warps spend
    // their time waiting on reads).
    const auto split = [&](ck::AttentionArgs& b) {
      if (b.n > kSplitRows || !att_count_.get()) return;
      b.splits = ck::decode_attention_splits(b.n, b.n_head, b.n_head_kv, b.head_dim, sms_);
      b.part_keys = ck::decode_attention_part_keys(b.n);
      b.part = att_part_.get<float>();
      b.count = att_count_.get<unsigned>();
    };
    // A prompt's rows (16 or more of one sequence) on tensor cores, each sequence's rows alone (their
    // keys split when they are few); steps with none (decode of several sequences) in one launch, and
    // so each run of consecutive sequences of fewer rows beside prompts.
    const bool flash = prompt_tiles(n, p.head_dim);
    if (!flash) {
      split(a);
      // The output's codes for the product after it (decode rows, whole super-blocks a block).
      const auto i = static_cast<size_t>(&node - g_.nodes.data());
      const bool codes = fuse_[i].codes && n <= ck::kCodesTokens && q8_.get();
      if (codes) a.codes = q8_.get();
      ck::attention(stream_, a);
      if (codes) codes_for_ = {node.out, 1};
      return;
    }
    // Runs of consecutive short parts (decoding sequences) in one launch each.
    for (size_t i = 0; i < parts_.size();) {
      ck::AttentionArgs b = a;
      const int64_t r = parts_[i].first;
      const bool tiles = parts_[i].step.n_tokens >= 16;
      size_t end = i + 1;
      while (!tiles && end < parts_.size() && parts_[end].step.n_tokens < 16) ++end;
      b.n = static_cast<int>(parts_[end - 1].first + parts_[end - 1].step.n_tokens - r);
      i = end;
      b.q = a.q + r * a.q_stride;
      b.out = out + r * a.q_stride;
      b.pos = a.pos + r;
      b.table_at = a.table_at + r;
      if (tiles) {
        if (att_part_.get()) {
          b.splits = ck::flash_splits(b.n, b.n_head, sms_);
          b.part = att_part_.get<float>();
        }
        ck::flash_attention(stream_, b);
      } else {
        split(b);
        ck::attention(stream_, b);
      }
    }
  }

  // Routing on the device, then each token's k experts: gate and up products (with the optional
  // biases), the activation, the down product, and the weighted sum in increasing expert order.
  void moe(const Node& node, int n, float* out) {
    const graph::MoeParams& mp = node.moe();
    const auto& rt = g_.tensor(node.in[1]);
    const auto& gt = g_.tensor(node.in[2]);
    const auto& ut = g_.tensor(node.in[3]);
    const auto& dt = g_.tensor(node.in[4]);
    const MoeShape shape = moe_shape(g_, node);
    const int64_t d = shape.d, ff = shape.ff;
    const bool fused = shape.fused;
    const int ne = mp.n_expert, k = mp.n_expert_used;
    const float* x = act(node.in[0]);
    const float* router_x = mp.router_in >= 0 ? act(node.in[static_cast<size_t>(mp.router_in)]) : x;
    float* logits = moe_logits_.get<float>();
    const auto bias = [&](int b) { return mp.bias >= 0 ? weights_->f32(node.in[static_cast<size_t>(mp.bias + b)]) : nullptr; };
    int32_t* ids = moe_ids_.get<int32_t>();
    float* wts = moe_weights_.get<float>();
    const bool topk_first = mp.routing == graph::MoeRouting::TopKSoftmax;
    const float* expert_scale = mp.expert_scale >= 0 ? weights_->f32(node.in[static_cast<size_t>(mp.expert_scale)]) : nullptr;
    // Decode and steps of few rows: the router and the routing in one launch (a block per expert and
    // row; the generic product of a float router for 9 to 64 rows ran on two blocks).
    if (n <= ck::kCodesTokens && ck::moe_router_fits(static_cast<int>(rt.type), d, ne)) {
      // (With the shared expert's gate of the same rows, Fuse::Routed.)
      const size_t at = static_cast<size_t>(&node - g_.nodes.data());
      const int32_t gate = routed_[at];
      ck::moe_router(stream_, static_cast<const float*>(weights_->raw(node.in[1])), router_x, d, n, moe_count_.get<unsigned>(), logits, ne,
                     k, topk_first, mp.norm_topk, mp.logit_scale, bias(0), expert_scale, ids, wts,
                     gate >= 0 ? static_cast<const float*>(weights_->raw(g_.nodes[static_cast<size_t>(gate)].in[0])) : nullptr, moe_shared_g_.get<float>());
    } else {
      ck::mul_mat(stream_, static_cast<int>(rt.type), weights_->raw(node.in[1]), quant::row_size(rt.type, d), ne, d, router_x, d, n, logits,
                  ne, nullptr);
      ck::moe_route(stream_, logits, n, ne, k, topk_first, mp.norm_topk, mp.logit_scale, bias(0), expert_scale, ids, wts);
    }
    const int slots = n * k;
    const size_t g_row = quant::row_size(gt.type, d), u_row = quant::row_size(ut.type, d), d_row = quant::row_size(dt.type, ff);
    float* gate = moe_gate_.get<float>();
    float* up = moe_up_.get<float>();
    float* y = moe_y_.get<float>();
    const ck::Elementwise glu = mp.glu == graph::MoeGlu::SwiGLUClamped ? ck::Elementwise::SwiGLUClamped
                                : mp.glu == graph::MoeGlu::GeGLU       ? ck::Elementwise::GeGLU
                                                                       : ck::Elementwise::SwiGLU;
    const auto grouped = [](gguf::TensorType t) { return ck::grouped_mul_mat_supported(static_cast<int>(t)); };
    const bool codes = q8_.get() && gt.type == ut.type && ck::uses_codes(static_cast<int>(gt.type)) && mp.glu != graph::MoeGlu::SwiGLUClamped;
    const bool codes_apart = codes && n <= ck::kCodesTokens && slots_apart(n, k, ne);
    const bool codes_grouped = codes && !codes_apart && n <= ck::kCodesTokens && ck::uses_codes(static_cast<int>(dt.type));
    if (n > kMoeSlotRows && !codes_apart && !codes_grouped && grouped(gt.type) && grouped(ut.type) && grouped(dt.type)) {
      // A prompt: the slots grouped by expert, each expert's three products one tiled product over its
      // slots (its weights read once per 64 of them, not once per slot).
      auto* order = moe_order_.get<int32_t>();
      auto* offsets = moe_offsets_.get<int32_t>();
      ck::moe_group(stream_, ids, slots, ne, order, offsets);
      ck::grouped_mul_mat(stream_, static_cast<int>(gt.type), weights_->raw(node.in[2]), g_row, g_row * static_cast<size_t>(gt.ne[1]), 0, ff, d,
                          x, d, k, order, offsets, ne, slots, gate, ff, bias(1), ff, q8_.get(), codes_of(gt.type, node.in[0], k, slots));
      ck::grouped_mul_mat(stream_, static_cast<int>(ut.type), weights_->raw(node.in[3]), u_row, u_row * static_cast<size_t>(ut.ne[1]),
                          fused ? ff : 0, ff, d, x, d, k, order, offsets, ne, slots, up, ff, bias(2), ff, q8_.get(),
                          codes_of(ut.type, node.in[0], k, slots));
      ck::elementwise(stream_, glu, gate, up, gate, static_cast<int64_t>(slots) * ff, mp.glu_alpha, mp.glu_limit);
      codes_for_ = {-1, 0};  // the down product's input is scratch, not a tensor: always quantized
      ck::grouped_mul_mat(stream_, static_cast<int>(dt.type), weights_->raw(node.in[4]), d_row, d_row * static_cast<size_t>(d), 0, d, ff, gate,
                          ff, 1, order, offsets, ne, slots, y, d, bias(3), d, q8_.get(), false);
      if (!combined_later(node)) ck::moe_combine(stream_, y, wts, n, k, d, out);
      return;
    }
    if (codes_grouped) {
      // Up to ck::kCodesTokens rows: the slots grouped by expert, each expert's rows read once per 8 of
      // its slots on integer tensor cores (gate and up with the activation, then down).
      auto* order = moe_order_.get<int32_t>();
      auto* offsets = moe_offsets_.get<int32_t>();
      ck::moe_group(stream_, ids, slots, ne, order, offsets);
      ck::Product p[2];
      p[0] = {static_cast<int>(gt.type), weights_->raw(node.in[2]), g_row, g_row * static_cast<size_t>(gt.ne[1]), 0, ff, gate, ff, bias(1), ff};
      p[1] = {static_cast<int>(ut.type), weights_->raw(node.in[3]), u_row, u_row * static_cast<size_t>(ut.ne[1]), fused ? ff : 0, ff, up, ff,
              bias(2), ff};
      ck::grouped_mul_mat_codes(stream_, p, 2, d, x, d, k, order, offsets, ne, n, slots, q8_.get(), codes_of(gt.type, node.in[0], 1),
                                mp.glu == graph::MoeGlu::GeGLU ? ck::Glu::GeGLU : ck::Glu::SwiGLU);
      codes_for_ = {-1, 0};
      const ck::Product down{static_cast<int>(dt.type), weights_->raw(node.in[4]), d_row, d_row * static_cast<size_t>(d), 0, d, y, d, bias(3), d};
      ck::grouped_mul_mat_codes(stream_, &down, 1, ff, gate, ff, 1, order, offsets, ne, n, slots, q8_.get(), false);
      if (!combined_later(node)) ck::moe_combine(stream_, y, wts, n, k, d, out);
      return;
    }
    if (codes) {
      // Each slot's gate and up rows on the same warps, the activation applied as they are written.
      ck::Product p[2];
      p[0] = {static_cast<int>(gt.type), weights_->raw(node.in[2]), g_row, g_row * static_cast<size_t>(gt.ne[1]), 0, ff, gate, ff, bias(1), ff};
      p[1] = {static_cast<int>(ut.type), weights_->raw(node.in[3]), u_row, u_row * static_cast<size_t>(ut.ne[1]), fused ? ff : 0, ff, up, ff,
              bias(2), ff};
      ck::mul_mat_codes(stream_, p, 2, d, x, d, k, ids, slots, q8_.get(), codes_of(gt.type, node.in[0], 1),
                        mp.glu == graph::MoeGlu::GeGLU ? ck::Glu::GeGLU : ck::Glu::SwiGLU, 0, 0, ck::Chain::First);
    } else {
      ck::mul_mat_id(stream_, static_cast<int>(gt.type), weights_->raw(node.in[2]), g_row, g_row * static_cast<size_t>(gt.ne[1]), 0, ff, d,
                     x, d, k, ids, slots, gate, ff, bias(1), ff, q8_.get(), codes_of(gt.type, node.in[0], k));
      ck::mul_mat_id(stream_, static_cast<int>(ut.type), weights_->raw(node.in[3]), u_row, u_row * static_cast<size_t>(ut.ne[1]),
                     fused ? ff : 0, ff, d, x, d, k, ids, slots, up, ff, bias(2), ff, q8_.get(), codes_of(ut.type, node.in[0], k));
      ck::elementwise(stream_, glu, gate, up, gate, static_cast<int64_t>(slots) * ff, mp.glu_alpha, mp.glu_limit);
    }
    // The down product's input is scratch, not a tensor: always quantized, in each block where it forms
    // the codes itself (the codes of x then stay for the products after the mixture, a shared expert's).
    if (!codes || !ck::slot_products_keep_codes(static_cast<int>(dt.type), ff)) codes_for_ = {-1, 0};
    ck::mul_mat_id(stream_, static_cast<int>(dt.type), weights_->raw(node.in[4]), d_row, d_row * static_cast<size_t>(d), 0, d, ff, gate, ff, 1,
                   ids, slots, y, d, bias(3), d, q8_.get(), false, codes ? ck::Chain::Second : ck::Chain::None);
    if (!combined_later(node)) ck::moe_combine(stream_, y, wts, n, k, d, out);
  }
  // Whether a later launch forms the mixture's weighted sum itself (AddNorm's combine, MoeTail).
  bool combined_later(const Node& node) const { return combined_[static_cast<size_t>(&node - g_.nodes.data())] != 0; }

  // Launches doing the work of consecutive nodes, decided once per graph and taken at a step when its
  // rows allow (products against codes: up to ck::kCodesTokens rows): an add and the norm of its sum
  // (with the codes of the norm when products against codes read it next); a norm and its codes;
  // products of the same input in one launch (q, k, v); gate and up products with their activation
  // (the two products' outputs then never written: they have no other reader); the per-head norms of q
  // and k and their rotations, or the two rotations alone (the norms' outputs then never written).
  // Also: a per-head norm and the gated activation after it, with the codes of the product after them
  // (NormGlu); the splits of q, k and v from one tensor and the delta rule reading them in place
  // (DeltaInPlace); a shared expert's sigmoid gate, its sum with the mixture and the residual's add and
  // norm in the launch of that norm, the mixture's slots combined there (MoeTail); a shared expert's
  // one-row float gate formed in the mixture's router launch (Routed: done there for up to
  // ck::kCodesTokens rows).
  enum class Fuse : uint8_t { None, AddNorm, Norm, Products, Glu, HeadsRope, NormGlu, DeltaInPlace, MoeTail, Routed };
  struct Fusion {  // (set by designated initializers, so a field added anywhere leaves the others as they are)
    Fuse kind = Fuse::None;
    uint8_t count = 0;  // nodes done
    bool codes = false;  // the norm (or an attention, kind None) writes the codes the next product reads
    bool swap = false;   // Glu: the activation applies to the second product
    bool append = false;  // HeadsRope: k and v also into the cache of the attention that follows
    bool attend = false;  // HeadsRope with append: at decode the attention's launch forms the heads itself
    bool few = false;     // AddNorm, Norm: codes only for up to ck::kCodesTokens rows (a mixture's products read them)
    bool combine = false;  // AddNorm: the sum's other term is the mixture just before, combined here
    int32_t moe = -1;        // MoeTail, Routed: the mixture's node
  };
  std::vector<Fusion> fuse_;
  std::vector<uint8_t> combined_;  // per mixture node: its slots combined by a later launch (AddNorm combine, MoeTail)
  std::vector<int32_t> routed_;    // per mixture node: the shared gate product its router launch forms (-1: none)

  bool codes_product(size_t i, TensorId x) const {
    if (i >= g_.nodes.size()) return false;
    const Node& n = g_.nodes[i];
    return n.op == Op::MatMul && n.in[1] == x && ck::uses_codes(static_cast<int>(g_.tensor(n.in[0]).type));
  }
  // A mixture whose gate and up products take the codes of x (up to ck::kCodesTokens rows).
  bool codes_moe(size_t i, TensorId x) const {
    if (i >= g_.nodes.size()) return false;
    const Node& m = g_.nodes[i];
    if (m.op != Op::MoE || m.in[0] != x || m.moe().glu == graph::MoeGlu::SwiGLUClamped) return false;
    const auto& gt = g_.tensor(m.in[2]);
    return gt.type == g_.tensor(m.in[3]).type && ck::uses_codes(static_cast<int>(gt.type)) && gt.ne[0] == g_.tensor(x).ne[0];
  }
  bool row_norm(const Node& n) const {
    const int64_t width = g_.tensor(n.out).ne[0];
    return n.op == Op::RmsNorm && (n.norm().group == 0 || n.norm().group == width) && ck::add_rms_norm_fits(width);
  }

  // The fusions of NormGlu, DeltaInPlace and MoeTail (with Routed) starting at node i, if one fits.
  bool plan_new(size_t i, const std::vector<int>& readers, const std::vector<int>& producer) {
    const size_t count = g_.nodes.size();
    const Node& n = g_.nodes[i];
    const auto one_reader = [&](TensorId t) { return readers[static_cast<size_t>(t)] == 1; };
    const auto width_of = [&](TensorId t) { return g_.tensor(t).ne[0]; };
    if (n.op == Op::RmsNorm && i + 1 < count) {
      const Node& a = g_.nodes[i + 1];
      const int64_t width = width_of(n.out), group = n.norm().group > 0 ? n.norm().group : width;
      if ((a.op == Op::SwiGLU || a.op == Op::GeGLU) && a.in.size() == 2 && (a.in[0] == n.out) != (a.in[1] == n.out) && one_reader(n.out) &&
          n.in.size() <= 2 && ck::norm_glu_fits(width, group) && width_of(a.in[0]) == width && width_of(a.in[1]) == width) {
        fuse_[i] = {.kind = Fuse::NormGlu, .count = 2, .codes = codes_product(i + 2, a.out), .swap = a.in[0] == n.out};
        return true;
      }
    }
    if (n.op == Op::Split && i + 3 < count) {
      const Node &k = g_.nodes[i + 1], &v = g_.nodes[i + 2], &dn = g_.nodes[i + 3];
      const auto whole = [&](const Node& x) { return x.op == Op::Split && x.in[0] == n.in[0] && x.split().n_groups == 1 && one_reader(x.out); };
      if (whole(n) && whole(k) && whole(v) && dn.op == Op::DeltaNet && dn.in[0] == n.out && dn.in[1] == k.out && dn.in[2] == v.out) {
        fuse_[i] = {.kind = Fuse::DeltaInPlace, .count = 4};
        return true;
      }
    }
    if (n.op == Op::SigmoidMul && i + 3 < count) {
      // ffn = mixture + shared * sigmoid(gate); h = x + ffn; its norm.
      const Node &add1 = g_.nodes[i + 1], &add2 = g_.nodes[i + 2], &nm = g_.nodes[i + 3];
      if (add1.op != Op::Add || add2.op != Op::Add || !row_norm(nm) || nm.in[0] != add2.out) return false;
      if ((add1.in[0] == n.out) == (add1.in[1] == n.out) || (add2.in[0] == add1.out) == (add2.in[1] == add1.out)) return false;
      const TensorId mixture = add1.in[0] == n.out ? add1.in[1] : add1.in[0];
      const int mi = producer[static_cast<size_t>(mixture)];
      const int64_t width = width_of(nm.out), gw = width_of(n.in[1]);
      if (mi < 0 || g_.nodes[static_cast<size_t>(mi)].op != Op::MoE || !one_reader(mixture) || !one_reader(n.out) || !one_reader(add1.out) ||
          width_of(n.in[0]) != width || (gw != 1 && gw != width) || combined_[static_cast<size_t>(mi)])
        return false;
      const TensorId y = nm.out;
      const bool moe_next = codes_moe(i + 4, y);
      fuse_[i] = {.kind = Fuse::MoeTail, .count = 4, .codes = codes_product(i + 4, y) || moe_next, .few = moe_next};
      fuse_[i].moe = mi;
      combined_[static_cast<size_t>(mi)] = 1;
      // The gate: a one-row float product of the router's input, read by the sigmoid alone.
      const Node& m = g_.nodes[static_cast<size_t>(mi)];
      const int gi = producer[static_cast<size_t>(n.in[1])];
      if (gi > mi && gw == 1 && one_reader(n.in[1]) && m.moe().router_in < 0 && fuse_[static_cast<size_t>(gi)].kind == Fuse::None) {
        const Node& gn = g_.nodes[static_cast<size_t>(gi)];
        const auto& rt = g_.tensor(m.in[1]);
        const auto& wt = g_.tensor(gn.in[0]);
        if (gn.op == Op::MatMul && gn.in.size() == 2 && gn.in[1] == m.in[0] && wt.type == gguf::TensorType::F32 && wt.ne[1] == 1 &&
            wt.ne[0] == rt.ne[0] && weights_->padded_cols(gn.in[0]) == 0 &&
            ck::moe_router_fits(static_cast<int>(rt.type), rt.ne[0], m.moe().n_expert)) {
          fuse_[static_cast<size_t>(gi)] = Fusion{.kind = Fuse::Routed, .count = 1};
          fuse_[static_cast<size_t>(gi)].moe = mi;
          routed_[static_cast<size_t>(mi)] = gi;
        }
      }
      return true;
    }
    return false;
  }

  void plan_fusions() {
    const size_t count = g_.nodes.size();
    fuse_.assign(count, Fusion{});
    combined_.assign(count, 0);
    routed_.assign(count, -1);
    if (knob_u32("ZINC_CUDA_FUSE", 1, 0, 1) == 0) return;
    std::vector<int> readers(g_.tensors.size(), 0), producer(g_.tensors.size(), -1);
    for (size_t i = 0; i < count; ++i) {
      for (TensorId t : g_.nodes[i].in) ++readers[static_cast<size_t>(t)];
      producer[static_cast<size_t>(g_.nodes[i].out)] = static_cast<int>(i);
    }
    for (TensorId t : {g_.logits, g_.hidden})
      if (t >= 0) ++readers[static_cast<size_t>(t)];
    const auto same_rotation = [&](size_t a, size_t b) {
      const Node &x = g_.nodes[a], &y = g_.nodes[b];
      if (x.op != Op::Rope || y.op != Op::Rope) return false;
      const TensorId fx = x.in.size() > 1 ? x.in[1] : -1, fy = y.in.size() > 1 ? y.in[1] : -1;  // as rope_table shares tables
      return fx == fy && x.rope().rope == y.rope().rope && x.rope().head_dim == y.rope().head_dim &&
             x.rope().n_rot == y.rope().n_rot && x.rope().mode == y.rope().mode && x.rope().head_dim <= 1024;
    };
    const auto head_norm = [&](size_t k, int head_dim) {
      const Node& x = g_.nodes[k];
      return x.op == Op::RmsNorm && x.norm().group == head_dim && readers[static_cast<size_t>(x.out)] == 1;
    };
    // The attention right after the rotation of k (node k_rope) reads k and v of full heads from F32 or
    // F16 caches: the rotation's launch stores them.
    const auto appends = [&](size_t k_rope) {
      if (k_rope + 1 >= count) return false;
      const Node& att = g_.nodes[k_rope + 1];
      if (att.op != Op::Attention || att.in[1] != g_.nodes[k_rope].out) return false;
      const int64_t kw = g_.kv_width_of(att.layer);
      return (kv_storage_ == gguf::TensorType::F32 || kv_storage_ == gguf::TensorType::F16) &&
             g_.tensor(att.in[1]).ne[0] == kw && g_.tensor(att.in[2]).ne[0] == kw && kw % g_.nodes[k_rope].rope().head_dim == 0 &&
             att.attention().head_dim == g_.nodes[k_rope].rope().head_dim;
    };
    // ... and reads the rotations' outputs alone, from heads the decode launch can form: at decode it
    // forms them (q's rotation at q_rope, k's right after).
    const auto attends = [&](size_t q_rope) {
      if (!appends(q_rope + 1) || knob_u32("ZINC_CUDA_ATTENTION_HEADS", 1, 0, 1) == 0) return false;
      const Node &qr = g_.nodes[q_rope], &kr = g_.nodes[q_rope + 1], &att = g_.nodes[q_rope + 2];
      const graph::RopeOpParams& r = qr.rope();
      return att.in[0] == qr.out && readers[static_cast<size_t>(qr.out)] == 1 && readers[static_cast<size_t>(kr.out)] == 1 &&
             r.n_head == att.attention().n_head && kr.rope().n_head == att.attention().n_head_kv &&
             ck::attention_forms_heads(static_cast<int>(kv_storage_), r.head_dim, r.n_rot, r.mode == graph::RopeMode::NeoX);
    };
    for (size_t i = 0; i < count; ++i) {
      const Node& n = g_.nodes[i];
      if (!opts_.keep_activations && plan_new(i, readers, producer)) {
        i += fuse_[i].count - 1;
        continue;
      }
      if (i + 3 < count && !opts_.keep_activations && same_rotation(i + 2, i + 3) && g_.nodes[i + 2].in[0] == n.out &&
          g_.nodes[i + 3].in[0] == g_.nodes[i + 1].out && head_norm(i, g_.nodes[i + 2].rope().head_dim) &&
          head_norm(i + 1, g_.nodes[i + 2].rope().head_dim)) {
        fuse_[i] = {.kind = Fuse::HeadsRope, .count = 4, .append = appends(i + 3), .attend = attends(i + 2)};
        i += 3;
        continue;
      }
      if (i + 1 < count && same_rotation(i, i + 1)) {
        fuse_[i] = {.kind = Fuse::HeadsRope, .count = 2, .append = appends(i + 1), .attend = attends(i)};
        ++i;
        continue;
      }
      if (n.op == Op::Attention) {
        const graph::AttentionParams& p = n.attention();
        fuse_[i].codes = codes_product(i + 1, n.out) && ck::attention_codes_fit(p.head_dim, p.n_head, p.n_head_kv);
        continue;
      }
      if (n.op == Op::Add && i + 1 < count && row_norm(g_.nodes[i + 1]) && g_.nodes[i + 1].in[0] == n.out) {
        const TensorId y = g_.nodes[i + 1].out;
        const bool moe = codes_moe(i + 2, y);
        // The mixture just before, read by this sum alone: its weighted sum of slots formed here.
        const bool combine = i > 0 && g_.nodes[i - 1].op == Op::MoE && !opts_.keep_activations &&
                             (n.in[0] == g_.nodes[i - 1].out || n.in[1] == g_.nodes[i - 1].out) &&
                             readers[static_cast<size_t>(g_.nodes[i - 1].out)] == 1 && n.in[0] != n.in[1];
        fuse_[i] = {.kind = Fuse::AddNorm, .count = 2, .codes = codes_product(i + 2, y) || moe, .few = moe, .combine = combine};
        if (combine) combined_[i - 1] = 1;
        ++i;
        continue;
      }
      if (row_norm(n) && (codes_product(i + 1, n.out) || codes_moe(i + 1, n.out))) {
        fuse_[i] = {.kind = Fuse::Norm, .count = 1, .codes = true, .few = codes_moe(i + 1, n.out)};
        continue;
      }
      if (!codes_product(i, n.in.size() > 1 ? n.in[1] : -1)) continue;
      const TensorId x = n.in[1];
      const auto& w0 = g_.tensor(n.in[0]);
      if (codes_product(i + 1, x) && i + 2 < count && !opts_.keep_activations) {
        const Node& up = g_.nodes[i + 1];
        const Node& act = g_.nodes[i + 2];
        const auto& w1 = g_.tensor(up.in[0]);
        const bool pair = act.in.size() == 2 && ((act.in[0] == n.out && act.in[1] == up.out) || (act.in[0] == up.out && act.in[1] == n.out));
        if ((act.op == Op::SwiGLU || act.op == Op::GeGLU) && pair && w0.type == w1.type && w0.ne[1] == w1.ne[1] && w0.ne[0] == w1.ne[0] &&
            readers[static_cast<size_t>(n.out)] == 1 && readers[static_cast<size_t>(up.out)] == 1) {
          fuse_[i] = {.kind = Fuse::Glu, .count = 3, .swap = act.in[0] == up.out};
          i += 2;
          continue;
        }
      }
      uint8_t k = 1;
      while (k < 4 && codes_product(i + k, x) && g_.tensor(g_.nodes[i + k].in[0]).ne[0] == w0.ne[0]) ++k;
      if (k > 1) {
        fuse_[i] = {.kind = Fuse::Products, .count = k};
        i += k - 1;
      }
    }
  }

  // How many nodes from i one fused launch does at this step (0: node i alone).
  size_t fusion(size_t i) const {
    const Fusion& f = fuse_[i];
    if (f.kind == Fuse::Routed) return rows_[static_cast<size_t>(g_.nodes[i].in[1])] <= ck::kCodesTokens ? 1 : 0;
    if (f.kind != Fuse::Products && f.kind != Fuse::Glu) return f.count;
    // (Only a product has its activation at in[1]; a norm or a rotation may have one input.)
    const int64_t n = rows_[static_cast<size_t>(g_.nodes[i].in[1])];
    if (f.kind == Fuse::Glu && n > ck::kCodesTokens) return 0;
    if (f.kind == Fuse::Products && n > ck::kCodesTokens) {
      // A prompt's products of one input in one launch of the prompt tiles, where they all take them.
      for (size_t k = i; k < i + f.count; ++k)
        if (!ck::prompt_tiles(static_cast<int>(g_.tensor(g_.nodes[k].in[0]).type), n)) return 0;
    }
    return f.count;
  }

  void exec_fused(size_t i, size_t count) {
    const Fusion& f = fuse_[i];
    const Node& first = g_.nodes[i];
    const auto s = stream_;
    switch (f.kind) {
      case Fuse::AddNorm: case Fuse::Norm: {
        const Node& norm = g_.nodes[i + count - 1];
        const int64_t width = g_.tensor(norm.out).ne[0];
        const int64_t n = rows_[static_cast<size_t>(first.in[0])];
        const bool codes = f.codes && (n <= ck::kCodesTokens || (!f.few && int8_prompts_ && n <= 65535));
        const bool add = f.kind == Fuse::AddNorm;
        if (f.combine) {  // the mixture's output was never formed: its slots' rows are combined here
          const Node& moe = g_.nodes[i - 1];
          const TensorId other = first.in[0] == moe.out ? first.in[1] : first.in[0];
          ck::add_rms_norm(s, act(other), nullptr, act(first.out), weights_->f32_or_null(norm, 1), act(norm.out), width, static_cast<int>(n),
                           norm.norm().eps, norm.norm().offset, codes ? q8_.get() : nullptr, moe_y_.get<float>(), moe_weights_.get<float>(),
                           moe.moe().n_expert_used);
        } else {
          ck::add_rms_norm(s, act(first.in[0]), add ? act(first.in[1]) : nullptr, add ? act(first.out) : nullptr,
                           weights_->f32_or_null(norm, 1), act(norm.out), width, static_cast<int>(n), norm.norm().eps, norm.norm().offset,
                           codes ? q8_.get() : nullptr);
        }
        for (size_t k = i; k < i + count; ++k) rows_[static_cast<size_t>(g_.nodes[k].out)] = n;
        if (codes) codes_for_ = {norm.out, 1};
        break;
      }
      case Fuse::Products: case Fuse::Glu: {
        const TensorId x = first.in[1];
        const int64_t n = rows_[static_cast<size_t>(x)];
        const int64_t cols = g_.tensor(first.in[0]).ne[0];
        const size_t products = f.kind == Fuse::Glu ? 2 : count;
        ck::Product p[4];
        for (size_t k = 0; k < products; ++k) {
          const Node& m = g_.nodes[i + (f.swap ? 1 - k : k)];
          const auto& wt = g_.tensor(m.in[0]);
          p[k].type = static_cast<int>(wt.type);
          p[k].w = weights_->raw(m.in[0]);
          p[k].row_bytes = quant::row_size(wt.type, cols);
          p[k].rows = wt.ne[1];
          p[k].out = act(f.kind == Fuse::Glu ? g_.nodes[i + 2].out : m.out);
          p[k].out_stride = wt.ne[1];
          p[k].bias = weights_->f32_or_null(m, 2);
        }
        const Op glu = g_.nodes[i + count - 1].op;
        // (A prompt's tiles take up to three products a launch.)
        const size_t chunk = n > ck::kCodesTokens ? 3 : products;
        for (size_t c0 = 0; c0 < products; c0 += chunk) {
          ck::mul_mat_codes(s, p + c0, static_cast<int>(std::min(chunk, products - c0)), cols, act(x), cols, 1, nullptr, static_cast<int>(n),
                            q8_.get(), codes_of(g_.tensor(first.in[0]).type, x, 1),
                            f.kind != Fuse::Glu ? ck::Glu::None : glu == Op::GeGLU ? ck::Glu::GeGLU : ck::Glu::SwiGLU);
        }
        for (size_t k = i; k < i + count; ++k) rows_[static_cast<size_t>(g_.nodes[k].out)] = n;
        break;
      }
      case Fuse::HeadsRope: {
        const bool norms = count == 4;
        ck::HeadsArgs a;
        a.nparts = 2;
        int64_t n = 0;
        for (size_t p = 0; p < 2; ++p) {
          const size_t ri = i + (norms ? 2 : 0) + p;
          const Node& r = g_.nodes[ri];
          ck::HeadsPart& part = a.part[p];
          const TensorId in = norms ? g_.nodes[i + p].in[0] : r.in[0];
          n = rows_[static_cast<size_t>(in)];
          part.in = act(in);
          part.out = act(r.out);
          part.n_head = r.rope().n_head;
          if (norms) {
            const Node& nm = g_.nodes[i + p];
            part.norm = true;
            part.w = weights_->f32_or_null(nm, 1);
            part.eps = nm.norm().eps;
            part.offset = nm.norm().offset;
          }
          if (p == 0) {
            a.head_dim = r.rope().head_dim;
            a.n_rot = r.rope().n_rot;
            a.neox = r.rope().mode == graph::RopeMode::NeoX;
            a.cs = step_dev<float>(ropes_[rope_of_.at(ri)].offset);
          }
        }
        if (f.append) {
          const Node& att = g_.nodes[i + count];
          const auto l = static_cast<size_t>(att.layer);
          a.kc = k_[l].bytes();
          a.vc = v_[l].bytes();
          a.v = act(att.in[2]);
          a.v_heads = static_cast<int>(g_.kv_width_of(att.layer) / a.head_dim);
          a.slots = step_dev<int32_t>(slot_at_);
          a.row_bytes = kv_row_bytes_[l];
          a.kv_type = static_cast<int>(kv_storage_);
          kv_appended_ = true;
        }
        for (size_t k = i; k < i + count; ++k) rows_[static_cast<size_t>(g_.nodes[k].out)] = n;
        // Formed by the decode attention's launch where every row is its sequence's one token (a row
        // reads only keys stored before the step, and its own).
        if (f.attend && std::all_of(parts_.begin(), parts_.end(), [](const Part& p) { return p.step.n_tokens == 1; })) {
          heads_pending_ = a;
          break;
        }
        ck::heads_norm_rope(s, a, static_cast<int>(n));
        break;
      }
      case Fuse::NormGlu: {
        const Node& a = g_.nodes[i + 1];
        const int64_t width = g_.tensor(first.out).ne[0];
        const int64_t n = rows_[static_cast<size_t>(first.in[0])];
        const bool codes = f.codes && q8_.get() && (n <= ck::kCodesTokens || (int8_prompts_ && n <= 65535));
        const TensorId z = f.swap ? a.in[1] : a.in[0];
        ck::norm_glu(s, act(first.in[0]), weights_->f32_or_null(first, 1), act(z), act(a.out), width,
                     first.norm().group > 0 ? first.norm().group : width, static_cast<int>(n), first.norm().eps, first.norm().offset,
                     a.op == Op::GeGLU, f.swap, codes ? q8_.get() : nullptr);
        for (size_t k = i; k < i + count; ++k) rows_[static_cast<size_t>(g_.nodes[k].out)] = n;
        if (codes) codes_for_ = {a.out, 1};
        break;
      }
      case Fuse::DeltaInPlace: {
        const Node& dn = g_.nodes[i + 3];
        const TensorId c = first.in[0];
        const int64_t n = rows_[static_cast<size_t>(c)], cw = g_.tensor(c).ne[0];
        const float* x = act(c);
        delta_net(dn, i + 3, act(dn.out), x + first.split().offset, x + g_.nodes[i + 1].split().offset, x + g_.nodes[i + 2].split().offset, cw, cw);
        for (size_t k = i; k < i + count; ++k) rows_[static_cast<size_t>(g_.nodes[k].out)] = n;
        break;
      }
      case Fuse::MoeTail: {
        const Node &add1 = g_.nodes[i + 1], &add2 = g_.nodes[i + 2], &norm = g_.nodes[i + 3];
        const Node& moe = g_.nodes[static_cast<size_t>(f.moe)];
        const TensorId x = add2.in[0] == add1.out ? add2.in[1] : add2.in[0];
        const int64_t width = g_.tensor(norm.out).ne[0];
        const int64_t n = rows_[static_cast<size_t>(first.in[0])];
        const bool codes = f.codes && (n <= ck::kCodesTokens || (!f.few && int8_prompts_ && n <= 65535));
        const int32_t gate = routed_[static_cast<size_t>(f.moe)];
        const float* g = gate >= 0 && n <= ck::kCodesTokens ? moe_shared_g_.get<float>() : act(first.in[1]);
        ck::add_rms_norm(s, act(x), nullptr, act(add2.out), weights_->f32_or_null(norm, 1), act(norm.out), width, static_cast<int>(n),
                         norm.norm().eps, norm.norm().offset, codes ? q8_.get() : nullptr, moe_y_.get<float>(), moe_weights_.get<float>(),
                         moe.moe().n_expert_used, act(first.in[0]), g, g_.tensor(first.in[1]).ne[0]);
        for (size_t k = i; k < i + count; ++k) rows_[static_cast<size_t>(g_.nodes[k].out)] = n;
        if (codes) codes_for_ = {norm.out, 1};
        break;
      }
      case Fuse::Routed: {  // formed by the router's launch
        rows_[static_cast<size_t>(first.out)] = rows_[static_cast<size_t>(first.in[1])];
        break;
      }
      case Fuse::None: break;
    }
  }

  // Whether the activation codes in q8_ already are those of tensor x's rows (read x_div rows per
  // row): the previous product that took codes read the same rows (q, k and v of one norm; gate and
  // up). Within a step, a tensor's rows do not change between the products that read them.
  // rows: the product's rows (prompts of types other than ck::int8_tiles() take float tiles and leave
  // q8_ as it is).
  bool codes_of(gguf::TensorType type, TensorId x, int x_div, int64_t rows = 1) {
    if (!q8_.get() || !ck::uses_codes(static_cast<int>(type))) return false;
    if (rows > ck::kCodesTokens && !ck::int8_tiles(static_cast<int>(type))) return false;
    const std::pair<TensorId, int> key{x, x_div};
    const bool ready = codes_for_ == key;
    codes_for_ = key;
    return ready;
  }

  bool by_columns(size_t node) const { return g_.nodes[node].op == Op::DeltaNet; }
  // Each head's dk x dv matrix between rows (the CPU's) and columns (held here): to_columns or back.
  static void transpose_heads(const graph::DeltaNetParams& d, const float* from, float* to, bool to_columns) {
    const size_t dk = static_cast<size_t>(d.dk), dv = static_cast<size_t>(d.dv);
    for (size_t h = 0; h < static_cast<size_t>(d.n_head_v); ++h) {
      const float* f = from + h * dk * dv;
      float* t = to + h * dk * dv;
      for (size_t i = 0; i < dk; ++i)
        for (size_t j = 0; j < dv; ++j) {
          if (to_columns) t[j * dk + i] = f[i * dv + j];
          else t[i * dv + j] = f[j * dk + i];
        }
    }
  }
  float* state_of(size_t node, int32_t seq) const { return state_[node].get<float>() + static_cast<size_t>(seq) * state_floats_[node]; }
  float* kept_of(size_t node, int32_t seq) const {
    return kept_[node].get<float>() + static_cast<size_t>(seq) * static_cast<size_t>(kept_states()) * state_floats_[node];
  }

  // The hooks of SequencedExecutable, through synchronous copies on the context's stream.
  void copy(void* to, const void* from, size_t bytes, cudaMemcpyKind kind) const {
    check(cudaMemcpyAsync(to, from, bytes, kind, stream_), "cudaMemcpy");
    sync("a copy");
  }
  void kv_copy(size_t l, size_t from, size_t to, size_t bytes) override {
    check(cudaMemcpyAsync(k_[l].bytes() + to, k_[l].bytes() + from, bytes, cudaMemcpyDeviceToDevice, stream_), "cudaMemcpy");
    copy(v_[l].bytes() + to, v_[l].bytes() + from, bytes, cudaMemcpyDeviceToDevice);
  }
  // A sequence's blocks from another context of the weights (seq_take): one launch copying every run.
  void kv_take(const SequencedExecutable& from, std::span<const KvRun> runs) override {
    const auto& f = static_cast<const CudaExecutable&>(from);  // (takes_from: this class)
    std::vector<ck::CopyRun> list;
    list.reserve(runs.size());
    for (const KvRun& r : runs) list.push_back({(r.v ? f.v_ : f.k_)[r.layer].bytes() + r.from, (r.v ? v_ : k_)[r.layer].bytes() + r.to, r.bytes});
    if (list.empty()) return;
    const DeviceBuffer dev(list.size() * sizeof(ck::CopyRun));
    check(cudaMemcpyAsync(dev.get(), list.data(), dev.size(), cudaMemcpyHostToDevice, stream_), "cudaMemcpy");
    ck::copy_runs(stream_, dev.get<ck::CopyRun>(), static_cast<int>(list.size()));
    sync("a sequence's blocks taken from another context");
  }
  void state_take(const SequencedExecutable& from, size_t node, int32_t from_seq, int32_t seq) override {
    copy(state_of(node, seq), static_cast<const CudaExecutable&>(from).state_of(node, from_seq), state_floats_[node] * 4, cudaMemcpyDeviceToDevice);
  }
  void kv_read(size_t l, bool v, size_t offset, void* out, size_t bytes) const override {
    copy(out, (v ? v_ : k_)[l].bytes() + offset, bytes, cudaMemcpyDeviceToHost);
  }
  void kv_write(size_t l, bool v, size_t offset, const void* in, size_t bytes) override {
    copy((v ? v_ : k_)[l].bytes() + offset, in, bytes, cudaMemcpyHostToDevice);
  }
  // The delta rule's states are held by columns (ck::DeltaArgs): read and written in the CPU's layout.
  void state_read(size_t node, int32_t seq, float* out) const override {
    if (!by_columns(node)) return copy(out, state_of(node, seq), state_floats_[node] * 4, cudaMemcpyDeviceToHost);
    std::vector<float> held(state_floats_[node]);
    copy(held.data(), state_of(node, seq), held.size() * 4, cudaMemcpyDeviceToHost);
    transpose_heads(g_.nodes[node].delta_net(), held.data(), out, false);
  }
  void state_write(size_t node, int32_t seq, const float* in) override {
    if (in && by_columns(node)) {
      std::vector<float> held(state_floats_[node]);
      transpose_heads(g_.nodes[node].delta_net(), in, held.data(), true);
      return copy(state_of(node, seq), held.data(), held.size() * 4, cudaMemcpyHostToDevice);
    }
    if (in) return copy(state_of(node, seq), in, state_floats_[node] * 4, cudaMemcpyHostToDevice);
    check(cudaMemsetAsync(state_of(node, seq), 0, state_floats_[node] * 4, stream_), "cudaMemset");
    sync("a clear");
  }
  void state_copy(size_t node, int32_t src, int32_t dst) override {
    copy(state_of(node, dst), state_of(node, src), state_floats_[node] * 4, cudaMemcpyDeviceToDevice);
  }
  void state_from_kept(int32_t seq, int32_t t) override {
    for (size_t i = 0; i < state_floats_.size(); ++i) {
      if (state_floats_[i] == 0) continue;
      check(cudaMemcpyAsync(state_of(i, seq), kept_of(i, seq) + static_cast<size_t>(t) * state_floats_[i], state_floats_[i] * 4,
                            cudaMemcpyDeviceToDevice, stream_),
            "cudaMemcpy");
    }
    sync("a state copy");
  }

  static constexpr size_t kAlign = 256;

  struct Part {
    graph::SeqStep step;
    int64_t first = 0;  // the row of the step its first token is
  };

  std::shared_ptr<CudaWeights> weights_;
  cudaStream_t stream_ = nullptr;  // (the step's: main_stream_, or side_stream_ beside a background context)
  cudaStream_t main_stream_ = nullptr, side_stream_ = nullptr;
  bool side_made_ = false;
  std::vector<size_t> offset_;  // per activation: its bytes in the arena
  DeviceBuffer arena_;
  HostBuffer logits_host_, hidden_host_, step_host_, ids_host_;
  // Steps of up to this many rows run a mixture slot by slot against codes (each slot its expert's
  // rows); more, up to ck::kCodesTokens, grouped by expert on integer tensor cores; more still, grouped
  // in prompt tiles of 64 slots. Measured on an H200, qwen3-30b-a3b, decode of 8 / 16 / 32 sequences:
  // slot by slot 1292 / 1046 tok/s; the prompt tiles 576 at 16, 978 at 32; on tensor cores 1738 at 32.
  static constexpr int kMoeSlotRows = 8;
  // Against codes, slot by slot also past kMoeSlotRows while a step's slots are at most 1.5 times the
  // experts its rows are expected to reach (k of n_expert each, drawn evenly: n_expert (1 - (1 -
  // k / n_expert)^n)): grouping then saves few reads of an expert and costs more than it saves.
  // zinc_cuda_matvec_bench ROWS 40 1 1 1 0 moe:E:K:FF on an H100, us a layer, slot by slot / grouped:
  // 128 of 8 (qwen3-30b-a3b) 12 rows 120.1 / 136.1, 16 155.5 / 154.8, 24 227.1 / 194.7; 256 of 8 (512
  // between) 24 179.8 / 197.2, 32 236.1 / 246.3, 48 348.7 / 332.0; 32 of 4, 12 65.0 / 65.3, 16 82.8 /
  // 67.9. In the step the grouping did better than there: qwen3-30b-a3b, 16 requests, 1656.0 tok/s slot
  // by slot against 1787.5 grouped (ZINC_CUDA_MOE_APART=0). A router that sends rows to fewer experts
  // than evenly (a trained one) makes the grouping pay sooner.
  // ZINC_CUDA_MOE_APART=ROWS: slot by slot up to that many rows instead (0: up to kMoeSlotRows).
  static bool slots_apart(int n, int k, int n_expert) {
    static const int forced = [] {
      const char* v = knob("ZINC_CUDA_MOE_APART");
      return v && *v ? std::atoi(v) : -1;
    }();
    if (forced >= 0) return n <= std::max(forced, kMoeSlotRows);
    if (n <= kMoeSlotRows) return true;
    const double reached = n_expert * (1.0 - std::pow(1.0 - static_cast<double>(k) / n_expert, n));
    return static_cast<double>(n) * k <= 1.5 * reached;
  }
  static constexpr int kSplitRows = 32;  // decode attention splits each row's keys for steps of up to this many rows
  DeviceBuffer ids_dev_;               // each logits row's argmax (read back with the step)
  DeviceBuffer argmax_scratch_;        // the argmax launch's keys and counts (zero between launches)
  mutable bool logits_read_ = false;   // logits_host_ holds the last step's logits
  DeviceBuffer step_dev_;
  size_t step_bytes_ = 0, step_used_ = 0, ids_at_ = 0, pos_at_ = 0, slot_at_ = 0, table_at_ = 0, select_at_ = 0, tables_at_ = 0, inputs_at_ = 0;
  size_t input_width_ = 0;
  std::vector<RopeTable> ropes_;
  std::map<size_t, size_t> rope_of_;  // rope node -> its table
  std::vector<DeviceBuffer> k_, v_, state_, kept_;
  DeviceBuffer q8_;  // activation codes (ck::mul_mat's q8)
  DeviceBuffer split_part_, split_count_;  // the prompt tiles' split scratch
  DeviceBuffer att_part_, att_count_;  // decode attention's split keys (ck::AttentionArgs part, count)
  int sms_ = 1;
  DeviceBuffer pad_x_;
  bool kv_appended_ = false;  // the next attention's k and v are in the cache already
  std::optional<ck::HeadsArgs> heads_pending_;  // the next attention forms these heads (Fusion::attend)
  std::pair<TensorId, int> codes_for_{-1, 0};  // whose codes q8_ holds in this step
  bool int8_prompts_ = true;
  bool flash_attention_ = true;  // prompts' attention on tensor cores (ZINC_CUDA_FLASH_ATTENTION)  // prompt products of uses_codes() types take codes (ZINC_CUDA_INT8_PROMPTS)
  DeviceBuffer moe_order_, moe_offsets_;  // a prompt's slots grouped by expert (ck::moe_group)
  DeviceBuffer moe_ids_, moe_weights_, moe_gate_, moe_up_, moe_y_, moe_logits_;
  DeviceBuffer moe_shared_g_;  // the shared expert's gate of up to ck::kCodesTokens rows, from the router's launch (Fuse::Routed)
  DeviceBuffer moe_count_;  // the routing launch's counters of finished blocks, per row (ck::moe_router)
  std::vector<Part> parts_;
  std::vector<int64_t> rows_;  // rows each activation held in the last step
  int64_t logit_rows_ = 0, hidden_rows_ = 0;
  uint64_t device_bytes_ = 0;
  const bool use_graphs_ = [] {
    const char* v = knob("ZINC_CUDA_GRAPHS");
    return !v || std::string(v) != "0";
  }();
  std::map<std::vector<int32_t>, Captured> graphs_;  // by step shape; destroyed before the buffers they use
};

}  // namespace

std::unique_ptr<Executable> cuda::CudaWeights::instantiate_graph(const ExecOptions& opts, const graph::Graph& g) {
  return std::make_unique<CudaExecutable>(std::static_pointer_cast<CudaWeights>(shared_from_this()), g, opts);
}

}  // namespace zinc::backend
