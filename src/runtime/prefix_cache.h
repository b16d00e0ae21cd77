// A prefix cache shared by every sequence of one context: a tree of KV blocks keyed by the tokens they
// hold, so a request reuses the longest prefix any sequence evaluated before, whichever slot did it and
// however long ago (until evicted). Each node is one block of Executable::kv_block_tokens() tokens (a
// full block, or a partial one as a leaf), holding a reference on its block (Executable::blocks_hold):
// the rows stay while the node does, and a sequence that adopts them shares them, copied only where it
// writes. A context with recurrent state (linear-attention layers) can only resume where a checkpoint
// of that state was taken: the state after a node's last token, kept in host memory beside the node.
// Memory is bounded: held blocks (all of them, shared or not) times their bytes plus the checkpoints
// stay within the budget, and the blocks within the room the context set aside for the cache
// (ExecOptions::cache_blocks: so no sequence ever lacks blocks for its own context); the least recently
// used leaf goes first. With a host tier (a second budget, in host memory), a block evicted from the
// device is read out into host memory instead of dropped (its checkpoint with it), and written back
// into a free block when a lookup matches it: faster than evaluating its tokens again. The host tier
// drops its least recently used leaves to stay within its own budget.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "backend/backend.h"

namespace zinc::runtime {

struct PrefixCacheStats {
  int64_t lookups = 0, hits = 0;    // lookups, and those whose prefix a sequence took
  int64_t tokens_reused = 0;        // tokens the hits gave back
  int64_t evictions = 0;            // nodes evicted under the budgets (spilled to the host tier, or dropped)
  uint64_t kv_bytes = 0;            // bytes of the blocks held on the device (block count × block bytes)
  uint64_t checkpoint_bytes = 0;    // bytes of the recurrent-state checkpoints of those blocks' nodes
  uint64_t budget_bytes = 0;        // what the two above stay within
  int64_t nodes = 0, checkpoints = 0;  // nodes (both tiers), and checkpoints (both tiers)
  // The host tier: blocks read out of the device into host memory, with their nodes' checkpoints.
  uint64_t host_bytes = 0, host_budget_bytes = 0;
  int64_t host_nodes = 0;
  int64_t spills = 0, restores = 0;  // blocks moved to the host tier, and written back for a lookup
};

class PrefixCache {
 public:
  // A cache over `exe`'s blocks (which must outlive it) within `budget_bytes`. Throws zinc::Error for
  // a context that does not share blocks. host_budget_bytes > 0 adds the host tier (it takes effect
  // from one block's bytes).
  PrefixCache(std::shared_ptr<backend::Executable> exe, uint64_t budget_bytes, uint64_t host_budget_bytes = 0);
  ~PrefixCache();
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  // What a lookup found: the first `tokens` of the prompt are in `blocks` (and, for a recurrent
  // context, `state` is the state after them). tokens == 0: nothing.
  struct Match {
    int32_t tokens = 0;
    std::vector<int32_t> blocks;
    std::vector<float> state;
    std::vector<int32_t> transient;  // blocks written back from the host tier for this match alone (held until adopt)
  };
  // The longest cached prefix of `prompt` no longer than `limit` tokens that this context can resume
  // from: any prefix for a context without recurrent state (a block may be matched in part), one
  // ending at a checkpoint otherwise. Only one longer than `longer_than` tokens (what the caller holds
  // already) is returned, and marked as recently used. Its blocks in the host tier are written back
  // to the device first (evicting others where needed; where no block is free, the match ends before
  // them). A match with tokens must be given to adopt().
  Match lookup(std::span<const int32_t> prompt, int32_t limit, int32_t longer_than = 0);
  // Makes `seq` hold a match's tokens (the context's blocks and, where recurrent, its state).
  void adopt(int32_t seq, const Match& m);
  // Records the first history.size() tokens `seq` holds now (its blocks; for a recurrent context, a
  // checkpoint of its state, which must hold exactly those tokens), then evicts down to the budget.
  void insert(std::span<const int32_t> history, int32_t seq);
  // Drops every node (the blocks go back to the context).
  void clear();

  PrefixCacheStats stats() const;
  bool recurrent() const { return recurrent_; }

 private:
  struct Node;
  struct Tally;
  Node* find_child(Node* n, std::span<const int32_t> tokens) const;
  Tally tally();
  // Evicts until the device tier has room for `room` more blocks within its budgets (false where it
  // cannot: what is left is pinned), then the host tier to its budget.
  bool evict_to_budget(int32_t room = 0);
  void spill(Node* n);
  void drop(Node* n);
  void release(Node* n);

  std::shared_ptr<backend::Executable> exe_;
  int32_t block_tokens_ = 0;
  uint64_t block_bytes_ = 0;
  bool recurrent_ = false;
  bool tiered_ = false;  // a host tier that holds at least a block
  std::unique_ptr<Node> root_;
  uint64_t clock_ = 0;
  PrefixCacheStats stats_;
  mutable std::mutex mutex_;  // the server's metrics read stats() from another thread
};

}  // namespace zinc::runtime
