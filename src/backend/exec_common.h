// What every backend's executor does the same way: whether a step fits, the rules of recurrent state,
// the KV block tables, the layout of a saved context (so that a context saved by one backend loads into
// another), the activation arena's plan, and a context's bookkeeping of its sequences
// (SequencedExecutable, whose hooks a backend implements to move the bytes).
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <mutex>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"
#include "gguf/types.h"
#include "quant/quant.h"

namespace zinc::backend {

// Throws zinc::Error unless the step has 1..max_tokens tokens in parts of distinct sequences of the
// context (each with at least one token, the parts' counts adding up to the tokens), each part fits in
// its sequence's context, and every id is in the vocabulary.
inline void check_step(const graph::Graph& g, const ExecOptions& opts, const graph::StepParams& step) {
  const auto n = static_cast<int64_t>(step.tokens.size());
  if (n == 0) throw Error("a step needs at least one token");
  if (n > opts.max_tokens) {
    throw Error(fmt::format("a step of {} tokens exceeds the executable's limit of {}", n, opts.max_tokens));
  }
  if (step.seqs.empty()) throw Error("a step names no sequence");
  int64_t sum = 0;
  std::vector<bool> seen(static_cast<size_t>(std::max(opts.n_seq, 1)), false);
  for (const graph::SeqStep& s : step.seqs) {
    if (s.seq < 0 || s.seq >= opts.n_seq) {
      throw Error(fmt::format("sequence {} is not one of the context's {} (0..{})", s.seq, opts.n_seq, opts.n_seq - 1));
    }
    if (seen[static_cast<size_t>(s.seq)]) throw Error(fmt::format("sequence {} appears twice in one step", s.seq));
    seen[static_cast<size_t>(s.seq)] = true;
    if (s.n_tokens < 1) throw Error(fmt::format("sequence {}'s part of the step has no tokens", s.seq));
    if (s.n_past < 0 || int64_t{s.n_past} + s.n_tokens > opts.n_ctx) {
      throw Error(fmt::format("the context is full: {} tokens already in it, {} more do not fit in {}", s.n_past,
                              s.n_tokens, opts.n_ctx));
    }
    sum += s.n_tokens;
  }
  if (sum != n) throw Error(fmt::format("the step's parts hold {} tokens, the step {}", sum, n));
  int64_t input_width = 0;
  for (const graph::Node& node : g.nodes) {
    if (node.op == graph::Op::Input) input_width = g.tensor(node.out).ne[0];
  }
  if (static_cast<int64_t>(step.inputs.size()) != input_width * n) {
    throw Error(fmt::format("the step carries {} input floats; this graph takes {} per token ({} tokens)", step.inputs.size(),
                            input_width, n));
  }
  for (int32_t t : step.tokens) {
    if (t < 0 || t >= g.n_vocab) throw Error(fmt::format("token id {} is outside the vocabulary (0..{})", t, g.n_vocab - 1));
  }
}

// The KV cache as fixed-size blocks of positions, shared by all layers: each sequence has a table of
// blocks; a block may be in several tables (a common prefix), reference-counted, and a shared block is
// copied before a sequence writes into it. Backends keep the rows; this keeps the tables.
class KvBlocks {
 public:
  KvBlocks(int32_t n_blocks, int32_t block_tokens, int32_t n_seq)
      : block_(block_tokens), refs_(static_cast<size_t>(n_blocks), 0), tables_(static_cast<size_t>(n_seq)),
        lengths_(static_cast<size_t>(n_seq), 0) {
    for (int32_t b = n_blocks - 1; b >= 0; --b) free_.push_back(b);
  }

  int32_t block_tokens() const { return block_; }
  int32_t n_blocks() const { return static_cast<int32_t>(refs_.size()); }
  int32_t free_blocks() const { return static_cast<int32_t>(free_.size()); }
  int32_t length(int32_t seq) const { return lengths_[static_cast<size_t>(seq)]; }
  // The block holding position `pos` of `seq` (pos < length).
  int32_t block(int32_t seq, int32_t pos) const { return tables_[static_cast<size_t>(seq)][static_cast<size_t>(pos / block_)]; }
  const std::vector<int32_t>& table(int32_t seq) const { return tables_[static_cast<size_t>(seq)]; }
  int32_t refs(int32_t block) const { return refs_[static_cast<size_t>(block)]; }

  // Makes `seq` hold positions [0, n_past + n): it keeps its first n_past (positions past them are
  // dropped) and gets blocks for the rest. A shared block that positions from n_past on fall in is
  // replaced by a private one, after copy(from, to, rows) has copied its first `rows` rows. Throws
  // zinc::Error when the blocks run out (nothing is changed then).
  template <class Copy>
  void prepare(int32_t seq, int32_t n_past, int32_t n, const Copy& copy) {
    auto& t = tables_[static_cast<size_t>(seq)];
    if (n_past > lengths_[static_cast<size_t>(seq)]) {
      throw Error(fmt::format("sequence {} holds {} positions; a step cannot start at {}", seq,
                              lengths_[static_cast<size_t>(seq)], n_past));
    }
    const size_t keep = static_cast<size_t>((n_past + block_ - 1) / block_);
    const size_t need = static_cast<size_t>((n_past + n + block_ - 1) / block_);
    // A shared block is copied only where this sequence will write into it.
    const bool cow = n > 0 && n_past % block_ != 0 && keep <= t.size() && refs_[static_cast<size_t>(t[keep - 1])] > 1;
    const size_t fresh = need - keep + (cow ? 1 : 0);
    size_t available = free_.size();  // and the blocks past n_past that only this sequence holds
    for (size_t i = keep; i < t.size(); ++i) available += refs_[static_cast<size_t>(t[i])] == 1;
    if (fresh > available) {
      throw Error(fmt::format("the KV cache is full: sequence {} needs {} more blocks of {} positions, {} are free", seq,
                              fresh, block_, available));
    }
    for (size_t i = keep; i < t.size(); ++i) release(t[i]);
    t.resize(keep);
    if (cow) {
      const int32_t to = take();
      copy(t[keep - 1], to, n_past % block_);
      release(t[keep - 1]);
      t[keep - 1] = to;
    }
    while (t.size() < need) t.push_back(take());
    lengths_[static_cast<size_t>(seq)] = n_past + n;
  }

  // Forgets what `seq` holds.
  void clear(int32_t seq) {
    for (int32_t b : tables_[static_cast<size_t>(seq)]) release(b);
    tables_[static_cast<size_t>(seq)].clear();
    lengths_[static_cast<size_t>(seq)] = 0;
  }

  // A reference on `block` taken (a holder outside the tables, such as a prefix cache) or given back.
  void hold(int32_t block) {
    check_block(block);
    if (refs_[static_cast<size_t>(block)] == 0) throw Error(fmt::format("block {} holds nothing to keep", block));
    ++refs_[static_cast<size_t>(block)];
  }
  // A free block, held once by the caller (a prefix cache filling it from host memory). Throws
  // zinc::Error where none is free.
  int32_t alloc() {
    if (free_.empty()) throw Error(fmt::format("the KV cache is full: none of its {} blocks is free", n_blocks()));
    return take();
  }
  // Throws unless `block` is in use (its rows hold something).
  void check_used(int32_t block) const {
    check_block(block);
    if (refs_[static_cast<size_t>(block)] == 0) throw Error(fmt::format("block {} holds nothing", block));
  }
  void unhold(int32_t block) {
    check_block(block);
    if (refs_[static_cast<size_t>(block)] == 0) throw Error(fmt::format("block {} is not held", block));
    release(block);
  }

  // Makes `seq` hold the first n_tokens positions of `blocks` (each in use, shared: no rows copied).
  void adopt(int32_t seq, std::span<const int32_t> blocks, int32_t n_tokens) {
    if (n_tokens < 0 || static_cast<size_t>((n_tokens + block_ - 1) / block_) != blocks.size()) {
      throw Error(fmt::format("{} positions do not fill {} blocks of {}", n_tokens, blocks.size(), block_));
    }
    for (int32_t b : blocks) {
      check_block(b);
      if (refs_[static_cast<size_t>(b)] == 0) throw Error(fmt::format("block {} holds nothing to adopt", b));
    }
    for (int32_t b : blocks) ++refs_[static_cast<size_t>(b)];  // before clear(): a block seq holds stays
    clear(seq);
    tables_[static_cast<size_t>(seq)].assign(blocks.begin(), blocks.end());
    lengths_[static_cast<size_t>(seq)] = n_tokens;
  }

  // Makes `dst` hold the first n_tokens of `src`, sharing its blocks (no rows are copied).
  void share(int32_t src, int32_t dst, int32_t n_tokens) {
    if (n_tokens < 0 || n_tokens > length(src)) {
      throw Error(fmt::format("sequence {} holds {} positions, not {}", src, length(src), n_tokens));
    }
    if (src == dst) {
      prepare(dst, n_tokens, 0, [](int32_t, int32_t, int32_t) {});
      return;
    }
    clear(dst);
    const auto& from = tables_[static_cast<size_t>(src)];
    auto& to = tables_[static_cast<size_t>(dst)];
    for (size_t i = 0; i < static_cast<size_t>((n_tokens + block_ - 1) / block_); ++i) {
      ++refs_[static_cast<size_t>(from[i])];
      to.push_back(from[i]);
    }
    lengths_[static_cast<size_t>(dst)] = n_tokens;
  }

 private:
  void check_block(int32_t b) const {
    if (b < 0 || b >= n_blocks()) throw Error(fmt::format("block {} is not one of the cache's {}", b, n_blocks()));
  }
  int32_t take() {
    const int32_t b = free_.back();
    free_.pop_back();
    refs_[static_cast<size_t>(b)] = 1;
    return b;
  }
  void release(int32_t b) {
    if (--refs_[static_cast<size_t>(b)] == 0) free_.push_back(b);
  }

  int32_t block_;
  std::vector<int32_t> refs_;
  std::vector<int32_t> free_;
  std::vector<std::vector<int32_t>> tables_;
  std::vector<int32_t> lengths_;
};

// The recurrent state summarises every token before it: it restarts at position 0 and can only
// continue from where the last step ended (`state_pos` tokens; -1 after a failed step). Returns true
// when the step starts again (the state must be cleared); throws for any other position.
inline bool recurrent_restart(int64_t state_pos, int32_t n_past) {
  if (n_past == 0) return true;
  if (n_past != state_pos) {
    throw Error(fmt::format("the recurrent state holds {} tokens; a step cannot resume at position {}",
                            std::max<int64_t>(state_pos, 0), n_past));
  }
  return false;
}

// Blocks of SequencedExecutable::kKvBlock positions that hold `positions` positions.
int32_t kv_blocks(int64_t positions);

// The storage type of a KV cache.
inline gguf::TensorType kv_storage_type(KvType t) {
  return t == KvType::F32 ? gguf::TensorType::F32 : t == KvType::F16 ? gguf::TensorType::F16 : gguf::TensorType::Q8_0;
}

// Bytes of one cache row per layer (each layer's own K/V width; 0 for layers without attention).
// Throws when a layer's rows or heads do not fill whole blocks of the type.
inline std::vector<size_t> kv_row_bytes(const graph::Graph& g, gguf::TensorType type) {
  std::vector<size_t> out(static_cast<size_t>(g.n_layer), 0);
  for (const graph::Node& node : g.nodes) {
    if (node.op != graph::Op::Attention) continue;
    const int64_t kw = g.kv_width_of(node.layer);
    if (kw % quant::block_size(type) != 0 || node.attention().head_dim % quant::block_size(type) != 0) {
      throw Error(fmt::format("a {} KV cache needs head rows that are a multiple of {} elements",
                              gguf::tensor_type_name(type), quant::block_size(type)));
    }
    out[static_cast<size_t>(node.layer)] = quant::row_size(type, kw);
  }
  return out;
}

// Bytes of one KV block (SequencedExecutable::kKvBlock positions, K and V of every layer) for the rows
// kv_row_bytes gives.
uint64_t kv_block_bytes(const std::vector<size_t>& row_bytes);

// A saved context: a header {magic, fingerprint, n_past}, then per layer its first n_past K rows and
// V rows, then every node's recurrent state (floats).
struct SavedStateLayout {
  static constexpr uint64_t kMagic = 0x31544154534e435aull;  // "ZCNSTAT1"
  static constexpr size_t kHeaderBytes = 3 * sizeof(uint64_t);

  gguf::TensorType kv_type = gguf::TensorType::F16;
  int32_t n_ctx = 0;
  std::vector<size_t> kv_row_bytes;  // per layer (0: no cache)
  std::vector<size_t> state_floats;  // per node (0: no state)

  // What the layout depends on: a state saved under another one is refused.
  uint64_t fingerprint() const {
    uint64_t h = 1469598103934665603ull;
    const auto mix = [&h](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
    mix(static_cast<uint64_t>(kv_type));
    mix(static_cast<uint64_t>(n_ctx));
    for (size_t r : kv_row_bytes) mix(r);
    for (size_t s : state_floats) mix(s);
    return h;
  }

  size_t bytes(size_t n_past) const {
    size_t n = kHeaderBytes;
    for (size_t r : kv_row_bytes) n += 2 * r * n_past;
    for (size_t s : state_floats) n += s * sizeof(float);
    return n;
  }

  // Throws unless a context of n_past tokens can be saved now (a recurrent state holds exactly
  // state_pos tokens); returns the buffer with its header written.
  std::vector<uint8_t> begin_save(int32_t n_past, bool recurrent, int64_t state_pos) const {
    if (n_past < 0 || n_past > n_ctx || (recurrent && n_past != state_pos)) {
      throw Error(fmt::format("cannot save the state at position {} (the context holds {})", n_past,
                              recurrent ? state_pos : int64_t{n_ctx}));
    }
    std::vector<uint8_t> out(bytes(static_cast<size_t>(n_past)));
    const uint64_t header[] = {kMagic, fingerprint(), static_cast<uint64_t>(n_past)};
    std::memcpy(out.data(), header, sizeof(header));
    return out;
  }

  // Checks a saved context's header and size against this layout; returns its n_past.
  size_t check(std::span<const uint8_t> saved) const {
    uint64_t header[3];
    if (saved.size() < sizeof(header)) throw Error("saved state: truncated");
    std::memcpy(header, saved.data(), sizeof(header));
    if (header[0] != kMagic || header[1] != fingerprint() || header[2] > static_cast<uint64_t>(n_ctx)) {
      throw Error("saved state: made by another model, backend or context settings");
    }
    const auto n_past = static_cast<size_t>(header[2]);
    if (saved.size() != bytes(n_past)) {
      throw Error(fmt::format("saved state: {} bytes, expected {}", saved.size(), bytes(n_past)));
    }
    return n_past;
  }
};

// ---- activations ------------------------------------------------------------------------------

// Per tensor, the index of the last node reading it (-1: none reads it, or it is the graph's `hidden`,
// read after the step).
std::vector<int> last_uses(const graph::Graph& g);

// Where every activation of a step lives in one arena: a tensor holds its range from the node that
// writes it to the last node that reads it (last_use; to the end when keep_all or when no node reads
// it: the graph's outputs), first fit over the ranges live at the time, offsets multiples of `align`.
// A node's output never shares bytes with its inputs. Tensors `bytes` gives 0 get no range.
struct ArenaPlan {
  std::vector<size_t> offset;  // per tensor
  size_t bytes = 0;            // the arena's size
};
ArenaPlan plan_arena(const graph::Graph& g, const std::vector<int>& last_use,
                     const std::function<size_t(graph::TensorId)>& bytes, size_t align, bool keep_all);

// ---- sequences ----------------------------------------------------------------------------------

// What every backend's context does the same way with its sequences: the options' checks, which KV
// blocks hold each sequence's positions (KvBlocks), how far each recurrent state has come, and saving,
// loading, clearing and copying a sequence (SavedStateLayout, so a context saved on one backend loads
// into another). The backend keeps the bytes and moves them through the hooks: each attending layer's
// K and V caches hold blocks of kKvBlock rows (block b's rows from b * kKvBlock * row bytes), and every
// node with recurrent state keeps one region of state_floats()[node] floats per sequence.
class SequencedExecutable : public Executable {
 public:
  static constexpr int32_t kKvBlock = 32;  // positions per cache block

  // Throws zinc::Error for options no context can have, or a KV type the heads do not fit.
  SequencedExecutable(const graph::Graph& g, const ExecOptions& opts);

  const ExecOptions& options() const override { return opts_; }
  int64_t n_vocab() const override { return g_.tensor(g_.logits).ne[0]; }
  bool can_rewind() const override { return !recurrent_; }
  std::vector<uint8_t> save_state(int32_t n_past, int32_t seq) const override;
  void load_state(std::span<const uint8_t> bytes, int32_t seq) override;
  void seq_clear(int32_t seq) override;
  void seq_copy(int32_t src, int32_t dst, int32_t n_tokens) override;
  void seq_keep(int32_t seq, int32_t n_tokens) override;
  // From a context of the same class and cache layout (takes_from): the sequence's blocks copied run
  // by run (kv_take) and its recurrent states (state_take), none of it through the host where the
  // backend copies on its device; from any other, through saved bytes.
  void seq_take(const Executable& from, int32_t from_seq, int32_t seq, int32_t n_tokens) override;
  int32_t kv_block_tokens() const override { return kKvBlock; }
  uint64_t kv_block_bytes() const override;
  std::vector<int32_t> seq_blocks(int32_t seq, int32_t n_tokens) const override;
  void blocks_hold(std::span<const int32_t> blocks, bool hold) override;
  void seq_adopt(int32_t seq, std::span<const int32_t> blocks, int32_t n_tokens, std::span<const float> state) override;
  std::vector<float> recurrent_state(int32_t seq, int32_t n_tokens) const override;
  std::vector<uint8_t> block_read(int32_t block) const override;
  int32_t block_write(std::span<const uint8_t> bytes) override;

 protected:
  // Copies `bytes` bytes of layer l's K and V caches from offset `from` to offset `to`.
  virtual void kv_copy(size_t layer, size_t from, size_t to, size_t bytes) = 0;
  // Reads / writes bytes of layer l's K (v false) or V cache.
  virtual void kv_read(size_t layer, bool v, size_t offset, void* out, size_t bytes) const = 0;
  virtual void kv_write(size_t layer, bool v, size_t offset, const void* in, size_t bytes) = 0;
  // Node i's recurrent state of sequence `seq`: read out, written (nullptr: zeros), copied to another.
  virtual void state_read(size_t node, int32_t seq, float* out) const = 0;
  virtual void state_write(size_t node, int32_t seq, const float* in) = 0;
  virtual void state_copy(size_t node, int32_t src, int32_t dst) = 0;
  // Block `block` of every attending layer (K rows, then V rows, layer by layer: block_read's bytes),
  // and every node's recurrent state of `seq` (node by node: recurrent_state's floats), read and
  // written; through the hooks above one run at a time, unless a backend moves many runs at once.
  virtual void kv_block_read(int32_t block, uint8_t* out) const;
  // Calls f(layer, v, offset, bytes, at) for each run of block `block` in that order: the run's offset
  // in layer l's K (v false) or V cache and its place `at` in block_read's bytes.
  void for_each_block_run(int32_t block, const std::function<void(size_t, bool, size_t, size_t, size_t)>& f) const;
  virtual void kv_block_write(int32_t block, const uint8_t* in);
  virtual void states_read(int32_t seq, float* out) const;
  virtual void states_write(int32_t seq, const float* in);
  // Every node's recurrent state of `seq` becomes the one the last step kept after the part's token
  // `t` (SeqStep::keep_states): the backend keeps, per node and sequence, kept_states() regions of
  // state_floats()[node] floats, region t holding the state after the part's token t.
  virtual void state_from_kept(int32_t seq, int32_t t) = 0;
  // Regions of kept states per node and sequence (ExecOptions::kept_states; 0 without recurrent state).
  int32_t kept_states() const { return recurrent_ ? opts_.kept_states : 0; }

  // seq_take's parts: whether `from` is a context of this class with this cache and state layout, and
  // the copy (checked, then made; the caller holds what guards both contexts).
  bool takes_from(const Executable& from) const;
  void take_blocks(const SequencedExecutable& from, int32_t from_seq, int32_t seq, int32_t n_tokens);
  // One run of a layer's K (v false) or V cache: `bytes` from offset `from` of the other context's to
  // offset `to` of this one's.
  struct KvRun {
    size_t layer = 0;
    bool v = false;
    size_t from = 0, to = 0, bytes = 0;
  };
  // Copies the runs from `from`'s caches (a context of this class: takes_from) into this one's; here
  // through the host (kv_read there, kv_write here).
  virtual void kv_take(const SequencedExecutable& from, std::span<const KvRun> runs);
  // Node `node`'s recurrent state of from_seq in `from` becomes seq's here; through the host here.
  virtual void state_take(const SequencedExecutable& from, size_t node, int32_t from_seq, int32_t seq);

  // Before a step's work: checks the step (check_step; each part's start within what its sequence
  // holds; a recurrent state resumes only where it stopped) before changing anything, then gives each
  // part its cache blocks (a shared block it writes into copied first) and clears the states that
  // restart. A failed step leaves its sequences' states unusable until they restart (state_pos -1).
  void begin_step(const graph::StepParams& step);
  // After the step's work has completed.
  void end_step(const graph::StepParams& step);
  void check_seq(int32_t seq) const;
  // Calls f(offset, bytes) for each run of sequence `seq`'s first n rows in layer l's cache, in order
  // of position (one run per block).
  void for_each_block(size_t layer, int32_t seq, int32_t n, const std::function<void(size_t, size_t)>& f) const;

  const graph::Graph g_;  // its own copy: the weights' graph, or one cut from it
  ExecOptions opts_;
  gguf::TensorType kv_storage_ = gguf::TensorType::F16;
  std::vector<size_t> kv_row_bytes_;  // per layer (0: no attention)
  std::vector<size_t> state_floats_;  // per node: one sequence's recurrent state (0: none)
  int32_t blocks_per_seq_ = 0;        // a sequence's whole context in blocks
  KvBlocks blocks_;                   // which blocks hold each sequence's positions
  bool recurrent_ = false;
  SavedStateLayout layout_;           // what save_state() writes
  std::vector<int64_t> state_pos_;    // per sequence: tokens its state has absorbed (-1: a step failed part-way)
  // Per sequence: the positions whose states the last step kept, [kept_from, kept_from + kept_count).
  std::vector<int64_t> kept_from_, kept_count_;
};

// A context whose device is shared by the contexts of one set of weights (a GPU's queue or stream
// work): every call that moves a sequence's bytes holds the weights' step mutex, as steps do.
class SharedDeviceExecutable : public SequencedExecutable {
 public:
  SharedDeviceExecutable(const graph::Graph& g, const ExecOptions& opts, std::mutex& step_mutex)
      : SequencedExecutable(g, opts), step_mutex_(step_mutex) {}
  std::vector<uint8_t> save_state(int32_t n_past, int32_t seq) const override {
    const std::lock_guard<std::mutex> lock(step_mutex_);
    return SequencedExecutable::save_state(n_past, seq);
  }
  void load_state(std::span<const uint8_t> bytes, int32_t seq) override {
    const std::lock_guard<std::mutex> lock(step_mutex_);
    SequencedExecutable::load_state(bytes, seq);
  }
  void seq_clear(int32_t seq) override {
    const std::lock_guard<std::mutex> lock(step_mutex_);
    SequencedExecutable::seq_clear(seq);
  }
  void seq_copy(int32_t src, int32_t dst, int32_t n_tokens) override {
    const std::lock_guard<std::mutex> lock(step_mutex_);
    SequencedExecutable::seq_copy(src, dst, n_tokens);
  }
  void seq_keep(int32_t seq, int32_t n_tokens) override {
    const std::lock_guard<std::mutex> lock(step_mutex_);
    SequencedExecutable::seq_keep(seq, n_tokens);
  }
  void seq_take(const Executable& from, int32_t from_seq, int32_t seq, int32_t n_tokens) override {
    if (!takes_from(from)) return Executable::seq_take(from, from_seq, seq, n_tokens);  // (save and load hold it themselves)
    const std::lock_guard<std::mutex> lock(step_mutex_);
    take_blocks(static_cast<const SequencedExecutable&>(from), from_seq, seq, n_tokens);
  }
  void seq_adopt(int32_t seq, std::span<const int32_t> blocks, int32_t n_tokens, std::span<const float> state) override {
    const std::lock_guard<std::mutex> lock(step_mutex_);
    SequencedExecutable::seq_adopt(seq, blocks, n_tokens, state);
  }
  std::vector<float> recurrent_state(int32_t seq, int32_t n_tokens) const override {
    const std::lock_guard<std::mutex> lock(step_mutex_);
    return SequencedExecutable::recurrent_state(seq, n_tokens);
  }
  std::vector<uint8_t> block_read(int32_t block) const override {
    const std::lock_guard<std::mutex> lock(step_mutex_);
    return SequencedExecutable::block_read(block);
  }
  int32_t block_write(std::span<const uint8_t> bytes) override {
    const std::lock_guard<std::mutex> lock(step_mutex_);
    return SequencedExecutable::block_write(bytes);
  }

 protected:
  std::mutex& step_mutex_;
};

// ---- weights ------------------------------------------------------------------------------------

// How a GPU backend holds each weight of a graph (its head included): `raw`, the bytes as stored (what
// the products read); `f32`, as floats (the small weights nodes read as F32, and those also_f32
// names). Throws zinc::Error naming the backend for the first node `unsupported` refuses.
struct WeightUses {
  std::vector<bool> raw, f32;  // per tensor
};
WeightUses weight_uses(const graph::Graph& g, const std::string& backend,
                       const std::function<std::string(const graph::Node&)>& unsupported,
                       const std::function<bool(const graph::Node&, size_t)>& also_f32 = {});
// A weight's elements as floats (copied, or dequantized from its type).
std::vector<float> weight_floats(const graph::Tensor& t, std::span<const uint8_t> bytes);
// Reads every weight of `g` from `file` once, in order: raw(id, bytes) for those uses.raw names,
// floats(id, weight_floats) for those uses.f32 names, and progress(done, total) after each.
void read_weights(const graph::Graph& g, const gguf::File& file, const WeightUses& uses, const LoadProgress& progress,
                  const std::function<void(graph::TensorId, std::span<const uint8_t>)>& raw,
                  const std::function<void(graph::TensorId, std::vector<float>)>& floats);

// The shape of a mixture-of-experts node: model width d, expert width ff, and whether gate and up
// are one tensor (gate rows first, then up rows, per expert).
struct MoeShape {
  int64_t d = 0, ff = 0;
  bool fused = false;
};
inline MoeShape moe_shape(const graph::Graph& g, const graph::Node& node) {
  const bool fused = node.in[2] == node.in[3];
  const int64_t gate_rows = g.tensor(node.in[2]).ne[1];
  return {g.tensor(node.in[1]).ne[0], fused ? gate_rows / 2 : gate_rows, fused};
}

}  // namespace zinc::backend
