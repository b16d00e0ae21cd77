// Speculative decoding with a draft model: a smaller model of the same vocabulary proposes the next
// few tokens greedily, the target model evaluates them all in one step (Session::eval_speculative), and
// the generation keeps those the target itself chooses. Each token is still chosen from the target's
// own logits by the same sampler, so the output is the one generation without a draft gives (for a
// greedy draft this is the speculative-sampling rule: a drafted token d is kept with probability p(d),
// and a refused one is replaced by a draw from p without d).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "runtime/session.h"
#include "tokenizer/tokenizer.h"

namespace zinc::runtime {

enum class SpecMode { Off, On, Auto };
// "off", "on", "auto"; throws zinc::Error for another word.
SpecMode parse_spec_mode(const std::string& s);

struct SpecStats {
  int64_t rounds = 0;    // speculative steps taken
  int64_t drafted = 0;   // tokens proposed
  int64_t accepted = 0;  // of which the target chose
  double acceptance() const { return drafted > 0 ? static_cast<double>(accepted) / static_cast<double>(drafted) : 0.0; }
};

// What proposes drafted tokens, and the policy of how many: On drafts the most every time; Auto drafts
// the number that maximises the expected speed-up at the acceptance and step times measured so far,
// none where drafting does not pay (trying again now and then). A draft model is one source
// (ModelDrafter); a model's own multi-token-prediction head is another.
class Drafter {
 public:
  Drafter(int32_t max_draft, SpecMode mode);
  virtual ~Drafter() = default;

  // Up to n tokens likely to follow `context` (the target's tokens so far, ending with the token about
  // to be evaluated); fewer, or none, where Auto mode decides so.
  std::vector<int32_t> propose(std::span<const int32_t> context, int32_t n);
  // How many of the tokens last proposed the target chose.
  void accepted(int32_t proposed, int32_t kept);
  // A step of the target model took `seconds` for n_tokens tokens (1: a plain decode step; more: a
  // verifying step): Auto mode's measure of what verifying costs.
  void target_step(int32_t n_tokens, double seconds);

  int32_t max_draft() const { return max_draft_; }
  SpecMode mode() const { return mode_; }
  const SpecStats& stats() const { return stats_; }
  // The tokens Auto mode would draft now (0: none), and the speed-up it expects from k of them.
  int32_t planned() const;
  double expected_speedup(int32_t k) const;

 protected:
  // n >= 1 tokens after `context`, the source's best guesses.
  virtual std::vector<int32_t> draft(std::span<const int32_t> context, int32_t n) = 0;

 private:
  int32_t max_draft_;
  SpecMode mode_;
  SpecStats stats_;
  // Measured, exponentially weighted (0: not yet): the acceptance per drafted token, seconds of a
  // target decode step, of each extra token a verifying step carries, and per drafted token.
  double accept_ = 0.7;
  double t_step_ = 0, t_extra_ = 0, t_draft_ = 0;
  int32_t idle_ = 0;  // tokens decoded without drafting since Auto mode stopped
};

// Drafts from a smaller model of the same vocabulary: its greedy choices, in a session of its own.
class ModelDrafter final : public Drafter {
 public:
  // `draft` must outlive the drafter and be able to go back (a transformer without recurrent state).
  // Throws zinc::Error otherwise.
  ModelDrafter(Session& draft, int32_t max_draft, SpecMode mode = SpecMode::On);
  // Throws zinc::Error unless the draft's vocabulary has the target's size and its context is as long.
  void check_target(const Session& target) const;

 protected:
  std::vector<int32_t> draft(std::span<const int32_t> context, int32_t n) override;

 private:
  Session& draft_;
};

// Drafts with the model's own multi-token-prediction head (graph::Graph::mtp, Qwen3.5/3.6's MTP
// layer): the head reads the target's hidden state of token t and the embedding of token t+1 and
// guesses token t+2; further guesses read the head's own hidden state. It runs in a context of its
// own over the target's weights, with a cache of its own: every position of the target's context is
// fed to it (the target's hidden rows, watched step by step), so that its attention sees the whole
// text as the target does. Rows wait until drafting needs them (a plain step costs the head nothing)
// and go through in steps of many positions. A position whose row it never saw (a prefix taken from a
// cache, a context restored whole) reads zeros: its drafts may be worse there, the output never is.
class MtpDrafter final : public Drafter {
 public:
  // `target` must outlive the drafter and have a model with a multi-token-prediction head (throws
  // zinc::Error otherwise); a batched one's scheduler passes committed() each part's first token.
  MtpDrafter(Session& target, int32_t max_draft, SpecMode mode = SpecMode::On);
  ~MtpDrafter() override;
  MtpDrafter(const MtpDrafter&) = delete;
  MtpDrafter& operator=(const MtpDrafter&) = delete;

 protected:
  std::vector<int32_t> draft(std::span<const int32_t> context, int32_t n) override;

 private:
  static constexpr int32_t kFeedRows = 64;  // rows that wait at most (outside drafting)

  void on_step(int32_t n_past, std::span<const int32_t> tokens, bool speculative, std::span<const float> hidden);
  // The target's context holds `token` at position `pos` and what was there from pos on is gone: the
  // head forgets the positions that paired a row or a token no longer there.
  void keep_until(int32_t pos, int32_t token);
  int32_t done() const { return static_cast<int32_t>(fed_.size()); }
  // Feeds the head positions [done(), end): the target's hidden row of each with the token after it
  // (context[i + 1]); a position whose row was never seen (a prefix another context computed) reads
  // zeros. Leaves the last position's guess in the head's logits.
  void feed(std::span<const int32_t> context, int32_t end);

  Session& target_;
  std::unique_ptr<backend::Executable> head_;
  int64_t width_;  // of a hidden row
  // The head's cache holds positions [0, fed_.size()) of the target's context: position i paired the
  // target's row of token i with token i + 1 (fed_[i]).
  std::vector<int32_t> fed_;
  // The target's hidden rows the head has not read yet: positions [rows_from_, rows_from_ + rows).
  int32_t rows_from_ = 0;
  std::vector<float> rows_;
};

// Throws zinc::Error unless the draft model's tokenizer has the target's tokens, id for id (`name`: the
// draft's, for the message).
void check_draft_vocab(const tokenizer::Tokenizer& target, const tokenizer::Tokenizer& draft, const std::string& name);

// The expected tokens per target step when each drafted token is accepted with probability a and k
// are drafted: 1 + a + a^2 + ... + a^k.
double expected_tokens_per_step(double a, int32_t k);

}  // namespace zinc::runtime
