// Each sampler stage alone, against distributions worked out from the stage's definition: small
// cases computed by hand (logits written as ln of round probabilities so the arithmetic stays exact
// enough to read), and full-vocabulary cases checked against a plain full-sort reference written here,
// which also covers the one-pass selections and the growing sorted prefix.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "core/error.h"
#include "float_bound.h"
#include "sample/candidates.h"
#include "sample/stages.h"

namespace zinc::sample {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

std::vector<float> ln(const std::vector<double>& probs) {
  std::vector<float> out;
  for (const double p : probs) out.push_back(static_cast<float>(std::log(p)));
  return out;
}

// The candidates left after `stage`, by ascending id.
template <class Stage>
std::vector<TokenProb> after(const std::vector<float>& logits, Stage&& stage) {
  Candidates c;
  c.start(logits);
  stage(c);
  std::vector<TokenProb> out = c.list();
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  return out;
}

std::vector<int32_t> ids_of(const std::vector<TokenProb>& v) {
  std::vector<int32_t> ids;
  for (const auto& t : v) ids.push_back(t.id);
  std::sort(ids.begin(), ids.end());
  return ids;
}

template <class Stage>
std::vector<int32_t> kept(const std::vector<float>& logits, Stage&& stage) {
  return ids_of(after(logits, std::forward<Stage>(stage)));
}

std::vector<float> random_logits(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

// Reference: every token, sorted by (logit desc, id asc) with a full sort.
struct Ref {
  int32_t id;
  double logit;
};
std::vector<Ref> full_sort(const std::vector<float>& logits) {
  std::vector<Ref> v;
  for (size_t i = 0; i < logits.size(); ++i) v.push_back({static_cast<int32_t>(i), logits[i]});
  std::sort(v.begin(), v.end(),
            [](const Ref& a, const Ref& b) { return a.logit > b.logit || (a.logit == b.logit && a.id < b.id); });
  return v;
}
std::vector<double> ref_softmax(const std::vector<Ref>& v) {
  double m = -INFINITY;
  for (const Ref& r : v) m = std::max(m, r.logit);
  std::vector<double> p;
  double sum = 0;
  for (const Ref& r : v) sum += std::exp(r.logit - m);
  for (const Ref& r : v) p.push_back(std::exp(r.logit - m) / sum);
  return p;
}
std::vector<int32_t> ids_of(const std::vector<Ref>& v, size_t n) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < n; ++i) ids.push_back(v[i].id);
  std::sort(ids.begin(), ids.end());
  return ids;
}

// ---- selection by mass -----------------------------------------------------------------------

TEST(MassSelector, MatchesASortedWalk) {
  // Logits on a coarse grid (many ties, many per bucket), thresholds halfway between two cumulative
  // sums of the rank-order walk: the selected count and set must be the walk's.
  std::mt19937 rng(21);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (int round = 0; round < 20; ++round) {
    std::vector<TokenProb> v(5000);
    double sum = 0;
    for (size_t i = 0; i < v.size(); ++i) {
      v[i] = {static_cast<int32_t>(i), std::round(normal(rng) * 4.0f) / 4.0f, 0.0f};
      sum += std::exp(static_cast<double>(v[i].logit));
    }
    for (TokenProb& t : v) t.p = static_cast<float>(std::exp(static_cast<double>(t.logit)) / sum);
    std::vector<TokenProb> ref = v;
    std::sort(ref.begin(), ref.end(), ranks_before);
    std::vector<double> cum;
    double acc = 0;
    for (const TokenProb& t : ref) cum.push_back(acc += t.p);
    // Targets at random places and at the last two tokens of a group of equal logits (a bucket's end).
    std::vector<size_t> ends;
    for (size_t i = 1; i + 1 < ref.size(); ++i) {
      if (ref[i].logit != ref[i + 1].logit) ends.push_back(i);
    }
    MassSelector<TokenProb> selector;
    for (int k = 0; k < 40; ++k) {
      const size_t j = std::max<size_t>(
          1, k % 2 == 0 ? 1 + rng() % (v.size() - 2) : ends[rng() % ends.size()] - (k % 4 == 1 ? 1 : 0));
      const double target = (cum[j - 1] + cum[j]) / 2;
      std::vector<TokenProb> w = v;
      const size_t m = selector.select(
          w, [](const TokenProb& t) { return -t.logit; }, ranks_before,
          [](const TokenProb& t) { return static_cast<double>(t.p); }, [&](double c) { return c >= target; });
      ASSERT_EQ(m, j + 1);
      std::vector<int32_t> got, want;
      for (size_t i = 0; i < m; ++i) {
        got.push_back(w[i].id);
        want.push_back(ref[i].id);
      }
      std::sort(got.begin(), got.end());
      std::sort(want.begin(), want.end());
      ASSERT_EQ(got, want) << "round " << round << " target " << target;
    }
  }
}

// ---- logit bias -------------------------------------------------------------------------------

TEST(LogitBias, AddsToTheNamedTokensOnly) {
  const std::vector<int32_t> ids = {0, 2};
  const std::vector<float> bias = {1.5f, kNegInf};
  const auto out = after({1.0f, 2.0f, 3.0f}, [&](Candidates& c) { stage::logit_bias(c, ids, bias); });
  ASSERT_EQ(out.size(), 3u);
  EXPECT_FLOAT_EQ(out[0].logit, 2.5f);
  EXPECT_FLOAT_EQ(out[1].logit, 2.0f);
  EXPECT_EQ(out[2].logit, kNegInf);
}

// ---- penalties --------------------------------------------------------------------------------

TEST(Penalties, RepeatDividesPositiveMultipliesNegativeThenFrequencyAndPresence) {
  const std::vector<float> logits = {2.0f, -1.0f, 0.5f, 3.0f, 0.0f};
  const std::vector<int32_t> ids = {0, 1, 4};
  const std::vector<int32_t> counts = {2, 1, 3};
  // Hand-computed with repeat 1.5, frequency 0.1, presence 0.25:
  //   token 0:  2.0 / 1.5 - 2*0.1 - 0.25 =  0.883333
  //   token 1: -1.0 * 1.5 - 1*0.1 - 0.25 = -1.85
  //   token 4:  0.0 * 1.5 - 3*0.1 - 0.25 = -0.55  (zero counts as not positive)
  // Exactly, with the bound of the stage's float arithmetic (float_bound.h): x / repeat or x * repeat,
  // then - n * frequency - presence.
  using test::Fb;
  const auto penalized = [](float x, int n) {
    const Fb r = x <= 0.0f ? Fb(x) * Fb(1.5f) : Fb(x) / Fb(1.5f);
    return r - Fb(static_cast<float>(n)) * Fb(0.1f) - Fb(0.25f);
  };
  const std::vector<Fb> want = {penalized(2.0f, 2), penalized(-1.0f, 1), Fb(0.5f), Fb(3.0f), penalized(0.0f, 3)};
  EXPECT_NEAR(want[0].v, 0.8833333, 1e-6);  // the hand-computed values above
  EXPECT_NEAR(want[4].v, -0.55, 1e-6);
  for (const bool as_list : {false, true}) {
    const auto out = after(logits, [&](Candidates& c) {
      if (as_list) c.list();  // the list path, as after a truncating stage
      stage::penalties(c, ids, counts, 1.5f, 0.1f, 0.25f);
    });
    ASSERT_EQ(out.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(out[i].logit, want[i].v, want[i].e) << "token " << i;
  }
}

TEST(Penalties, NeutralValuesChangeNothing) {
  const std::vector<int32_t> ids = {0, 1};
  const std::vector<int32_t> counts = {5, 5};
  const auto out = after({2.0f, -1.0f}, [&](Candidates& c) { stage::penalties(c, ids, counts, 1.0f, 0.0f, 0.0f); });
  EXPECT_EQ(out[0].logit, 2.0f);
  EXPECT_EQ(out[1].logit, -1.0f);
}

TEST(Penalties, OnlyTokensStillInTheListAreTouched) {
  // After top-k(2) only tokens 3 and 1 remain; a penalty on token 0 must not bring it back.
  const std::vector<int32_t> ids = {0, 1};
  const std::vector<int32_t> counts = {1, 1};
  const auto out = after({1.0f, 2.0f, 0.0f, 3.0f}, [&](Candidates& c) {
    stage::top_k(c, 2);
    stage::penalties(c, ids, counts, 2.0f, 0.0f, 0.0f);
  });
  ASSERT_EQ(ids_of(out), (std::vector<int32_t>{1, 3}));
  EXPECT_FLOAT_EQ(out[0].logit, 1.0f);
  EXPECT_FLOAT_EQ(out[1].logit, 3.0f);
}

// ---- top-k ------------------------------------------------------------------------------------

TEST(TopK, KeepsTheKBestWithTiesToTheLowerId) {
  const std::vector<float> logits = {0.1f, 3.0f, 2.0f, 3.0f, -1.0f, 5.0f};
  EXPECT_EQ(kept(logits, [](Candidates& c) { stage::top_k(c, 3); }), (std::vector<int32_t>{1, 3, 5}));
  EXPECT_EQ(kept(logits, [](Candidates& c) { stage::top_k(c, 2); }), (std::vector<int32_t>{1, 5}));
  EXPECT_EQ(kept(logits, [](Candidates& c) { stage::top_k(c, 1); }), (std::vector<int32_t>{5}));
  const std::vector<int32_t> all = {0, 1, 2, 3, 4, 5};
  EXPECT_EQ(kept(logits, [](Candidates& c) { stage::top_k(c, 0); }), all);  // disabled
  EXPECT_EQ(kept(logits, [](Candidates& c) { stage::top_k(c, 6); }), all);
  EXPECT_EQ(kept(logits, [](Candidates& c) { stage::top_k(c, 100); }), all);
}

TEST(TopK, LeavesTheListSortedBestFirst) {
  Candidates c;
  const std::vector<float> logits = {0.1f, 3.0f, 2.0f, 3.0f, -1.0f, 5.0f};
  c.start(logits);
  stage::top_k(c, 4);
  const auto& l = c.list();
  ASSERT_EQ(l.size(), 4u);
  EXPECT_EQ(l[0].id, 5);
  EXPECT_EQ(l[1].id, 1);
  EXPECT_EQ(l[2].id, 3);
  EXPECT_EQ(l[3].id, 2);
  EXPECT_EQ(c.sorted_prefix(), 4u);
}

TEST(TopK, FullVocabularyMatchesAFullSort) {
  const std::vector<float> logits = random_logits(151936, 1);
  const auto ref = full_sort(logits);
  for (const int32_t k : {1, 2, 40, 1000, 3000, 100000}) {
    EXPECT_EQ(kept(logits, [&](Candidates& c) { stage::top_k(c, k); }), ids_of(ref, static_cast<size_t>(k)))
        << "k = " << k;
  }
}

TEST(TopK, FullVocabularyWithChangedTokensAndTies) {
  // Logits on a coarse grid make many ties; bias raises some tokens, lowers others.
  std::vector<float> logits = random_logits(50000, 2);
  for (float& x : logits) x = std::round(x * 2.0f) / 2.0f;
  const std::vector<int32_t> ids = {0, 7, 49999, 123, 40000, 25000};
  const std::vector<float> bias = {20.0f, 15.0f, 20.0f, -50.0f, 9.5f, kNegInf};
  std::vector<float> changed = logits;
  for (size_t j = 0; j < ids.size(); ++j) changed[static_cast<size_t>(ids[j])] += bias[j];
  const auto ref = full_sort(changed);
  for (const int32_t k : {1, 3, 50, 2500}) {
    EXPECT_EQ(kept(logits,
                   [&](Candidates& c) {
                     stage::logit_bias(c, ids, bias);
                     stage::top_k(c, k);
                   }),
              ids_of(ref, static_cast<size_t>(k)))
        << "k = " << k;
  }
}

TEST(TopK, NaNIsNeverKept) {
  const std::vector<float> logits = {NAN, 1.0f, NAN, 0.5f, NAN};
  EXPECT_EQ(kept(logits, [](Candidates& c) { stage::top_k(c, 2); }), (std::vector<int32_t>{1, 3}));
}

// ---- typical ----------------------------------------------------------------------------------

TEST(Typical, KeepsTheTokensClosestToTheEntropy) {
  // p = 1/2, 1/4, 1/8, 1/8: H = 1.75 ln 2; -ln p = 1, 2, 3, 3 (x ln 2); |-ln p - H| = 0.75, 0.25,
  // 1.25, 1.25 (x ln 2). Typicality order: token 1, token 0, then 2 and 3 (tied; rank order: 2 first).
  // Cumulative mass in that order: 0.25, 0.75, 0.875, 1.
  const std::vector<float> logits = ln({0.5, 0.25, 0.125, 0.125});
  EXPECT_EQ(kept(logits, [](Candidates& c) { stage::typical(c, 0.2f, 0); }), (std::vector<int32_t>{1}));
  EXPECT_EQ(kept(logits, [](Candidates& c) { stage::typical(c, 0.5f, 0); }), (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(kept(logits, [](Candidates& c) { stage::typical(c, 0.8f, 0); }), (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(kept(logits, [](Candidates& c) { stage::typical(c, 0.2f, 3); }), (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(kept(logits, [](Candidates& c) { stage::typical(c, 1.0f, 0); }), (std::vector<int32_t>{0, 1, 2, 3}));
}

TEST(Typical, ExcludesTheMostLikelyTokenWhenItIsAtypical) {
  // p = 0.9 and 100 tokens of 0.001: H = 0.9*0.1054 + 0.1*6.9078 = 0.7856. |-ln p - H|: 0.68 for the
  // top token, 6.12 for the rest; keeping mass > 0.5 stops right after the top token.
  std::vector<double> p(101, 0.001);
  p[0] = 0.9;
  EXPECT_EQ(kept(ln(p), [](Candidates& c) { stage::typical(c, 0.5f, 0); }), (std::vector<int32_t>{0}));
  // p = 0.3 and 700 tokens of 0.001: H = 0.3*1.2040 + 0.7*6.9078 = 5.1966; the top token is
  // |1.2040 - 5.1966| = 3.99 away, each small one |6.9078 - 5.1966| = 1.71: the small ones come first
  // (in id order, being tied), and the first cumulative sum > 0.3005 is 301 x 0.001.
  std::vector<double> q(701, 0.001);
  q[0] = 0.3;
  std::vector<int32_t> want(301);
  std::iota(want.begin(), want.end(), 1);
  EXPECT_EQ(kept(ln(q), [](Candidates& c) { stage::typical(c, 0.3005f, 0); }), want);
}

TEST(Typical, FullVocabularyMatchesAFullSort) {
  const std::vector<float> logits = random_logits(30000, 3);
  const auto ref = full_sort(logits);
  const auto p = ref_softmax(ref);
  double h = 0;
  for (const double x : p) h -= x * std::log(x);
  std::vector<size_t> order(ref.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return std::fabs(-std::log(p[a]) - h) < std::fabs(-std::log(p[b]) - h); });
  // Put the threshold halfway between two cumulative sums, away from rounding.
  double cum = 0;
  std::vector<double> cums;
  for (const size_t i : order) cums.push_back(cum += p[i]);
  const size_t m = 700;
  const auto threshold = static_cast<float>((cums[m - 1] + cums[m]) / 2);
  std::vector<int32_t> want;
  for (size_t i = 0; i <= m; ++i) want.push_back(ref[order[i]].id);
  std::sort(want.begin(), want.end());
  EXPECT_EQ(kept(logits, [&](Candidates& c) { stage::typical(c, threshold, 0); }), want);
}

// ---- top-p ------------------------------------------------------------------------------------

TEST(TopP, KeepsTheSmallestPrefixReachingP) {
  // p = 1/2, 1/4, 1/8, 1/16, 1/16: cumulative 0.5, 0.75, 0.875, 0.9375, 1.
  const std::vector<float> logits = ln({0.0625, 0.25, 0.5, 0.0625, 0.125});  // shuffled ids
  EXPECT_EQ(kept(logits, [](Candidates& c) { stage::top_p(c, 0.3f, 0); }), (std::vector<int32_t>{2}));
  EXPECT_EQ(kept(logits, [](Candidates& c) { stage::top_p(c, 0.7f, 0); }), (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(kept(logits, [](Candidates& c) { stage::top_p(c, 0.8f, 0); }), (std::vector<int32_t>{1, 2, 4}));
  EXPECT_EQ(kept(logits, [](Candidates& c) { stage::top_p(c, 0.3f, 3); }), (std::vector<int32_t>{1, 2, 4}));
  // The two 1/16 tokens tie: the lower id comes first.
  EXPECT_EQ(kept(logits, [](Candidates& c) { stage::top_p(c, 0.9f, 0); }), (std::vector<int32_t>{0, 1, 2, 4}));
  EXPECT_EQ(kept(logits, [](Candidates& c) { stage::top_p(c, 1.0f, 0); }), (std::vector<int32_t>{0, 1, 2, 3, 4}));
}

TEST(TopP, FullVocabularyMatchesAFullSort) {
  for (const size_t m : {0, 5, 63, 64, 65, 500, 9000}) {
    const std::vector<float> logits = random_logits(151936, 4 + static_cast<uint32_t>(m));
    const auto ref = full_sort(logits);
    const auto p = ref_softmax(ref);
    double cum = 0;
    std::vector<double> cums;
    for (const double x : p) cums.push_back(cum += x);
    const double below = m == 0 ? 0.0 : cums[m - 1];
    const auto threshold = static_cast<float>((below + cums[m]) / 2);
    EXPECT_EQ(kept(logits, [&](Candidates& c) { stage::top_p(c, threshold, 0); }), ids_of(ref, m + 1)) << "m = " << m;
  }
}

// ---- min-p ------------------------------------------------------------------------------------

TEST(MinP, KeepsTokensAtLeastPTimesTheTopProbability) {
  // Relative probabilities 1, 0.5, 0.2, 0.04 (ids shuffled).
  const std::vector<float> logits = ln({0.2, 1.0, 0.04, 0.5});
  EXPECT_EQ(kept(logits, [](Candidates& c) { stage::min_p(c, 0.1f, 0); }), (std::vector<int32_t>{0, 1, 3}));
  EXPECT_EQ(kept(logits, [](Candidates& c) { stage::min_p(c, 0.3f, 0); }), (std::vector<int32_t>{1, 3}));
  EXPECT_EQ(kept(logits, [](Candidates& c) { stage::min_p(c, 0.6f, 0); }), (std::vector<int32_t>{1}));
  EXPECT_EQ(kept(logits, [](Candidates& c) { stage::min_p(c, 0.6f, 3); }), (std::vector<int32_t>{0, 1, 3}));
  EXPECT_EQ(kept(logits, [](Candidates& c) { stage::min_p(c, 0.0f, 0); }), (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(kept({2.0f, 5.0f, 5.0f, 1.0f}, [](Candidates& c) { stage::min_p(c, 1.0f, 0); }),
            (std::vector<int32_t>{1, 2}));
}

TEST(MinP, SameResultOnTheWholeVocabularyAndOnAList) {
  const std::vector<float> logits = random_logits(151936, 5);
  const std::vector<int32_t> ids = {5, 77, 150000};
  const std::vector<float> bias = {30.0f, 29.0f, -100.0f};
  std::vector<float> changed = logits;
  for (size_t j = 0; j < ids.size(); ++j) changed[static_cast<size_t>(ids[j])] += bias[j];
  const double max = *std::max_element(changed.begin(), changed.end());
  for (const float p : {0.05f, 0.3f, 0.9f}) {
    std::vector<int32_t> want;
    for (size_t i = 0; i < changed.size(); ++i) {
      if (changed[i] >= max + std::log(static_cast<double>(p))) want.push_back(static_cast<int32_t>(i));
    }
    for (const bool as_list : {false, true}) {
      EXPECT_EQ(kept(logits,
                     [&](Candidates& c) {
                       stage::logit_bias(c, ids, bias);
                       if (as_list) c.list();
                       stage::min_p(c, p, 0);
                     }),
                want)
          << "p = " << p << (as_list ? " (list)" : " (whole)");
    }
  }
  // min_keep larger than what passes: the best-ranked min_keep.
  const auto ref = full_sort(changed);
  EXPECT_EQ(kept(logits,
                 [&](Candidates& c) {
                   stage::logit_bias(c, ids, bias);
                   stage::min_p(c, 0.9f, 10);
                 }),
            ids_of(ref, 10));
}

// ---- XTC --------------------------------------------------------------------------------------

TEST(Xtc, RemovesTopChoicesButTheLeastLikelyOfThem) {
  // p = 0.4, 0.3, 0.2, 0.1 (ids shuffled: token 3 is the most likely).
  const std::vector<float> logits = ln({0.2, 0.3, 0.1, 0.4});
  std::mt19937_64 rng(1);
  const auto run = [&](float threshold, size_t min_keep) {
    return kept(logits, [&](Candidates& c) { stage::xtc(c, 1.0f, threshold, min_keep, rng); });
  };
  EXPECT_EQ(run(0.25f, 0), (std::vector<int32_t>{0, 1, 2}));     // 0.4, 0.3 reach it: drop 0.4
  EXPECT_EQ(run(0.15f, 0), (std::vector<int32_t>{0, 2}));        // 0.4, 0.3, 0.2: keep 0.2 and below
  EXPECT_EQ(run(0.35f, 0), (std::vector<int32_t>{0, 1, 2, 3}));  // only one reaches it
  EXPECT_EQ(run(0.15f, 3), (std::vector<int32_t>{0, 1, 2, 3}));  // would leave 2 < min_keep
  EXPECT_EQ(run(0.15f, 2), (std::vector<int32_t>{0, 2}));
  EXPECT_EQ(run(0.6f, 0), (std::vector<int32_t>{0, 1, 2, 3}));  // > 0.5: disabled
}

TEST(Xtc, ActsWithTheGivenProbability) {
  const std::vector<float> logits = ln({0.2, 0.3, 0.1, 0.4});
  std::mt19937_64 rng(42);
  int acted = 0;
  const int n = 10000;
  for (int i = 0; i < n; ++i) {
    if (kept(logits, [&](Candidates& c) { stage::xtc(c, 0.5f, 0.25f, 0, rng); }).size() == 3) ++acted;
  }
  // Binomial(10000, 0.5): standard deviation 50; 5 deviations either side.
  EXPECT_GT(acted, 4750);
  EXPECT_LT(acted, 5250);
}

// ---- temperature ------------------------------------------------------------------------------

TEST(Temperature, DividesLogits) {
  const auto out = after({1.0f, 2.0f, 4.0f}, [](Candidates& c) { stage::temperature(c, 0.5f); });
  EXPECT_FLOAT_EQ(out[0].logit, 2.0f);
  EXPECT_FLOAT_EQ(out[1].logit, 4.0f);
  EXPECT_FLOAT_EQ(out[2].logit, 8.0f);
}

TEST(Temperature, ZeroKeepsTheFirstBest) {
  EXPECT_EQ(kept({1.0f, 2.0f, 4.0f}, [](Candidates& c) { stage::temperature(c, 0.0f); }), (std::vector<int32_t>{2}));
  EXPECT_EQ(kept({3.0f, 1.0f, 3.0f}, [](Candidates& c) { stage::temperature(c, 0.0f); }), (std::vector<int32_t>{0}));
  EXPECT_EQ(kept({3.0f, 1.0f, 3.0f},
                 [](Candidates& c) {
                   c.list();
                   stage::temperature(c, 0.0f);
                 }),
            (std::vector<int32_t>{0}));
}

// ---- the draw ---------------------------------------------------------------------------------

TEST(Draw, FollowsTheDocumentedProcedure) {
  // stages.h: w = exp(logit - max) in ascending id; u = (next >> 11) * 2^-53; the first token whose
  // running sum exceeds u * sum(w). Re-done here from the same seed.
  const std::vector<float> logits = {0.0f, 1.0f, 2.0f, -1.0f};
  std::mt19937_64 mine(7), theirs(7);
  for (int step = 0; step < 200; ++step) {
    double total = 0;
    for (const float l : logits) total += std::exp(static_cast<double>(l) - 2.0);
    const double u = static_cast<double>(mine() >> 11) / 9007199254740992.0;
    double run = 0;
    int32_t want = -1;
    for (size_t i = 0; i < logits.size() && want < 0; ++i) {
      run += std::exp(static_cast<double>(logits[i]) - 2.0);
      if (run > u * total) want = static_cast<int32_t>(i);
    }
    Candidates c;
    c.start(logits);
    ASSERT_EQ(stage::draw(c, theirs), want) << "step " << step;
  }
}

TEST(Draw, FrequenciesMatchTheDistribution) {
  const std::vector<double> p = {0.5, 0.3, 0.15, 0.05};
  const std::vector<float> logits = ln(p);
  std::mt19937_64 rng(2024);
  std::vector<int> count(p.size(), 0);
  const int n = 100000;
  Candidates c;
  for (int i = 0; i < n; ++i) {
    c.start(logits);
    ++count[static_cast<size_t>(stage::draw(c, rng))];
  }
  double chi2 = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const double e = p[i] * n;
    chi2 += (count[i] - e) * (count[i] - e) / e;
  }
  EXPECT_LT(chi2, 16.27);  // chi-square, 3 degrees of freedom, p = 0.001
}

TEST(Draw, NeverPicksBannedTokensAndFailsWhenAllAreBanned) {
  std::mt19937_64 rng(3);
  Candidates c;
  const std::vector<float> logits = {kNegInf, 0.0f, kNegInf, NAN};
  for (int i = 0; i < 100; ++i) {
    c.start(logits);
    EXPECT_EQ(stage::draw(c, rng), 1);
  }
  const std::vector<float> none = {kNegInf, NAN};
  c.start(none);
  EXPECT_THROW(stage::draw(c, rng), Error);
}

TEST(Draw, LargeListsAreDrawnInIdOrderToo) {
  // 10000 candidates (more than are sorted by id directly) after a stage that leaves them in rank
  // order: the draw must still walk ids upwards, so it agrees with a draw over the untouched row.
  const std::vector<float> logits = random_logits(10000, 9);
  for (uint64_t seed = 0; seed < 20; ++seed) {
    std::mt19937_64 a(seed), b(seed);
    Candidates whole, ranked;
    whole.start(logits);
    ranked.start(logits);
    ranked.sort_prefix(10000);
    EXPECT_EQ(stage::draw(whole, a), stage::draw(ranked, b)) << "seed " << seed;
  }
}

}  // namespace
}  // namespace zinc::sample
