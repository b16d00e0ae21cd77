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
// used leaf goes first.
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
  int64_t evictions = 0;            // nodes evicted under the budget
  uint64_t kv_bytes = 0;            // bytes of the blocks held (block count × block bytes)
  uint64_t checkpoint_bytes = 0;    // bytes of recurrent-state checkpoints
  uint64_t budget_bytes = 0;
  int64_t nodes = 0, checkpoints = 0;
};

class PrefixCache {
 public:
  // A cache over `exe`'s blocks (which must outlive it) within `budget_bytes`. Throws zinc::Error for
  // a context that does not share blocks.
  PrefixCache(std::shared_ptr<backend::Executable> exe, uint64_t budget_bytes);
  ~PrefixCache();
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  // What a lookup found: the first `tokens` of the prompt are in `blocks` (and, for a recurrent
  // context, `state` is the state after them). tokens == 0: nothing.
  struct Match {
    int32_t tokens = 0;
    std::vector<int32_t> blocks;
    std::vector<float> state;
  };
  // The longest cached prefix of `prompt` no longer than `limit` tokens that this context can resume
  // from: any prefix for a context without recurrent state (a block may be matched in part), one
  // ending at a checkpoint otherwise. Only one longer than `longer_than` tokens (what the caller holds
  // already) is returned, and marked as recently used.
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
  Node* find_child(Node* n, std::span<const int32_t> tokens) const;
  void evict_to_budget();
  void drop(Node* n);
  uint64_t used_bytes() const;

  std::shared_ptr<backend::Executable> exe_;
  int32_t block_tokens_ = 0;
  uint64_t block_bytes_ = 0;
  bool recurrent_ = false;
  std::unique_ptr<Node> root_;
  uint64_t clock_ = 0;
  PrefixCacheStats stats_;
  mutable std::mutex mutex_;  // the server's metrics read stats() from another thread
};

}  // namespace zinc::runtime
