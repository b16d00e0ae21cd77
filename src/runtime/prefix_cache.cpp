#include "runtime/prefix_cache.h"

#include <algorithm>

#include "core/error.h"

namespace zinc::runtime {

struct PrefixCache::Node {
  std::vector<int32_t> tokens;  // the block's tokens: a whole block, or fewer in a leaf
  int32_t block = -1;           // the context's block holding their rows (one reference held)
  Node* parent = nullptr;
  std::vector<std::unique_ptr<Node>> children;
  uint64_t last_use = 0;
  std::vector<float> state;  // recurrent state after the last token (empty: no checkpoint here)
};

namespace {

size_t common_prefix(std::span<const int32_t> a, std::span<const int32_t> b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

}  // namespace

PrefixCache::PrefixCache(std::shared_ptr<backend::Executable> exe, uint64_t budget_bytes)
    : exe_(std::move(exe)), root_(std::make_unique<Node>()) {
  block_tokens_ = exe_->kv_block_tokens();
  if (block_tokens_ <= 0) throw Error("this context does not share KV blocks: no prefix cache");
  block_bytes_ = std::max<uint64_t>(exe_->kv_block_bytes(), 1);
  recurrent_ = !exe_->can_rewind();
  stats_.budget_bytes = budget_bytes;
}

PrefixCache::~PrefixCache() { clear(); }

PrefixCache::Node* PrefixCache::find_child(Node* n, std::span<const int32_t> tokens) const {
  for (auto& c : n->children) {
    if (std::equal(c->tokens.begin(), c->tokens.end(), tokens.begin(), tokens.end())) return c.get();
  }
  return nullptr;
}

PrefixCache::Match PrefixCache::lookup(std::span<const int32_t> prompt, int32_t limit, int32_t longer_than) {
  const std::lock_guard<std::mutex> lock(mutex_);
  ++stats_.lookups;
  Match best;
  best.tokens = std::max(longer_than, 0);
  Node* best_node = nullptr;
  limit = std::min<int32_t>(limit, static_cast<int32_t>(prompt.size()));
  Node* n = root_.get();
  std::vector<int32_t> path;  // the blocks of the whole nodes walked so far
  int32_t pos = 0;
  while (pos < limit) {
    const auto rest = prompt.subspan(static_cast<size_t>(pos), static_cast<size_t>(limit - pos));
    Node* down = nullptr;
    for (auto& c : n->children) {
      const auto m = static_cast<int32_t>(common_prefix(c->tokens, rest));
      const bool whole = m == static_cast<int32_t>(c->tokens.size());
      // A recurrent state resumes only at a checkpoint; KV rows resume anywhere (a block matched in
      // part is shared, and copied where the sequence writes into it).
      const bool usable = recurrent_ ? whole && !c->state.empty() : m > 0;
      if (usable && pos + m > best.tokens) {
        best.tokens = pos + m;
        best.blocks = path;
        best.blocks.push_back(c->block);
        best_node = c.get();
      }
      if (whole && m == block_tokens_) down = c.get();
    }
    if (!down) break;
    path.push_back(down->block);
    pos += block_tokens_;
    n = down;
  }
  if (!best_node) return {};
  if (recurrent_) best.state = best_node->state;
  const uint64_t now = ++clock_;
  for (Node* p = best_node; p != root_.get(); p = p->parent) p->last_use = now;
  return best;
}

void PrefixCache::adopt(int32_t seq, const Match& m) {
  exe_->seq_adopt(seq, m.blocks, m.tokens, m.state);
  const std::lock_guard<std::mutex> lock(mutex_);
  ++stats_.hits;
  stats_.tokens_reused += m.tokens;
}

void PrefixCache::insert(std::span<const int32_t> history, int32_t seq) {
  if (history.empty() || stats_.budget_bytes == 0) return;
  const auto n = static_cast<int32_t>(history.size());
  const std::vector<int32_t> blocks = exe_->seq_blocks(seq, n);
  std::vector<float> state;
  if (recurrent_) {
    try {
      state = exe_->recurrent_state(seq, n);
    } catch (const Error&) {
      return;  // the state has moved past these tokens (or never reached them): nothing to resume from
    }
  }
  const std::lock_guard<std::mutex> lock(mutex_);
  const uint64_t now = ++clock_;
  Node* node = root_.get();
  for (int32_t pos = 0, k = 0; pos < n; pos += block_tokens_, ++k) {
    const auto span = history.subspan(static_cast<size_t>(pos), static_cast<size_t>(std::min(block_tokens_, n - pos)));
    const bool partial = static_cast<int32_t>(span.size()) < block_tokens_;
    Node* child = find_child(node, span);
    if (!child && partial && !recurrent_) {
      // A node that already holds these tokens and more serves this prefix too (matched in part).
      for (auto& c : node->children) {
        if (common_prefix(c->tokens, span) == span.size()) child = c.get();
      }
    }
    if (!child) {
      // Partial leaves this one's tokens extend are no longer needed (unless they carry a checkpoint).
      auto& cs = node->children;
      cs.erase(std::remove_if(cs.begin(), cs.end(),
                              [&](const std::unique_ptr<Node>& c) {
                                const bool dominated = c->children.empty() && c->state.empty() &&
                                                       c->tokens.size() < span.size() &&
                                                       common_prefix(c->tokens, span) == c->tokens.size();
                                if (dominated) exe_->blocks_hold(std::span<const int32_t>(&c->block, 1), false);
                                return dominated;
                              }),
               cs.end());
      auto made = std::make_unique<Node>();
      made->tokens.assign(span.begin(), span.end());
      made->block = blocks[static_cast<size_t>(k)];
      made->parent = node;
      exe_->blocks_hold(std::span<const int32_t>(&made->block, 1), true);
      child = made.get();
      cs.push_back(std::move(made));
    }
    child->last_use = now;
    node = child;
    if (partial) break;
  }
  if (recurrent_ && node != root_.get()) node->state = std::move(state);
  evict_to_budget();
}

uint64_t PrefixCache::used_bytes() const {
  return static_cast<uint64_t>(stats_.nodes) * block_bytes_ + stats_.checkpoint_bytes;
}

void PrefixCache::evict_to_budget() {
  for (;;) {
    // Count what is held, and find the victim: a leaf (its block goes back), or an inner node's
    // checkpoint (only the state goes). For a recurrent context a leaf without a checkpoint cannot be
    // resumed from: such leaves go first, whatever the budget. Otherwise the least recently used.
    int64_t nodes = 0, checkpoints = 0;
    uint64_t cp_bytes = 0;
    Node* victim = nullptr;
    bool victim_useful = true;
    std::vector<Node*> stack = {root_.get()};
    while (!stack.empty()) {
      Node* x = stack.back();
      stack.pop_back();
      for (auto& c : x->children) stack.push_back(c.get());
      if (x == root_.get()) continue;
      ++nodes;
      if (!x->state.empty()) {
        ++checkpoints;
        cp_bytes += x->state.size() * sizeof(float);
      }
      if (!x->children.empty() && x->state.empty()) continue;
      const bool useful = !recurrent_ || !x->state.empty();
      if (!victim || (victim_useful && !useful) || (useful == victim_useful && x->last_use < victim->last_use)) {
        victim = x;
        victim_useful = useful;
      }
    }
    stats_.nodes = nodes;
    stats_.checkpoints = checkpoints;
    stats_.checkpoint_bytes = cp_bytes;
    stats_.kv_bytes = static_cast<uint64_t>(nodes) * block_bytes_;
    // Within the bytes, and within the blocks the context set aside (ExecOptions::cache_blocks): held
    // blocks beyond those could leave a sequence without room for its own context.
    const bool over = used_bytes() > stats_.budget_bytes || nodes > exe_->options().cache_blocks;
    if (!victim || (!over && victim_useful)) return;
    // Each round removes a node or a checkpoint: the loop ends.
    ++stats_.evictions;
    if (victim->children.empty()) {
      drop(victim);
    } else {
      victim->state.clear();
      victim->state.shrink_to_fit();
    }
  }
}

void PrefixCache::drop(Node* n) {
  exe_->blocks_hold(std::span<const int32_t>(&n->block, 1), false);
  auto& siblings = n->parent->children;
  siblings.erase(std::find_if(siblings.begin(), siblings.end(), [n](const auto& c) { return c.get() == n; }));
}

void PrefixCache::clear() {
  const std::lock_guard<std::mutex> lock(mutex_);
  std::vector<Node*> stack = {root_.get()};
  while (!stack.empty()) {
    Node* x = stack.back();
    stack.pop_back();
    for (auto& c : x->children) stack.push_back(c.get());
    if (x != root_.get()) exe_->blocks_hold(std::span<const int32_t>(&x->block, 1), false);
  }
  root_->children.clear();
  stats_.nodes = stats_.checkpoints = 0;
  stats_.kv_bytes = stats_.checkpoint_bytes = 0;
}

PrefixCacheStats PrefixCache::stats() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

}  // namespace zinc::runtime
