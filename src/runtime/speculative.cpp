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
