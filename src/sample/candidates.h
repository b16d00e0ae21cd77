// The candidate tokens of one sampling step, kept cheap for 150k–260k vocabularies.
//
// A step starts with the whole vocabulary: the logits row is borrowed, not copied, and the sparse
// stages (logit bias, penalties, DRY) record their changes as a short list of overrides. The first
// truncating stage then selects from the row in one pass — top-k with a running threshold, min-p with
// a logit cut, greedy with an argmax — and only the survivors are copied into an explicit list. Later
// stages work on that list: they sort only the prefix they need (grow_sorted_prefix) or select by
// probability mass with buckets (MassSelector). Stages without a one-pass form (top-p, typical-p, XTC
// and temperature applied to the whole vocabulary) copy the row once. So a step costs one or two
// passes over the row when top-k or min-p comes first, a few when not, and never a full sort.
//
// Non-finite logits: NaN is never selected (it enters a list as -inf, probability 0) and +inf enters
// as the largest finite float, so softmax never computes inf - inf.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

namespace zinc::sample {

struct TokenProb {
  int32_t id;
  float logit;
  float p;  // probability, set by Candidates::softmax (and by the draw as a weight)
};

// The rank order: higher logit first, equal logits by lower id. Every selection breaks ties this way,
// so which tokens survive a stage never depends on the path that selected them.
// A function object rather than a function, so the sorts and selections that take it inline it.
struct RankOrder {
  bool operator()(const TokenProb& a, const TokenProb& b) const {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  }
};
inline constexpr RankOrder ranks_before{};

// A logit as it enters a list: NaN becomes -inf (never drawn), +inf the largest finite float.
inline float clean_logit(float x) {
  if (x != x) return -std::numeric_limits<float>::infinity();
  if (x > std::numeric_limits<float>::max()) return std::numeric_limits<float>::max();
  return x;
}

// Extends the sorted prefix of v (its first `sorted` elements are the best ones under `before`, in
// order) to at least `want` elements, with one partial selection over the rest and a sort of the
// newly taken part. Returns the new prefix length. Callers double `want` as they walk, so walking k
// elements costs O(n log(k)) compares instead of a full sort.
template <class T, class Before>
size_t grow_sorted_prefix(std::vector<T>& v, size_t sorted, size_t want, Before before) {
  want = std::min(want, v.size());
  if (want <= sorted) return sorted;
  const auto first = v.begin() + static_cast<std::ptrdiff_t>(sorted);
  const auto mid = v.begin() + static_cast<std::ptrdiff_t>(want);
  if (mid != v.end()) std::nth_element(first, mid, v.end(), before);
  std::sort(first, mid, before);
  return want;
}

// Reorders v so that its first m elements are the m best under `before` (in no particular order) and
// returns m: the smallest count whose mass (mass(e) summed in double over those m) satisfies
// reached(sum), or v.size() when none does (v then keeps its order). reached must be false for 0 and
// stay true once true. key(e) is a float that orders like `before` (smaller key first; equal keys are
// left to `before`), +inf allowed.
//
// Buckets instead of a sort: one pass finds the key range, one drops each element's mass into one of
// 2048 buckets over it, a walk over the buckets finds the one holding the boundary, and one pass moves
// the elements of earlier buckets to the front; only the boundary bucket is sorted. A nucleus of 100k
// tokens out of 260k costs three passes, not a sort. The scratch vectors are kept between calls.
template <class T>
class MassSelector {
 public:
  template <class Key, class Before, class Mass, class Reached>
  size_t select(std::vector<T>& v, Key key, Before before, Mass mass, Reached reached) {
    constexpr size_t kBuckets = 2048;
    constexpr size_t kSmall = 64;
    const size_t n = v.size();
    float lo = std::numeric_limits<float>::infinity(), hi = -lo;
    for (const T& e : v) {
      const float k = key(e);
      lo = std::min(lo, k);
      if (k < std::numeric_limits<float>::infinity()) hi = std::max(hi, k);
    }
    if (n <= kSmall || !(hi > lo) || !(hi - lo < std::numeric_limits<float>::infinity())) {
      std::sort(v.begin(), v.end(), before);
      return walk(v, 0, n, 0.0, mass, reached);
    }
    const float scale = static_cast<float>(kBuckets) / (hi - lo);
    bucket_.resize(n);
    bucket_mass_.assign(kBuckets + 1, 0.0);
    bucket_count_.assign(kBuckets + 1, 0);
    for (size_t i = 0; i < n; ++i) {
      const float k = key(v[i]);
      // A bucket index never decreases as the key grows (IEEE subtraction and scaling are monotone);
      // +inf keys go to the extra last bucket.
      const size_t b = k <= hi ? std::min(kBuckets - 1, static_cast<size_t>((k - lo) * scale)) : kBuckets;
      bucket_[i] = static_cast<uint16_t>(b);
      bucket_mass_[b] += mass(v[i]);
      ++bucket_count_[b];
    }
    double acc = 0.0;
    size_t boundary = kBuckets + 1, before_boundary = 0;
    for (size_t b = 0; b <= kBuckets; ++b) {
      if (reached(acc + bucket_mass_[b])) {
        boundary = b;
        break;
      }
      acc += bucket_mass_[b];
      before_boundary += bucket_count_[b];
    }
    if (boundary > kBuckets) return n;
    // One pass moves each element to its group: earlier buckets, the boundary bucket, the rest.
    const size_t boundary_end = before_boundary + bucket_count_[boundary];
    out_.resize(n);
    size_t cursor[3] = {0, before_boundary, boundary_end};
    for (size_t i = 0; i < n; ++i) {
      const size_t group = (bucket_[i] > boundary) + (bucket_[i] >= boundary);
      out_[cursor[group]++] = v[i];
    }
    v.swap(out_);
    std::sort(v.begin() + static_cast<std::ptrdiff_t>(before_boundary),
              v.begin() + static_cast<std::ptrdiff_t>(boundary_end), before);
    return walk(v, before_boundary, boundary_end, acc, mass, reached);
  }

 private:
  // Adds the masses of the sorted v[from, to) to acc until reached.
  template <class Mass, class Reached>
  static size_t walk(const std::vector<T>& v, size_t from, size_t to, double acc, Mass mass, Reached reached) {
    for (size_t i = from; i < to; ++i) {
      acc += mass(v[i]);
      if (reached(acc)) return i + 1;
    }
    return to;
  }

  std::vector<uint16_t> bucket_;
  std::vector<double> bucket_mass_;
  std::vector<size_t> bucket_count_;
  std::vector<T> out_;
};

class Candidates {
 public:
  // Starts a step over one logits row (n_vocab floats, at least one). The row must stay alive and
  // unchanged until the step's last call.
  void start(std::span<const float> logits);
  // After start(): only these tokens are candidates (distinct ids inside the vocabulary), as a list.
  void restrict_to(std::span<const int32_t> ids);

  int32_t n_vocab() const { return n_vocab_; }
  // Still the whole vocabulary, not yet copied into a list.
  bool whole() const { return whole_; }
  size_t size() const { return whole_ ? static_cast<size_t>(n_vocab_) : list_.size(); }

  // Sparse change: for each ids[j] that is still a candidate, logit = f(j, logit). ids must be
  // distinct and inside the vocabulary. O(ids) on the whole vocabulary, O(list + ids) on a list.
  template <class F>
  void adjust(std::span<const int32_t> ids, F&& f);

  // Keeps the k best-ranked tokens (k >= 1), leaving them sorted. One thresholded pass over the row.
  // `allowed` (bits by token id, bit t % 64 of word t / 64, covering the row): only those tokens are
  // candidates at all (a grammar's mask), so fewer than k may be kept.
  void keep_top_k(size_t k, const uint64_t* allowed = nullptr);
  // Keeps every token whose logit is >= threshold; when fewer than max(min_keep, 1) pass, keeps the
  // max(min_keep, 1) best-ranked tokens instead.
  void keep_logit_at_least(float threshold, size_t min_keep);
  // Keeps the single best-ranked token (the first of equal maxima).
  void keep_best();
  // Largest logit among the candidates (-inf when there is none).
  float max_logit();

  // The candidates as an explicit list, copying the whole row on first use. Stages may reorder,
  // truncate or change it; they then say what is still sorted through set_sorted_prefix.
  std::vector<TokenProb>& list();
  // The first sorted_prefix() entries of list() are the best-ranked ones, in rank order.
  size_t sorted_prefix() const { return whole_ ? 0 : sorted_; }
  // Makes at least n leading entries sorted (fewer if the list is shorter); returns how many are.
  size_t sort_prefix(size_t n);
  void set_sorted_prefix(size_t n) { sorted_ = std::min(n, list_.size()); }
  // p = softmax(logit) over the list (uniform if every logit is -inf).
  void softmax();
  // The list reordered by ascending token id (the order of the draw); valid until the next change.
  std::span<TokenProb> by_id();
  // Scratch for selecting the list by probability mass (top-p).
  MassSelector<TokenProb>& mass_selector() { return selector_; }

 private:
  float logit_of(int32_t id) const;
  void sort_overrides();
  // Visits the whole vocabulary in id order: on_range(begin, end) for runs of unchanged row values,
  // on_override(id, logit) for changed tokens.
  template <class OnRange, class OnOverride>
  void for_each_segment(OnRange&& on_range, OnOverride&& on_override);

  std::span<const float> row_;
  int32_t n_vocab_ = 0;
  bool whole_ = false;
  std::vector<TokenProb> overrides_;    // whole mode: tokens whose logit a sparse stage changed
  std::vector<int32_t> override_slot_;  // (n_vocab) index into overrides_, or -1
  bool overrides_sorted_ = true;
  std::vector<TokenProb> list_;
  size_t sorted_ = 0;
  std::vector<int32_t> slot_;  // (n_vocab) scratch id -> index, all -1 between uses
  std::vector<TokenProb> scratch_;
  MassSelector<TokenProb> selector_;
};

template <class F>
void Candidates::adjust(std::span<const int32_t> ids, F&& f) {
  if (whole_) {
    for (size_t j = 0; j < ids.size(); ++j) {
      const int32_t id = ids[j];
      int32_t s = override_slot_[static_cast<size_t>(id)];
      if (s < 0) {
        s = static_cast<int32_t>(overrides_.size());
        overrides_.push_back({id, row_[static_cast<size_t>(id)], 0.0f});
        override_slot_[static_cast<size_t>(id)] = s;
        overrides_sorted_ = false;
      }
      float& logit = overrides_[static_cast<size_t>(s)].logit;
      logit = f(j, logit);
    }
    return;
  }
  if (ids.empty()) return;
  for (size_t j = 0; j < ids.size(); ++j) slot_[static_cast<size_t>(ids[j])] = static_cast<int32_t>(j);
  for (TokenProb& c : list_) {
    const int32_t s = slot_[static_cast<size_t>(c.id)];
    if (s >= 0) c.logit = clean_logit(f(static_cast<size_t>(s), c.logit));
  }
  for (const int32_t id : ids) slot_[static_cast<size_t>(id)] = -1;
  sorted_ = 0;
}

}  // namespace zinc::sample
