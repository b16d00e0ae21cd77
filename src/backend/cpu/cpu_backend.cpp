// The CPU backend: the reference executor every other backend is compared with, and the fallback
// that always runs. Weights are read in place from the mapped GGUF, or from a copy packed at load for
// the matrix products (CpuWeights: the tensor pointers, packed copies and the thread pool, shared by
// every context); each context's activations live in one arena planned
// once per graph (plan_arena: a range is reused once the last node reading its tensor has run); the KV
// cache is blocks of rows per layer that sequences hold through tables, and sequences are saved,
// loaded and copied as on every backend (SequencedExecutable).
#include <fmt/format.h>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "backend/exec_common.h"
#include "backend/cpu/cpu_ops.h"
#include "core/big_buffer.h"
#include "core/error.h"
#include "core/knobs.h"
#include "core/system_info.h"
#include "core/thread_pool.h"
#include "quant/dot.h"
#include "quant/fp16.h"
#include "quant/matmul.h"
#include "quant/packed.h"
#include "quant/quant.h"

namespace zinc::backend {

namespace {

using graph::Node;
using graph::Op;
using graph::TensorId;
using graph::TensorKind;

// The weights in place in the mapped file or packed, and the threads every context of them computes on (one
// step at a time: a step takes the pool for its whole length).
class CpuWeights final : public Weights {
 public:
  CpuWeights(const graph::Graph& g, const gguf::File& file, unsigned threads, const LoadProgress& progress)
      : Weights(g), pool(threads ? threads : std::max(1u, cpu_info().physical_cores)) {
    ptr.resize(graph().tensors.size(), nullptr);
    std::vector<size_t> weights;
    uint64_t total = 0, done = 0;
    for (size_t i = 0; i < graph().tensors.size(); ++i) {
      const auto& t = graph().tensors[i];
      if (t.kind != TensorKind::Weight) continue;
      const auto bytes = file.tensor_data(file.tensor(t.name));
      ptr[i] = bytes.data();
      weights.push_back(i);
      total += bytes.size();
    }
    pack(file.mapped(), [&](size_t i) {
      done += file.tensor(graph().tensors[i].name).n_bytes;
      if (progress) progress(done, total);
    });
    if (!progress) return;
    // Reads the other mapped weights in now, one byte per page, so that the wait is here, with
    // progress, and not in the first steps.
    volatile uint8_t sink = 0;
    for (size_t i : weights) {
      if (packed[i].bytes() > 0) continue;
      const auto part = file.tensor_data(file.tensor(graph().tensors[i].name));
      for (size_t at = 0; at < part.size(); at += 4096) sink = static_cast<uint8_t>(sink + part[at]);
      done += part.size();
      progress(done, total);
    }
    if (weights.empty()) progress(0, 0);
  }
  std::unique_ptr<Executable> instantiate_graph(const ExecOptions& opts, const graph::Graph& g) override;

  // Weight rows [row0, row0 + rows) of a matrix (or of stacked experts' rows) times n rows of x:
  // through the packed copy where the tensor has one (x_key: matmul_packed's, x quantized once for
  // the products given the same key).
  void product(graph::TensorId id, int64_t row0, int64_t rows, const float* x, int64_t n, float* y, uint64_t x_key = 0) {
    product(id, row0, rows, x, n, y, pool, x_key);
  }
  // The same on the threads of `on` (a pool of one: this thread only).
  void product(graph::TensorId id, int64_t row0, int64_t rows, const float* x, int64_t n, float* y, ThreadPool& on,
               uint64_t x_key = 0) {
    const auto& t = graph().tensor(id);
    const quant::PackedMatrix& pk = packed[static_cast<size_t>(id)];
    if (pk.bytes() > 0) return quant::matmul_packed(pk.view().slice(row0, rows), x, n, y, on, x_key);
    const auto* base = static_cast<const uint8_t*>(ptr[static_cast<size_t>(id)]) + quant::row_size(t.type, t.ne[0]) * static_cast<size_t>(row0);
    quant::matmul(t.type, base, rows, t.ne[0], x, n, y, on);
  }

  std::vector<const void*> ptr;  // per tensor: a weight's bytes in the mapped file
  std::vector<quant::PackedMatrix> packed;  // per tensor: its packed copy (packed.h), or none
  ThreadPool pool;
  std::mutex step_mutex;  // held for a step: the pool serves one caller at a time

 private:
  // Packs the weights that only matrix products read where this CPU has packed kernels for their type
  // and the row slices the graph takes (whole matrices; experts, and the gate and up halves of fused
  // expert tensors) are whole groups of rows. Products then read only the packed copy: the mapped
  // pages of those tensors are released (the file stays mapped; nothing reads them again).
  void pack(bool mapped, const std::function<void(size_t)>& packed_one) {
    const auto& g = graph();
    std::vector<int64_t> slice(g.tensors.size(), 0);  // rows per slice a product takes; -1: read otherwise
    auto product_of = [&](TensorId id, int64_t rows) {
      auto& s = slice[static_cast<size_t>(id)];
      if (s >= 0) s = s == 0 || s == rows ? rows : -1;
    };
    for (const Node* np : graph::nodes_with_head(g)) {
      const Node& node = *np;
      if (node.op == Op::MatMul) product_of(node.in[0], g.tensor(node.in[0]).ne[1]);
      if (node.op == Op::MoE) {
        product_of(node.in[1], g.tensor(node.in[1]).ne[1]);
        const bool fused = node.in[2] == node.in[3];
        product_of(node.in[2], fused ? g.tensor(node.in[2]).ne[1] / 2 : g.tensor(node.in[2]).ne[1]);
        if (!fused) product_of(node.in[3], g.tensor(node.in[3]).ne[1]);
        product_of(node.in[4], g.tensor(node.in[4]).ne[1]);
      }
      for (size_t k = 0; k < node.in.size(); ++k) {
        const bool product_input = (node.op == Op::MatMul && k == 0) || (node.op == Op::MoE && k >= 1 && k <= 4);
        if (!product_input && g.tensor(node.in[k]).kind == TensorKind::Weight) slice[static_cast<size_t>(node.in[k])] = -1;
      }
    }
    packed.resize(g.tensors.size());
    for (size_t i = 0; i < g.tensors.size(); ++i) {
      const auto& t = g.tensors[i];
      if (slice[i] <= 0 || slice[i] % quant::kPackRows != 0) continue;
      int64_t rows = 1;
      for (size_t d = 1; d < t.ne.size(); ++d) rows *= t.ne[d];
      if (!quant::can_pack(t.type, rows, t.ne[0])) continue;
      packed[i] = quant::PackedMatrix(t.type, ptr[i], rows, t.ne[0], pool);
      if (mapped) release_pages(ptr[i], quant::row_size(t.type, t.ne[0]) * static_cast<size_t>(rows));
      packed_one(i);
    }
  }

  // Drops the whole pages of a read-only file mapping from memory (they would be read from the file
  // again if touched).
  static void release_pages(const void* p, size_t bytes) {
    const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    const auto begin = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;
    const auto end = (reinterpret_cast<uintptr_t>(p) + bytes) / page * page;
    if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
  }
};

class CpuExecutable final : public SequencedExecutable {
 public:
  CpuExecutable(std::shared_ptr<CpuWeights> weights, const graph::Graph& g, const ExecOptions& opts)
      : SequencedExecutable(g, opts), weights_(std::move(weights)), pool_(weights_->pool) {
    if (const char* e = knob("ZINC_CPU_PROFILE"); e && *e && *e != '0') {
      profiling_ = true;
      pool_.set_accounting(true);
      for (auto& v : op_time_) v.resize(static_cast<size_t>(Op::Input) + 1);
    }
    plan_buffers();
    // Each layer's cache has its own row width (layers may differ in head size or KV heads); all
    // layers share the block tables.
    k_.resize(kv_row_bytes_.size());
    v_.resize(kv_row_bytes_.size());
    for (size_t l = 0; l < kv_row_bytes_.size(); ++l) {
      const size_t layer_bytes = kv_row_bytes_[l] * static_cast<size_t>(blocks_.n_blocks()) * kKvBlock;
      // Zeros that take memory only once written, a page at a time: a cache costs what its sequences
      // fill, and a prompt's rows cost the zeroing of the pages they fill.
      k_[l] = BigBuffer(layer_bytes, false);
      v_[l] = BigBuffer(layer_bytes, false);
    }
    state_.resize(g_.nodes.size());
    for (size_t i = 0; i < state_floats_.size(); ++i) state_[i].assign(state_floats_[i] * static_cast<size_t>(opts_.n_seq), 0.0f);
    kept_.resize(g_.nodes.size());
    for (size_t i = 0; i < state_floats_.size(); ++i) {
      kept_[i].assign(state_floats_[i] * static_cast<size_t>(opts_.n_seq) * static_cast<size_t>(kept_states()), 0.0f);
    }
  }

  void run(const graph::StepParams& step) override {
    const std::lock_guard<std::mutex> lock(weights_->step_mutex);
    step_serial_ = next_step_serial();
    begin_step(step);
    parts_.clear();
    int32_t first = 0;
    for (const graph::SeqStep& p : step.seqs) {
      parts_.push_back({p, first});
      first += p.n_tokens;
    }
    auto& rows = rows_;  // rows held by each activation this step
    rows.assign(g_.tensors.size(), 0);
    const size_t kind = step.tokens.size() > 1 ? 1 : 0;
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      cur_ = i;
      if (!profiling_) {
        exec(g_.nodes[i], step, rows);
        continue;
      }
      const ThreadPool::Usage u0 = pool_.usage();
      const int64_t t0 = now_ns();
      exec(g_.nodes[i], step, rows);
      const int64_t wall = now_ns() - t0;
      const ThreadPool::Usage u1 = pool_.usage();
      OpTime& o = op_time_[kind][static_cast<size_t>(g_.nodes[i].op)];
      ++o.nodes;
      o.wall_ns += wall;
      o.idle_ns += static_cast<int64_t>(pool_.size() - 1) * wall - (u1.worker_busy_ns - u0.worker_busy_ns) + (u1.caller_wait_ns - u0.caller_wait_ns);
    }
    if (profiling_) {
      ++steps_[kind];
      tokens_[kind] += static_cast<int64_t>(step.tokens.size());
    }
    logit_rows_ = rows[static_cast<size_t>(g_.logits)];
    end_step(step);
  }

  ~CpuExecutable() override {
    if (profiling_) std::fputs(profile().c_str(), stderr);
  }

  std::span<const float> logits() const override {
    return {buf(g_.logits), static_cast<size_t>(logit_rows_ * n_vocab())};
  }

  std::span<const float> hidden() const override {
    if (g_.hidden < 0) return Executable::hidden();
    return {buf(g_.hidden), static_cast<size_t>(rows_[static_cast<size_t>(g_.hidden)] * hidden_width())};
  }
  int64_t hidden_width() const override { return g_.hidden < 0 ? 0 : g_.tensor(g_.hidden).ne[0]; }

  std::vector<float> activation(TensorId id) const override {
    check_activation(g_, opts_, id);
    const float* b = buf(id);
    return {b, b + rows_[static_cast<size_t>(id)] * g_.tensor(id).ne[0]};
  }

 private:
  static int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
  }

  // ZINC_CPU_PROFILE: per kind of step (decode: one token; prompt: more), per op: its time and the
  // threads' idle time inside it (thread time not spent in the op's work: a thread waiting for the
  // others, or the op running on one thread), as a table sorted by time.
  std::string profile() const {
    const unsigned threads = pool_.size();
    std::string out = fmt::format("CPU profile: {} thread{}; idle: the share of the threads' time inside an op not spent working\n",
                                  threads, threads == 1 ? "" : "s");
    const char* kinds[] = {"decode", "prompt"};
    for (size_t k = 0; k < 2; ++k) {
      if (steps_[k] == 0) continue;
      int64_t total = 0, idle = 0;
      std::vector<size_t> order;
      for (size_t op = 0; op < op_time_[k].size(); ++op) {
        total += op_time_[k][op].wall_ns;
        idle += op_time_[k][op].idle_ns;
        if (op_time_[k][op].nodes > 0) order.push_back(op);
      }
      std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return op_time_[k][a].wall_ns > op_time_[k][b].wall_ns; });
      const auto pct = [&](int64_t part, int64_t whole) { return whole > 0 ? 100.0 * static_cast<double>(part) / static_cast<double>(whole) : 0.0; };
      out += fmt::format("{} steps: {} ({} tokens), {:.3f} ms per step in ops, {:.1f}% idle\n", kinds[k], steps_[k], tokens_[k],
                         static_cast<double>(total) / 1e6 / static_cast<double>(steps_[k]), pct(idle, total * threads));
      out += fmt::format("  {:<12} {:>8} {:>12} {:>7} {:>7}\n", "op", "nodes", "ms per step", "share", "idle");
      for (size_t op : order) {
        const OpTime& o = op_time_[k][op];
        out += fmt::format("  {:<12} {:>8} {:>12.3f} {:>6.1f}% {:>6.1f}%\n", graph::op_name(static_cast<Op>(op)), o.nodes / steps_[k],
                           static_cast<double>(o.wall_ns) / 1e6 / static_cast<double>(steps_[k]), pct(o.wall_ns, total), pct(o.idle_ns, o.wall_ns * threads));
      }
    }
    return out;
  }
  struct OpTime {
    int64_t nodes = 0, wall_ns = 0, idle_ns = 0;
  };
  bool profiling_ = false;
  std::vector<OpTime> op_time_[2];  // [decode, prompt][op]
  int64_t steps_[2] = {}, tokens_[2] = {};

  // Every activation's place in one arena of width * max_tokens floats each, reused once the last node
  // reading a tensor has run (plan_arena, as every backend plans it).
  void plan_buffers() {
    const ArenaPlan plan = plan_arena(
        g_, last_uses(g_), [&](TensorId t) { return static_cast<size_t>(g_.tensor(t).ne[0] * opts_.max_tokens) * sizeof(float); },
        kArenaAlign, opts_.keep_activations);
    offset_.resize(plan.offset.size());
    for (size_t i = 0; i < plan.offset.size(); ++i) offset_[i] = plan.offset[i] / sizeof(float);
    arena_.assign(plan.bytes / sizeof(float), 0.0f);
  }
  static constexpr size_t kArenaAlign = 64;  // a cache line

  // The hooks of SequencedExecutable: the caches and states are host memory. They address a block's
  // first rows (offset: the block's start); tiled keys (tiled_keys) are gathered into rows and
  // scattered back, copied a whole tile at a time.
  void kv_copy(size_t l, size_t from, size_t to, size_t bytes) override {
    std::memcpy(v_[l].data() + to, v_[l].data() + from, bytes);
    if (tiled_keys()) {
      const size_t tile = kv_row_bytes_[l] * cpu::kAttendTile;
      bytes = (bytes + tile - 1) / tile * tile;
    }
    std::memcpy(k_[l].data() + to, k_[l].data() + from, bytes);
  }
  void kv_read(size_t l, bool v, size_t offset, void* out, size_t bytes) const override {
    if (v || !tiled_keys()) return (void)std::memcpy(out, (v ? v_ : k_)[l].data() + offset, bytes);
    const size_t rb = kv_row_bytes_[l];
    for (size_t r = 0; r < bytes / rb; ++r) {
      const KeyLane k = key_lane(l, const_cast<uint8_t*>(k_[l].data()) + offset, static_cast<int>(r));
      for (size_t c = 0; c < k.width; ++c) std::memcpy(static_cast<uint8_t*>(out) + r * rb + c * k.elem, k.at(c), k.elem);
    }
  }
  void kv_write(size_t l, bool v, size_t offset, const void* in, size_t bytes) override {
    if (v || !tiled_keys()) return (void)std::memcpy((v ? v_ : k_)[l].data() + offset, in, bytes);
    const size_t rb = kv_row_bytes_[l];
    for (size_t r = 0; r < bytes / rb; ++r) store_key(l, k_[l].data() + offset, static_cast<int>(r), static_cast<const uint8_t*>(in) + r * rb);
  }

  // Keys of an F32 or F16 cache are stored as the attention reads them: each block of kKvBlock
  // positions as tiles of kAttendTile positions, element c of the tile's lane x at c·kAttendTile + x.
  // Other storage types keep rows.
  bool tiled_keys() const { return kv_storage_ == gguf::TensorType::F32 || kv_storage_ == gguf::TensorType::F16; }
  static_assert(kKvBlock % cpu::kAttendTile == 0);
  // Where the elements of row r of a block of tiled keys are.
  struct KeyLane {
    uint8_t* tile;
    size_t lane, elem, width;
    uint8_t* at(size_t c) const { return tile + (c * cpu::kAttendTile + lane) * elem; }
  };
  KeyLane key_lane(size_t l, uint8_t* block, int r) const {
    const size_t elem = kv_storage_ == gguf::TensorType::F32 ? 4 : 2;
    return {block + static_cast<size_t>(r / cpu::kAttendTile) * cpu::kAttendTile * kv_row_bytes_[l], static_cast<size_t>(r % cpu::kAttendTile),
            elem, kv_row_bytes_[l] / elem};
  }
  // Row r of a block of tiled keys from a row of the storage type.
  void store_key(size_t l, uint8_t* block, int r, const uint8_t* row) const {
    const KeyLane k = key_lane(l, block, r);
    for (size_t c = 0; c < k.width; ++c) std::memcpy(k.at(c), row + c * k.elem, k.elem);
  }
  // The block of keys holding position `pos` of a sequence, and the tile holding it (tiled_keys).
  uint8_t* key_block(size_t layer, int32_t seq, int32_t pos) {
    return k_[layer].data() + static_cast<size_t>(blocks_.block(seq, pos)) * kKvBlock * kv_row_bytes_[layer];
  }
  const uint8_t* key_tile(size_t layer, int32_t seq, int32_t pos) {
    return key_block(layer, seq, pos) + static_cast<size_t>(pos % kKvBlock / cpu::kAttendTile * cpu::kAttendTile) * kv_row_bytes_[layer];
  }
  float* state_at(size_t node, int32_t seq) { return state_[node].data() + static_cast<size_t>(seq) * state_floats_[node]; }
  void state_read(size_t node, int32_t seq, float* out) const override {
    std::memcpy(out, state_[node].data() + static_cast<size_t>(seq) * state_floats_[node], state_floats_[node] * sizeof(float));
  }
  void state_write(size_t node, int32_t seq, const float* in) override {
    if (in) std::memcpy(state_at(node, seq), in, state_floats_[node] * sizeof(float));
    else std::fill_n(state_at(node, seq), state_floats_[node], 0.0f);
  }
  void state_copy(size_t node, int32_t src, int32_t dst) override {
    std::memcpy(state_at(node, dst), state_at(node, src), state_floats_[node] * sizeof(float));
  }

  // fn(first, end) over rows [0, n) of `width` floats: split among the threads when the rows hold
  // enough elements to pay for it (prompts), else on this thread (a decode step's single rows). Each
  // row's result is the same either way.
  template <class Fn>
  void by_rows(int64_t n, int64_t width, const Fn& fn) {
    if (n < 2 || n * width < kParallelElements) return fn(0, n);
    pool_.parallel_for(n, [&](int64_t b, int64_t e) { fn(b, e); });
  }
  static constexpr int64_t kParallelElements = 16384;

  float* buf(TensorId id) { return arena_.data() + offset_[static_cast<size_t>(id)]; }
  const float* buf(TensorId id) const { return arena_.data() + offset_[static_cast<size_t>(id)]; }
  const void* w(TensorId id) const { return weights_->ptr[static_cast<size_t>(id)]; }

  void exec(const Node& node, const graph::StepParams& step, std::vector<int64_t>& rows) {
    const auto& out_t = g_.tensor(node.out);
    const int64_t width = out_t.ne[0];
    const auto in_rows = [&](size_t k) { return rows[static_cast<size_t>(node.in[k])]; };
    const auto n_step = static_cast<int64_t>(step.tokens.size());
    float* out = buf(node.out);
    int64_t n = n_step;
    switch (node.op) {
      case Op::Embed: {
        const auto& wt = g_.tensor(node.in[0]);
        const size_t rs = quant::row_size(wt.type, wt.ne[0]);
        const auto* base = static_cast<const uint8_t*>(w(node.in[0]));
        by_rows(n, width, [&](int64_t t0, int64_t t1) {
          for (int64_t t = t0; t < t1; ++t) {
            quant::dequantize_row(wt.type, base + rs * static_cast<size_t>(step.tokens[static_cast<size_t>(t)]), out + t * width, width);
            if (node.embed().scale != 1.0f) {
              for (int64_t i = 0; i < width; ++i) out[t * width + i] *= node.embed().scale;
            }
          }
        });
        break;
      }
      case Op::RmsNorm: {
        n = in_rows(0);
        const float* wv = nullptr;
        std::vector<float> wbuf;
        if (node.in.size() > 1) wv = f32_weight(node.in[1], wbuf);
        const int64_t group = node.norm().group > 0 ? node.norm().group : width;
        const float* x = buf(node.in[0]);
        by_rows(n, width, [&](int64_t t0, int64_t t1) {
          cpu::rms_norm(x + t0 * width, wv, out + t0 * width, width, group, t1 - t0, node.norm().eps, node.norm().offset);
        });
        break;
      }
      case Op::MatMul: {
        const auto& wt = g_.tensor(node.in[0]);
        n = in_rows(1);
        weights_->product(node.in[0], 0, wt.ne[1], buf(node.in[1]), n, out, x_key(node.in[1]));
        if (node.in.size() > 2) {
          std::vector<float> bbuf;
          const float* bias = f32_weight(node.in[2], bbuf);
          for (int64_t t = 0; t < n; ++t)
            for (int64_t i = 0; i < width; ++i) out[t * width + i] += bias[i];
        }
        break;
      }
      case Op::Add: case Op::Mul: {
        n = in_rows(0);
        const float* a = buf(node.in[0]);
        const float* b = buf(node.in[1]);
        const bool add = node.op == Op::Add;
        by_rows(n, width, [&](int64_t t0, int64_t t1) {
          if (add) for (int64_t i = t0 * width; i < t1 * width; ++i) out[i] = a[i] + b[i];
          else for (int64_t i = t0 * width; i < t1 * width; ++i) out[i] = a[i] * b[i];
        });
        break;
      }
      case Op::Rope: {
        n = in_rows(0);
        std::vector<float> fbuf;
        const float* factors = node.in.size() > 1 ? f32_weight(node.in[1], fbuf) : nullptr;
        const graph::RopeOpParams& r = node.rope();
        for (const Part& p : parts_) {  // each sequence's tokens at its own positions
          by_rows(p.step.n_tokens, width, [&](int64_t t0, int64_t t1) {
            cpu::rope(buf(node.in[0]) + (p.first + t0) * width, out + (p.first + t0) * width, t1 - t0, r.n_head, r.head_dim,
                      r.n_rot, r.mode, r.rope, factors, static_cast<int32_t>(p.step.n_past + t0));
          });
        }
        break;
      }
      case Op::Attention:
        n = in_rows(0);
        attention(node, out);
        break;
      case Op::SwiGLU:
        n = in_rows(0);
        by_rows(n, width, [&](int64_t t0, int64_t t1) {
          cpu::swiglu(buf(node.in[0]) + t0 * width, buf(node.in[1]) + t0 * width, out + t0 * width, (t1 - t0) * width);
        });
        break;
      case Op::GeGLU:
        n = in_rows(0);
        by_rows(n, width, [&](int64_t t0, int64_t t1) {
          cpu::geglu(buf(node.in[0]) + t0 * width, buf(node.in[1]) + t0 * width, out + t0 * width, (t1 - t0) * width);
        });
        break;
      case Op::Softcap:
        n = in_rows(0);
        by_rows(n, width, [&](int64_t t0, int64_t t1) {
          cpu::softcap(buf(node.in[0]) + t0 * width, out + t0 * width, (t1 - t0) * width, node.softcap().cap);
        });
        break;
      case Op::MoE:
        n = in_rows(0);
        moe(node, buf(node.in[0]), n, out);
        break;
      case Op::Split: {
        n = in_rows(0);
        const int64_t in_w = g_.tensor(node.in[0]).ne[0], piece = width / node.split().n_groups;
        const float* x = buf(node.in[0]);
        by_rows(n, width, [&](int64_t t0, int64_t t1) {
          for (int64_t t = t0; t < t1; ++t) {
            for (int gi = 0; gi < node.split().n_groups; ++gi) {
              std::memcpy(out + t * width + gi * piece, x + t * in_w + gi * node.split().stride + node.split().offset,
                          static_cast<size_t>(piece) * sizeof(float));
            }
          }
        });
        break;
      }
      case Op::Concat: {
        n = in_rows(0);
        int64_t at = 0;
        for (TensorId part : node.in) {
          const int64_t pw = g_.tensor(part).ne[0];
          const float* x = buf(part);
          by_rows(n, pw, [&](int64_t t0, int64_t t1) {
            for (int64_t t = t0; t < t1; ++t) std::memcpy(out + t * width + at, x + t * pw, static_cast<size_t>(pw) * sizeof(float));
          });
          at += pw;
        }
        break;
      }
      case Op::SigmoidMul: {
        n = in_rows(0);
        const float* a = buf(node.in[0]);
        const float* b = buf(node.in[1]);
        const int64_t bw = g_.tensor(node.in[1]).ne[0];
        by_rows(n, width, [&](int64_t t0, int64_t t1) {
          for (int64_t t = t0; t < t1; ++t) {
            for (int64_t i = 0; i < width; ++i) {
              const float gate = b[t * bw + (bw == 1 ? 0 : i)];
              out[t * width + i] = a[t * width + i] / (1.0f + std::exp(-gate));
            }
          }
        });
        break;
      }
      case Op::SsmConv: {
        n = in_rows(0);
        const auto& wt = g_.tensor(node.in[1]);
        for (const Part& p : parts_) {
          // Keeping its states: token by token, the state after each copied out.
          const int64_t pieces = p.step.keep_states ? p.step.n_tokens : 1, each = p.step.n_tokens / pieces;
          for (int64_t t = 0; t < pieces; ++t) {
            const int64_t at = p.first + t * each;
            cpu::ssm_conv(buf(node.in[0]) + at * width, static_cast<const float*>(w(node.in[1])), state_of(p.step.seq),
                          out + at * width, width, static_cast<int>(wt.ne[0]), each, &pool_);
            if (p.step.keep_states) keep_state(p.step.seq, t);
          }
        }
        break;
      }
      case Op::DeltaNet:
        n = in_rows(0);
        delta_net(node, n, out);
        break;
      case Op::Scale: {
        n = in_rows(0);
        std::vector<float> sbuf;
        const auto& st = g_.tensor(node.in[1]);
        const float* sv = f32_weight(node.in[1], sbuf);
        const float* a = buf(node.in[0]);
        const bool one = st.ne[0] * st.ne[1] * st.ne[2] * st.ne[3] == 1;
        for (int64_t t = 0; t < n; ++t)
          for (int64_t i = 0; i < width; ++i) out[t * width + i] = a[t * width + i] * sv[one ? 0 : i];
        break;
      }
      case Op::Input:
        std::memcpy(out, step.inputs.data(), static_cast<size_t>(n * width) * sizeof(float));
        break;
      case Op::SelectLast: {
        // Per sequence: all its rows, or its last. Rows only move towards the front, in order.
        const float* src = buf(node.in[0]);
        n = 0;
        for (const Part& p : parts_) {
          const int64_t from = p.step.all_logits ? p.first : p.first + p.step.n_tokens - 1;
          const int64_t count = p.step.all_logits ? p.step.n_tokens : 1;
          std::memmove(out + n * width, src + from * width, static_cast<size_t>(count * width) * sizeof(float));
          n += count;
        }
        break;
      }
    }
    rows[static_cast<size_t>(node.out)] = n;
  }

  // Mixture of experts. Routing per token (softmax over all experts, top-k, optional renormalisation;
  // or top-k logits, softmax over those), then each expert runs once over the tokens routed to it (a
  // matrix-matrix product in prefill), its outputs added back scaled by their routing weights. The
  // optional inputs (Node::moe_*): the router's own input and logit scale, a per-expert factor on the
  // final weights (Gemma 4), biases on the router and every projection (GPT-OSS).
  void moe(const Node& node, const float* x, int64_t n, float* out) {
    const auto& gt = g_.tensor(node.in[2]);
    // fused: one {d, 2 * ff, n_expert} tensor, gate rows first (named, not bound: lambdas below capture them)
    const MoeShape shape = moe_shape(g_, node);
    const int64_t d = shape.d, ff = shape.ff;
    const bool fused = shape.fused;
    const int ne = node.moe().n_expert, k = node.moe().n_expert_used;
    std::vector<float> logits(static_cast<size_t>(n * ne));
    const float* router_x = node.moe().router_in >= 0 ? buf(node.in[static_cast<size_t>(node.moe().router_in)]) : x;
    weights_->product(node.in[1], 0, ne, router_x, n, logits.data());
    if (node.moe().logit_scale != 1.0f) {
      for (float& l : logits) l *= node.moe().logit_scale;
    }
    std::vector<float> ebuf;
    const float* expert_scale =
        node.moe().expert_scale >= 0 ? f32_weight(node.in[static_cast<size_t>(node.moe().expert_scale)], ebuf) : nullptr;
    // Biases (all four or none): router {ne}, gate and up {ff, ne}, down {d, ne}, F32.
    const bool biased = node.moe().bias >= 0;
    const auto bias = [&](int k_in) {
      return biased ? static_cast<const float*>(w(node.in[static_cast<size_t>(node.moe().bias + k_in)])) : nullptr;
    };
    const float *router_b = bias(0), *gate_b = bias(1), *up_b = bias(2), *down_b = bias(3);
    const bool topk_first = node.moe().routing == graph::MoeRouting::TopKSoftmax;
    std::vector<std::vector<std::pair<int64_t, float>>> routed(static_cast<size_t>(ne));  // (token, weight)
    std::vector<int> order(static_cast<size_t>(ne));
    for (int64_t t = 0; t < n; ++t) {
      float* l = logits.data() + t * ne;
      if (router_b) {
        for (int e = 0; e < ne; ++e) l[e] += router_b[e];
      }
      if (!topk_first) {
        const float mx = *std::max_element(l, l + ne);
        float sum = 0;
        for (int e = 0; e < ne; ++e) sum += l[e] = std::exp(l[e] - mx);
        for (int e = 0; e < ne; ++e) l[e] /= sum;
      }
      for (int e = 0; e < ne; ++e) order[static_cast<size_t>(e)] = e;
      std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int a, int b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
      if (topk_first) {  // softmax over the k selected logits (the largest is order[0])
        const float mx = l[order[0]];
        float sum = 0;
        for (int i = 0; i < k; ++i) sum += l[order[static_cast<size_t>(i)]] = std::exp(l[order[static_cast<size_t>(i)]] - mx);
        for (int i = 0; i < k; ++i) l[order[static_cast<size_t>(i)]] /= sum;
      }
      float top = 0;
      for (int i = 0; i < k; ++i) top += l[order[static_cast<size_t>(i)]];
      for (int i = 0; i < k; ++i) {
        const int e = order[static_cast<size_t>(i)];
        const float wt = node.moe().norm_topk ? l[e] / top : l[e];
        routed[static_cast<size_t>(e)].emplace_back(t, expert_scale ? wt * expert_scale[e] : wt);
      }
    }
    // Expert e's rows: gate [e·gate_rows, + ff), up [e·up_rows + up_first, + ff), down [e·d, + d).
    const int64_t gate_rows = gt.ne[1], up_rows = g_.tensor(node.in[3]).ne[1], up_first = fused ? ff : 0;
    // Expert e's output rows for its tokens (m × d) into ye.
    const auto run_expert = [&](int e, ThreadPool& on, float* ye) {
      const auto& tokens = routed[static_cast<size_t>(e)];
      const auto m = static_cast<int64_t>(tokens.size());
      thread_local std::vector<float> xs, g, u;
      xs.resize(static_cast<size_t>(m * d));
      for (int64_t i = 0; i < m; ++i) {
        std::memcpy(xs.data() + i * d, x + tokens[static_cast<size_t>(i)].first * d, static_cast<size_t>(d) * sizeof(float));
      }
      g.resize(static_cast<size_t>(m * ff));
      u.resize(static_cast<size_t>(m * ff));
      const uint64_t xs_key = expert_key(e);  // gate and up quantize xs once
      weights_->product(node.in[2], e * gate_rows, ff, xs.data(), m, g.data(), on, xs_key);
      weights_->product(node.in[3], e * up_rows + up_first, ff, xs.data(), m, u.data(), on, xs_key);
      if (biased) {
        add_row_bias(g.data(), gate_b + e * ff, m, ff);
        add_row_bias(u.data(), up_b + e * ff, m, ff);
      }
      switch (node.moe().glu) {
        case graph::MoeGlu::SwiGLUClamped:
          cpu::swiglu_clamped(g.data(), u.data(), g.data(), m * ff, node.moe().glu_alpha, node.moe().glu_limit);
          break;
        case graph::MoeGlu::GeGLU: cpu::geglu(g.data(), u.data(), g.data(), m * ff); break;
        case graph::MoeGlu::SwiGLU: cpu::swiglu(g.data(), u.data(), g.data(), m * ff); break;
      }
      weights_->product(node.in[4], e * d, d, g.data(), m, ye, on);
      if (biased) add_row_bias(ye, down_b + e * d, m, d);
    };
    // Each token's sum over its experts in increasing expert order (whichever thread ran an expert):
    // out[t] = 0 + w·y of its first expert + w·y of the next ...
    std::fill(out, out + n * d, 0.0f);
    if (pool_.size() == 1) {
      // One thread: experts one after another.
      std::vector<float> y;
      for (int e = 0; e < ne; ++e) {
        const auto& tokens = routed[static_cast<size_t>(e)];
        if (tokens.empty()) continue;
        y.resize(tokens.size() * static_cast<size_t>(d));
        run_expert(e, pool_, y.data());
        for (size_t i = 0; i < tokens.size(); ++i) {
          float* o = out + tokens[i].first * d;
          const float* yr = y.data() + i * static_cast<size_t>(d);
          for (int64_t j = 0; j < d; ++j) o[j] += tokens[i].second * yr[j];
        }
      }
      return;
    }
    // Whole experts handed out to the threads one at a time, the most tokens first, each expert's
    // products on its thread alone; every (token, expert) output kept, then summed per token. (Experts
    // one after another with their products split left a thread idle for 16-20% of a prompt step, and
    // 8-16% of a decode step, whose k experts are small products each.)
    std::vector<int64_t> offset(static_cast<size_t>(ne) + 1, 0);  // expert e's rows in ys
    std::vector<int> busy;
    for (int e = 0; e < ne; ++e) {
      offset[static_cast<size_t>(e) + 1] = offset[static_cast<size_t>(e)] + static_cast<int64_t>(routed[static_cast<size_t>(e)].size());
      if (!routed[static_cast<size_t>(e)].empty()) busy.push_back(e);
    }
    std::stable_sort(busy.begin(), busy.end(), [&](int a, int b) { return routed[static_cast<size_t>(a)].size() > routed[static_cast<size_t>(b)].size(); });
    std::vector<float>& ys = moe_rows_;
    ys.resize(static_cast<size_t>(offset.back() * d));
    std::atomic<size_t> next{0};
    pool_.parallel_for(std::min<int64_t>(pool_.size(), static_cast<int64_t>(busy.size())), [&](int64_t, int64_t) {
      thread_local ThreadPool alone(1);
      for (size_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < busy.size();) {
        const int e = busy[i];
        run_expert(e, alone, ys.data() + offset[static_cast<size_t>(e)] * d);
      }
    });
    for (int e = 0; e < ne; ++e) {
      const auto& tokens = routed[static_cast<size_t>(e)];
      for (size_t i = 0; i < tokens.size(); ++i) {
        float* o = out + tokens[i].first * d;
        const float* yr = ys.data() + (offset[static_cast<size_t>(e)] + static_cast<int64_t>(i)) * d;
        for (int64_t j = 0; j < d; ++j) o[j] += tokens[i].second * yr[j];
      }
    }
  }

  // rows[r] += bias for each of n rows of `width` floats.
  static void add_row_bias(float* rows, const float* bias, int64_t n, int64_t width) {
    for (int64_t r = 0; r < n; ++r)
      for (int64_t i = 0; i < width; ++i) rows[r * width + i] += bias[i];
  }
  // The gates (beta = sigmoid(b), g = A softplus(a + dt_bias)) per token and v head, then the delta rule:
  // chunked for prompts, token by token for single-token steps.
  void delta_net(const Node& node, int64_t n, float* out) {
    const int hv = node.delta_net().n_head_v;
    const float* a = buf(node.in[3]);
    const float* b = buf(node.in[4]);
    std::vector<float> abuf, dbuf;
    const float* A = f32_weight(node.in[5], abuf);
    const float* dt = f32_weight(node.in[6], dbuf);
    std::vector<float> g(static_cast<size_t>(n * hv)), beta(static_cast<size_t>(n * hv));
    for (int64_t t = 0; t < n; ++t) {
      for (int h = 0; h < hv; ++h) {
        const float x = a[t * hv + h] + dt[h];
        const float softplus = x > 20.0f ? x : std::log1p(std::exp(x));
        g[static_cast<size_t>(t * hv + h)] = A[h] * softplus;
        beta[static_cast<size_t>(t * hv + h)] = 1.0f / (1.0f + std::exp(-b[t * hv + h]));
      }
    }
    const cpu::DeltaNetShape shape{node.delta_net().n_head_k, node.delta_net().n_head_v, node.delta_net().dk, node.delta_net().dv, node.delta_net().tiled_heads};
    const int64_t qw = g_.tensor(node.in[0]).ne[0], vw = g_.tensor(node.in[2]).ne[0], ow = g_.tensor(node.out).ne[0];
    for (const Part& p : parts_) {  // each sequence through its own state, its tokens in order
      if (p.step.keep_states) {  // token by token (as single-token steps go), the state after each copied out
        for (int64_t t = 0; t < p.step.n_tokens; ++t) {
          const int64_t f = p.first + t;
          cpu::gated_delta_rule(buf(node.in[0]) + f * qw, buf(node.in[1]) + f * qw, buf(node.in[2]) + f * vw,
                                g.data() + f * hv, beta.data() + f * hv, state_of(p.step.seq), out + f * ow, 1, shape, 0,
                                pool_);
          keep_state(p.step.seq, t);
        }
        continue;
      }
      const int64_t m = p.step.n_tokens, f = p.first;
      cpu::gated_delta_rule(buf(node.in[0]) + f * qw, buf(node.in[1]) + f * qw, buf(node.in[2]) + f * vw,
                            g.data() + f * hv, beta.data() + f * hv, state_of(p.step.seq), out + f * ow, m, shape,
                            m > 1 ? kDeltaChunk : 0, pool_);
    }
  }
  static constexpr int kDeltaChunk = 64;

  // A small weight (norm, bias) as floats: in place when stored as F32, converted otherwise.
  const float* f32_weight(TensorId id, std::vector<float>& scratch) const {
    const auto& t = g_.tensor(id);
    if (t.type == gguf::TensorType::F32) return static_cast<const float*>(w(id));
    scratch.resize(static_cast<size_t>(t.ne[0]));
    quant::dequantize_row(t.type, w(id), scratch.data(), t.ne[0]);
    return scratch.data();
  }

  // Position `pos` of sequence `seq` in a layer's cache (K or V): a row of that layer's kv width in
  // kv_storage_, in the block the sequence's table gives.
  uint8_t* row(BigBuffer& cache, size_t layer, int32_t seq, int32_t pos) const {
    const size_t block = static_cast<size_t>(blocks_.block(seq, pos));
    return cache.data() + (block * kKvBlock + static_cast<size_t>(pos % kKvBlock)) * kv_row_bytes_[layer];
  }
  const uint8_t* row(const BigBuffer& cache, size_t layer, int32_t seq, int32_t pos) const {
    return row(const_cast<BigBuffer&>(cache), layer, seq, pos);
  }

  // Causal attention with grouped KV heads, each sequence over its own cache rows: token t of a part
  // (position n_past + t) attends to positions [max(0, pos - window + 1), pos] of its sequence; with
  // sinks, head h's softmax also counts exp(sinks[h]). Jobs of a few tokens × the query heads of one
  // KV head share each key tile and value row (cpu::attend_rows). A part with few query rows per KV
  // head (decode) reads the cache in place (fp16 converted in registers); one with more converts the
  // keys and values it sees once per step, for all its rows. Both give the same numbers.
  void attention(const Node& node, float* out) {
    const int64_t qw = g_.tensor(node.in[0]).ne[0], kw = g_.kv_width_of(node.layer);
    const float* q = buf(node.in[0]);
    const float* k = buf(node.in[1]);
    const float* v = buf(node.in[2]);
    const auto l = static_cast<size_t>(node.layer);
    const int hd = node.attention().head_dim, group = node.attention().n_head / node.attention().n_head_kv;
    const bool tiled = tiled_keys(), f16 = kv_storage_ == gguf::TensorType::F16;
    const size_t rb = kv_row_bytes_[l];
    kt_.resize(parts_.size());
    ktp_.resize(parts_.size());
    vp_.resize(parts_.size());
    seen_.resize(parts_.size());
    in_place_.resize(parts_.size());
    decoded_used_ = 0;
    for (size_t pi = 0; pi < parts_.size(); ++pi) {
      const Part& p = parts_[pi];
      // Append the part's rows.
      by_rows(p.step.n_tokens, 2 * kw, [&](int64_t t0, int64_t t1) {
        thread_local std::vector<uint8_t> key;
        key.resize(rb);
        for (int64_t t = t0; t < t1; ++t) {
          const auto pos = static_cast<int32_t>(p.step.n_past + t);
          quant::quantize_row(kv_storage_, v + (p.first + t) * kw, row(v_[l], l, p.step.seq, pos), kw);
          if (!tiled) {
            quant::quantize_row(kv_storage_, k + (p.first + t) * kw, row(k_[l], l, p.step.seq, pos), kw);
            continue;
          }
          quant::quantize_row(kv_storage_, k + (p.first + t) * kw, key.data(), kw);
          store_key(l, key_block(l, p.step.seq, pos), pos % kKvBlock, key.data());
        }
      });
      // The positions it sees, in tiles from the aligned position before the first.
      const int64_t first = node.attention().sliding_window > 0 ? std::max<int64_t>(0, p.step.n_past - node.attention().sliding_window + 1) : 0;
      const int64_t rows = p.step.n_past + p.step.n_tokens - first;
      const int64_t base = first / cpu::kAttendTile * cpu::kAttendTile;
      const int64_t tiles = (first + rows - 1) / cpu::kAttendTile - base / cpu::kAttendTile + 1;
      seen_[pi] = first;
      const bool in_place = kv_storage_ == gguf::TensorType::F32 || (f16 && p.step.n_tokens * group <= kInPlaceRows);
      in_place_[pi] = in_place;
      auto& ktp = ktp_[pi];
      ktp.resize(static_cast<size_t>(tiles));
      auto& vp = vp_[pi];
      vp.resize(static_cast<size_t>(rows));
      for (int64_t r = 0; r < rows; ++r) vp[static_cast<size_t>(r)] = row(v_[l], l, p.step.seq, static_cast<int32_t>(first + r));
      if (in_place) {
        for (int64_t t = 0; t < tiles; ++t) ktp[static_cast<size_t>(t)] = key_tile(l, p.step.seq, static_cast<int32_t>(base + t * cpu::kAttendTile));
        continue;
      }
      // Converted: values decoded to float rows, keys to float tiles (from the fp16 tiles, or from
      // rows decoded first).
      float* vf = decode_rows(vp, kw);
      for (int64_t r = 0; r < rows; ++r) vp[static_cast<size_t>(r)] = vf + r * decoded_stride(kw);
      auto& kt = kt_[pi];
      kt.resize(static_cast<size_t>(tiles * kw * cpu::kAttendTile));
      if (tiled) {
        pool_.parallel_for(tiles, [&](int64_t b, int64_t e) {
          for (int64_t t = b; t < e; ++t) {
            const auto* h = reinterpret_cast<const uint16_t*>(key_tile(l, p.step.seq, static_cast<int32_t>(base + t * cpu::kAttendTile)));
            cpu::halves_to_floats(h, kt.data() + t * kw * cpu::kAttendTile, kw * cpu::kAttendTile);
          }
        });
      } else {
        std::vector<const void*> kr(static_cast<size_t>(rows));
        for (int64_t r = 0; r < rows; ++r) kr[static_cast<size_t>(r)] = row(k_[l], l, p.step.seq, static_cast<int32_t>(first + r));
        const float* kf = decode_rows(kr, kw);
        pool_.parallel_for(tiles, [&](int64_t b, int64_t e) {
          for (int64_t t = b; t < e; ++t) {
            const float* lanes[cpu::kAttendTile];
            for (int x = 0; x < cpu::kAttendTile; ++x) {
              const int64_t at = base + t * cpu::kAttendTile + x - first;
              lanes[x] = at < 0 || at >= rows ? nullptr : kf + at * decoded_stride(kw);
            }
            cpu::transpose_keys(lanes, kw, kt.data() + t * kw * cpu::kAttendTile);
          }
        });
      }
      for (int64_t t = 0; t < tiles; ++t) ktp[static_cast<size_t>(t)] = kt.data() + t * kw * cpu::kAttendTile;
    }
    const float* sinks = node.in.size() > 3 ? static_cast<const float*>(w(node.in[3])) : nullptr;
    // Jobs: blocks of tokens of one part × one KV head; a job's rows (at most kAttnRows) are its tokens ×
    // the query heads of that KV head, which share every key and value row.
    const auto& ap = node.attention();
    const int n_head_kv = ap.n_head_kv;
    std::vector<AttnJob>& jobs = jobs_;
    jobs.clear();
    const int heads_per_pass = std::min(group, kAttnRows), tokens_per_job = kAttnRows / heads_per_pass;
    for (size_t pi = 0; pi < parts_.size(); ++pi) {
      for (int64_t t = 0; t < parts_[pi].step.n_tokens; t += tokens_per_job) {
        const int tokens = static_cast<int>(std::min<int64_t>(tokens_per_job, parts_[pi].step.n_tokens - t));
        for (int h = 0; h < n_head_kv; ++h) jobs.push_back({pi, parts_[pi].first + t, tokens, h});
      }
    }
    // Jobs handed out one at a time, the last tokens (the longest spans) first: in a prompt a job's work
    // grows with its position, and a static split left a thread idle for a third of the attention
    // (measured with ZINC_CPU_PROFILE). A job's results do not depend on the thread that runs it.
    const auto n_jobs = static_cast<int64_t>(jobs.size());
    std::atomic<int64_t> next{0};
    pool_.parallel_for(std::min<int64_t>(pool_.size(), n_jobs), [&](int64_t, int64_t) {
      thread_local std::vector<float> scratch;
      const float* qs[kAttnRows];
      float* outs[kAttnRows];
      int64_t lo[kAttnRows], hi[kAttnRows];
      float sink[kAttnRows];
      for (int64_t ji; (ji = next.fetch_add(1, std::memory_order_relaxed)) < n_jobs;) {
        const AttnJob& job = jobs[static_cast<size_t>(n_jobs - 1 - ji)];
        const Part& p = parts_[job.part];
        const int64_t first = seen_[job.part], base = first / cpu::kAttendTile * cpu::kAttendTile;
        for (int g0 = 0; g0 < group; g0 += heads_per_pass) {  // query heads of this KV head
          const int heads = std::min(heads_per_pass, group - g0);
          int nq = 0;
          for (int t = 0; t < job.tokens; ++t) {
            const int64_t tok = job.tok + t, pos = p.step.n_past + (tok - p.first);
            const int64_t from = ap.sliding_window > 0 ? std::max<int64_t>(0, pos - ap.sliding_window + 1) : 0;
            for (int hh = 0; hh < heads; ++hh, ++nq) {
              const int h = job.head_kv * group + g0 + hh;
              qs[nq] = q + tok * qw + static_cast<int64_t>(h) * hd;
              outs[nq] = out + tok * qw + static_cast<int64_t>(h) * hd;
              lo[nq] = from - base;
              hi[nq] = pos - base;
              if (sinks) sink[nq] = sinks[h];
            }
          }
          cpu::AttendRows rows;
          rows.q = qs;
          rows.nq = nq;
          rows.lo = lo;
          rows.hi = hi;
          rows.kt = ktp_[job.part].data();
          rows.v = vp_[job.part].data();
          rows.f16 = in_place_[job.part] && f16;
          rows.v_first = first - base;
          rows.kv_offset = static_cast<int64_t>(job.head_kv) * hd;
          rows.hd = hd;
          rows.scale = ap.scale;
          rows.softcap = ap.softcap;
          rows.sink = sinks ? sink : nullptr;
          rows.out = outs;
          cpu::attend_rows(rows, scratch);
        }
      }
    });
  }
  static constexpr int kAttnRows = 16;
  struct AttnJob {
    size_t part;
    int64_t tok;
    int tokens;
    int head_kv;
  };
  // Query rows per KV head up to which a part reads fp16 keys and values in place.
  static constexpr int64_t kInPlaceRows = 8;

  // The cache rows `rows` decoded to floats, `width` each, in scratch reused step after step.
  // Row r at out + r · decoded_stride(width).
  float* decode_rows(const std::vector<const void*>& rows, int64_t width) {
    if (decoded_used_ == decoded_.size()) decoded_.emplace_back();
    auto& buffer = decoded_[decoded_used_++];
    const int64_t stride = decoded_stride(width);
    buffer.resize(rows.size() * static_cast<size_t>(stride));
    float* out = buffer.data();
    pool_.parallel_for(static_cast<int64_t>(rows.size()), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const void* src = rows[static_cast<size_t>(r)];
        if (kv_storage_ == gguf::TensorType::F16) cpu::halves_to_floats(static_cast<const uint16_t*>(src), out + r * stride, width);
        else quant::dequantize_row(kv_storage_, src, out + r * stride, width);
      }
    });
    return out;
  }
  // Decoded rows of `width` floats lie a cache line more than whole lines apart: rows of a power-of-two
  // size (a cache row of 8 KV heads of 128: 4 KiB) would otherwise all map to the same sets of the
  // first-level cache, and the attention's block of 32 value rows, read again for each pair of query
  // rows, would not stay in it (measured with AVX2: the kernel 1.4x slower).
  static int64_t decoded_stride(int64_t width) { return (width + 15) / 16 * 16 + 16; }

  // The recurrent state of node cur_ for sequence `seq`.
  float* state_of(int32_t seq) { return state_at(cur_, seq); }
  // Node `node`'s state of `seq` as the last step kept it after its part's token t.
  float* kept_at(size_t node, int32_t seq, int32_t t) {
    return kept_[node].data() + (static_cast<size_t>(seq) * static_cast<size_t>(kept_states()) + static_cast<size_t>(t)) * state_floats_[node];
  }
  void keep_state(int32_t seq, int64_t t) {
    std::memcpy(kept_at(cur_, seq, static_cast<int32_t>(t)), state_of(seq), state_floats_[cur_] * sizeof(float));
  }
  void state_from_kept(int32_t seq, int32_t t) override {
    for (size_t i = 0; i < state_floats_.size(); ++i) {
      if (state_floats_[i] > 0) std::memcpy(state_at(i, seq), kept_at(i, seq, t), state_floats_[i] * sizeof(float));
    }
  }

  // A step's part: the sequence's share and the row of the step its first token is.
  struct Part {
    graph::SeqStep step;
    int64_t first = 0;
  };

  // Keys under which the packed products quantize an input once (quant::matmul_packed's x_key), unique
  // in the process: the step's serial and the tensor, or (the top bit of the low half set) the node and
  // the expert whose gathered rows it is; 0 (quantize) past their ranges.
  static uint64_t next_step_serial() {
    static std::atomic<uint64_t> serial{0};
    return ++serial;
  }
  uint64_t x_key(graph::TensorId t) const {
    return t >= 0 && t < (1 << 30) ? step_serial_ << 32 | static_cast<uint64_t>(t + 1) : 0;
  }
  uint64_t expert_key(int e) const {
    return cur_ < (size_t{1} << 21) && e >= 0 && e < 1024 ? step_serial_ << 32 | 0x80000000u | cur_ << 10 | static_cast<uint64_t>(e) : 0;
  }

  std::shared_ptr<CpuWeights> weights_;
  ThreadPool& pool_;
  uint64_t step_serial_ = 0;  // this step's, from next_step_serial()
  std::vector<size_t> offset_;  // per activation: its first float in arena_
  std::vector<float> arena_;
  std::vector<BigBuffer> k_, v_;  // per layer: kKvBlock rows of that layer's kv width per block
  std::vector<Part> parts_;                   // the step being run
  // The layer being attended, per part: its key tiles and value rows (in the cache, or converted into
  // kt_ and decoded_), whether in place, and the position of the first.
  std::vector<std::vector<const void*>> ktp_, vp_;
  std::vector<std::vector<float>> kt_;  // per part: its keys converted to float tiles
  std::vector<char> in_place_;
  std::vector<int64_t> seen_;
  std::vector<std::vector<float>> decoded_;  // scratch for decoded rows, reused step after step
  size_t decoded_used_ = 0;
  std::vector<float> moe_rows_;  // a prompt's expert outputs, reused step after step
  std::vector<AttnJob> jobs_;  // the attention's jobs, rebuilt per layer in the same storage
  int64_t logit_rows_ = 0;
  std::vector<int64_t> rows_;               // rows each activation held in the last step
  // Per node: the recurrent state of SsmConv and DeltaNet nodes, one after another for each sequence.
  std::vector<std::vector<float>> state_;
  std::vector<std::vector<float>> kept_;  // per node: kept_states() states per sequence (keep_states)
  size_t cur_ = 0;         // the node being executed
};

std::unique_ptr<Executable> CpuWeights::instantiate_graph(const ExecOptions& opts, const graph::Graph& g) {
  return std::make_unique<CpuExecutable>(std::static_pointer_cast<CpuWeights>(shared_from_this()), g, opts);
}

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(unsigned threads) : threads_(threads) {}
  std::string name() const override { return "cpu"; }
  // Every op runs here; a weight type must have a dot product (products) or decode (the rest).
  std::string unsupported(const graph::Graph& g, const Node& n) const override {
    for (size_t k = 0; k < n.in.size(); ++k) {
      const auto& t = g.tensor(n.in[k]);
      if (t.kind != TensorKind::Weight) continue;
      const bool product = (n.op == Op::MatMul && k == 0) || (n.op == Op::MoE && k >= 1 && k <= 4);
      if (product ? !quant::has_dot(t.type) : !quant::can_dequantize(t.type)) {
        return fmt::format("its weight '{}' is stored as {}, which the CPU kernels do not read", t.name,
                           gguf::tensor_type_name(t.type));
      }
    }
    return "";
  }
  using Backend::load;
  std::shared_ptr<Weights> load(const graph::Graph& g, const gguf::File& file, const LoadProgress& progress) override {
    if (std::string why = why_unsupported(g); !why.empty()) throw Error(why);
    if (g.mtp) {
      if (std::string why = why_unsupported(*g.mtp); !why.empty()) throw Error(why);
    }
    return std::make_shared<CpuWeights>(g, file, threads_, progress);
  }

 private:
  unsigned threads_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(unsigned threads) { return std::make_unique<CpuBackend>(threads); }

}  // namespace zinc::backend
