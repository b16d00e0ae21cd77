// DRY: repetition lengths in hand-worked windows and against a naive reference written here from the
// definition (for every earlier position, how many tokens before it repeat the window's end), the
// breaker limit, the penalty formula and its exponent clamp, and breaker strings turned into token
// sequences for a small made-up vocabulary and for a real one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "gguf/reader.h"
#include "sample/dry.h"
#include "tokenizer/tokenizer.h"

namespace zinc::sample {
namespace {

using Lengths = std::vector<std::pair<int32_t, int32_t>>;

Lengths lengths_of(std::vector<int32_t> window, int32_t allowed, const DryBreakers& breakers = {}) {
  Dry dry(DryParams{1.0f, 1.75f, allowed}, breakers);
  return dry.repeat_lengths(window);
}

DryBreakers token_breakers(const std::vector<std::vector<int32_t>>& seqs) {
  DryBreakers b;
  for (const auto& s : seqs) b.add(s);
  return b;
}

// Naive reference, straight from the definition.
Lengths naive_lengths(const std::vector<int32_t>& w, int32_t allowed,
                      const std::vector<std::vector<int32_t>>& breakers) {
  const auto n = static_cast<int32_t>(w.size());
  if (n <= allowed) return {};
  // The most recent breaker occurrence (by its first token; the longest one there) bounds how far
  // back a repetition may reach: only tokens after it count.
  int32_t limit = n;
  for (int32_t h = n - 1; h >= 0; --h) {
    int32_t best_end = -1;
    for (const auto& b : breakers) {
      const auto len = static_cast<int32_t>(b.size());
      if (h + len > n) continue;
      if (std::equal(b.begin(), b.end(), w.begin() + h)) best_end = std::max(best_end, h + len);
    }
    if (best_end >= 0) {
      limit = n - best_end;
      break;
    }
  }
  if (limit < allowed) return {};
  std::map<int32_t, int32_t> best;
  for (int32_t j = 0; j + 1 < n; ++j) {
    int32_t len = 0;
    while (len <= j && w[static_cast<size_t>(j - len)] == w[static_cast<size_t>(n - 1 - len)]) ++len;
    len = std::min(len, limit);
    if (len < allowed) continue;
    auto& b = best[w[static_cast<size_t>(j + 1)]];
    b = std::max(b, len);
  }
  return Lengths(best.begin(), best.end());
}

TEST(Dry, RepeatLengthsOfAHandWorkedWindow) {
  // 1 2 3 9 1 2 3 7 1 2 3: the window ends in "1 2 3", which occurred twice before, followed by 9
  // and by 7. Neither occurrence is preceded by what precedes the end ("7" vs "9" and nothing), so
  // both repetitions are 3 long.
  EXPECT_EQ(lengths_of({1, 2, 3, 9, 1, 2, 3, 7, 1, 2, 3}, 2), (Lengths{{7, 3}, {9, 3}}));
  // With allowed length 4 neither counts.
  EXPECT_EQ(lengths_of({1, 2, 3, 9, 1, 2, 3, 7, 1, 2, 3}, 4), Lengths{});
  // A window no longer than the allowed length never counts.
  EXPECT_EQ(lengths_of({5, 5}, 2), Lengths{});
  // A run of one token: each earlier position repeats the end as far back as it can.
  EXPECT_EQ(lengths_of({4, 4, 4, 4, 4}, 2), (Lengths{{4, 4}}));
}

TEST(Dry, BreakersLimitHowFarBackARepetitionReaches) {
  // 7 1 2 3 4 8 7 1 2 3: "7 1 2 3" repeats, followed by 4: length 4.
  const std::vector<int32_t> w = {7, 1, 2, 3, 4, 8, 7, 1, 2, 3};
  EXPECT_EQ(lengths_of(w, 2), (Lengths{{4, 4}}));
  // Breaker 8 lies before the second "7 1 2 3": it does not cut it.
  EXPECT_EQ(lengths_of(w, 2, token_breakers({{8}})), (Lengths{{4, 4}}));
  // Breaker 7: only "1 2 3" after it may count.
  EXPECT_EQ(lengths_of(w, 2, token_breakers({{7}})), (Lengths{{4, 3}}));
  // Two-token breaker "7 1": only "2 3" after it.
  EXPECT_EQ(lengths_of(w, 2, token_breakers({{7, 1}})), (Lengths{{4, 2}}));
  // Breaker "3" is the last token: nothing after it, below the allowed length.
  EXPECT_EQ(lengths_of(w, 2, token_breakers({{3}})), Lengths{});
  // A multi-token breaker only counts when its whole tail is there: "3 5" never occurs.
  EXPECT_EQ(lengths_of(w, 2, token_breakers({{3, 5}})), (Lengths{{4, 4}}));
}

TEST(Dry, MatchesTheNaiveDefinitionOnRandomWindows) {
  std::mt19937 rng(11);
  const std::vector<std::vector<int32_t>> breaker_sets[] = {{}, {{4}}, {{3, 1}}, {{4}, {3, 1}, {2, 2, 2}}};
  for (int trial = 0; trial < 3000; ++trial) {
    const auto n = static_cast<size_t>(rng() % 60);
    const auto alphabet = 2 + static_cast<int32_t>(rng() % 3);
    std::vector<int32_t> w(n);
    for (int32_t& t : w) t = 1 + static_cast<int32_t>(rng() % static_cast<uint32_t>(alphabet));
    const auto allowed = 1 + static_cast<int32_t>(rng() % 3);
    const auto& breakers = breaker_sets[trial % 4];
    ASSERT_EQ(lengths_of(w, allowed, token_breakers(breakers)), naive_lengths(w, allowed, breakers))
        << "trial " << trial;
  }
}

TEST(Dry, PenaltyIsMultiplierTimesBaseToTheExcessLength) {
  Dry dry(DryParams{0.8f, 1.75f, 2}, token_breakers({{5}}));
  const std::vector<float> logits(10, 0.0f);
  Candidates c;
  c.start(logits);
  // Token 4 would extend "7 1 2 3" (4 long): 0.8 * 1.75^(4-2) = 2.45. No other token follows a
  // repetition, so nothing else is touched (breaker 5 does not occur).
  dry.apply(c, std::vector<int32_t>{7, 1, 2, 3, 4, 8, 7, 1, 2, 3});
  const auto& l = c.list();
  for (const TokenProb& t : l) {
    if (t.id == 4) {
      // The penalty is computed in double from the float parameters (pow within an ulp) and rounded
      // once to float: within 2^-23 of it, relative.
      const double want = -static_cast<double>(0.8f) * 1.75 * 1.75;
      EXPECT_NEAR(t.logit, want, 0x1p-23 * std::fabs(want));
    } else {
      EXPECT_EQ(t.logit, 0.0f) << "token " << t.id;
    }
  }
}

TEST(Dry, SingleTokenBreakersAreNeverPenalized) {
  // 1 2 5 1 2: "1 2" repeats and was followed by 5, but 5 is a breaker.
  const std::vector<int32_t> w = {1, 2, 5, 1, 2};
  const DryBreakers breakers = token_breakers({{5}});
  EXPECT_EQ(lengths_of(w, 2, breakers), (Lengths{{5, 2}}));
  Dry dry(DryParams{1.0f, 2.0f, 2}, breakers);
  const std::vector<float> logits(6, 1.0f);
  Candidates c;
  c.start(logits);
  dry.apply(c, w);
  for (const TokenProb& t : c.list()) EXPECT_EQ(t.logit, 1.0f) << "token " << t.id;
}

TEST(Dry, ExponentIsClampedBelowFloatOverflow) {
  // 200 repeats of one token with allowed length 1: the excess would be 198; base 3 overflows a
  // float past 3^80 (80 = floor(88.7228 / ln 3)), so the penalty is 3^80.
  Dry dry(DryParams{1.0f, 3.0f, 1}, DryBreakers{});
  const std::vector<int32_t> w(200, 2);
  const std::vector<float> logits(3, 0.0f);
  Candidates c;
  c.start(logits);
  dry.apply(c, w);
  const auto& l = c.list();
  EXPECT_TRUE(std::isfinite(l[2].logit));
  EXPECT_NEAR(l[2].logit / -std::pow(3.0, 80), 1.0, 0x1p-23);  // one rounding to float, pow's ulp
  EXPECT_EQ(l[0].logit, 0.0f);
}

// A made-up vocabulary: texts by id, and greedy longest-match encoding over them.
TokenTexts toy_texts() {
  static const std::vector<std::string> texts = {"a", "b", "\n", "x\n", ":", "ab", "<", "|", "|>", "<|", "end", "e"};
  TokenTexts t;
  t.n_vocab = static_cast<int32_t>(texts.size());
  t.text = [](int32_t id) { return texts[static_cast<size_t>(id)]; };
  t.encode = [](std::string_view s) {
    std::vector<int32_t> ids;
    while (!s.empty()) {
      int32_t best = -1;
      size_t best_len = 0;
      for (size_t i = 0; i < texts.size(); ++i) {
        if (texts[i].size() > best_len && s.substr(0, texts[i].size()) == texts[i]) {
          best = static_cast<int32_t>(i);
          best_len = texts[i].size();
        }
      }
      if (best < 0) throw std::runtime_error("toy vocabulary cannot spell the text");
      ids.push_back(best);
      s.remove_prefix(best_len);
    }
    return ids;
  };
  return t;
}

TEST(Dry, BreakerStringsBecomeTokenSequences) {
  const std::vector<std::string> strings = {"\n", "<|end"};
  const DryBreakers b = DryBreakers::from_strings(strings, toy_texts());
  // Tokens whose text contains "\n" are breakers by themselves.
  EXPECT_TRUE(b.is_single_token(2));
  EXPECT_TRUE(b.is_single_token(3));
  // "<" starts "<|end": the rest "|end" encodes as "|" "end"; "<|" leaves "end".
  ASSERT_NE(b.tails(6), nullptr);
  EXPECT_EQ(*b.tails(6), (std::vector<std::vector<int32_t>>{{7, 10}}));
  ASSERT_NE(b.tails(9), nullptr);
  EXPECT_EQ(*b.tails(9), (std::vector<std::vector<int32_t>>{{10}}));
  EXPECT_FALSE(b.is_single_token(6));
  // Tokens that neither contain nor end with a beginning of a breaker are not heads.
  for (const int32_t id : {0, 1, 4, 5, 7, 8, 10, 11}) EXPECT_EQ(b.tails(id), nullptr) << "token " << id;
}

TEST(Dry, BreakerStringsInARealVocabulary) {
  const std::filesystem::path path = std::filesystem::path(ZINC_TESTDATA_DIR) / "vocab" / "ggml-vocab-gpt-2.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not found";
  const gguf::File f = gguf::File::open(path);
  const tokenizer::Tokenizer tok = tokenizer::Tokenizer::from_gguf(f);
  const TokenTexts texts = token_texts(tok);
  const std::vector<std::string> strings = {"\n", ":"};
  const DryBreakers b = DryBreakers::from_strings(strings, texts);
  int singles = 0;
  for (int32_t id = 0; id < tok.vocab().size(); ++id) {
    const int32_t one[1] = {id};
    const std::string text = tok.decode(one);
    const bool contains = text.find('\n') != std::string::npos || text.find(':') != std::string::npos;
    ASSERT_EQ(b.is_single_token(id), contains) << "token " << id;
    singles += contains;
  }
  EXPECT_GT(singles, 10);
}

}  // namespace
}  // namespace zinc::sample
