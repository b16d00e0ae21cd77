// A session: one context (KV cache, recurrent state, position) over a model's weights on a backend.
// Feeds tokens in chunks no larger than the context's step size and returns logits. Sessions made from
// the same loaded Weights share them (a server's slots hold one copy of the model).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "gguf/reader.h"
#include "model/model.h"
#include "runtime/prefix_cache.h"

namespace zinc::runtime {

// Index of the largest value (the first one on ties).
int32_t argmax(std::span<const float> v);

class Session {
 public:
  // Loads the model's weights for this session alone (telling `progress` how far, when given). `file`
  // must outlive the session.
  Session(const gguf::File& file, backend::Backend& backend, const backend::ExecOptions& opts,
          const backend::LoadProgress& progress = {});
  // A context over weights already loaded (backend::Backend::load), shared with other sessions.
  Session(std::shared_ptr<backend::Weights> weights, const backend::ExecOptions& opts);
  // Sequence `seq` of a context shared with other sessions (each its own sequence of it), for a
  // scheduler that steps them together: such a session is batched (see below).
  Session(std::shared_ptr<backend::Weights> weights, std::shared_ptr<backend::Executable> exe, int32_t seq);

  // Batched sessions do not run steps themselves: eval() and what calls it (eval_reusing_prefix,
  // shift) check the tokens and queue them (returning no logits); a scheduler takes queued tokens of
  // many sessions into one step (pending(), then committed() after the step ran) and the logits are
  // read afterwards through last_logits() / last_argmax().
  bool batched() const { return batched_; }
  const std::vector<int32_t>& pending() const { return pending_; }
  int32_t seq() const { return seq_; }
  // How many of `available` tokens (pending, or of a prompt) to take into a step with room for `room`:
  // all that fit, except that where a prompt goes on past the step and a recurrent prefix cache keeps
  // checkpoints, the step ends on a cache block boundary (where the state is then checkpointed).
  int32_t chunk(int64_t available, int32_t room) const;
  // The step ran the first n pending tokens; `row` is this session's last logits row in it (a
  // speculative step's first), `first_token` the index of its first token among the step's (where the
  // executable's hidden rows are; needed by a step observer).
  void committed(int32_t n, int64_t row, int64_t first_token = -1);
  // The first n pending tokens went into the context another way (read on a context of their own,
  // then moved in: backend::Executable::seq_take): the session moves past them, with no logits row
  // until its next step. Not for a session with a step observer (which needs the steps' hidden rows).
  void committed_elsewhere(int32_t n);
  bool observed() const { return static_cast<bool>(observer_); }
  // Forgets the queued tokens (a cancelled request).
  void drop_pending() {
    pending_.clear();
    spec_pending_ = false;
  }
  // The queued tokens are a speculative step (eval_speculative): a scheduler takes them whole, with a
  // logits row for each and (for a recurrent state) the states after each kept, and passes committed()
  // the first of their rows.
  bool pending_speculative() const { return spec_pending_; }
  // The part of a step that runs `n` of the queued tokens (chunk()'s count; all of a speculative step's).
  void add_to(graph::StepParams& step, int32_t n) const;
  // The logits of the last evaluated token (of the last eval() or committed step).
  std::span<const float> last_logits() const;

  // Appends tokens to the context. Returns the logits of the last token, or with all_logits one row
  // of n_vocab per token. Throws zinc::Error when the context would overflow (nothing is appended).
  // `cancel`, when set between two chunks of a long prompt, stops there: the context keeps the chunks
  // evaluated so far and the result is empty.
  std::span<const float> eval(std::span<const int32_t> tokens, bool all_logits = false,
                              const std::atomic<bool>* cancel = nullptr);
  // eval() for a caller that reads the logits later, if at all (last_logits(), last_argmax()): a GPU
  // backend's stay on the device until asked for.
  void feed(std::span<const int32_t> tokens) { (void)eval_tokens(tokens, false, nullptr, false); }

  // Speculative decoding: evaluates the next token and drafted ones after it in one step (at most
  // the step size; for a context with recurrent state at most ExecOptions::kept_states), keeping every
  // row's logits and, for a recurrent state, the state after each token. The session then stands at
  // the first of them (last_logits() / last_argmax() are its row); speculative_accept() moves on to
  // the next, once the caller has chosen the token the model evaluated after it; speculative_end()
  // makes the context forget the tokens after the row it stands at (the drafts not accepted). Any
  // eval, remember() or shift() ends a speculative step first. A batched session queues the step
  // (pending_speculative) and stands at its first row once the scheduler has run it.
  void eval_speculative(std::span<const int32_t> tokens);
  void speculative_accept();
  void speculative_end();
  // Tokens of the speculative step after the one the session stands at (0: none, or no such step).
  int32_t speculative_ahead() const {
    return spec_tokens_ == 0 ? 0 : spec_tokens_ - 1 - static_cast<int32_t>(row_ - spec_row0_);
  }

  // Makes the context hold exactly `tokens`, reusing the longest common prefix with what it holds
  // now (only the rest is evaluated), and returns the last token's logits. This is how a chat's second
  // turn prefills only its new tokens. At least one token is always evaluated to produce logits.
  std::span<const float> eval_reusing_prefix(std::span<const int32_t> tokens, const std::atomic<bool>* cancel = nullptr);

  // The largest logit's index in the last row of the last eval() (greedy decoding; on a GPU backend
  // this reads one id instead of the logits).
  int32_t last_argmax() const {
    if (!spec_logits_.empty()) return argmax(last_logits());
    return row_ >= 0 ? exe_->argmax(row_) : exe_->argmax();
  }

  // Tokens evaluated since construction (prompt and generated), for counters and tests.
  int64_t tokens_evaluated() const { return tokens_evaluated_; }
  // How many leading tokens the last eval_reusing_prefix() found already in the context (its own, or
  // the prefix cache's).
  int32_t reused_tokens() const { return reused_; }

  // A prefix cache over this session's context, shared with the other sessions of it: then
  // eval_reusing_prefix() also takes the longest prefix any of them left there (where it is longer
  // than what this session holds), and remember() leaves this session's tokens there.
  void set_prefix_cache(std::shared_ptr<PrefixCache> cache) { cache_ = std::move(cache); }
  // A prefix cache of `budget_bytes` over this session's own context (its ExecOptions::cache_blocks).
  void use_prefix_cache(uint64_t budget_bytes, uint64_t host_budget_bytes = 0) {
    cache_ = std::make_shared<PrefixCache>(exe_, budget_bytes, host_budget_bytes);
  }
  const std::shared_ptr<PrefixCache>& prefix_cache() const { return cache_; }
  // Leaves the tokens the context holds now in the prefix cache (with a checkpoint of the recurrent
  // state where there is one). Nothing without a cache, or while tokens wait for a step.
  void remember();

  // Makes room in a full context: keeps the first n_keep tokens, drops the n_discard after them and
  // moves the rest down, recomputing the moved tokens at their new positions (exact, unlike rotating
  // cached keys). Throws zinc::Error for a range outside the context.
  void shift(int32_t n_keep, int32_t n_discard);

  // The whole context (tokens, cache, recurrent state) set aside, and restored later into this
  // session or another of the same model and options: evaluation continues exactly where it was,
  // which is how a model with recurrent state resumes a conversation it has moved away from.
  struct Snapshot {
    std::vector<int32_t> history;
    std::vector<uint8_t> state;
  };
  Snapshot save() const;
  void restore(const Snapshot& s);

  int32_t n_past() const { return n_past_; }
  const std::vector<int32_t>& history() const { return history_; }
  int32_t n_ctx() const { return exe_->options().n_ctx; }
  int64_t n_vocab() const { return exe_->n_vocab(); }
  void reset() {
    spec_tokens_ = 0;
    spec_logits_.clear();
    row_ = -1;
    n_past_ = 0;
    reused_ = 0;
    history_.clear();
    drop_pending();
  }
  // Told after each step of this session's tokens (run here, or by a scheduler: committed()): the
  // position of its first token, its tokens, whether it verifies drafted tokens (those after the
  // first), and the executable's hidden rows of those tokens (graph::Graph::hidden; empty without).
  using StepObserver = std::function<void(int32_t n_past, std::span<const int32_t> tokens, bool speculative,
                                          std::span<const float> hidden)>;
  void set_step_observer(StepObserver observer) { observer_ = std::move(observer); }

  const graph::Graph& graph() const { return weights_->graph(); }
  const std::shared_ptr<backend::Weights>& weights() const { return weights_; }
  const backend::Executable& executable() const { return *exe_; }

 private:
  std::span<const float> eval_tokens(std::span<const int32_t> tokens, bool all_logits, const std::atomic<bool>* cancel, bool read);
  void run_step(std::span<const int32_t> tokens, bool all_logits);  // one executable step, then the bookkeeping
  void commit(int32_t n, int64_t row);  // committed()'s bookkeeping
  void advance(int32_t n);  // the first n pending tokens into the context's history (and the logits kept dropped)
  // The executable's hidden rows of n tokens of the last step from its first_token-th (empty without).
  std::span<const float> hidden_rows(int64_t first_token, int32_t n) const;
  void checkpoint_mid_prompt();  // a recurrent cache's checkpoint at a block boundary inside a prompt

  std::shared_ptr<backend::Weights> weights_;
  std::shared_ptr<backend::Executable> exe_;
  int32_t seq_ = 0;
  bool batched_ = false;
  std::vector<int32_t> pending_;  // batched: checked tokens waiting for a step
  // This session's logits row in the last step: batched, its part's; else the row of a speculative
  // step it stands at (-1: the last row).
  int64_t row_ = -1;
  int32_t spec_tokens_ = 0;       // the tokens of the speculative step under way (0: none)
  int64_t spec_row0_ = 0;         // the logits row of its first token
  bool spec_pending_ = false;     // batched: the queued tokens are a speculative step
  std::vector<float> spec_logits_;  // batched: the rows of the last step's speculative part
  int32_t n_past_ = 0;
  std::vector<int32_t> history_;  // the tokens whose keys and values the cache holds, in order
  int64_t tokens_evaluated_ = 0;
  int32_t reused_ = 0;
  std::vector<float> logits_;
  std::shared_ptr<PrefixCache> cache_;
  StepObserver observer_;
};

}  // namespace zinc::runtime
