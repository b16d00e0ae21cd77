// The sampler stages (see stages.h for each definition). Nothing here sorts a long list: top-p and
// typical-p select their kept set by mass (MassSelector: bucket passes, no sort), XTC walks a sorted
// prefix that grows by doubling, and after top-k the list is short and already sorted.
#include "sample/stages.h"

#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"

namespace zinc::sample::stage {
namespace {

constexpr size_t kFirstPrefix = 64;

// Makes index i of the list sorted, doubling the sorted prefix when i reaches its end.
inline void need_sorted(Candidates& c, size_t i) {
  if (i >= c.sorted_prefix()) c.sort_prefix(std::max(kFirstPrefix, 2 * (i + 1)));
}

}  // namespace

void logit_bias(Candidates& c, std::span<const int32_t> ids, std::span<const float> bias) {
  c.adjust(ids, [&](size_t j, float x) { return x + bias[j]; });
}

void penalties(Candidates& c, std::span<const int32_t> ids, std::span<const int32_t> counts, float repeat,
               float frequency, float presence) {
  if (repeat == 1.0f && frequency == 0.0f && presence == 0.0f) return;
  c.adjust(ids, [&](size_t j, float x) {
    const int32_t n = counts[j];
    if (n <= 0) return x;
    // Dividing a negative logit would raise it; multiplying lowers it, as intended.
    x = x <= 0.0f ? x * repeat : x / repeat;
    return x - static_cast<float>(n) * frequency - presence;
  });
}

void top_k(Candidates& c, int32_t k) {
  if (k <= 0) return;
  c.keep_top_k(static_cast<size_t>(k));
}

// Keeps the first max(m, min_keep) of v under `before`, where v's first m are already the m best.
template <class T, class Before>
void keep_best_at_least(std::vector<T>& v, size_t m, size_t min_keep, Before before) {
  if (m < min_keep && min_keep < v.size()) {
    std::nth_element(v.begin() + static_cast<std::ptrdiff_t>(m), v.begin() + static_cast<std::ptrdiff_t>(min_keep),
                     v.end(), before);
  }
  v.resize(std::min(v.size(), std::max(m, min_keep)));
}

void typical(Candidates& c, float p, size_t min_keep) {
  if (p >= 1.0f) return;
  std::vector<TokenProb>& list = c.list();
  if (list.empty()) return;
  c.softmax();
  double entropy = 0.0;
  for (const TokenProb& t : list) {
    if (t.p > 0.0f) entropy -= static_cast<double>(t.p) * std::log(static_cast<double>(t.p));
  }
  struct Scored {
    float score;
    TokenProb tok;
  };
  std::vector<Scored> scored;
  scored.reserve(list.size());
  for (const TokenProb& t : list) {
    const float score = t.p > 0.0f ? static_cast<float>(std::fabs(-std::log(static_cast<double>(t.p)) - entropy))
                                   : std::numeric_limits<float>::infinity();
    scored.push_back({score, t});
  }
  const auto before = [](const Scored& a, const Scored& b) {
    if (a.score != b.score) return a.score < b.score;
    return ranks_before(a.tok, b.tok);
  };
  MassSelector<Scored> selector;
  const size_t m = selector.select(
      scored, [](const Scored& s) { return s.score; }, before,
      [](const Scored& s) { return static_cast<double>(s.tok.p); }, [p](double cum) { return cum > p; });
  keep_best_at_least(scored, m, min_keep, before);
  list.clear();
  for (const Scored& s : scored) list.push_back(s.tok);
  c.set_sorted_prefix(0);  // in no rank order now
}

void top_p(Candidates& c, float p, size_t min_keep) {
  if (p >= 1.0f) return;
  std::vector<TokenProb>& list = c.list();
  if (list.empty()) return;
  c.softmax();
  const auto reached = [p](double cum) { return cum >= p; };
  if (c.sorted_prefix() < list.size()) {
    // Unsorted (typically the whole vocabulary): select the nucleus without sorting it.
    const size_t m = c.mass_selector().select(
        list, [](const TokenProb& t) { return -t.logit; }, ranks_before,
        [](const TokenProb& t) { return static_cast<double>(t.p); }, reached);
    keep_best_at_least(list, m, min_keep, ranks_before);
    c.set_sorted_prefix(0);
    return;
  }
  double cum = 0.0;
  for (size_t i = 0; i < list.size(); ++i) {
    cum += list[i].p;
    if (reached(cum) && i + 1 >= min_keep) {
      list.resize(i + 1);
      c.set_sorted_prefix(i + 1);
      return;
    }
  }
}

void min_p(Candidates& c, float p, size_t min_keep) {
  if (p <= 0.0f || c.size() == 0) return;
  // p_i >= p * p_max  <=>  logit_i - max >= ln p: no softmax needed.
  c.keep_logit_at_least(c.max_logit() + std::log(p), min_keep);
}

void xtc(Candidates& c, float probability, float threshold, size_t min_keep, std::mt19937_64& rng) {
  if (probability <= 0.0f || threshold > 0.5f || c.size() < 2) return;
  if (uniform01(rng) > probability) return;
  std::vector<TokenProb>& list = c.list();
  c.softmax();
  size_t above = 0;  // leading rank-order tokens with p >= threshold
  for (size_t i = 0; i < list.size(); ++i) {
    need_sorted(c, i);
    if (list[i].p < threshold) break;
    above = i + 1;
  }
  if (above < 2) return;
  const size_t cut = above - 1;  // the least likely of the top choices stays
  if (list.size() - cut < min_keep) return;
  const size_t sorted = c.sorted_prefix();
  list.erase(list.begin(), list.begin() + static_cast<std::ptrdiff_t>(cut));
  c.set_sorted_prefix(sorted - cut);
}

void temperature(Candidates& c, float t) {
  if (t == 0.0f) {
    c.keep_best();
    return;
  }
  // Dividing by t > 0 keeps the rank order, so the sorted prefix stays valid.
  for (TokenProb& tok : c.list()) tok.logit /= t;
}

int32_t draw(Candidates& c, std::mt19937_64& rng) {
  const std::span<TokenProb> cands = c.by_id();
  float max = -std::numeric_limits<float>::infinity();
  for (const TokenProb& t : cands) max = std::max(max, t.logit);
  if (cands.empty() || max == -std::numeric_limits<float>::infinity()) {
    throw Error(
        "sampling: no token can be chosen: every candidate's logit is -inf or NaN (a logit bias of -inf on every "
        "remaining token, or a model that produced NaN)");
  }
  double total = 0.0;
  for (TokenProb& t : cands) {
    t.p = std::exp(t.logit - max);
    total += t.p;
  }
  const double target = uniform01(rng) * total;
  double run = 0.0;
  int32_t last_positive = -1;
  for (const TokenProb& t : cands) {
    if (t.p <= 0.0f) continue;
    run += t.p;
    last_positive = t.id;
    if (run > target) return t.id;
  }
  return last_positive;  // unreachable: the walk sums the same terms as total in the same order
}

}  // namespace zinc::sample::stage
