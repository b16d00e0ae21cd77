// Sampler benchmark: microseconds per sampling step (sample + accept) on one thread, for the chains
// people run, at Qwen's (151936) and Gemma 3's (262144) vocabulary sizes. Prints a markdown table.
//
// Logits are synthetic but shaped like decode steps: N(0, 2) for the vocabulary with 40 tokens lifted
// into a head, 10–20 in half the rows (a confident step: the head holds nearly all the mass) and 4–10
// in the other half (an open step: the tail holds much of it, so a nucleus over the whole vocabulary
// is tens of thousands of tokens). Eight rows are cycled so no row stays hot in cache. The "argmax pass" row is one
// std::max_element over the row: the floor any sampler that reads every logit pays.
//
// Usage: zinc_sample_bench [--min-ms 300] [--only TEXT]   (--only: chains whose name contains TEXT)
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "sample/sampler.h"

using zinc::sample::Sampler;
using zinc::sample::SamplerParams;
using Clock = std::chrono::steady_clock;

namespace {

std::vector<std::vector<float>> make_rows(size_t n_vocab, int n_rows) {
  std::vector<std::vector<float>> rows;
  std::mt19937 rng(static_cast<uint32_t>(n_vocab));
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::uniform_real_distribution<float> confident(10.0f, 20.0f), open(4.0f, 10.0f);
  for (int r = 0; r < n_rows; ++r) {
    std::vector<float> row(n_vocab);
    for (float& x : row) x = normal(rng);
    for (int i = 0; i < 40; ++i) row[rng() % n_vocab] = r % 2 == 0 ? confident(rng) : open(rng);
    rows.push_back(std::move(row));
  }
  return rows;
}

// Mean microseconds per call of step(row), run for at least min_ms after a warm-up.
double time_per_step(const std::vector<std::vector<float>>& rows, double min_ms,
                     const std::function<void(const std::vector<float>&)>& step) {
  for (size_t i = 0; i < 2 * rows.size(); ++i) step(rows[i % rows.size()]);
  size_t steps = 0;
  const auto start = Clock::now();
  double elapsed_ms = 0;
  while (elapsed_ms < min_ms) {
    for (size_t i = 0; i < 64; ++i) step(rows[(steps + i) % rows.size()]);
    steps += 64;
    elapsed_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  }
  return elapsed_ms * 1000.0 / static_cast<double>(steps);
}

struct Chain {
  std::string name;
  SamplerParams params;
};

std::vector<Chain> chains() {
  std::vector<Chain> out;
  out.push_back({"greedy (temperature 0)", SamplerParams::greedy()});
  out.push_back({"default (llama.cpp common order)", SamplerParams{}});
  out.push_back({"chat (top_k 40, min_p 0.05, temp 0.7)", SamplerParams::chat()});
  SamplerParams penalties;
  penalties.repeat_penalty = 1.1f;
  penalties.frequency_penalty = 0.1f;
  penalties.presence_penalty = 0.1f;
  penalties.dry_multiplier = 0.8f;
  penalties.dry_sequence_breakers = {};
  penalties.dry_breaker_tokens = {{13}, {25}};
  penalties.n_ctx = 4096;
  out.push_back({"default + penalties 64 + DRY (window 4096)", penalties});
  SamplerParams xtc;
  xtc.xtc_probability = 0.5f;
  xtc.typical_p = 0.95f;
  out.push_back({"default + typical 0.95 + XTC 0.5", xtc});
  SamplerParams nucleus;
  nucleus.top_k = 0;
  out.push_back({"no top_k (top_p 0.95 over the vocabulary)", nucleus});
  SamplerParams full;
  full.top_k = 0;
  full.top_p = 1.0f;
  full.min_p = 0.0f;
  out.push_back({"no truncation (temperature + draw over all)", full});
  for (Chain& c : out) c.params.seed = 1234;
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  double min_ms = 300;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--min-ms") == 0 && i + 1 < argc) {
      min_ms = std::atof(argv[++i]);
    } else if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
      only = argv[++i];
    } else {
      fmt::print(stderr, "usage: {} [--min-ms 300] [--only TEXT]\n", argv[0]);
      return 2;
    }
  }
  const size_t sizes[] = {151936, 262144};
  std::vector<std::vector<std::vector<float>>> rows;
  for (const size_t n : sizes) rows.push_back(make_rows(n, 8));

  fmt::print("| chain | µs/step, vocab {} | µs/step, vocab {} |\n|---|---:|---:|\n", sizes[0], sizes[1]);
  if (only.empty()) {
    std::vector<double> us;
    for (const auto& r : rows) {
      volatile float sink = 0;
      us.push_back(time_per_step(
          r, min_ms, [&](const std::vector<float>& row) { sink = sink + *std::max_element(row.begin(), row.end()); }));
    }
    fmt::print("| argmax pass (std::max_element, reference) | {:.1f} | {:.1f} |\n", us[0], us[1]);
  }
  for (const Chain& c : chains()) {
    if (c.name.find(only) == std::string::npos) continue;
    std::vector<double> us;
    for (const auto& r : rows) {
      Sampler sampler(c.params);
      us.push_back(
          time_per_step(r, min_ms, [&](const std::vector<float>& row) { sampler.accept(sampler.sample(row)); }));
    }
    fmt::print("| {} | {:.1f} | {:.1f} |\n", c.name, us[0], us[1]);
  }
  return 0;
}
