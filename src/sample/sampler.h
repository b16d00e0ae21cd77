// The sampler chain: logits of one step in, one token id out.
//
//   Sampler sampler(SamplerParams::chat(), &tokenizer);   // tokenizer: only DRY's breakers need it
//   int32_t id = sampler.sample(session.eval(tokens));
//   sampler.accept(id);                                     // feeds penalties and DRY
//
// Stages run in `order` (llama.cpp's common sampler: penalties, dry, top_k, typ_p, top_p, min_p, xtc,
// temperature), after the logit bias, then one seeded draw (stages.h: stage::draw says exactly how
// u becomes a token). The knobs and their defaults are llama.cpp's (common_params_sampling); a stage
// whose knob says "disabled" is dropped from the chain when the sampler is built.
//
// Greedy: with temperature 0 the chain's answer is the argmax of the logits after bias, penalties and
// DRY whenever no active typical-p or XTC comes before the temperature and no sparse stage follows a
// truncating one — then sample() is one argmax pass, no list, no sort (is_greedy()).
//
// Reproducibility: the draw and XTC each own a std::mt19937_64, seeded with `seed` and `seed +
// 0x9E3779B97F4A7C15` (so the two streams differ). Same seed, same logits, same accepted tokens:
// same tokens out. Across C libraries only expf may differ (by an ulp), which moves a draw only when
// u lands that close to a boundary. reset() restarts both streams from the same seed.
//
// Differences from llama.cpp, on purpose: the draw walks the candidates in ascending token id (there:
// in whatever order the stages left them — the same distribution, but here the token drawn for a given
// u does not depend on which internal path selected the candidates), and the random numbers are
// mt19937_64 + 53-bit uniforms, so a seed does not reproduce llama.cpp's tokens. Not implemented:
// top-n-sigma, mirostat, dynamic temperature. Grammars (grammar_matcher.h) restrict the candidates
// through sample_allowed() and sample_among(): the chain then runs over the allowed tokens only, where
// llama.cpp samples first and masks the whole row only when its choice is refused.
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "sample/candidates.h"
#include "sample/dry.h"

namespace zinc::tokenizer {
class Tokenizer;
}

namespace zinc::sample {

struct SamplerParams {
  // A seed of kRandomSeed picks one from std::random_device (Sampler::seed() tells which).
  static constexpr uint64_t kRandomSeed = ~uint64_t{0};

  int32_t top_k = 40;            // keep the k best; 0: disabled
  float top_p = 0.95f;           // nucleus mass, (0, 1]; 1: disabled
  float min_p = 0.05f;           // fraction of the top probability, [0, 1]; 0: disabled
  float typical_p = 1.0f;        // locally typical mass, (0, 1]; 1: disabled
  float temperature = 0.8f;      // >= 0; 0: greedy
  float xtc_probability = 0.0f;  // chance XTC acts in a step, [0, 1]; 0: disabled
  float xtc_threshold = 0.1f;    // [0, 1]; above 0.5: disabled
  int32_t min_keep = 0;          // top_p, min_p, typical_p and XTC keep at least this many

  int32_t penalty_last_n = 64;     // window of previous tokens; 0: disabled, -1: n_ctx
  float repeat_penalty = 1.0f;     // > 0; 1: disabled
  float frequency_penalty = 0.0f;  // per occurrence in the window; 0: disabled
  float presence_penalty = 0.0f;   // once if present in the window; 0: disabled

  float dry_multiplier = 0.0f;      // >= 0; 0: disabled
  float dry_base = 1.75f;           // >= 1
  int32_t dry_allowed_length = 2;   // >= 1
  int32_t dry_penalty_last_n = -1;  // 0: disabled, -1: n_ctx
  std::vector<std::string> dry_sequence_breakers = {"\n", ":", "\"", "*"};
  std::vector<std::vector<int32_t>> dry_breaker_tokens;  // more breakers, already as token ids

  std::vector<std::pair<int32_t, float>> logit_bias;  // (token, added to its logit); -inf bans it

  std::vector<std::string> order = default_order();
  int32_t n_ctx = 4096;  // what a window of -1 means: the session's context length
  uint64_t seed = kRandomSeed;

  // llama.cpp's common sampler order.
  static std::vector<std::string> default_order();
  // ZINC's recommendation for chat: top_k 40, then min_p 0.05, then temperature 0.7 (min-p before
  // temperature, so the cut does not move with the temperature). Penalties and DRY keep their place
  // at the front, off unless their knobs are set; top-p, typical-p and XTC are not in the order.
  static SamplerParams chat();
  // Temperature 0: always the most likely token (after bias and penalties).
  static SamplerParams greedy();
  // Every stage name `order` accepts ("typical_p"/"typical" and "temp" are accepted as aliases).
  static const std::vector<std::string>& stage_names();

  // Throws zinc::Error naming the first parameter out of range and the range it must be in.
  void validate() const;
};

class Sampler {
 public:
  // `tokenizer` (kept only for the constructor) gives DRY's breaker strings their token sequences and
  // checks logit-bias ids; it may be null when DRY is disabled or has no string breakers.
  explicit Sampler(SamplerParams params, const tokenizer::Tokenizer* tokenizer = nullptr);
  Sampler(SamplerParams params, const TokenTexts& texts);

  // One token from a row of logits (n_vocab floats). Does not accept it: call accept() with the token
  // actually appended (penalties and DRY look at accepted tokens only). Throws zinc::Error when a
  // logit-bias id is outside the row or no token can be drawn.
  int32_t sample(std::span<const float> logits);
  // sample() over the row with every token `allowed` refuses removed (a grammar's mask), decided from
  // the k + scan best tokens alone when the chain's first cut is top-k (or greedy): if k of them are
  // allowed they are the masked row's top k, so the answer is exact. Returns -1 when that cannot
  // decide (another chain, or fewer allowed): then mask the row and call sample().
  int32_t sample_allowed(std::span<const float> logits, const std::function<bool(int32_t)>& allowed, size_t scan = 64);

  // sample() over the row with every token but `ids` (distinct ids) at -inf: the same token, without
  // writing that row. Throws zinc::Error when ids is empty.
  int32_t sample_among(std::span<const float> logits, std::span<const int32_t> ids);
  // The same over the tokens whose bit is set in `allowed` (bit t % 64 of word t / 64; a grammar's
  // whole mask): when the chain's first cut is top-k (or greedy) that cut is one pass over the row that
  // skips refused tokens, with no list of the allowed ones. -1 when the row has no allowed token.
  int32_t sample_masked(std::span<const float> logits, std::span<const uint64_t> allowed);
  // The chain without the draw: the surviving tokens in ascending id order with their final
  // probabilities (summing to 1). Advances XTC's random stream like sample() does.
  std::span<const TokenProb> distribution(std::span<const float> logits);

  // Appends a token to the history that penalties and DRY see (prompt tokens may be accepted too).
  void accept(int32_t token);
  // Forgets the history and restarts the random streams from seed().
  void reset();

  uint64_t seed() const { return seed_; }
  const SamplerParams& params() const { return params_; }
  bool is_greedy() const { return greedy_; }
  // False when the choice is the largest logit whatever came before (greedy, with no logit bias,
  // penalties or DRY): the caller may then take the backend's argmax and never read the logits.
  bool needs_logits() const { return !greedy_ || greedy_prefix_ > 0 || !params_.logit_bias.empty(); }
  // Names of the stages that run, in order (disabled ones are left out; "logit_bias" first if set).
  std::vector<std::string> chain() const;

 private:
  enum class Stage { Penalties, Dry, TopK, TypicalP, TopP, MinP, Xtc, Temperature };

  void init(const TokenTexts* texts);
  void run_chain(std::span<const float> logits, bool greedy, const std::span<const int32_t>* subset = nullptr);
  void apply_sparse(Stage s);
  void apply_stage(Stage s);
  int32_t pick();  // after the chain: the best candidate (greedy) or the seeded draw
  // The index in stages_ of the chain's first cut, with k its top-k (1 when greedy; 0 when the first
  // cut is not top-k), and the step started up to it (bias and the sparse stages before it).
  size_t first_cut(size_t& k) const;
  void start_until(std::span<const float> logits, size_t cut);
  void check_bias_ids(size_t n_vocab);
  std::span<const int32_t> window(int32_t last_n) const;

  SamplerParams params_;
  uint64_t seed_ = 0;
  std::vector<Stage> stages_;
  size_t greedy_prefix_ = 0;  // stages_ before the first truncating stage (all sparse)
  bool greedy_ = false;
  std::vector<int32_t> bias_ids_;
  std::vector<float> bias_values_;
  size_t bias_checked_for_ = 0;  // n_vocab the bias ids were last checked against
  Dry dry_;
  int32_t penalty_window_ = 0;
  int32_t dry_window_ = 0;
  size_t history_keep_ = 0;
  std::vector<int32_t> history_;  // accepted tokens, oldest first (trimmed to 2 * history_keep_)
  std::vector<int32_t> pen_ids_, pen_counts_;
  std::vector<int32_t> pen_slot_;  // token -> index in pen_ids_, grown on demand, all -1 between uses
  Candidates cands_;
  std::vector<TokenProb> out_;
  std::vector<int32_t> allowed_ids_;  // sample_masked's ids when the chain needs them listed
  std::vector<uint64_t> padded_mask_;  // sample_masked's mask when shorter than the row
  std::mt19937_64 draw_rng_, xtc_rng_;
};

}  // namespace zinc::sample
