#include "runtime/session.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"

namespace zinc::runtime {

Session::Session(const gguf::File& file, backend::Backend& backend, const backend::ExecOptions& opts,
                 const backend::LoadProgress& progress)
    : Session(backend.load(model::load(file).graph, file, progress), opts) {}

Session::Session(std::shared_ptr<backend::Weights> weights, const backend::ExecOptions& opts)
    : weights_(std::move(weights)), exe_(weights_->instantiate(opts)) {}

Session::Session(std::shared_ptr<backend::Weights> weights, std::shared_ptr<backend::Executable> exe, int32_t seq)
    : weights_(std::move(weights)), exe_(std::move(exe)), seq_(seq), batched_(true) {
  if (seq < 0 || seq >= exe_->options().n_seq) {
    throw Error(fmt::format("sequence {} is not one of the context's {}", seq, exe_->options().n_seq));
  }
  exe_->seq_clear(seq_);
}

int32_t Session::chunk(int64_t available, int32_t room) const {
  auto n = static_cast<int32_t>(std::min<int64_t>(available, room));
  if (n < available && cache_ && cache_->recurrent()) {
    const int32_t block = exe_->kv_block_tokens();
    const int32_t end = (n_past_ + n) / block * block;
    if (end > n_past_) n = end - n_past_;
  }
  return n;
}

void Session::checkpoint_mid_prompt() {
  if (cache_ && cache_->recurrent() && n_past_ % exe_->kv_block_tokens() == 0) cache_->insert(history_, seq_);
}

std::span<const float> Session::hidden_rows(int64_t first_token, int32_t n) const {
  if (graph().hidden < 0) return {};
  const auto w = static_cast<size_t>(exe_->hidden_width());
  return exe_->hidden().subspan(static_cast<size_t>(first_token) * w, static_cast<size_t>(n) * w);
}

void Session::committed(int32_t n, int64_t row, int64_t first_token) {
  if (n < 1 || n > static_cast<int32_t>(pending_.size())) throw Error("committed tokens that were not pending");
  if (observer_ && first_token < 0) throw Error("a step observer needs the part's first token in the step");
  const std::vector<int32_t> tokens = observer_ ? std::vector<int32_t>(pending_.begin(), pending_.begin() + n) : std::vector<int32_t>{};
  const int32_t at = n_past_;
  const bool speculative = spec_pending_;
  commit(n, row);
  if (observer_) observer_(at, tokens, speculative, hidden_rows(first_token, n));
}

void Session::committed_elsewhere(int32_t n) {
  if (n < 1 || n > static_cast<int32_t>(pending_.size()) || spec_pending_) throw Error("committed tokens that were not pending");
  if (observer_) throw Error("a session with a step observer runs its tokens in its own context's steps");
  advance(n);
  row_ = -1;
}

void Session::advance(int32_t n) {
  spec_logits_.clear();
  n_past_ += n;
  tokens_evaluated_ += n;
  history_.insert(history_.end(), pending_.begin(), pending_.begin() + n);
  pending_.erase(pending_.begin(), pending_.begin() + n);
}

void Session::commit(int32_t n, int64_t row) {
  if (spec_pending_) {
    // A speculative step, taken whole with a row for each token: the session stands at its first.
    if (n != static_cast<int32_t>(pending_.size())) throw Error("a speculative step's tokens go in one step");
    spec_pending_ = false;
    advance(n);
    spec_tokens_ = n;
    spec_row0_ = row_ = row;
    // Its rows are read over the next decode turns, while later steps (other sequences') overwrite the
    // executable's logits: kept here.
    const auto nv = static_cast<size_t>(n_vocab());
    const auto l = exe_->logits().subspan(static_cast<size_t>(row) * nv, static_cast<size_t>(n) * nv);
    spec_logits_.assign(l.begin(), l.end());
    return;
  }
  advance(n);
  row_ = row;
  if (!pending_.empty()) checkpoint_mid_prompt();
}

std::span<const float> Session::last_logits() const {
  const auto nv = static_cast<size_t>(n_vocab());
  if (!spec_logits_.empty()) return std::span<const float>(spec_logits_).subspan(static_cast<size_t>(row_ - spec_row0_) * nv, nv);
  if (!batched_ && row_ < 0) {
    const std::span<const float> l = logits_.empty() ? exe_->logits() : std::span<const float>(logits_);
    return l.subspan(l.size() - nv);
  }
  return exe_->logits().subspan(static_cast<size_t>(row_) * nv, nv);
}

std::span<const float> Session::eval(std::span<const int32_t> tokens, bool all_logits,
                                     const std::atomic<bool>* cancel) {
  return eval_tokens(tokens, all_logits, cancel, true);
}

std::span<const float> Session::eval_tokens(std::span<const int32_t> tokens, bool all_logits, const std::atomic<bool>* cancel,
                                            bool read) {
  if (tokens.empty()) throw Error("nothing to evaluate: no tokens");
  speculative_end();
  const auto held = n_past_ + static_cast<int64_t>(pending_.size());
  if (held + static_cast<int64_t>(tokens.size()) > n_ctx()) {
    throw Error(fmt::format("the prompt does not fit: {} tokens in the context, {} more, context size {}", held,
                            tokens.size(), n_ctx()));
  }
  // Check every id before the first chunk runs, so a bad id leaves the context as it was.
  for (int32_t t : tokens) {
    if (t < 0 || t >= n_vocab()) {
      throw Error(fmt::format("token id {} is outside the vocabulary (0..{})", t, n_vocab() - 1));
    }
  }
  logits_.clear();
  if (batched_) {
    if (all_logits) throw Error("a batched session returns the last token's logits only");
    pending_.insert(pending_.end(), tokens.begin(), tokens.end());
    return {};
  }
  const auto chunk = static_cast<size_t>(exe_->options().max_tokens);
  // One step: its logits are returned where the executable keeps them (no copy; a GPU backend reads
  // them back when asked for, which feed() does not do).
  if (tokens.size() <= chunk) {
    run_step(tokens, all_logits);
    return read ? exe_->logits() : std::span<const float>();
  }
  for (size_t i = 0; i < tokens.size();) {
    if (i > 0 && cancel && cancel->load()) {
      logits_.clear();
      break;
    }
    const auto n = static_cast<size_t>(this->chunk(static_cast<int64_t>(tokens.size() - i), static_cast<int32_t>(chunk)));
    run_step(tokens.subspan(i, n), all_logits);
    i += n;
    if (read && (all_logits || i == tokens.size())) {
      const auto l = exe_->logits();
      logits_.insert(logits_.end(), l.begin(), l.end());
    }
    if (i < tokens.size()) checkpoint_mid_prompt();
  }
  return logits_;
}

void Session::eval_speculative(std::span<const int32_t> tokens) {
  speculative_end();
  if (!pending_.empty()) throw Error("a speculative step after tokens still waiting for a step");
  const auto n = static_cast<int32_t>(tokens.size());
  if (n < 1 || n > exe_->options().max_tokens || (!exe_->can_rewind() && n > exe_->options().kept_states)) {
    throw Error(fmt::format("a speculative step of {} tokens does not fit (step size {}, kept states {})", n,
                            exe_->options().max_tokens, exe_->options().kept_states));
  }
  if (n_past_ + n > n_ctx()) {
    throw Error(fmt::format("the context is full: {} tokens in it, {} more do not fit in {}", n_past_, n, n_ctx()));
  }
  for (int32_t t : tokens) {
    if (t < 0 || t >= n_vocab()) throw Error(fmt::format("token id {} is outside the vocabulary (0..{})", t, n_vocab() - 1));
  }
  logits_.clear();
  if (batched_) {  // queued: the scheduler takes it whole (add_to), then committed()
    pending_.assign(tokens.begin(), tokens.end());
    spec_pending_ = true;
    return;
  }
  graph::StepParams step;
  step.add(seq_, n_past_, {tokens.begin(), tokens.end()}, true, !exe_->can_rewind());
  exe_->run(step);
  n_past_ += n;
  tokens_evaluated_ += n;
  history_.insert(history_.end(), tokens.begin(), tokens.end());
  spec_tokens_ = n;
  spec_row0_ = row_ = 0;
  if (observer_) observer_(n_past_ - n, tokens, true, hidden_rows(0, n));
}

void Session::add_to(graph::StepParams& step, int32_t n) const {
  if (n < 1 || n > static_cast<int32_t>(pending_.size()) || (spec_pending_ && n != static_cast<int32_t>(pending_.size()))) {
    throw Error("a step part of tokens that are not queued");
  }
  step.add(seq_, n_past_, std::vector<int32_t>(pending_.begin(), pending_.begin() + n), spec_pending_,
           spec_pending_ && !exe_->can_rewind());
}

void Session::speculative_accept() {
  if (speculative_ahead() < 1) throw Error("no speculated token left to accept");
  ++row_;
}

void Session::speculative_end() {
  if (spec_tokens_ == 0) return;
  const int32_t drop = speculative_ahead();
  spec_tokens_ = 0;  // the row stood at stays the last logits until the next step
  if (drop == 0) return;
  n_past_ -= drop;
  history_.resize(static_cast<size_t>(n_past_));
  exe_->seq_keep(seq_, n_past_);
}

void Session::run_step(std::span<const int32_t> tokens, bool all_logits) {
  row_ = -1;
  graph::StepParams step;
  step.add(seq_, n_past_, {tokens.begin(), tokens.end()}, all_logits);
  exe_->run(step);
  n_past_ += static_cast<int32_t>(step.tokens.size());
  tokens_evaluated_ += static_cast<int64_t>(step.tokens.size());
  history_.insert(history_.end(), step.tokens.begin(), step.tokens.end());
  if (observer_) observer_(n_past_ - static_cast<int32_t>(tokens.size()), tokens, false, hidden_rows(0, static_cast<int32_t>(tokens.size())));
}

std::span<const float> Session::eval_reusing_prefix(std::span<const int32_t> tokens, const std::atomic<bool>* cancel) {
  if (tokens.empty()) throw Error("nothing to evaluate: no tokens");
  speculative_end();
  drop_pending();
  size_t common = 0;
  while (common < history_.size() && common < tokens.size() && history_[common] == tokens[common]) ++common;
  // Keep at least the last token to evaluate: its logits are the answer.
  if (common == tokens.size()) --common;
  // A recurrent state cannot forget tokens: anything but a pure continuation starts again.
  if (!exe_->can_rewind() && common != history_.size()) common = 0;
  if (cache_) {
    // What the sequence holds past the kept prefix goes back first: blocks the cache may need to
    // bring a longer prefix back from host memory.
    if (common < history_.size()) {
      if (common == 0) {
        exe_->seq_clear(seq_);
      } else {
        exe_->seq_copy(seq_, seq_, static_cast<int32_t>(common));  // a context that rewinds: a recurrent one keeps all or nothing
      }
      history_.resize(common);
    }
    // The cache's prefix where it is longer (another sequence's, or one this session moved away from):
    // its blocks are shared and, for a recurrent context, its checkpointed state loaded.
    const auto m = cache_->lookup(tokens, static_cast<int32_t>(tokens.size()) - 1, static_cast<int32_t>(common));
    if (m.tokens > 0) {
      cache_->adopt(seq_, m);
      common = static_cast<size_t>(m.tokens);
      history_.assign(tokens.begin(), tokens.begin() + m.tokens);
    }
  }
  // Rows past the kept prefix stay in the cache but are never read again: attention only looks at
  // positions before the one being written, and the next tokens overwrite them.
  n_past_ = static_cast<int32_t>(common);
  history_.resize(common);
  reused_ = static_cast<int32_t>(common);
  return eval(tokens.subspan(common), false, cancel);
}

void Session::remember() {
  speculative_end();
  if (!cache_ || !pending_.empty() || history_.empty()) return;
  cache_->insert(history_, seq_);  // skipped by the cache where the context has moved past them
}

void Session::shift(int32_t n_keep, int32_t n_discard) {
  speculative_end();
  if (n_keep < 0 || n_discard <= 0 || static_cast<int64_t>(n_keep) + n_discard > n_past_) {
    throw Error(fmt::format("cannot drop {} tokens after the first {}: the context holds {}", n_discard, n_keep, n_past_));
  }
  std::vector<int32_t> moved(history_.begin() + n_keep + n_discard, history_.end());
  if (!exe_->can_rewind()) {
    // A recurrent state is recomputed from the start over what remains.
    moved.insert(moved.begin(), history_.begin(), history_.begin() + n_keep);
    n_keep = 0;
  }
  n_past_ = n_keep;
  history_.resize(static_cast<size_t>(n_keep));
  drop_pending();
  if (!moved.empty()) eval(moved);
}

Session::Snapshot Session::save() const {
  if (speculative_ahead() > 0) throw Error("a session is saved only after its speculative step has ended");
  return {history_, exe_->save_state(n_past_, seq_)};
}

void Session::restore(const Snapshot& s) {
  spec_tokens_ = 0;
  spec_logits_.clear();
  row_ = -1;
  exe_->load_state(s.state, seq_);
  drop_pending();
  history_ = s.history;
  n_past_ = static_cast<int32_t>(history_.size());
  reused_ = 0;
}

int32_t argmax(std::span<const float> v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

}  // namespace zinc::runtime
