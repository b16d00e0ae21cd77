// DRY: breaker preparation from token texts, the repetition lengths of one step (a Z-function over
// the reversed window), and the penalties. Definitions in dry.h.
#include "sample/dry.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace zinc::sample {
namespace {

// llama.cpp's bounds on breakers: longer strings are cut, longer tails are cut.
constexpr size_t kMaxBreakerBytes = 40;
constexpr size_t kMaxTailTokens = 20;

}  // namespace

TokenTexts token_texts(const tokenizer::Tokenizer& tokenizer) {
  TokenTexts t;
  t.n_vocab = tokenizer.vocab().size();
  t.text = [&tokenizer](int32_t id) {
    const int32_t one[1] = {id};
    return tokenizer.decode(one);
  };
  t.encode = [&tokenizer](std::string_view text) { return tokenizer.encode(text, false, false); };
  return t;
}

void DryBreakers::add(std::span<const int32_t> sequence) {
  if (sequence.empty()) return;
  std::vector<int32_t> tail(sequence.begin() + 1, sequence.end());
  auto& tails = by_head_[sequence[0]];
  if (std::find(tails.begin(), tails.end(), tail) == tails.end()) tails.push_back(std::move(tail));
}

bool DryBreakers::is_single_token(int32_t token) const {
  const auto* t = tails(token);
  return t != nullptr && std::any_of(t->begin(), t->end(), [](const auto& tail) { return tail.empty(); });
}

const std::vector<std::vector<int32_t>>* DryBreakers::tails(int32_t head) const {
  const auto it = by_head_.find(head);
  return it == by_head_.end() ? nullptr : &it->second;
}

DryBreakers DryBreakers::from_strings(std::span<const std::string> breakers, const TokenTexts& texts) {
  DryBreakers out;
  std::vector<std::string> cut;
  for (const std::string& b : breakers) {
    if (!b.empty()) cut.push_back(b.substr(0, kMaxBreakerBytes));
  }
  if (cut.empty()) return out;
  // The tail of a multi-token breaker depends only on (breaker, bytes already matched): encode each once.
  std::map<std::pair<size_t, size_t>, std::vector<int32_t>> tail_cache;
  const auto tail_of = [&](size_t b, size_t matched) -> const std::vector<int32_t>* {
    const auto key = std::make_pair(b, matched);
    auto it = tail_cache.find(key);
    if (it == tail_cache.end()) {
      std::vector<int32_t> tail;
      try {
        tail = texts.encode(std::string_view(cut[b]).substr(matched));
      } catch (const Error&) {
        // The rest starts inside a UTF-8 sequence (the head token ends in a partial character) and
        // plain text cannot spell it: no tail, so no breaker through this head.
      }
      if (tail.size() > kMaxTailTokens) tail.resize(kMaxTailTokens);
      it = tail_cache.emplace(key, std::move(tail)).first;
    }
    return it->second.empty() ? nullptr : &it->second;
  };

  std::vector<int32_t> seq;
  for (int32_t id = 0; id < texts.n_vocab; ++id) {
    const std::string word = texts.text(id);
    for (size_t b = 0; b < cut.size(); ++b) {
      const std::string& s = cut[b];
      if (word.find(s) != std::string::npos) {
        const int32_t head[1] = {id};
        out.add(head);
        continue;
      }
      // The token ends with the breaker's first `n` bytes: the rest of the breaker must follow.
      for (size_t pos = word.find(s[0]); pos != std::string::npos; pos = word.find(s[0], pos + 1)) {
        const size_t n = word.size() - pos;
        if (n >= s.size() || word.compare(pos, n, s, 0, n) != 0) continue;
        const std::vector<int32_t>* tail = tail_of(b, n);
        if (tail == nullptr) continue;
        seq.assign(1, id);
        seq.insert(seq.end(), tail->begin(), tail->end());
        out.add(seq);
      }
    }
  }
  return out;
}

const std::vector<std::pair<int32_t, int32_t>>& Dry::repeat_lengths(std::span<const int32_t> window) {
  lengths_.clear();
  const auto n = static_cast<int32_t>(window.size());
  const int32_t allowed = params_.allowed_length;
  if (n <= allowed) return lengths_;
  recent_.assign(window.rbegin(), window.rend());

  // A repetition may not reach back across a breaker: find the most recent breaker occurrence
  // (its head at recent_[i], its tail after it in time, i.e. at recent_[i-1], recent_[i-2], ...);
  // the longest breaker with that head wins.
  int32_t limit = n;
  for (int32_t i = 0; i < n; ++i) {
    const auto* tails = breakers_.tails(recent_[static_cast<size_t>(i)]);
    if (tails == nullptr) continue;
    int32_t longest = -1;
    for (const auto& tail : *tails) {
      const auto len = static_cast<int32_t>(tail.size());
      if (len <= longest || len > i) continue;
      bool match = true;
      for (int32_t j = 0; j < len && match; ++j)
        match = tail[static_cast<size_t>(j)] == recent_[static_cast<size_t>(i - 1 - j)];
      if (match) longest = len;
    }
    if (longest >= 0) {
      limit = i - longest;
      break;
    }
  }
  if (limit < allowed) return lengths_;

  // z_[k] = length of the longest common prefix of recent_ and recent_[k..]: the number of tokens
  // before (in time) position n-1-k that repeat the window's last tokens.
  z_.assign(static_cast<size_t>(n), 0);
  z_[0] = n;
  for (int32_t k = 1, lo = 0, hi = 0; k < n; ++k) {
    int32_t len = 0;
    if (k < hi) len = std::min(hi - k, z_[static_cast<size_t>(k - lo)]);
    while (k + len < n && recent_[static_cast<size_t>(len)] == recent_[static_cast<size_t>(k + len)]) ++len;
    z_[static_cast<size_t>(k)] = len;
    if (k + len > hi) {
      lo = k;
      hi = k + len;
    }
  }

  // The token that followed that earlier occurrence (recent_[k-1]) would extend the repetition.
  longest_.clear();
  for (int32_t k = 1; k < n; ++k) {
    const int32_t len = std::min(z_[static_cast<size_t>(k)], limit);
    if (len < allowed) continue;
    const int32_t next = recent_[static_cast<size_t>(k - 1)];
    auto [it, inserted] = longest_.try_emplace(next, len);
    if (!inserted && it->second < len) it->second = len;
  }
  lengths_.assign(longest_.begin(), longest_.end());
  std::sort(lengths_.begin(), lengths_.end());
  return lengths_;
}

void Dry::apply(Candidates& c, std::span<const int32_t> window) {
  if (params_.multiplier == 0.0f) return;
  const auto& lengths = repeat_lengths(window);
  if (lengths.empty()) return;
  // base^e overflows a float past e = ln(FLT_MAX) / ln(base): clamp the exponent there.
  int32_t max_exponent = 0;
  if (params_.base > 1.000001f) max_exponent = static_cast<int32_t>(88.7228391f / std::log(params_.base));
  ids_.clear();
  amounts_.clear();
  for (const auto& [token, len] : lengths) {
    if (token < 0 || token >= c.n_vocab() || breakers_.is_single_token(token)) continue;
    int32_t e = len - params_.allowed_length;
    if (max_exponent > 0 && e > max_exponent) e = max_exponent;
    ids_.push_back(token);
    amounts_.push_back(
        static_cast<float>(static_cast<double>(params_.multiplier) * std::pow(static_cast<double>(params_.base), e)));
  }
  c.adjust(ids_, [&](size_t j, float x) { return x - amounts_[j]; });
}

}  // namespace zinc::sample
