#include "backend/exec_common.h"

#include <typeinfo>

namespace zinc::backend {

std::vector<int> last_uses(const graph::Graph& g) {
  std::vector<int> last(g.tensors.size(), -1);
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    for (graph::TensorId i : g.nodes[n].in) last[static_cast<size_t>(i)] = static_cast<int>(n);
  }
  if (g.hidden >= 0) last[static_cast<size_t>(g.hidden)] = -1;  // handed out after the step
  return last;
}

ArenaPlan plan_arena(const graph::Graph& g, const std::vector<int>& last_use,
                     const std::function<size_t(graph::TensorId)>& bytes, size_t align, bool keep_all) {
  struct Live {
    size_t offset, bytes;
    int until;
  };
  ArenaPlan plan;
  plan.offset.assign(g.tensors.size(), 0);
  std::vector<Live> live;
  const int end = static_cast<int>(g.nodes.size());
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    const graph::TensorId out = g.nodes[n].out;
    const size_t need = (bytes(out) + align - 1) / align * align;
    if (need == 0) continue;
    // Ranges whose last reader ran before this node are free again; this node's inputs are not.
    live.erase(std::remove_if(live.begin(), live.end(), [&](const Live& l) { return l.until < static_cast<int>(n); }),
               live.end());
    std::sort(live.begin(), live.end(), [](const Live& a, const Live& b) { return a.offset < b.offset; });
    size_t at = 0;
    for (const Live& l : live) {
      if (l.offset >= at + need) break;
      at = std::max(at, l.offset + l.bytes);
    }
    plan.offset[static_cast<size_t>(out)] = at;
    const int last = last_use[static_cast<size_t>(out)];
    live.push_back({at, need, keep_all || last < 0 ? end : std::max(last, static_cast<int>(n))});
    plan.bytes = std::max(plan.bytes, at + need);
  }
  return plan;
}

int32_t kv_blocks(int64_t positions) {
  return static_cast<int32_t>((positions + SequencedExecutable::kKvBlock - 1) / SequencedExecutable::kKvBlock);
}

std::vector<int32_t> Executable::seq_blocks(int32_t, int32_t) const {
  throw Error("this context does not share KV blocks");
}
void Executable::blocks_hold(std::span<const int32_t>, bool) { throw Error("this context does not share KV blocks"); }
void Executable::seq_adopt(int32_t, std::span<const int32_t>, int32_t, std::span<const float>) {
  throw Error("this context does not share KV blocks");
}
void Executable::seq_keep(int32_t seq, int32_t n_tokens) {
  if (!can_rewind()) throw Error("this context cannot go back inside a step");
  seq_copy(seq, seq, n_tokens);
}
std::vector<float> Executable::recurrent_state(int32_t, int32_t) const { throw Error("this context does not share KV blocks"); }
std::vector<uint8_t> Executable::block_read(int32_t) const { throw Error("this context does not share KV blocks"); }
int32_t Executable::block_write(std::span<const uint8_t>) { throw Error("this context does not share KV blocks"); }

SequencedExecutable::SequencedExecutable(const graph::Graph& g, const ExecOptions& opts)
    : g_(g), opts_(opts), blocks_(0, kKvBlock, 0) {
  if (opts_.max_tokens < 1 || opts_.n_ctx < 1 || opts_.n_seq < 1) {
    throw Error("context size, step size and sequence count must be positive");
  }
  kv_storage_ = kv_storage_type(opts_.kv_type);
  kv_row_bytes_ = kv_row_bytes(g_, kv_storage_);
  // Enough blocks for every sequence to fill its context.
  blocks_per_seq_ = (opts_.n_ctx + kKvBlock - 1) / kKvBlock;
  if (opts_.cache_blocks < 0) throw Error("a context's cache blocks cannot be negative");
  blocks_ = KvBlocks(blocks_per_seq_ * opts_.n_seq + opts_.cache_blocks, kKvBlock, opts_.n_seq);
  state_floats_.assign(g_.nodes.size(), 0);
  for (size_t i = 0; i < g_.nodes.size(); ++i) {
    if (const int64_t st = graph::state_size(g_, g_.nodes[i]); st > 0) {
      state_floats_[i] = static_cast<size_t>(st);
      recurrent_ = true;
    }
  }
  state_pos_.assign(static_cast<size_t>(opts_.n_seq), 0);
  if (opts_.kept_states < 0) throw Error("a context's kept states cannot be negative");
  kept_from_.assign(static_cast<size_t>(opts_.n_seq), 0);
  kept_count_.assign(static_cast<size_t>(opts_.n_seq), 0);
  layout_ = {kv_storage_, opts_.n_ctx, kv_row_bytes_, state_floats_};
}

void SequencedExecutable::check_seq(int32_t seq) const {
  if (seq < 0 || seq >= opts_.n_seq) {
    throw Error(fmt::format("sequence {} is not one of the context's {} (0..{})", seq, opts_.n_seq, opts_.n_seq - 1));
  }
}

void SequencedExecutable::for_each_block(size_t layer, int32_t seq, int32_t n,
                                         const std::function<void(size_t, size_t)>& f) const {
  for (int32_t pos = 0; pos < n; pos += kKvBlock) {
    const auto block = static_cast<size_t>(blocks_.block(seq, pos));
    f(block * kKvBlock * kv_row_bytes_[layer], kv_row_bytes_[layer] * static_cast<size_t>(std::min(kKvBlock, n - pos)));
  }
}

void SequencedExecutable::begin_step(const graph::StepParams& step) {
  check_step(g_, opts_, step);
  for (const graph::SeqStep& s : step.seqs) {
    if (s.n_past > blocks_.length(s.seq)) {
      throw Error(fmt::format("sequence {} holds {} positions; a step cannot start at {}", s.seq, blocks_.length(s.seq),
                              s.n_past));
    }
    if (recurrent_) (void)recurrent_restart(state_pos_[static_cast<size_t>(s.seq)], s.n_past);
    if (s.keep_states && s.n_tokens > kept_states() && recurrent_) {
      throw Error(fmt::format("a step keeping the states after {} tokens of sequence {}; the context keeps {}", s.n_tokens,
                              s.seq, kept_states()));
    }
  }
  for (const graph::SeqStep& s : step.seqs) {
    blocks_.prepare(s.seq, s.n_past, s.n_tokens, [this](int32_t from, int32_t to, int32_t rows) {
      for (size_t l = 0; l < kv_row_bytes_.size(); ++l) {
        if (kv_row_bytes_[l] == 0) continue;
        const size_t block = kv_row_bytes_[l] * kKvBlock;
        kv_copy(l, static_cast<size_t>(from) * block, static_cast<size_t>(to) * block,
                kv_row_bytes_[l] * static_cast<size_t>(rows));
      }
    });
  }
  if (!recurrent_) return;
  for (const graph::SeqStep& s : step.seqs) {
    if (s.n_past == 0) {
      for (size_t i = 0; i < state_floats_.size(); ++i) {
        if (state_floats_[i] > 0) state_write(i, s.seq, nullptr);
      }
    }
    state_pos_[static_cast<size_t>(s.seq)] = -1;  // until the step completes
  }
}

void SequencedExecutable::end_step(const graph::StepParams& step) {
  if (!recurrent_) return;
  for (const graph::SeqStep& s : step.seqs) {
    const auto q = static_cast<size_t>(s.seq);
    state_pos_[q] = s.n_past + s.n_tokens;
    kept_from_[q] = s.n_past;
    kept_count_[q] = s.keep_states ? s.n_tokens : 0;
  }
}

std::vector<uint8_t> SequencedExecutable::save_state(int32_t n_past, int32_t seq) const {
  check_seq(seq);
  if (n_past > blocks_.length(seq)) {
    throw Error(fmt::format("cannot save the state at position {} (sequence {} holds {})", n_past, seq, blocks_.length(seq)));
  }
  std::vector<uint8_t> out = layout_.begin_save(n_past, recurrent_, state_pos_[static_cast<size_t>(seq)]);
  size_t at = SavedStateLayout::kHeaderBytes;
  for (size_t l = 0; l < kv_row_bytes_.size(); ++l) {
    if (kv_row_bytes_[l] == 0) continue;  // a layer without attention
    for (const bool v : {false, true}) {
      for_each_block(l, seq, n_past, [&](size_t offset, size_t bytes) {
        kv_read(l, v, offset, out.data() + at, bytes);
        at += bytes;
      });
    }
  }
  for (size_t i = 0; i < state_floats_.size(); ++i) {
    if (state_floats_[i] == 0) continue;
    std::vector<float> st(state_floats_[i]);
    state_read(i, seq, st.data());
    std::memcpy(out.data() + at, st.data(), st.size() * sizeof(float));
    at += st.size() * sizeof(float);
  }
  return out;
}

void SequencedExecutable::load_state(std::span<const uint8_t> bytes, int32_t seq) {
  check_seq(seq);
  kept_count_[static_cast<size_t>(seq)] = 0;
  const auto n_past = static_cast<int32_t>(layout_.check(bytes));
  blocks_.clear(seq);
  blocks_.prepare(seq, 0, n_past, [](int32_t, int32_t, int32_t) {});
  size_t at = SavedStateLayout::kHeaderBytes;
  for (size_t l = 0; l < kv_row_bytes_.size(); ++l) {
    if (kv_row_bytes_[l] == 0) continue;
    for (const bool v : {false, true}) {
      for_each_block(l, seq, n_past, [&](size_t offset, size_t n) {
        kv_write(l, v, offset, bytes.data() + at, n);
        at += n;
      });
    }
  }
  for (size_t i = 0; i < state_floats_.size(); ++i) {
    if (state_floats_[i] == 0) continue;
    std::vector<float> st(state_floats_[i]);
    std::memcpy(st.data(), bytes.data() + at, st.size() * sizeof(float));
    state_write(i, seq, st.data());
    at += st.size() * sizeof(float);
  }
  state_pos_[static_cast<size_t>(seq)] = n_past;
}

void SequencedExecutable::seq_clear(int32_t seq) {
  check_seq(seq);
  kept_count_[static_cast<size_t>(seq)] = 0;
  blocks_.clear(seq);
  for (size_t i = 0; i < state_floats_.size(); ++i) {
    if (state_floats_[i] > 0) state_write(i, seq, nullptr);
  }
  state_pos_[static_cast<size_t>(seq)] = 0;
}

bool SequencedExecutable::takes_from(const Executable& from) const {
  const auto* f = dynamic_cast<const SequencedExecutable*>(&from);
  return f && typeid(*f) == typeid(*this) && f->kv_row_bytes_ == kv_row_bytes_ && f->kv_storage_ == kv_storage_ &&
         f->state_floats_ == state_floats_;
}

void SequencedExecutable::seq_take(const Executable& from, int32_t from_seq, int32_t seq, int32_t n_tokens) {
  if (!takes_from(from)) return Executable::seq_take(from, from_seq, seq, n_tokens);
  take_blocks(static_cast<const SequencedExecutable&>(from), from_seq, seq, n_tokens);
}

void SequencedExecutable::take_blocks(const SequencedExecutable& from, int32_t from_seq, int32_t seq, int32_t n_tokens) {
  from.check_seq(from_seq);
  check_seq(seq);
  if (n_tokens < 0 || n_tokens > from.blocks_.length(from_seq)) {
    throw Error(fmt::format("cannot take {} positions of a sequence that holds {}", n_tokens, from.blocks_.length(from_seq)));
  }
  if (n_tokens > opts_.n_ctx) throw Error(fmt::format("cannot take {} positions into a context of {}", n_tokens, opts_.n_ctx));
  if (recurrent_ && n_tokens != from.state_pos_[static_cast<size_t>(from_seq)]) {
    throw Error(fmt::format("the recurrent state of that sequence holds {} tokens; it cannot be taken at {}",
                            std::max<int64_t>(from.state_pos_[static_cast<size_t>(from_seq)], 0), n_tokens));
  }
  kept_count_[static_cast<size_t>(seq)] = 0;
  blocks_.clear(seq);
  blocks_.prepare(seq, 0, n_tokens, [](int32_t, int32_t, int32_t) {});
  std::vector<KvRun> runs;
  for (size_t l = 0; l < kv_row_bytes_.size(); ++l) {
    if (kv_row_bytes_[l] == 0) continue;
    std::vector<std::pair<size_t, size_t>> there;
    from.for_each_block(l, from_seq, n_tokens, [&](size_t offset, size_t bytes) { there.emplace_back(offset, bytes); });
    size_t k = 0;
    for_each_block(l, seq, n_tokens, [&](size_t offset, size_t bytes) {
      for (const bool v : {false, true}) runs.push_back({l, v, there[k].first, offset, bytes});
      ++k;
    });
  }
  kv_take(from, runs);
  for (size_t i = 0; i < state_floats_.size(); ++i) {
    if (state_floats_[i] > 0) state_take(from, i, from_seq, seq);
  }
  state_pos_[static_cast<size_t>(seq)] = n_tokens;
}

void SequencedExecutable::kv_take(const SequencedExecutable& from, std::span<const KvRun> runs) {
  std::vector<uint8_t> buf;
  for (const KvRun& r : runs) {
    buf.resize(r.bytes);
    from.kv_read(r.layer, r.v, r.from, buf.data(), r.bytes);
    kv_write(r.layer, r.v, r.to, buf.data(), r.bytes);
  }
}

void SequencedExecutable::state_take(const SequencedExecutable& from, size_t node, int32_t from_seq, int32_t seq) {
  std::vector<float> st(state_floats_[node]);
  from.state_read(node, from_seq, st.data());
  state_write(node, seq, st.data());
}

void SequencedExecutable::seq_copy(int32_t src, int32_t dst, int32_t n_tokens) {
  check_seq(src);
  check_seq(dst);
  const auto s = static_cast<size_t>(src);
  if (recurrent_ && n_tokens != state_pos_[s]) {
    throw Error(fmt::format("the recurrent state of sequence {} holds {} tokens; it cannot be copied at {}", src,
                            std::max<int64_t>(state_pos_[s], 0), n_tokens));
  }
  blocks_.share(src, dst, n_tokens);
  if (src != dst) {
    kept_count_[static_cast<size_t>(dst)] = 0;
    for (size_t i = 0; i < state_floats_.size(); ++i) {
      if (state_floats_[i] > 0) state_copy(i, src, dst);
    }
  }
  state_pos_[static_cast<size_t>(dst)] = recurrent_ ? n_tokens : 0;
}

void SequencedExecutable::seq_keep(int32_t seq, int32_t n_tokens) {
  check_seq(seq);
  const auto q = static_cast<size_t>(seq);
  if (n_tokens < 0 || n_tokens > blocks_.length(seq)) {
    throw Error(fmt::format("sequence {} holds {} positions; it cannot keep {}", seq, blocks_.length(seq), n_tokens));
  }
  if (recurrent_ && n_tokens != state_pos_[q]) {
    // Back to the state after one of the last step's tokens, where that step kept them.
    const int64_t t = n_tokens - kept_from_[q] - 1;
    if (state_pos_[q] < 0 || t < 0 || t >= kept_count_[q]) {
      throw Error(fmt::format("the recurrent state of sequence {} holds {} tokens and kept none at {}", seq,
                              std::max<int64_t>(state_pos_[q], 0), n_tokens));
    }
    state_from_kept(seq, static_cast<int32_t>(t));
    state_pos_[q] = n_tokens;
  }
  blocks_.share(seq, seq, n_tokens);
}

uint64_t kv_block_bytes(const std::vector<size_t>& row_bytes) {
  uint64_t n = 0;
  for (size_t r : row_bytes) n += 2 * r * SequencedExecutable::kKvBlock;
  return n;
}

uint64_t SequencedExecutable::kv_block_bytes() const { return backend::kv_block_bytes(kv_row_bytes_); }

std::vector<int32_t> SequencedExecutable::seq_blocks(int32_t seq, int32_t n_tokens) const {
  check_seq(seq);
  if (n_tokens < 0 || n_tokens > blocks_.length(seq)) {
    throw Error(fmt::format("sequence {} holds {} positions, not {}", seq, blocks_.length(seq), n_tokens));
  }
  const auto& t = blocks_.table(seq);
  return {t.begin(), t.begin() + (n_tokens + kKvBlock - 1) / kKvBlock};
}

void SequencedExecutable::blocks_hold(std::span<const int32_t> blocks, bool hold) {
  for (int32_t b : blocks) hold ? blocks_.hold(b) : blocks_.unhold(b);
}

void SequencedExecutable::seq_adopt(int32_t seq, std::span<const int32_t> blocks, int32_t n_tokens,
                                    std::span<const float> state) {
  check_seq(seq);
  size_t total = 0;
  for (size_t f : state_floats_) total += f;
  if (state.size() != total) {
    throw Error(fmt::format("a recurrent state of {} floats, this context's has {}", state.size(), total));
  }
  blocks_.adopt(seq, blocks, n_tokens);
  kept_count_[static_cast<size_t>(seq)] = 0;
  if (total > 0) states_write(seq, state.data());
  state_pos_[static_cast<size_t>(seq)] = recurrent_ ? n_tokens : 0;
}

std::vector<float> SequencedExecutable::recurrent_state(int32_t seq, int32_t n_tokens) const {
  check_seq(seq);
  if (!recurrent_) return {};
  if (state_pos_[static_cast<size_t>(seq)] != n_tokens || blocks_.length(seq) != n_tokens) {
    throw Error(fmt::format("the recurrent state of sequence {} holds {} tokens, not {}", seq,
                            std::max<int64_t>(state_pos_[static_cast<size_t>(seq)], 0), n_tokens));
  }
  size_t total = 0;
  for (size_t f : state_floats_) total += f;
  std::vector<float> out(total);
  states_read(seq, out.data());
  return out;
}

std::vector<uint8_t> SequencedExecutable::block_read(int32_t block) const {
  blocks_.check_used(block);
  std::vector<uint8_t> out(kv_block_bytes());
  kv_block_read(block, out.data());
  return out;
}

int32_t SequencedExecutable::block_write(std::span<const uint8_t> bytes) {
  if (bytes.size() != kv_block_bytes()) {
    throw Error(fmt::format("{} bytes are not a KV block of this context ({} bytes)", bytes.size(), kv_block_bytes()));
  }
  const int32_t block = blocks_.alloc();
  try {
    kv_block_write(block, bytes.data());
  } catch (...) {
    blocks_.unhold(block);
    throw;
  }
  return block;
}

void SequencedExecutable::for_each_block_run(int32_t block,
                                             const std::function<void(size_t, bool, size_t, size_t, size_t)>& f) const {
  size_t at = 0;
  for (size_t l = 0; l < kv_row_bytes_.size(); ++l) {
    const size_t n = kv_row_bytes_[l] * kKvBlock;
    if (n == 0) continue;
    for (const bool v : {false, true}) {
      f(l, v, static_cast<size_t>(block) * n, n, at);
      at += n;
    }
  }
}

void SequencedExecutable::kv_block_read(int32_t block, uint8_t* out) const {
  for_each_block_run(block, [&](size_t l, bool v, size_t offset, size_t n, size_t at) { kv_read(l, v, offset, out + at, n); });
}

void SequencedExecutable::kv_block_write(int32_t block, const uint8_t* in) {
  for_each_block_run(block, [&](size_t l, bool v, size_t offset, size_t n, size_t at) { kv_write(l, v, offset, in + at, n); });
}

void SequencedExecutable::states_read(int32_t seq, float* out) const {
  for (size_t i = 0; i < state_floats_.size(); ++i) {
    if (state_floats_[i] == 0) continue;
    state_read(i, seq, out);
    out += state_floats_[i];
  }
}

void SequencedExecutable::states_write(int32_t seq, const float* in) {
  for (size_t i = 0; i < state_floats_.size(); ++i) {
    if (state_floats_[i] == 0) continue;
    state_write(i, seq, in);
    in += state_floats_[i];
  }
}

WeightUses weight_uses(const graph::Graph& g, const std::string& backend,
                       const std::function<std::string(const graph::Node&)>& unsupported,
                       const std::function<bool(const graph::Node&, size_t)>& also_f32) {
  WeightUses u{std::vector<bool>(g.tensors.size(), false), std::vector<bool>(g.tensors.size(), false)};
  for (const graph::Node* np : graph::nodes_with_head(g)) {
    const graph::Node& n = *np;
    if (std::string why = unsupported(n); !why.empty()) {
      throw Error(fmt::format("{} cannot run {}: {}", backend, g.tensor(n.out).name, why));
    }
    for (size_t k = 0; k < n.in.size(); ++k) {
      const auto id = static_cast<size_t>(n.in[k]);
      if (g.tensors[id].kind != graph::TensorKind::Weight) continue;
      (n.small_f32_input(k) || (also_f32 && also_f32(n, k)) ? u.f32 : u.raw)[id] = true;
    }
  }
  return u;
}

std::vector<float> weight_floats(const graph::Tensor& t, std::span<const uint8_t> bytes) {
  const int64_t count = t.ne[0] * t.ne[1] * t.ne[2] * t.ne[3];
  std::vector<float> f(static_cast<size_t>(count));
  if (t.type == gguf::TensorType::F32) std::memcpy(f.data(), bytes.data(), f.size() * 4);
  else quant::dequantize_row(t.type, bytes.data(), f.data(), count);
  return f;
}

void read_weights(const graph::Graph& g, const gguf::File& file, const WeightUses& uses, const LoadProgress& progress,
                  const std::function<void(graph::TensorId, std::span<const uint8_t>)>& raw,
                  const std::function<void(graph::TensorId, std::vector<float>)>& floats) {
  uint64_t total = 0, done = 0;
  for (const auto& t : g.tensors) {
    if (t.kind == graph::TensorKind::Weight) total += file.tensor(t.name).n_bytes;
  }
  for (size_t i = 0; i < g.tensors.size(); ++i) {
    const auto& t = g.tensors[i];
    if (t.kind != graph::TensorKind::Weight) continue;
    const auto bytes = file.tensor_data(file.tensor(t.name));
    done += bytes.size();
    const auto id = static_cast<graph::TensorId>(i);
    if (uses.raw[i]) raw(id, bytes);
    if (uses.f32[i]) floats(id, weight_floats(t, bytes));
    if (progress) progress(done, total);
  }
}

}  // namespace zinc::backend
