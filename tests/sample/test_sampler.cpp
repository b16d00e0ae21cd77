// The whole chain: parameter checks, stage order and presets, distributions worked out by hand for
// the default and chat chains, penalties and DRY through accept(), seeds, the greedy fast path, and
// full-vocabulary runs against a plain full-sort reference chain written here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "sample/sampler.h"

namespace zinc::sample {
namespace {

std::vector<float> ln(const std::vector<double>& probs) {
  std::vector<float> out;
  for (const double p : probs) out.push_back(static_cast<float>(std::log(p)));
  return out;
}

// A token's exact probability and how far the sampler's float arithmetic may move it. The sampler
// divides each kept logit by t (x = logit / t, one rounding), subtracts the largest x (m; one more),
// takes exp in float (within one ulp, 2u) and multiplies by the float reciprocal of the double sum
// (two roundings). So exp's argument is off by at most e = u·(|x| + |m| + |x − m|) + 2u relative to
// the result, the sum by at most the largest e (it is a weighted mean of the terms' errors), and
//   |Δp| <= p·(e + max e + 2u), u = 2^-24 (first order; 1% more for the rest).
struct Want {
  double p, bound;
};
using Dist = std::map<int32_t, Want>;

// The distribution softmax(x) over the ids of x (id -> logit / t), with the bounds above.
Dist softmax_with_bounds(const std::map<int32_t, double>& x) {
  const double u = std::ldexp(1.0, -24);
  double m = -INFINITY, sum = 0, e_max = 0;
  for (const auto& [id, v] : x) m = std::max(m, v);
  std::map<int32_t, double> e;
  for (const auto& [id, v] : x) {
    sum += std::exp(v - m);
    e[id] = std::isfinite(v) ? u * (std::fabs(v) + std::fabs(m) + std::fabs(v - m)) + 2 * u : 0.0;
    e_max = std::max(e_max, e[id]);
  }
  Dist out;
  for (const auto& [id, v] : x) {
    const double p = std::exp(v - m) / sum;
    out[id] = {p, 1.01 * p * (e[id] + e_max + 2 * u)};
  }
  return out;
}

// softmax(logits / t) restricted to `keep`, by id.
Dist expected(const std::vector<float>& logits, const std::vector<int32_t>& keep, double t = 1.0) {
  std::map<int32_t, double> x;
  for (const int32_t id : keep) x[id] = logits[static_cast<size_t>(id)] / t;
  return softmax_with_bounds(x);
}

void expect_distribution(std::span<const TokenProb> got, const Dist& want) {
  ASSERT_EQ(got.size(), want.size());
  size_t i = 0;
  for (const auto& [id, w] : want) {
    EXPECT_EQ(got[i].id, id);
    EXPECT_NEAR(got[i].p, w.p, w.bound) << "token " << id;
    ++i;
  }
}

SamplerParams seeded(SamplerParams p = {}, uint64_t seed = 1) {
  p.seed = seed;
  return p;
}

std::vector<float> random_logits(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

// ---- parameters -------------------------------------------------------------------------------

TEST(SamplerParams, DefaultsAreLlamaCppsCommonSampler) {
  const SamplerParams p;
  EXPECT_EQ(p.top_k, 40);
  EXPECT_FLOAT_EQ(p.top_p, 0.95f);
  EXPECT_FLOAT_EQ(p.min_p, 0.05f);
  EXPECT_FLOAT_EQ(p.typical_p, 1.0f);
  EXPECT_FLOAT_EQ(p.temperature, 0.8f);
  EXPECT_FLOAT_EQ(p.xtc_probability, 0.0f);
  EXPECT_FLOAT_EQ(p.xtc_threshold, 0.1f);
  EXPECT_EQ(p.penalty_last_n, 64);
  EXPECT_FLOAT_EQ(p.repeat_penalty, 1.0f);
  EXPECT_FLOAT_EQ(p.dry_multiplier, 0.0f);
  EXPECT_FLOAT_EQ(p.dry_base, 1.75f);
  EXPECT_EQ(p.dry_allowed_length, 2);
  EXPECT_EQ(p.dry_penalty_last_n, -1);
  EXPECT_EQ(p.dry_sequence_breakers, (std::vector<std::string>{"\n", ":", "\"", "*"}));
  EXPECT_EQ(p.order,
            (std::vector<std::string>{"penalties", "dry", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature"}));
}

TEST(SamplerParams, InvalidValuesNameTheParameterAndItsRange) {
  const std::vector<std::pair<std::string, std::function<void(SamplerParams&)>>> cases = {
      {"top_k", [](SamplerParams& p) { p.top_k = -1; }},
      {"top_p", [](SamplerParams& p) { p.top_p = 0.0f; }},
      {"top_p", [](SamplerParams& p) { p.top_p = 1.5f; }},
      {"min_p", [](SamplerParams& p) { p.min_p = -0.1f; }},
      {"min_p", [](SamplerParams& p) { p.min_p = 1.1f; }},
      {"typical_p", [](SamplerParams& p) { p.typical_p = 0.0f; }},
      {"temperature", [](SamplerParams& p) { p.temperature = -0.5f; }},
      {"temperature", [](SamplerParams& p) { p.temperature = NAN; }},
      {"xtc_probability", [](SamplerParams& p) { p.xtc_probability = 1.5f; }},
      {"xtc_threshold", [](SamplerParams& p) { p.xtc_threshold = -0.1f; }},
      {"min_keep", [](SamplerParams& p) { p.min_keep = -1; }},
      {"penalty_last_n", [](SamplerParams& p) { p.penalty_last_n = -2; }},
      {"repeat_penalty", [](SamplerParams& p) { p.repeat_penalty = 0.0f; }},
      {"frequency_penalty", [](SamplerParams& p) { p.frequency_penalty = NAN; }},
      {"presence_penalty", [](SamplerParams& p) { p.presence_penalty = INFINITY; }},
      {"dry_multiplier", [](SamplerParams& p) { p.dry_multiplier = -1.0f; }},
      {"dry_base", [](SamplerParams& p) { p.dry_base = 0.5f; }},
      {"dry_allowed_length", [](SamplerParams& p) { p.dry_allowed_length = 0; }},
      {"dry_penalty_last_n", [](SamplerParams& p) { p.dry_penalty_last_n = -2; }},
      {"n_ctx", [](SamplerParams& p) { p.n_ctx = 0; }},
      {"logit_bias",
       [](SamplerParams& p) {
         p.logit_bias = {{-1, 1.0f}};
       }},
      {"logit_bias",
       [](SamplerParams& p) {
         p.logit_bias = {{3, NAN}};
       }},
      {"logit_bias",
       [](SamplerParams& p) {
         p.logit_bias = {{3, INFINITY}};
       }},
      {"nucleus",
       [](SamplerParams& p) {
         p.order = {"top_k", "nucleus"};
       }},
  };
  for (const auto& [name, mutate] : cases) {
    SamplerParams p = seeded();
    mutate(p);
    try {
      Sampler s(p);
      ADD_FAILURE() << name << ": accepted";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(name), std::string::npos) << msg;
      EXPECT_NE(msg.find("expected"), std::string::npos) << msg;
    }
  }
}

TEST(SamplerParams, EdgeValuesAreAccepted) {
  SamplerParams p = seeded();
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.temperature = 0.0f;
  p.xtc_threshold = 1.0f;
  p.logit_bias = {{0, -INFINITY}};
  EXPECT_NO_THROW(Sampler{p});
}

// ---- chain and presets ------------------------------------------------------------------------

TEST(Sampler, ChatPresetTakesPenaltiesWhenAsked) {
  SamplerParams p = seeded(SamplerParams::chat());
  p.repeat_penalty = 1.1f;
  EXPECT_EQ(Sampler(p).chain(), (std::vector<std::string>{"penalties", "top_k", "min_p", "temperature"}));
}

TEST(Sampler, DisabledStagesAreLeftOut) {
  EXPECT_EQ(Sampler(seeded()).chain(), (std::vector<std::string>{"top_k", "top_p", "min_p", "temperature"}));
  EXPECT_EQ(Sampler(seeded(SamplerParams::chat())).chain(),
            (std::vector<std::string>{"top_k", "min_p", "temperature"}));
  SamplerParams p = seeded();
  p.repeat_penalty = 1.1f;
  p.typical_p = 0.9f;
  p.xtc_probability = 0.5f;
  p.logit_bias = {{1, 2.0f}};
  p.order = {"temp", "typical", "penalties", "xtc"};
  EXPECT_EQ(Sampler(p).chain(), (std::vector<std::string>{"logit_bias", "temperature", "typ_p", "penalties", "xtc"}));
}

TEST(Sampler, DefaultChainOnAHandWorkedDistribution) {
  // p = .4 .25 .15 .1 .05 .03 .02, top_p 0.92: cumulative .4 .65 .8 .9 .95 -> keep 5 tokens;
  // min_p 0.05 keeps p >= 0.02 (all 5); temperature 0.8: q ~ p^(1/0.8).
  const std::vector<float> logits = ln({0.4, 0.25, 0.15, 0.1, 0.05, 0.03, 0.02});
  SamplerParams p = seeded();
  p.top_p = 0.92f;
  Sampler s(p);
  expect_distribution(s.distribution(logits), expected(logits, {0, 1, 2, 3, 4}, 0.8));
}

TEST(Sampler, ChatPresetOnAHandWorkedDistribution) {
  // min_p 0.05 of the top 0.4 is 0.02: drops the 0.015 token; then temperature 0.7.
  const std::vector<float> logits = ln({0.4, 0.25, 0.15, 0.1, 0.05, 0.035, 0.015});
  Sampler s(seeded(SamplerParams::chat()));
  EXPECT_FLOAT_EQ(s.params().temperature, 0.7f);
  expect_distribution(s.distribution(logits), expected(logits, {0, 1, 2, 3, 4, 5}, 0.7));
}

TEST(Sampler, OrderIsRespected) {
  // Temperature 2 before min_p flattens first: 0.015 is (0.015/0.4)^0.5 = 0.19 of the top, kept.
  const std::vector<float> logits = ln({0.4, 0.25, 0.15, 0.1, 0.05, 0.035, 0.015});
  SamplerParams p = seeded(SamplerParams::chat());
  p.temperature = 2.0f;
  p.order = {"temperature", "min_p"};
  Sampler after(p);
  expect_distribution(after.distribution(logits), expected(logits, {0, 1, 2, 3, 4, 5, 6}, 2.0));
  p.order = {"min_p", "temperature"};
  Sampler before(p);
  expect_distribution(before.distribution(logits), expected(logits, {0, 1, 2, 3, 4, 5}, 2.0));
}

// ---- penalties and DRY through accept() -------------------------------------------------------

TEST(Sampler, PenaltiesSeeOnlyTheLastNAcceptedTokens) {
  SamplerParams p = seeded();
  p.order = {"penalties"};
  p.repeat_penalty = 2.0f;
  p.frequency_penalty = 0.5f;
  p.penalty_last_n = 3;
  const std::vector<float> logits = {1.0f, 1.0f, 1.0f, 1.0f};
  Sampler s(p);
  for (const int32_t t : {0, 1, 1, 2}) s.accept(t);
  // Window 1 1 2: token 1: 1/2 - 2*0.5 = -0.5; token 2: 1/2 - 0.5 = 0; tokens 0 and 3 untouched.
  const std::vector<float> want = {1.0f, -0.5f, 0.0f, 1.0f};
  expect_distribution(s.distribution(logits), expected(want, {0, 1, 2, 3}));
  // -1 means the context: with n_ctx 4 token 0 is in the window too (1/2 - 0.5 = 0).
  p.penalty_last_n = -1;
  p.n_ctx = 4;
  Sampler whole(p);
  for (const int32_t t : {0, 1, 1, 2}) whole.accept(t);
  expect_distribution(whole.distribution(logits), expected({0.0f, -0.5f, 0.0f, 1.0f}, {0, 1, 2, 3}));
  // reset() forgets the history.
  whole.reset();
  expect_distribution(whole.distribution(logits), expected(logits, {0, 1, 2, 3}));
}

TEST(Sampler, DryPenalizesTheTokenThatWouldExtendARepetition) {
  SamplerParams p = seeded();
  p.order = {"dry"};
  p.dry_multiplier = 0.8f;
  p.dry_sequence_breakers = {};
  p.dry_breaker_tokens = {{8}};
  p.n_ctx = 100;
  const std::vector<float> logits(10, 0.0f);
  Sampler s(p);
  for (const int32_t t : {7, 1, 2, 3, 4, 8, 7, 1, 2, 3}) s.accept(t);
  // "7 1 2 3" repeats, followed by 4 before: 0.8 * 1.75^(4-2) = 2.45.
  std::vector<float> want(10, 0.0f);
  want[4] = -2.45f;
  expect_distribution(s.distribution(logits), expected(want, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  // A 5-token window (8 7 1 2 3) holds no repetition.
  p.dry_penalty_last_n = 5;
  Sampler short_window(p);
  for (const int32_t t : {7, 1, 2, 3, 4, 8, 7, 1, 2, 3}) short_window.accept(t);
  expect_distribution(short_window.distribution(logits), expected(logits, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
}

TEST(Sampler, DryStringBreakersNeedTheVocabulary) {
  SamplerParams p = seeded();
  p.dry_multiplier = 0.8f;
  try {
    Sampler s(p);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer"), std::string::npos) << e.what();
  }
  // With texts (here: token i reads as the letter 'a' + i, and "\n" is token 5) it works.
  TokenTexts texts;
  texts.n_vocab = 6;
  texts.text = [](int32_t id) { return id == 5 ? std::string("\n") : std::string(1, static_cast<char>('a' + id)); };
  texts.encode = [](std::string_view) { return std::vector<int32_t>{}; };
  p.order = {"dry"};
  p.dry_sequence_breakers = {"\n"};
  Sampler s(p, texts);
  // 1 2 5 1 2: 5 would extend "1 2" but is a breaker (its text is "\n"): nothing is penalized.
  for (const int32_t t : {1, 2, 5, 1, 2}) s.accept(t);
  const std::vector<float> logits(6, 0.0f);
  expect_distribution(s.distribution(logits), expected(logits, {0, 1, 2, 3, 4, 5}));
}

// ---- logit bias -------------------------------------------------------------------------------

TEST(Sampler, BannedTokensAreNeverDrawnAndBadIdsAreReported) {
  SamplerParams p = seeded();
  p.logit_bias = {{2, -INFINITY}, {0, 1.0f}, {0, 0.5f}};  // repeated ids add up
  Sampler s(p);
  const std::vector<float> logits = {0.0f, 0.0f, 5.0f};
  for (int i = 0; i < 300; ++i) EXPECT_NE(s.sample(logits), 2);
  SamplerParams q = seeded();
  q.order = {"temperature"};
  q.temperature = 1.0f;
  q.logit_bias = p.logit_bias;
  Sampler t(q);
  expect_distribution(t.distribution(logits), expected({1.5f, 0.0f, -INFINITY}, {0, 1, 2}));
  SamplerParams r = seeded();
  r.logit_bias = {{10, 1.0f}};
  Sampler u(r);
  try {
    u.sample(logits);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("logit_bias"), std::string::npos) << e.what();
  }
}

TEST(Sampler, EverythingBannedIsAnError) {
  SamplerParams p = seeded();
  p.logit_bias = {{0, -INFINITY}, {1, -INFINITY}};
  const std::vector<float> logits = {0.0f, 0.0f};
  Sampler s(p);
  EXPECT_THROW(s.sample(logits), Error);
  p.temperature = 0.0f;
  Sampler g(p);
  EXPECT_THROW(g.sample(logits), Error);
}

// ---- seeds ------------------------------------------------------------------------------------

std::vector<int32_t> run(Sampler& s, const std::vector<float>& logits, int n) {
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(s.sample(logits));
    s.accept(out.back());
  }
  return out;
}

TEST(Sampler, SameSeedSameTokensDifferentSeedDifferentTokens) {
  SamplerParams p = seeded();
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.repeat_penalty = 1.2f;  // the history matters too
  p.xtc_probability = 0.5f;
  const std::vector<float> flat(1000, 0.0f);
  Sampler a(seeded(p, 42)), b(seeded(p, 42)), c(seeded(p, 43));
  const auto ra = run(a, flat, 200);
  EXPECT_EQ(ra, run(b, flat, 200));
  EXPECT_NE(ra, run(c, flat, 200));
  a.reset();
  EXPECT_EQ(run(a, flat, 200), ra);
  // On a flat distribution over 1000 tokens, 200 draws are far from constant.
  EXPECT_GT(std::set<int32_t>(ra.begin(), ra.end()).size(), 150u);
}

TEST(Sampler, RandomSeedIsReported) {
  Sampler a(SamplerParams{}), b(SamplerParams{});
  EXPECT_NE(a.seed(), SamplerParams::kRandomSeed);
  EXPECT_NE(a.seed(), b.seed());
  // Replaying with the reported seed gives the same tokens.
  const std::vector<float> flat(500, 0.0f);
  Sampler replay(seeded(SamplerParams{}, a.seed()));
  EXPECT_EQ(run(a, flat, 50), run(replay, flat, 50));
}

TEST(Sampler, DrawFrequenciesMatchTheChainsDistribution) {
  // Temperature 0.8 on p = .5 .3 .15 .05 (no other stage): q ~ p^1.25.
  const std::vector<double> p0 = {0.5, 0.3, 0.15, 0.05};
  const std::vector<float> logits = ln(p0);
  SamplerParams p = seeded({}, 5);
  p.order = {"temperature"};
  Sampler s(p);
  const auto q = expected(logits, {0, 1, 2, 3}, 0.8);
  std::vector<int> count(4, 0);
  const int n = 100000;
  for (int i = 0; i < n; ++i) ++count[static_cast<size_t>(s.sample(logits))];
  double chi2 = 0;
  for (const auto& [id, want] : q) {
    const double e = want.p * n;
    chi2 += (count[static_cast<size_t>(id)] - e) * (count[static_cast<size_t>(id)] - e) / e;
  }
  EXPECT_LT(chi2, 16.27);  // 3 degrees of freedom, p = 0.001
}

// ---- greedy -----------------------------------------------------------------------------------

TEST(Sampler, GreedyIsTheArgmax) {
  Sampler s(seeded(SamplerParams::greedy()));
  EXPECT_TRUE(s.is_greedy());
  for (uint32_t seed = 0; seed < 5; ++seed) {
    const std::vector<float> logits = random_logits(151936, seed);
    const auto want = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    EXPECT_EQ(s.sample(logits), want);
  }
  // Ties: the first.
  EXPECT_EQ(s.sample(std::vector<float>{1.0f, 3.0f, 2.0f, 3.0f}), 1);
  const auto d = s.distribution(std::vector<float>{1.0f, 3.0f, 2.0f, 3.0f});
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].id, 1);
  EXPECT_FLOAT_EQ(d[0].p, 1.0f);
}

TEST(Sampler, GreedyAppliesPenaltiesFirst) {
  SamplerParams p = seeded(SamplerParams::greedy());
  p.repeat_penalty = 1.3f;
  p.presence_penalty = 0.4f;
  Sampler s(p);
  EXPECT_TRUE(s.is_greedy());
  std::vector<int32_t> history;
  std::mt19937 rng(9);
  for (int step = 0; step < 100; ++step) {
    // Logits that favour a few tokens strongly, so the penalties keep changing the winner.
    std::vector<float> logits = random_logits(151936, 100 + static_cast<uint32_t>(step));
    for (int32_t t = 0; t < 8; ++t)
      logits[static_cast<size_t>(t * 1000)] = 14.0f + 0.1f * static_cast<float>(rng() % 5);
    std::vector<float> penalized = logits;
    std::map<int32_t, int> counts;
    for (size_t i = history.size() > 64 ? history.size() - 64 : 0; i < history.size(); ++i) ++counts[history[i]];
    for (const auto& [t, n] : counts) {
      float& x = penalized[static_cast<size_t>(t)];
      x = x <= 0 ? x * 1.3f : x / 1.3f;
      x -= 0.4f;
    }
    const auto want = static_cast<int32_t>(std::max_element(penalized.begin(), penalized.end()) - penalized.begin());
    const int32_t got = s.sample(logits);
    ASSERT_EQ(got, want) << "step " << step;
    s.accept(got);
    history.push_back(got);
  }
  EXPECT_GT(std::set<int32_t>(history.begin(), history.end()).size(), 1u);
}

TEST(Sampler, GreedyFastPathOnlyWhenItGivesTheSameAnswer) {
  SamplerParams p = seeded(SamplerParams::greedy());
  p.xtc_probability = 1.0f;  // XTC before the temperature removes the top choice
  EXPECT_FALSE(Sampler(p).is_greedy());
  p = seeded(SamplerParams::greedy());
  p.typical_p = 0.5f;  // typical-p may drop the most likely token
  EXPECT_FALSE(Sampler(p).is_greedy());
  p = seeded(SamplerParams::greedy());
  p.repeat_penalty = 1.1f;
  p.order = {"top_k", "penalties", "temperature"};  // penalties after a cut
  EXPECT_FALSE(Sampler(p).is_greedy());
  p.order = {"penalties", "top_k", "min_p", "temperature", "xtc"};
  EXPECT_TRUE(Sampler(p).is_greedy());
  p.order = {"top_k"};  // no temperature stage: a draw
  EXPECT_FALSE(Sampler(p).is_greedy());

  // The slow path with temperature 0 agrees with the fast path where both apply.
  SamplerParams slow = seeded(SamplerParams::greedy());
  slow.order = {"top_k", "typ_p", "temperature"};
  slow.typical_p = 0.9999999f;
  Sampler a(slow), b(seeded(SamplerParams::greedy()));
  EXPECT_FALSE(a.is_greedy());
  const std::vector<float> logits = random_logits(5000, 77);
  EXPECT_EQ(a.sample(logits), b.sample(logits));
}

// ---- full vocabulary against a reference chain ------------------------------------------------

// top_k -> top_p -> min_p -> temperature with full sorts and double arithmetic.
Dist reference_chain(const std::vector<float>& logits, int32_t top_k, double top_p, double min_p, double temp) {
  struct R {
    int32_t id;
    double logit;
  };
  std::vector<R> v;
  for (size_t i = 0; i < logits.size(); ++i) v.push_back({static_cast<int32_t>(i), logits[i]});
  std::sort(v.begin(), v.end(),
            [](const R& a, const R& b) { return a.logit > b.logit || (a.logit == b.logit && a.id < b.id); });
  if (top_k > 0 && static_cast<size_t>(top_k) < v.size()) v.resize(static_cast<size_t>(top_k));
  if (top_p < 1.0) {
    double sum = 0, cum = 0;
    for (const R& r : v) sum += std::exp(r.logit - v[0].logit);
    for (size_t i = 0; i < v.size(); ++i) {
      cum += std::exp(v[i].logit - v[0].logit) / sum;
      if (cum >= top_p) {
        v.resize(i + 1);
        break;
      }
    }
  }
  if (min_p > 0.0) {
    const double cut = v[0].logit + std::log(min_p);
    v.erase(std::remove_if(v.begin(), v.end(), [&](const R& r) { return r.logit < cut; }), v.end());
  }
  std::map<int32_t, double> x;
  for (const R& r : v) x[r.id] = r.logit / temp;
  return softmax_with_bounds(x);
}

TEST(Sampler, FullVocabularyChainsMatchTheReference) {
  struct Case {
    int32_t top_k;
    float top_p, min_p, temp;
  };
  const Case cases[] = {{40, 0.95f, 0.05f, 0.8f},
                        {40, 1.0f, 0.05f, 0.7f},
                        {0, 0.9f, 0.0f, 1.0f},
                        {0, 1.0f, 0.002f, 1.3f},
                        {1000, 0.99f, 0.01f, 0.5f}};
  for (const size_t n : {151936u, 262144u}) {
    for (const Case& c : cases) {
      const std::vector<float> logits = random_logits(n, static_cast<uint32_t>(n) + static_cast<uint32_t>(c.top_k));
      SamplerParams p = seeded();
      p.top_k = c.top_k;
      p.top_p = c.top_p;
      p.min_p = c.min_p;
      p.temperature = c.temp;
      Sampler s(p);
      SCOPED_TRACE(testing::Message() << "n " << n << " top_k " << c.top_k << " top_p " << c.top_p << " min_p "
                                      << c.min_p << " temp " << c.temp);
      expect_distribution(s.distribution(logits), reference_chain(logits, c.top_k, c.top_p, c.min_p, c.temp));
    }
  }
}

TEST(Sampler, AcceptRejectsNegativeIds) {
  Sampler s(seeded());
  EXPECT_THROW(s.accept(-1), Error);
}

}  // namespace
}  // namespace zinc::sample

namespace zinc::sample {
namespace {

// sample_allowed() is sample() over the logits with the refused tokens at -inf: the same token from
// the same seed whenever it decides, for greedy and top-k chains (penalties and bias before the cut
// included), whatever fraction of the vocabulary is allowed; other chains are left to the caller.
TEST(Sampler, SampleAllowedIsSamplingTheMaskedRow) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  int decided = 0, undecided = 0;
  for (const size_t n : {size_t{5000}, size_t{700}, size_t{60}}) {  // larger and smaller than k + 64 and k + 1024
    auto penalised = SamplerParams::chat();
    penalised.repeat_penalty = 1.3f;
    penalised.logit_bias = {{7, 3.0f}, {11, -INFINITY}};
    auto greedy_biased = SamplerParams::greedy();
    greedy_biased.logit_bias = {{3, 5.0f}};
    auto nucleus_first = SamplerParams{};
    nucleus_first.top_k = 0;
    std::vector<SamplerParams> chains = {SamplerParams::greedy(), SamplerParams::chat(), SamplerParams{}, penalised, greedy_biased,
                                         nucleus_first};
    for (size_t c = 0; c < chains.size(); ++c) {
      for (double fraction : {0.9, 0.3, 0.02, 0.002}) {
        for (int trial = 0; trial < 20; ++trial) {
          std::vector<float> logits(n);
          for (float& v : logits) v = normal(rng);
          std::vector<uint8_t> ok(n);
          for (auto& a : ok) a = std::uniform_real_distribution<double>(0, 1)(rng) < fraction;
          std::vector<float> masked = logits;
          for (size_t t = 0; t < n; ++t) {
            if (!ok[t]) masked[t] = -INFINITY;
          }
          if (std::none_of(ok.begin(), ok.end(), [](uint8_t a) { return a; })) continue;
          auto params = chains[c];
          params.seed = 100 + static_cast<uint64_t>(trial);
          Sampler a(params), b(params);
          for (int32_t h : {7, 8, 9, 7}) {  // a history for the penalties
            a.accept(h);
            b.accept(h);
          }
          // Over the allowed tokens alone: always the masked row's token.
          std::vector<int32_t> ids;
          for (size_t t = 0; t < n; ++t) {
            if (ok[t]) ids.push_back(static_cast<int32_t>(t));
          }
          Sampler among(params), masked_row(params);
          for (int32_t h : {7, 8, 9, 7}) {
            among.accept(h);
            masked_row.accept(h);
          }
          EXPECT_EQ(among.sample_among(logits, ids), masked_row.sample(masked)) << "chain " << c << " fraction " << fraction;
          // Over the mask's bits: the same token, and the random streams moved alike.
          std::vector<uint64_t> bits((n + 63) / 64, 0);
          for (size_t t = 0; t < n; ++t) bits[t / 64] |= uint64_t{ok[t]} << (t % 64);
          Sampler by_bits(params), by_row(params);
          for (int32_t h : {7, 8, 9, 7}) {
            by_bits.accept(h);
            by_row.accept(h);
          }
          EXPECT_EQ(by_bits.sample_masked(logits, bits), by_row.sample(masked)) << "chain " << c << " fraction " << fraction;
          EXPECT_EQ(by_bits.sample(logits), by_row.sample(logits));
          const int32_t fast = a.sample_allowed(logits, [&](int32_t t) { return ok[static_cast<size_t>(t)] != 0; }, n == 700 ? 1024 : 64);
          if (fast < 0) {
            ++undecided;
            continue;
          }
          ++decided;
          EXPECT_EQ(fast, b.sample(masked)) << "chain " << c << " fraction " << fraction << " trial " << trial;
          EXPECT_TRUE(ok[static_cast<size_t>(fast)]);
          // The random streams moved alike: the next draws agree too.
          EXPECT_EQ(a.sample(logits), b.sample(logits));
        }
      }
    }
  }
  EXPECT_GT(decided, 400);
  EXPECT_GT(undecided, 10);  // 0.2% allowed: fewer than k among the best k + 64
  // A chain whose first cut is not top-k is not decided from a few candidates.
  auto nucleus = SamplerParams{};
  nucleus.top_k = 0;
  Sampler s(nucleus);
  std::vector<float> logits(100, 0.0f);
  EXPECT_EQ(s.sample_allowed(logits, [](int32_t) { return true; }), -1);
  EXPECT_THROW(s.sample_among(logits, {}), Error);
  // A mask that allows nothing; one shorter than the row (a vocabulary smaller than the padded row):
  // the tokens past it are refused.
  std::vector<float> rising(300);
  for (size_t t = 0; t < rising.size(); ++t) rising[t] = static_cast<float>(t) * 0.01f;
  for (const SamplerParams& p : {SamplerParams::greedy(), SamplerParams::chat(), nucleus}) {
    Sampler m(p);
    EXPECT_EQ(m.sample_masked(rising, std::vector<uint64_t>(5, 0)), -1);
    const int32_t t = m.sample_masked(rising, std::vector<uint64_t>(2, ~uint64_t{0}));
    EXPECT_TRUE(t >= 0 && t < 128) << t;
  }
  EXPECT_EQ(Sampler(SamplerParams::greedy()).sample_masked(rising, std::vector<uint64_t>(2, ~uint64_t{0})), 127);
}

}  // namespace
}  // namespace zinc::sample
