// What the speculative-decoding tests share: drafts scripted from a reference generation, and
// generations of sequences of one context stepped together as the server's scheduler steps them.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "runtime/generate.h"
#include "runtime/session.h"

namespace zinc::test {

// Up to n tokens of `reference` (a generation after a prompt of `prompt` tokens) after `context` (which
// ends with a generated token), wrong at one place that moves round by round: in round r, token
// r % period is replaced (none where that is past the proposal). Never empty.
inline std::vector<int32_t> scripted_draft(std::span<const int32_t> context, int32_t n, size_t prompt,
                                           const std::vector<int32_t>& reference, int32_t n_vocab, int round, int period) {
  const size_t next = context.size() - prompt;  // the reference goes on with this token
  std::vector<int32_t> out;
  for (int32_t i = 0; i < n && next + static_cast<size_t>(i) < reference.size(); ++i) out.push_back(reference[next + static_cast<size_t>(i)]);
  const auto wrong = static_cast<size_t>(round % period);
  if (wrong < out.size()) out[wrong] = (out[wrong] + 1) % n_vocab;
  if (out.empty()) out.push_back(0);
  return out;
}

// Runs the generations (over `sessions`, sequences of `exe`) to their end, prompts in chunks of
// `chunk` tokens; returns the steps taken.
inline int step_together(backend::Executable& exe, std::initializer_list<runtime::Generation*> generations,
                         std::initializer_list<runtime::Session*> sessions, int32_t chunk) {
  int steps = 0;
  for (bool more = true; more;) {
    more = false;
    for (runtime::Generation* g : generations) more = g->step() || more;
    graph::StepParams step;
    std::vector<runtime::Session*> parts;
    for (runtime::Session* s : sessions) {
      if (s->pending().empty()) continue;
      const int32_t n = s->pending_speculative() ? static_cast<int32_t>(s->pending().size())
                                                 : s->chunk(static_cast<int64_t>(s->pending().size()), chunk);
      s->add_to(step, n);
      parts.push_back(s);
    }
    if (parts.empty()) continue;
    exe.run(step);
    ++steps;
    int64_t row = 0, first = 0;
    for (size_t k = 0; k < parts.size(); ++k) {
      const auto& p = step.seqs[k];
      parts[k]->committed(p.n_tokens, row, first);  // its first row (a speculative part's), or its one
      row += p.all_logits ? p.n_tokens : 1;
      first += p.n_tokens;
    }
  }
  return steps;
}

}  // namespace zinc::test
