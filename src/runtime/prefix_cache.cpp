#include "runtime/prefix_cache.h"

#include <algorithm>

#include "core/error.h"

namespace zinc::runtime {

struct PrefixCache::Node {
  std::vector<int32_t> tokens;  // the block's tokens: a whole block, or fewer in a leaf
  int32_t block = -1;           // the context's block holding their rows (one reference held); -1: in the host tier
  std::vector<uint8_t> host;    // the rows while in the host tier (Executable::block_read)
  Node* parent = nullptr;
  std::vector<std::unique_ptr<Node>> children;
  uint64_t last_use = 0;
  std::vector<float> state;  // recurrent state after the last token (empty: no checkpoint here)
  bool pinned = false;       // on the path a lookup is bringing back: not evicted meanwhile

  bool on_device() const { return block >= 0; }
  uint64_t state_bytes() const { return state.size() * sizeof(float); }
};

// What the tree holds, per tier.
struct PrefixCache::Tally {
  int64_t device_nodes = 0, host_nodes = 0, checkpoints = 0;
  uint64_t device_state_bytes = 0, host_state_bytes = 0;
};

namespace {

int64_t kv_blocks_of_tokens(int32_t n, int32_t block_tokens) { return (n + block_tokens - 1) / block_tokens; }

size_t common_prefix(std::span<const int32_t> a, std::span<const int32_t> b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

}  // namespace

PrefixCache::PrefixCache(std::shared_ptr<backend::Executable> exe, uint64_t budget_bytes, uint64_t host_budget_bytes)
    : exe_(std::move(exe)), root_(std::make_unique<Node>()) {
  block_tokens_ = exe_->kv_block_tokens();
  if (block_tokens_ <= 0) throw Error("this context does not share KV blocks: no prefix cache");
  block_bytes_ = std::max<uint64_t>(exe_->kv_block_bytes(), 1);
  recurrent_ = !exe_->can_rewind();
  stats_.budget_bytes = budget_bytes;
  stats_.host_budget_bytes = host_budget_bytes;
  tiered_ = host_budget_bytes >= block_bytes_;
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
        best_node = c.get();
      }
      if (whole && m == block_tokens_) down = c.get();
    }
    if (!down) break;
    pos += block_tokens_;
    n = down;
  }
  if (!best_node) return {};
  // The nodes from the root down to the match. Those in the host tier are written back into free
  // blocks: kept by the node where the device tier has room (others spilled for it), otherwise held
  // only until the sequence adopts them. Where no block is free, the match ends before the node.
  std::vector<Node*> chain;
  for (Node* p = best_node; p != root_.get(); p = p->parent) chain.push_back(p);
  std::reverse(chain.begin(), chain.end());
  for (Node* p : chain) p->pinned = true;
  std::vector<int32_t> blocks;
  std::vector<bool> transient;
  for (Node* p : chain) {
    if (p->on_device()) {
      blocks.push_back(p->block);
      transient.push_back(false);
      continue;
    }
    const bool keep = evict_to_budget(1);
    int32_t b = -1;
    try {
      b = exe_->block_write(p->host);
    } catch (const Error&) {
      break;
    }
    ++stats_.restores;
    blocks.push_back(b);
    transient.push_back(!keep);
    if (keep) {
      p->block = b;
      p->host = {};
    }
  }
  for (Node* p : chain) p->pinned = false;
  // Gives back the blocks written for this match alone from the k-th on.
  const auto drop_from = [&](size_t k) {
    for (size_t i = k; i < blocks.size(); ++i) {
      if (transient[i]) exe_->blocks_hold(std::span<const int32_t>(&blocks[i], 1), false);
    }
    blocks.resize(k);
    transient.resize(k);
  };
  if (blocks.size() < chain.size()) {
    // The match ends within the whole blocks written back (where a recurrent context has a checkpoint).
    chain.resize(blocks.size());
    while (!chain.empty() && recurrent_ && chain.back()->state.empty()) chain.pop_back();
    drop_from(chain.size());
    const auto tokens = static_cast<int32_t>(chain.size()) * block_tokens_;
    if (chain.empty() || tokens <= std::max(longer_than, 0)) {
      drop_from(0);
      tally();
      return {};
    }
    best.tokens = tokens;
    best_node = chain.back();
  }
  best.blocks = blocks;
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (transient[i]) best.transient.push_back(blocks[i]);
  }
  if (recurrent_) best.state = best_node->state;
  const uint64_t now = ++clock_;
  for (Node* p : chain) p->last_use = now;
  tally();
  return best;
}

void PrefixCache::adopt(int32_t seq, const Match& m) {
  try {
    exe_->seq_adopt(seq, m.blocks, m.tokens, m.state);
  } catch (...) {
    exe_->blocks_hold(m.transient, false);
    throw;
  }
  exe_->blocks_hold(m.transient, false);  // the sequence holds them now
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
  // Blocks the device tier can take besides what it holds, less this history's (its new nodes come
  // first): nodes in the host tier that this history passes take the sequence's blocks within that.
  const Tally t = tally();
  const uint64_t used = static_cast<uint64_t>(t.device_nodes) * block_bytes_ + t.device_state_bytes;
  const auto free_bytes = static_cast<int64_t>((stats_.budget_bytes - std::min(stats_.budget_bytes, used)) / block_bytes_);
  int64_t device_room = std::min<int64_t>(exe_->options().cache_blocks - t.device_nodes, free_bytes) -
                        kv_blocks_of_tokens(n, block_tokens_);
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
                                if (dominated) release(c.get());
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
    } else if (!child->on_device() && child->tokens.size() == span.size() && device_room > 0) {
      // Back from the host tier for nothing where the device tier has room: the sequence holds these
      // rows now (without room, the copy in host memory stays: taking the block would only read it
      // out again).
      child->block = blocks[static_cast<size_t>(k)];
      exe_->blocks_hold(std::span<const int32_t>(&child->block, 1), true);
      child->host = {};
      --device_room;
    }
    child->last_use = now;
    node = child;
    if (partial) break;
  }
  if (recurrent_ && node != root_.get()) node->state = std::move(state);
  evict_to_budget();
}

PrefixCache::Tally PrefixCache::tally() {
  Tally t;
  std::vector<Node*> stack = {root_.get()};
  while (!stack.empty()) {
    Node* x = stack.back();
    stack.pop_back();
    for (auto& c : x->children) stack.push_back(c.get());
    if (x == root_.get()) continue;
    (x->on_device() ? t.device_nodes : t.host_nodes) += 1;
    (x->on_device() ? t.device_state_bytes : t.host_state_bytes) += x->state_bytes();
    t.checkpoints += !x->state.empty();
  }
  stats_.nodes = t.device_nodes + t.host_nodes;
  stats_.host_nodes = t.host_nodes;
  stats_.checkpoints = t.checkpoints;
  stats_.kv_bytes = static_cast<uint64_t>(t.device_nodes) * block_bytes_;
  stats_.checkpoint_bytes = t.device_state_bytes;
  stats_.host_bytes = static_cast<uint64_t>(t.host_nodes) * block_bytes_ + t.host_state_bytes;
  return t;
}

bool PrefixCache::evict_to_budget(int32_t room) {
  // The device tier. The victim: a node on the device no other node there depends on (with a host
  // tier: none of its children on the device; without: a leaf, whose block goes back, or an inner
  // node's checkpoint, which goes alone). For a recurrent context a leaf without a checkpoint cannot be
  // resumed from: such leaves are dropped first, whatever the budget. Otherwise the least recently used.
  bool fits = false;
  for (;;) {
    const Tally t = tally();
    Node* victim = nullptr;
    bool victim_useful = true;
    std::vector<Node*> stack = {root_.get()};
    while (!stack.empty()) {
      Node* x = stack.back();
      stack.pop_back();
      bool device_below = false;
      for (auto& c : x->children) {
        stack.push_back(c.get());
        device_below |= c->on_device();
      }
      if (x == root_.get() || x->pinned || !x->on_device()) continue;
      if (tiered_ ? device_below : !x->children.empty() && x->state.empty()) continue;
      const bool useful = !recurrent_ || !x->state.empty() || !x->children.empty();
      if (!victim || (victim_useful && !useful) || (useful == victim_useful && x->last_use < victim->last_use)) {
        victim = x;
        victim_useful = useful;
      }
    }
    // Within the bytes, and within the blocks the context set aside (ExecOptions::cache_blocks): held
    // blocks beyond those could leave a sequence without room for its own context.
    const int64_t nodes = t.device_nodes + room;
    const bool over = static_cast<uint64_t>(nodes) * block_bytes_ + t.device_state_bytes > stats_.budget_bytes ||
                      nodes > exe_->options().cache_blocks;
    fits = !over;
    if (!victim || (!over && victim_useful)) break;
    // Each round moves or removes a node or a checkpoint: the loop ends.
    ++stats_.evictions;
    if (!victim_useful) {
      drop(victim);
    } else if (tiered_) {
      spill(victim);
    } else if (victim->children.empty()) {
      drop(victim);
    } else {
      victim->state.clear();
      victim->state.shrink_to_fit();
    }
  }
  // The host tier: its least recently used leaves (those a recurrent context cannot resume from first);
  // where only inner nodes are left there, the oldest goes with what hangs below it.
  for (;;) {
    const Tally t = tally();
    Node* victim = nullptr;
    bool victim_leaf = false, victim_useful = true;
    std::vector<Node*> stack = {root_.get()};
    while (!stack.empty()) {
      Node* x = stack.back();
      stack.pop_back();
      for (auto& c : x->children) stack.push_back(c.get());
      if (x == root_.get() || x->pinned || x->on_device()) continue;
      const bool leaf = x->children.empty();
      const bool useful = !leaf || !recurrent_ || !x->state.empty();
      const auto rank = [](bool l, bool u) { return (l ? 2 : 0) + (u ? 0 : 1); };  // higher goes first
      if (!victim || rank(leaf, useful) > rank(victim_leaf, victim_useful) ||
          (rank(leaf, useful) == rank(victim_leaf, victim_useful) && x->last_use < victim->last_use)) {
        victim = x;
        victim_leaf = leaf;
        victim_useful = useful;
      }
    }
    const bool over = static_cast<uint64_t>(t.host_nodes) * block_bytes_ + t.host_state_bytes > stats_.host_budget_bytes;
    if (!victim || (!over && victim_useful)) break;
    ++stats_.evictions;
    drop(victim);
  }
  tally();
  return fits;
}

void PrefixCache::spill(Node* n) {
  n->host = exe_->block_read(n->block);
  release(n);
  ++stats_.spills;
}

void PrefixCache::release(Node* n) {
  if (!n->on_device()) return;
  exe_->blocks_hold(std::span<const int32_t>(&n->block, 1), false);
  n->block = -1;
}

void PrefixCache::drop(Node* n) {
  std::vector<Node*> stack = {n};
  while (!stack.empty()) {
    Node* x = stack.back();
    stack.pop_back();
    for (auto& c : x->children) stack.push_back(c.get());
    release(x);
  }
  auto& siblings = n->parent->children;
  siblings.erase(std::find_if(siblings.begin(), siblings.end(), [n](const auto& c) { return c.get() == n; }));
}

void PrefixCache::clear() {
  const std::lock_guard<std::mutex> lock(mutex_);
  while (!root_->children.empty()) drop(root_->children.back().get());
  tally();
}

PrefixCacheStats PrefixCache::stats() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

}  // namespace zinc::runtime
