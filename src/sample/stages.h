// The sampler stages, one function each, over the candidates of one step (candidates.h). Each follows
// the definition of the llama.cpp sampler of the same name (src/llama-sampling.cpp), edge cases
// included; where it differs the comment says so. Sampler (sampler.h) chains them. DRY is in dry.h.
//
// Stages leave candidates they remove out of the list (llama.cpp keeps some at -inf: the same
// distribution). A stage whose parameter means "disabled" returns at once.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <utility>

#include "sample/candidates.h"

namespace zinc::sample {

// A uniform double in [0, 1) from the next 64-bit output: the top 53 bits times 2^-53. Written out
// (not std::uniform_real_distribution, whose algorithm each standard library chooses) so a seed gives
// the same draws with every compiler.
inline double uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

namespace stage {

// logit += bias for each (token, bias); tokens distinct and inside the vocabulary.
void logit_bias(Candidates& c, std::span<const int32_t> ids, std::span<const float> bias);

// Repetition, frequency and presence penalties (llama.cpp "penalties") for tokens seen counts[j] > 0
// times in the window: a positive logit is divided by `repeat`, a negative or zero one multiplied by
// it; then logit -= count * frequency + presence. Disabled when repeat == 1 and both others are 0.
void penalties(Candidates& c, std::span<const int32_t> ids, std::span<const int32_t> counts, float repeat,
               float frequency, float presence);

// Keeps the k best-ranked tokens, sorted. k <= 0: disabled; k >= size: nothing removed.
void top_k(Candidates& c, int32_t k);

// Locally typical sampling (Meister et al. 2022): with H the entropy of softmax(logits), orders tokens
// by |-log p - H| (ties in rank order) and keeps the shortest such prefix whose probability sum
// exceeds p (strictly), and at least min_keep tokens. p >= 1: disabled. Zero-probability tokens count
// 0 towards H and come last.
void typical(Candidates& c, float p, size_t min_keep);

// Nucleus: keeps the shortest rank-order prefix whose probability sum reaches p (>=), and at least
// min_keep tokens; all tokens when rounding keeps the sum below p. p >= 1: disabled.
void top_p(Candidates& c, float p, size_t min_keep);

// Keeps tokens with probability >= p * (largest probability), i.e. logit >= max + ln p; when fewer
// than min_keep pass, the min_keep best-ranked. p <= 0: disabled.
void min_p(Candidates& c, float p, size_t min_keep);

// Exclude Top Choices: with chance `probability` (one uniform01 from rng per step while enabled and
// at least 2 candidates), removes every token with probability >= threshold except the least
// likely of them — only when at least two reach the threshold and min_keep tokens stay.
// Disabled when probability <= 0 or threshold > 0.5.
void xtc(Candidates& c, float probability, float threshold, size_t min_keep, std::mt19937_64& rng);

// logit /= t; t == 0 keeps only the best-ranked token (greedy).
void temperature(Candidates& c, float t);

// The draw: w_i = exp(logit_i - max) over the candidates in ascending token id; u = uniform01(rng);
// returns the first token whose running sum of w (in double) exceeds u * sum(w). Tokens at -inf have
// w = 0 and are never drawn. Throws zinc::Error when there is no candidate or every logit is -inf.
int32_t draw(Candidates& c, std::mt19937_64& rng);

}  // namespace stage
}  // namespace zinc::sample
