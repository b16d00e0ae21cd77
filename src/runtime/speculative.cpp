#include "runtime/speculative.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/error.h"

namespace zinc::runtime {

SpecMode parse_spec_mode(const std::string& s) {
  if (s == "off") return SpecMode::Off;
  if (s == "on") return SpecMode::On;
  if (s == "auto") return SpecMode::Auto;
  throw Error(fmt::format("--spec takes on, off or auto, not '{}'", s));
}

void check_draft_vocab(const tokenizer::Tokenizer& target, const tokenizer::Tokenizer& draft, const std::string& name) {
  const auto& dv = draft.vocab();
  const auto& tv = target.vocab();
  bool same = dv.size() == tv.size();
  for (int32_t id = 0; same && id < dv.size(); ++id) same = dv.text(id) == tv.text(id);
  if (!same) {
    throw Error(fmt::format("the draft model '{}' has another vocabulary ({} tokens; the model's {}): a draft must share it",
                            name, dv.size(), tv.size()));
  }
}

double expected_tokens_per_step(double a, int32_t k) {
  double sum = 0, p = 1;
  for (int32_t i = 0; i <= k; ++i, p *= a) sum += p;
  return sum;
}

Drafter::Drafter(int32_t max_draft, SpecMode mode) : max_draft_(max_draft), mode_(mode) {
  if (max_draft < 1) throw Error(fmt::format("a draft of {} tokens: draft at least one", max_draft));
}

ModelDrafter::ModelDrafter(Session& draft, int32_t max_draft, SpecMode mode) : Drafter(max_draft, mode), draft_(draft) {
  if (!draft_.executable().can_rewind()) {
    throw Error("the draft model has recurrent state (a hybrid): a draft model must be a transformer without it");
  }
  if (draft_.batched()) throw Error("a draft model's session cannot be a batched one");
}

void ModelDrafter::check_target(const Session& target) const {
  if (target.n_vocab() != draft_.n_vocab()) {
    throw Error(fmt::format("the draft model's vocabulary has {} tokens, the model's {}: a draft must share the vocabulary",
                            draft_.n_vocab(), target.n_vocab()));
  }
  if (draft_.n_ctx() < target.n_ctx()) {
    throw Error(fmt::format("the draft model's context ({}) is smaller than the model's ({})", draft_.n_ctx(), target.n_ctx()));
  }
}

std::vector<int32_t> ModelDrafter::draft(std::span<const int32_t> context, int32_t n) {
  std::vector<int32_t> out;
  out.reserve(static_cast<size_t>(n));
  draft_.eval_reusing_prefix(context);
  for (;;) {
    out.push_back(draft_.last_argmax());
    if (static_cast<int32_t>(out.size()) == n) break;
    draft_.eval(std::span<const int32_t>(&out.back(), 1));
  }
  return out;
}

MtpDrafter::MtpDrafter(Session& target, int32_t max_draft, SpecMode mode) : Drafter(max_draft, mode), target_(target) {
  const graph::Graph& g = target_.graph();
  if (!g.mtp || g.hidden < 0) throw Error("the model has no multi-token-prediction head to draft with");
  const backend::ExecOptions& to = target_.executable().options();
  backend::ExecOptions opts;
  opts.n_ctx = to.n_ctx;
  opts.max_tokens = to.max_tokens;
  opts.kv_type = to.kv_type;
  head_ = target_.weights()->instantiate(opts, *g.mtp);
  width_ = g.tensor(g.hidden).ne[0];
  target_.set_step_observer([this](int32_t n_past, std::span<const int32_t> tokens, bool speculative, std::span<const float> hidden) {
    on_step(n_past, tokens, speculative, hidden);
  });
}

MtpDrafter::~MtpDrafter() { target_.set_step_observer({}); }

void MtpDrafter::on_step(int32_t n_past, std::span<const int32_t> tokens, bool speculative, std::span<const float> h) {
  const auto w = static_cast<size_t>(width_);
  const auto held = static_cast<int32_t>(rows_.size() / w);
  // Rows from n_past on are replaced; a step past the rows held leaves a gap (read as zeros).
  if (n_past < rows_from_ || n_past > rows_from_ + held) {
    rows_.clear();
    rows_from_ = n_past;
  } else {
    rows_.resize(static_cast<size_t>(n_past - rows_from_) * w);
  }
  if (!tokens.empty()) keep_until(n_past, tokens[0]);
  if (h.size() != tokens.size() * w) throw Error("the model handed out hidden rows that do not match its step");
  rows_.insert(rows_.end(), h.begin(), h.end());
  // A long run of rows (a prompt, or decoding without drafts) is fed now, in steps of many positions,
  // so the rows held stay few. A verifying step's rows wait for the verdict: draft() feeds only the
  // accepted ones.
  if (!speculative && rows_.size() / w >= static_cast<size_t>(kFeedRows)) {
    feed(target_.history(), target_.n_past() - 1);
  }
}

void MtpDrafter::keep_until(int32_t pos, int32_t token) {
  // Position pos - 1 paired the row of token pos - 1 (unchanged) with the token at pos.
  const auto p = static_cast<size_t>(std::max(pos, 0));
  size_t keep = p > 0 ? p - 1 : 0;
  if (p > 0 && fed_.size() >= p && fed_[p - 1] == token) keep = p;
  if (fed_.size() > keep) fed_.resize(keep);
}

void MtpDrafter::feed(std::span<const int32_t> context, int32_t end) {
  const auto w = static_cast<size_t>(width_);
  const auto step_max = head_->options().max_tokens;
  while (done() < end) {
    const int32_t at = done(), n = std::min(end - at, step_max);
    graph::StepParams step;
    step.add(0, at, std::vector<int32_t>(context.begin() + at + 1, context.begin() + at + 1 + n));
    step.inputs.assign(static_cast<size_t>(n) * w, 0.0f);
    for (int32_t i = 0; i < n; ++i) {
      const int32_t r = at + i - rows_from_;
      if (r >= 0 && static_cast<size_t>(r + 1) * w <= rows_.size()) {
        std::copy_n(rows_.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(r) * w), w,
                    step.inputs.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(i) * w));
      }
    }
    head_->run(step);
    fed_.insert(fed_.end(), step.tokens.begin(), step.tokens.end());
  }
  // Rows of positions the head has read are not needed again, but for the last one (draft() reads
  // that position again for its guess).
  const int32_t drop = std::clamp(done() - 1 - rows_from_, 0, static_cast<int32_t>(rows_.size() / w));
  rows_.erase(rows_.begin(), rows_.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(drop) * w));
  rows_from_ += drop;
}

std::vector<int32_t> MtpDrafter::draft(std::span<const int32_t> context, int32_t n) {
  // context: the target's tokens (positions 0..p-1 evaluated) and the next token, at p.
  const auto p = static_cast<int32_t>(context.size()) - 1;
  if (p < 1 || p > target_.n_past()) return {};
  // Position p - 1 pairs the last evaluated token's row with the next token: its guess is token p + 1,
  // so the head's last step is that position's (fed again where the head holds it already).
  if (fed_.size() > static_cast<size_t>(p - 1)) fed_.resize(static_cast<size_t>(p - 1));
  feed(context, p);
  std::vector<int32_t> out{head_->argmax()};
  while (static_cast<int32_t>(out.size()) < n && p + static_cast<int32_t>(out.size()) < head_->options().n_ctx) {
    // The head's own hidden row of its last guess, with that guess, at the next position. These
    // positions are the drafts': the next feed() goes back over them.
    const std::span<const float> h = head_->hidden();
    graph::StepParams step;
    step.add(0, p - 1 + static_cast<int32_t>(out.size()), {out.back()});
    step.inputs.assign(h.end() - width_, h.end());
    head_->run(step);
    out.push_back(head_->argmax());
  }
  return out;
}

namespace {

// An exponentially weighted mean (the first sample taken as it is).
void blend(double& mean, double x, double w = 0.2) { mean = mean == 0 ? x : (1 - w) * mean + w * x; }

}  // namespace

double Drafter::expected_speedup(int32_t k) const {
  if (k <= 0 || t_step_ <= 0) return 1.0;
  // k drafted tokens cost k draft steps and a verifying step k tokens longer than a decode step, and
  // yield expected_tokens_per_step tokens where a decode step yields one.
  return expected_tokens_per_step(accept_, k) * t_step_ / (t_step_ + k * (t_draft_ + t_extra_));
}

int32_t Drafter::planned() const {
  if (mode_ == SpecMode::Off) return 0;
  if (mode_ == SpecMode::On) return max_draft_;
  if (t_step_ <= 0) return 0;                              // a plain step first: what drafting is measured against
  if (t_draft_ <= 0 || t_extra_ <= 0) return max_draft_;  // then a draft, to measure its cost
  int32_t best = 0;
  double best_gain = 1.0;
  for (int32_t k = 1; k <= max_draft_; ++k) {
    if (const double g = expected_speedup(k); g > best_gain * 1.02) {
      best = k;
      best_gain = g;
    }
  }
  return best;
}

std::vector<int32_t> Drafter::propose(std::span<const int32_t> context, int32_t n) {
  int32_t k = planned();
  if (k == 0 && mode_ == SpecMode::Auto && t_step_ > 0 && ++idle_ >= 32) {
    // Not drafting: try a short draft now and then (the text may have become predictable).
    idle_ = 0;
    k = 1;
  }
  n = std::min(n, k);
  if (n < 1 || context.empty()) return {};
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<int32_t> out = draft(context, n);
  if (static_cast<int32_t>(out.size()) > n) out.resize(static_cast<size_t>(n));
  if (!out.empty()) blend(t_draft_, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / static_cast<double>(out.size()));
  return out;
}

void Drafter::accepted(int32_t proposed, int32_t kept) {
  if (proposed <= 0) return;
  ++stats_.rounds;
  stats_.drafted += proposed;
  stats_.accepted += kept;
  // Each drafted token up to the first refused one was a trial: kept / (kept + refused).
  blend(accept_, static_cast<double>(kept) / static_cast<double>(kept + (kept < proposed ? 1 : 0)), 0.1);
}

void Drafter::target_step(int32_t n_tokens, double seconds) {
  if (n_tokens == 1) blend(t_step_, seconds);
  else if (n_tokens > 1 && t_step_ > 0) blend(t_extra_, std::max(seconds - t_step_, 1e-3 * t_step_) / (n_tokens - 1));
}

}  // namespace zinc::runtime
