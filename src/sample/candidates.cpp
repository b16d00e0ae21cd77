// Candidates: whole-vocabulary passes and list bookkeeping (see candidates.h for the design).
//
// The passes over the row test blocks of 16 values against the current threshold at once (SSE2
// compares and one mask test on x86-64); only blocks that hold a value at or above the threshold are
// looked at one by one. Once top-k or argmax has seen a few thousand tokens
// the threshold sits in the upper tail of the logits, so nearly every block costs one compare.
#include "sample/candidates.h"

#include <bit>
#include <cmath>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace zinc::sample {
namespace {

constexpr int32_t kBlock = 16;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// True when some value of row[0..kBlock) is >= t (or > t); false for NaN. SSE2 is part of x86-64, so
// this is four compares and one mask test per block there; elsewhere the loop is left to the compiler.
#if defined(__SSE2__)
inline bool block_any_at_least(const float* row, float t) {
  const __m128 v = _mm_set1_ps(t);
  const __m128 m =
      _mm_or_ps(_mm_or_ps(_mm_cmpge_ps(_mm_loadu_ps(row), v), _mm_cmpge_ps(_mm_loadu_ps(row + 4), v)),
                _mm_or_ps(_mm_cmpge_ps(_mm_loadu_ps(row + 8), v), _mm_cmpge_ps(_mm_loadu_ps(row + 12), v)));
  return _mm_movemask_ps(m) != 0;
}
inline bool block_any_above(const float* row, float t) {
  const __m128 v = _mm_set1_ps(t);
  const __m128 m =
      _mm_or_ps(_mm_or_ps(_mm_cmpgt_ps(_mm_loadu_ps(row), v), _mm_cmpgt_ps(_mm_loadu_ps(row + 4), v)),
                _mm_or_ps(_mm_cmpgt_ps(_mm_loadu_ps(row + 8), v), _mm_cmpgt_ps(_mm_loadu_ps(row + 12), v)));
  return _mm_movemask_ps(m) != 0;
}
#else
inline bool block_any_at_least(const float* row, float t) {
  bool any = false;
  for (int32_t j = 0; j < kBlock; ++j) any |= row[j] >= t;
  return any;
}
inline bool block_any_above(const float* row, float t) {
  bool any = false;
  for (int32_t j = 0; j < kBlock; ++j) any |= row[j] > t;
  return any;
}
#endif

// Lists at most this long are put in id order by sorting; longer ones through the dense id map.
constexpr size_t kSortByIdMax = 4096;

}  // namespace

void Candidates::start(std::span<const float> logits) {
  const auto n = static_cast<int32_t>(logits.size());
  if (n != n_vocab_) {
    override_slot_.assign(logits.size(), -1);
    slot_.assign(logits.size(), -1);
  } else {
    for (const TokenProb& o : overrides_) override_slot_[static_cast<size_t>(o.id)] = -1;
  }
  overrides_.clear();
  overrides_sorted_ = true;
  row_ = logits;
  n_vocab_ = n;
  whole_ = true;
  list_.clear();
  sorted_ = 0;
}

void Candidates::restrict_to(std::span<const int32_t> ids) {
  list_.clear();
  list_.reserve(ids.size());
  for (const int32_t id : ids) list_.push_back({id, clean_logit(logit_of(id)), 0.0f});
  whole_ = false;
  sorted_ = 0;
}

float Candidates::logit_of(int32_t id) const {
  const int32_t s = override_slot_[static_cast<size_t>(id)];
  return s >= 0 ? overrides_[static_cast<size_t>(s)].logit : row_[static_cast<size_t>(id)];
}

void Candidates::sort_overrides() {
  if (overrides_sorted_) return;
  std::sort(overrides_.begin(), overrides_.end(), [](const TokenProb& a, const TokenProb& b) { return a.id < b.id; });
  for (size_t i = 0; i < overrides_.size(); ++i)
    override_slot_[static_cast<size_t>(overrides_[i].id)] = static_cast<int32_t>(i);
  overrides_sorted_ = true;
}

template <class OnRange, class OnOverride>
void Candidates::for_each_segment(OnRange&& on_range, OnOverride&& on_override) {
  sort_overrides();
  int32_t next = 0;
  for (const TokenProb& o : overrides_) {
    if (o.id > next) on_range(next, o.id);
    on_override(o.id, o.logit);
    next = o.id + 1;
  }
  if (next < n_vocab_) on_range(next, n_vocab_);
}

void Candidates::keep_top_k(size_t k, const uint64_t* allowed) {
  if (k == 0) k = 1;
  if (allowed && !whole_) {
    std::erase_if(list_, [&](const TokenProb& c) { return !((allowed[static_cast<size_t>(c.id) / 64] >> (c.id % 64)) & 1); });
    sorted_ = 0;
  }
  if (!whole_) {
    if (k >= list_.size()) return;
    sort_prefix(k);
    list_.resize(k);
    sorted_ = k;
    return;
  }
  if (k >= static_cast<size_t>(n_vocab_) && !allowed) return;

  // Running selection: admit a token only if it ranks before the current k-th best; when the
  // buffer fills, cut it back to the k best and raise the bar to the new k-th.
  std::vector<TokenProb>& buf = scratch_;
  buf.clear();
  const size_t cap = k + std::max<size_t>(k, 64);
  buf.reserve(cap);
  float bar = kNegInf;
  int32_t bar_id = std::numeric_limits<int32_t>::max();
  const auto shrink = [&] {
    std::nth_element(buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(k - 1), buf.end(), ranks_before);
    buf.resize(k);
    bar = buf[k - 1].logit;
    bar_id = buf[k - 1].id;
  };
  const auto is_allowed = [allowed](int32_t id) { return ((allowed[static_cast<size_t>(id) / 64] >> (id % 64)) & 1) != 0; };
  const auto consider = [&](int32_t id, float x) {
    if ((x > bar || (x == bar && id < bar_id)) && (!allowed || is_allowed(id))) {
      buf.push_back({id, clean_logit(x), 0.0f});
      if (buf.size() == cap) shrink();
    }
  };
  const float* row = row_.data();
  for_each_segment(
      [&](int32_t begin, int32_t end) {
        int32_t i = begin;
        if (allowed) {
          // By the mask's words: a block the mask or the bar rules out is skipped whole (a grammar's
          // mask is often sparse, and then the bar never rises), else its allowed tokens.
          static_assert(64 % kBlock == 0);
          for (; i < end && i % 64 != 0; ++i) consider(i, row[i]);
          for (; i + 64 <= end; i += 64) {
            const uint64_t word = allowed[static_cast<size_t>(i) / 64];
            if (word == 0) continue;
            for (int32_t q = 0; q < 64; q += kBlock) {
              uint64_t b = (word >> q) & ((uint64_t{1} << kBlock) - 1);
              if (b == 0 || !block_any_at_least(row + i + q, bar)) continue;
              for (; b != 0; b &= b - 1) {
                const int32_t id = i + q + std::countr_zero(b);
                consider(id, row[id]);
              }
            }
          }
          for (; i < end; ++i) consider(i, row[i]);
          return;
        }
        for (; i + kBlock <= end; i += kBlock) {
          if (!block_any_at_least(row + i, bar)) continue;
          for (int32_t j = 0; j < kBlock; ++j) consider(i + j, row[i + j]);
        }
        for (; i < end; ++i) consider(i, row[i]);
      },
      consider);
  if (buf.size() > k) shrink();
  std::sort(buf.begin(), buf.end(), ranks_before);
  list_.swap(buf);
  whole_ = false;
  sorted_ = list_.size();
}

void Candidates::keep_logit_at_least(float threshold, size_t min_keep) {
  min_keep = std::max<size_t>(min_keep, 1);
  if (whole_) {
    std::vector<TokenProb>& kept = scratch_;
    kept.clear();
    const float* row = row_.data();
    const auto take = [&](int32_t id, float x) {
      if (x >= threshold) kept.push_back({id, clean_logit(x), 0.0f});
    };
    for_each_segment(
        [&](int32_t begin, int32_t end) {
          int32_t i = begin;
          for (; i + kBlock <= end; i += kBlock) {
            if (!block_any_at_least(row + i, threshold)) continue;
            for (int32_t j = 0; j < kBlock; ++j) take(i + j, row[i + j]);
          }
          for (; i < end; ++i) take(i, row[i]);
        },
        take);
    if (kept.size() < min_keep) {
      keep_top_k(min_keep);
      return;
    }
    list_.swap(kept);
    whole_ = false;
    sorted_ = 0;
    return;
  }
  size_t passing = 0, passing_in_prefix = 0;
  for (size_t i = 0; i < list_.size(); ++i) {
    if (list_[i].logit >= threshold) {
      ++passing;
      if (i < sorted_) ++passing_in_prefix;
    }
  }
  if (passing < min_keep) {
    keep_top_k(min_keep);
    return;
  }
  // A stable filter keeps relative order, so the surviving part of the sorted prefix stays the
  // best-ranked and sorted.
  list_.erase(std::remove_if(list_.begin(), list_.end(), [&](const TokenProb& c) { return !(c.logit >= threshold); }),
              list_.end());
  sorted_ = passing_in_prefix;
}

void Candidates::keep_best() {
  if (!whole_) {
    if (list_.size() <= 1) {
      sorted_ = list_.size();
      return;
    }
    const auto best = *std::min_element(list_.begin(), list_.end(), ranks_before);
    list_.assign(1, best);
    sorted_ = 1;
    return;
  }
  float best = kNegInf;
  int32_t best_id = -1;
  const auto consider = [&](int32_t id, float x) {
    if (x > best) {
      best = x;
      best_id = id;
    }
  };
  const float* row = row_.data();
  for_each_segment(
      [&](int32_t begin, int32_t end) {
        int32_t i = begin;
        for (; i + kBlock <= end; i += kBlock) {
          if (!block_any_above(row + i, best)) continue;
          for (int32_t j = 0; j < kBlock; ++j) consider(i + j, row[i + j]);
        }
        for (; i < end; ++i) consider(i, row[i]);
      },
      consider);
  if (best_id < 0) {
    // Nothing above -inf: the first -inf token is the best-ranked one (NaN tokens are never kept).
    for (int32_t id = 0; id < n_vocab_; ++id) {
      if (logit_of(id) == kNegInf) {
        best_id = id;
        break;
      }
    }
  }
  list_.clear();
  if (best_id >= 0) list_.push_back({best_id, clean_logit(logit_of(best_id)), 0.0f});
  whole_ = false;
  sorted_ = list_.size();
}

float Candidates::max_logit() {
  float m = kNegInf;
  if (!whole_) {
    for (const TokenProb& c : list_) m = std::max(m, c.logit);
    return m;
  }
  const auto consider = [&](int32_t, float x) {
    if (x > m) m = x;
  };
  const float* row = row_.data();
  for_each_segment(
      [&](int32_t begin, int32_t end) {
        int32_t i = begin;
        for (; i + kBlock <= end; i += kBlock) {
          if (!block_any_above(row + i, m)) continue;
          for (int32_t j = 0; j < kBlock; ++j) consider(i + j, row[i + j]);
        }
        for (; i < end; ++i) consider(i, row[i]);
      },
      consider);
  return clean_logit(m);
}

std::vector<TokenProb>& Candidates::list() {
  if (!whole_) return list_;
  list_.resize(static_cast<size_t>(n_vocab_));
  TokenProb* out = list_.data();
  const float* row = row_.data();
  for_each_segment(
      [&](int32_t begin, int32_t end) {
        for (int32_t i = begin; i < end; ++i) out[i] = {i, clean_logit(row[i]), 0.0f};
      },
      [&](int32_t id, float x) {
        out[id] = {id, clean_logit(x), 0.0f};
      });
  whole_ = false;
  sorted_ = 0;
  return list_;
}

size_t Candidates::sort_prefix(size_t n) {
  list();
  sorted_ = grow_sorted_prefix(list_, sorted_, n, ranks_before);
  return sorted_;
}

void Candidates::softmax() {
  list();
  if (list_.empty()) return;
  float m = kNegInf;
  for (const TokenProb& c : list_) m = std::max(m, c.logit);
  if (m == kNegInf) {
    const float u = 1.0f / static_cast<float>(list_.size());
    for (TokenProb& c : list_) c.p = u;
    return;
  }
  double sum = 0.0;
  for (TokenProb& c : list_) {
    c.p = std::exp(c.logit - m);
    sum += c.p;
  }
  const auto inv = static_cast<float>(1.0 / sum);
  for (TokenProb& c : list_) c.p *= inv;
}

std::span<TokenProb> Candidates::by_id() {
  list();
  const auto by_id_less = [](const TokenProb& a, const TokenProb& b) { return a.id < b.id; };
  if (std::is_sorted(list_.begin(), list_.end(), by_id_less)) return list_;
  if (list_.size() <= kSortByIdMax) {
    std::sort(list_.begin(), list_.end(), by_id_less);
  } else {
    // Dense pass: mark each candidate's position by id, then read the marks in id order.
    for (size_t i = 0; i < list_.size(); ++i) slot_[static_cast<size_t>(list_[i].id)] = static_cast<int32_t>(i);
    scratch_.clear();
    scratch_.reserve(list_.size());
    for (size_t id = 0; id < slot_.size(); ++id) {
      if (slot_[id] >= 0) {
        scratch_.push_back(list_[static_cast<size_t>(slot_[id])]);
        slot_[id] = -1;
      }
    }
    list_.swap(scratch_);
  }
  sorted_ = 0;
  return list_;
}

}  // namespace zinc::sample
