// The sampler chain: parameter checks, the stage list built once, the per-step run and the history
// that penalties and DRY read. See sampler.h for the contract.
#include "sample/sampler.h"

#include <functional>

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>

#include "core/error.h"
#include "sample/stages.h"
#include "tokenizer/tokenizer.h"

namespace zinc::sample {
namespace {

struct StageName {
  const char* name;
  int stage;  // Sampler::Stage, as int so this table can live outside the class
};

// Canonical names first (those of llama.cpp's --samplers), then aliases.
const StageName kStageNames[] = {
    {"penalties", 0}, {"dry", 1},         {"top_k", 2},     {"typ_p", 3},   {"top_p", 4}, {"min_p", 5},
    {"xtc", 6},       {"temperature", 7}, {"typical_p", 3}, {"typical", 3}, {"temp", 7},
};

[[noreturn]] void out_of_range(const char* name, double value, const char* allowed) {
  throw Error(fmt::format("sampler: {} = {} is out of range: {}", name, value, allowed));
}

bool finite(float x) { return std::isfinite(x); }

[[noreturn]] void throw_nothing_to_draw() {
  throw Error(
      "sampling: no token can be chosen: every candidate's logit is -inf or NaN (a logit bias of -inf on every "
      "remaining token, or a model that produced NaN)");
}

}  // namespace

std::vector<std::string> SamplerParams::default_order() {
  return {"penalties", "dry", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature"};
}

SamplerParams SamplerParams::chat() {
  SamplerParams p;
  p.top_k = 40;
  p.min_p = 0.05f;
  p.temperature = 0.7f;
  p.top_p = 1.0f;
  // Penalties and DRY stay in the order (off by default) so setting their knobs still takes effect.
  p.order = {"penalties", "dry", "top_k", "min_p", "temperature"};
  return p;
}

SamplerParams SamplerParams::greedy() {
  SamplerParams p;
  p.temperature = 0.0f;
  return p;
}

const std::vector<std::string>& SamplerParams::stage_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const StageName& s : kStageNames) v.emplace_back(s.name);
    return v;
  }();
  return names;
}

void SamplerParams::validate() const {
  if (top_k < 0) out_of_range("top_k", top_k, "expected 0 (disabled) or a positive number of tokens");
  if (!(top_p > 0.0f && top_p <= 1.0f)) out_of_range("top_p", top_p, "expected a probability in (0, 1]; 1 disables it");
  if (!(min_p >= 0.0f && min_p <= 1.0f)) out_of_range("min_p", min_p, "expected a fraction in [0, 1]; 0 disables it");
  if (!(typical_p > 0.0f && typical_p <= 1.0f))
    out_of_range("typical_p", typical_p, "expected a probability in (0, 1]; 1 disables it");
  if (!(temperature >= 0.0f && finite(temperature)))
    out_of_range("temperature", temperature, "expected a finite value >= 0; 0 samples greedily");
  if (!(xtc_probability >= 0.0f && xtc_probability <= 1.0f))
    out_of_range("xtc_probability", xtc_probability, "expected a probability in [0, 1]; 0 disables XTC");
  if (!(xtc_threshold >= 0.0f && xtc_threshold <= 1.0f))
    out_of_range("xtc_threshold", xtc_threshold, "expected a probability in [0, 1]; above 0.5 disables XTC");
  if (min_keep < 0) out_of_range("min_keep", min_keep, "expected a number of tokens >= 0");
  if (penalty_last_n < -1)
    out_of_range("penalty_last_n", penalty_last_n, "expected -1 (the context), 0 (disabled) or a number of tokens");
  if (!(repeat_penalty > 0.0f && finite(repeat_penalty)))
    out_of_range("repeat_penalty", repeat_penalty, "expected a finite value > 0; 1 disables it");
  if (!finite(frequency_penalty)) out_of_range("frequency_penalty", frequency_penalty, "expected a finite value");
  if (!finite(presence_penalty)) out_of_range("presence_penalty", presence_penalty, "expected a finite value");
  if (!(dry_multiplier >= 0.0f && finite(dry_multiplier)))
    out_of_range("dry_multiplier", dry_multiplier, "expected a finite value >= 0; 0 disables DRY");
  if (!(dry_base >= 1.0f && finite(dry_base))) out_of_range("dry_base", dry_base, "expected a finite value >= 1");
  if (dry_allowed_length < 1)
    out_of_range("dry_allowed_length", dry_allowed_length, "expected a number of tokens >= 1");
  if (dry_penalty_last_n < -1)
    out_of_range("dry_penalty_last_n", dry_penalty_last_n,
                 "expected -1 (the context), 0 (disabled) or a number of tokens");
  if (n_ctx < 1) out_of_range("n_ctx", n_ctx, "expected a context length >= 1");
  for (const auto& [id, bias] : logit_bias) {
    if (id < 0) throw Error(fmt::format("sampler: logit_bias names token {}: expected a token id >= 0", id));
    if (std::isnan(bias) || bias == INFINITY)
      throw Error(
          fmt::format("sampler: logit_bias for token {} is {}: expected a finite value or -inf (ban)", id, bias));
  }
  for (const auto& seq : dry_breaker_tokens) {
    for (const int32_t id : seq) {
      if (id < 0) throw Error(fmt::format("sampler: dry_breaker_tokens holds token {}: expected token ids >= 0", id));
    }
  }
  for (const std::string& name : order) {
    const bool known =
        std::any_of(std::begin(kStageNames), std::end(kStageNames), [&](const StageName& s) { return name == s.name; });
    if (!known) {
      std::string names;
      for (const std::string& n : default_order()) names += (names.empty() ? "" : ", ") + n;
      throw Error(fmt::format("sampler: unknown stage \"{}\" in the order: expected one of {}", name, names));
    }
  }
}

Sampler::Sampler(SamplerParams params, const tokenizer::Tokenizer* tokenizer) : params_(std::move(params)) {
  if (tokenizer != nullptr) {
    const TokenTexts texts = token_texts(*tokenizer);
    init(&texts);
  } else {
    init(nullptr);
  }
}

Sampler::Sampler(SamplerParams params, const TokenTexts& texts) : params_(std::move(params)) { init(&texts); }

void Sampler::init(const TokenTexts* texts) {
  params_.validate();
  const SamplerParams& p = params_;

  // Logit bias: merge repeated ids (their biases add up, as applying each entry would).
  std::vector<std::pair<int32_t, float>> bias = p.logit_bias;
  std::sort(bias.begin(), bias.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [id, b] : bias) {
    if (!bias_ids_.empty() && bias_ids_.back() == id) {
      bias_values_.back() += b;
    } else {
      bias_ids_.push_back(id);
      bias_values_.push_back(b);
    }
  }
  if (texts != nullptr && texts->n_vocab > 0) check_bias_ids(static_cast<size_t>(texts->n_vocab));

  const auto window_of = [&](int32_t last_n) { return last_n == -1 ? p.n_ctx : last_n; };
  const bool penalties_on =
      p.penalty_last_n != 0 && (p.repeat_penalty != 1.0f || p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f);
  const bool dry_on = p.dry_multiplier != 0.0f && p.dry_penalty_last_n != 0;
  for (const std::string& name : p.order) {
    const auto* entry = std::find_if(std::begin(kStageNames), std::end(kStageNames),
                                     [&](const StageName& s) { return name == s.name; });
    const auto s = static_cast<Stage>(entry->stage);
    bool on = true;
    switch (s) {
      case Stage::Penalties:
        on = penalties_on;
        break;
      case Stage::Dry:
        on = dry_on;
        break;
      case Stage::TopK:
        on = p.top_k > 0;
        break;
      case Stage::TypicalP:
        on = p.typical_p < 1.0f;
        break;
      case Stage::TopP:
        on = p.top_p < 1.0f;
        break;
      case Stage::MinP:
        on = p.min_p > 0.0f;
        break;
      case Stage::Xtc:
        on = p.xtc_probability > 0.0f && p.xtc_threshold <= 0.5f;
        break;
      case Stage::Temperature:
        on = true;
        break;
    }
    if (on) stages_.push_back(s);
  }
  if (std::find(stages_.begin(), stages_.end(), Stage::Penalties) != stages_.end())
    penalty_window_ = window_of(p.penalty_last_n);
  if (std::find(stages_.begin(), stages_.end(), Stage::Dry) != stages_.end()) {
    dry_window_ = window_of(p.dry_penalty_last_n);
    DryBreakers breakers;
    if (!p.dry_sequence_breakers.empty()) {
      if (texts == nullptr) {
        throw Error(
            "sampler: DRY's sequence breakers are strings and need the vocabulary: build the Sampler with the "
            "tokenizer, or give the breakers as token ids (dry_breaker_tokens) and clear dry_sequence_breakers");
      }
      breakers = DryBreakers::from_strings(p.dry_sequence_breakers, *texts);
    }
    for (const auto& seq : p.dry_breaker_tokens) breakers.add(seq);
    dry_ = Dry(DryParams{p.dry_multiplier, p.dry_base, p.dry_allowed_length}, std::move(breakers));
  }
  history_keep_ = static_cast<size_t>(std::max(penalty_window_, dry_window_));

  // Greedy fast path: temperature 0 reached through sparse stages, then only stages that always keep
  // the best token (top-k, top-p, min-p).
  if (p.temperature == 0.0f) {
    const auto temp = std::find(stages_.begin(), stages_.end(), Stage::Temperature);
    if (temp != stages_.end()) {
      const auto sparse = [](Stage s) { return s == Stage::Penalties || s == Stage::Dry; };
      const auto first_cut = std::find_if_not(stages_.begin(), temp, sparse);
      greedy_ = std::all_of(first_cut, temp,
                            [](Stage s) { return s == Stage::TopK || s == Stage::TopP || s == Stage::MinP; });
      greedy_prefix_ = static_cast<size_t>(first_cut - stages_.begin());
    }
  }

  seed_ = p.seed;
  if (seed_ == SamplerParams::kRandomSeed) {
    std::random_device rd;
    seed_ = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }
  reset();
}

void Sampler::reset() {
  history_.clear();
  draw_rng_.seed(seed_);
  xtc_rng_.seed(seed_ + 0x9E3779B97F4A7C15ull);
}

void Sampler::accept(int32_t token) {
  if (token < 0) throw Error(fmt::format("sampler: accept() got token {}: expected a token id >= 0", token));
  if (history_keep_ == 0) return;
  history_.push_back(token);
  // Trim in bulk so the window stays one contiguous span at O(1) amortized cost.
  if (history_.size() >= 2 * history_keep_) {
    history_.erase(history_.begin(), history_.end() - static_cast<std::ptrdiff_t>(history_keep_));
  }
}

std::span<const int32_t> Sampler::window(int32_t last_n) const {
  const size_t n = std::min(history_.size(), static_cast<size_t>(last_n));
  return std::span<const int32_t>(history_).last(n);
}

std::vector<std::string> Sampler::chain() const {
  std::vector<std::string> out;
  if (!bias_ids_.empty()) out.emplace_back("logit_bias");
  for (const Stage s : stages_) out.emplace_back(kStageNames[static_cast<int>(s)].name);
  return out;
}

void Sampler::check_bias_ids(size_t n_vocab) {
  if (bias_checked_for_ == n_vocab) return;
  if (!bias_ids_.empty() && static_cast<size_t>(bias_ids_.back()) >= n_vocab) {
    throw Error(fmt::format("sampler: logit_bias names token {}, outside the vocabulary of {} tokens", bias_ids_.back(),
                            n_vocab));
  }
  bias_checked_for_ = n_vocab;
}

void Sampler::apply_sparse(Stage s) {
  const auto n_vocab = cands_.n_vocab();
  if (s == Stage::Penalties) {
    // Count each token of the window once, through a token -> slot map reset after use.
    const std::span<const int32_t> w = window(penalty_window_);
    if (w.empty()) return;
    if (pen_slot_.size() < static_cast<size_t>(n_vocab)) pen_slot_.resize(static_cast<size_t>(n_vocab), -1);
    pen_ids_.clear();
    pen_counts_.clear();
    for (const int32_t t : w) {
      if (t >= n_vocab) continue;  // accepted from a larger vocabulary: cannot be a candidate
      int32_t& slot = pen_slot_[static_cast<size_t>(t)];
      if (slot < 0) {
        slot = static_cast<int32_t>(pen_ids_.size());
        pen_ids_.push_back(t);
        pen_counts_.push_back(0);
      }
      ++pen_counts_[static_cast<size_t>(slot)];
    }
    for (const int32_t t : pen_ids_) pen_slot_[static_cast<size_t>(t)] = -1;
    stage::penalties(cands_, pen_ids_, pen_counts_, params_.repeat_penalty, params_.frequency_penalty,
                     params_.presence_penalty);
  } else if (s == Stage::Dry) {
    dry_.apply(cands_, window(dry_window_));
  }
}

void Sampler::run_chain(std::span<const float> logits, bool greedy, const std::span<const int32_t>* subset) {
  if (logits.empty() || logits.size() > static_cast<size_t>(INT32_MAX)) {
    throw Error(fmt::format("sampler: a logits row of {} values: expected 1 to 2^31-1", logits.size()));
  }
  check_bias_ids(logits.size());
  cands_.start(logits);
  if (subset) {
    if (subset->empty()) throw_nothing_to_draw();
    cands_.restrict_to(*subset);
  }
  stage::logit_bias(cands_, bias_ids_, bias_values_);
  if (greedy) {
    for (size_t i = 0; i < greedy_prefix_; ++i) apply_sparse(stages_[i]);
    cands_.keep_best();
    return;
  }
  for (const Stage s : stages_) apply_stage(s);
}

void Sampler::apply_stage(Stage s) {
  const auto min_keep = static_cast<size_t>(params_.min_keep);
  switch (s) {
    case Stage::Penalties:
    case Stage::Dry:
      apply_sparse(s);
      break;
    case Stage::TopK:
      stage::top_k(cands_, params_.top_k);
      break;
    case Stage::TypicalP:
      stage::typical(cands_, params_.typical_p, min_keep);
      break;
    case Stage::TopP:
      stage::top_p(cands_, params_.top_p, min_keep);
      break;
    case Stage::MinP:
      stage::min_p(cands_, params_.min_p, min_keep);
      break;
    case Stage::Xtc:
      stage::xtc(cands_, params_.xtc_probability, params_.xtc_threshold, min_keep, xtc_rng_);
      break;
    case Stage::Temperature:
      stage::temperature(cands_, params_.temperature);
      break;
  }
}

size_t Sampler::first_cut(size_t& k) const {
  size_t cut = 0;
  while (cut < stages_.size() && (stages_[cut] == Stage::Penalties || stages_[cut] == Stage::Dry)) ++cut;
  k = 0;
  if (greedy_) {
    k = 1;
    return greedy_prefix_;
  }
  if (cut < stages_.size() && stages_[cut] == Stage::TopK) k = static_cast<size_t>(params_.top_k);
  return cut;
}

void Sampler::start_until(std::span<const float> logits, size_t cut) {
  if (logits.empty() || logits.size() > static_cast<size_t>(INT32_MAX)) {
    throw Error(fmt::format("sampler: a logits row of {} values: expected 1 to 2^31-1", logits.size()));
  }
  check_bias_ids(logits.size());
  cands_.start(logits);
  stage::logit_bias(cands_, bias_ids_, bias_values_);
  for (size_t i = 0; i < cut; ++i) apply_sparse(stages_[i]);
}

int32_t Sampler::sample_masked(std::span<const float> logits, std::span<const uint64_t> allowed) {
  if (allowed.size() * 64 < logits.size()) {  // a row longer than the vocabulary (padded): the rest refused
    padded_mask_.assign((logits.size() + 63) / 64, 0);
    std::copy(allowed.begin(), allowed.end(), padded_mask_.begin());
    allowed = padded_mask_;
  }
  size_t k = 0;
  const size_t cut = first_cut(k);
  if (k == 0) {  // another first cut: the chain over the allowed tokens
    std::vector<int32_t>& ids = allowed_ids_;
    ids.clear();
    for (size_t w = 0; w < allowed.size(); ++w) {
      for (uint64_t b = allowed[w]; b != 0; b &= b - 1) {
        const size_t t = w * 64 + static_cast<size_t>(std::countr_zero(b));
        if (t < logits.size()) ids.push_back(static_cast<int32_t>(t));
      }
    }
    return ids.empty() ? -1 : sample_among(logits, ids);
  }
  start_until(logits, cut);
  cands_.keep_top_k(k, allowed.data());
  if (cands_.list().empty()) return -1;
  if (greedy_) return pick();
  for (size_t i = cut + 1; i < stages_.size(); ++i) apply_stage(stages_[i]);
  return stage::draw(cands_, draw_rng_);
}

int32_t Sampler::sample_allowed(std::span<const float> logits, const std::function<bool(int32_t)>& allowed, size_t scan) {
  // The chain's first cut: the best token (greedy) or top-k. Anything else needs the whole mask.
  size_t k = 0;
  const size_t first_cut = this->first_cut(k);
  if (k == 0) return -1;
  start_until(logits, first_cut);
  cands_.keep_top_k(k + scan);
  cands_.sort_prefix(k + scan);  // a vocabulary no larger than k + scan is left whole, in id order
  // The allowed ones among them, in rank order: when k are there, they are the masked row's top k.
  std::vector<TokenProb>& list = cands_.list();
  size_t kept = 0;
  for (const TokenProb& c : list) {
    if (c.logit != -INFINITY && allowed(c.id)) list[kept++] = c;
  }
  if (kept < k) return -1;
  list.resize(k);
  cands_.set_sorted_prefix(k);
  if (greedy_) return list[0].id;
  for (size_t i = first_cut + 1; i < stages_.size(); ++i) apply_stage(stages_[i]);
  return stage::draw(cands_, draw_rng_);
}

int32_t Sampler::sample_among(std::span<const float> logits, std::span<const int32_t> ids) {
  run_chain(logits, greedy_, &ids);
  return pick();
}

int32_t Sampler::sample(std::span<const float> logits) {
  run_chain(logits, greedy_);
  return pick();
}

int32_t Sampler::pick() {
  if (greedy_) {
    const std::vector<TokenProb>& best = cands_.list();
    if (best.empty() || best[0].logit == -INFINITY) throw_nothing_to_draw();
    return best[0].id;
  }
  return stage::draw(cands_, draw_rng_);
}

std::span<const TokenProb> Sampler::distribution(std::span<const float> logits) {
  run_chain(logits, greedy_);
  if (cands_.size() == 0 || cands_.max_logit() == -INFINITY) throw_nothing_to_draw();
  cands_.softmax();
  const std::span<TokenProb> by_id = cands_.by_id();
  out_.assign(by_id.begin(), by_id.end());
  return out_;
}

}  // namespace zinc::sample
