// Several sequences stepped together, for the backends' many-sequence tests: each sequence starts at
// a given step, feeds its prompt in given chunks beside the others' tokens, then one token a step
// (the caller says which) until it has yielded all its logits rows.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "graph/graph.h"

namespace zinc::test {

struct SeqPlan {
  int32_t seq;
  std::vector<int32_t> prompt;
  std::vector<int32_t> chunks;  // prefill chunk sizes (summing to the prompt's length)
  int start_step;
};

// A sequence of the plan alone, in a context of its own with the same chunks, then n_decode greedy
// tokens (the backend's argmax): its logits rows, its tokens, and the context it ends in.
struct AloneRun {
  std::vector<std::vector<float>> rows;
  std::vector<int32_t> tokens;
  std::unique_ptr<backend::Executable> exe;
  int32_t pos = 0;
};

inline AloneRun run_alone(backend::Weights& weights, const backend::ExecOptions& opts, const SeqPlan& p, int n_decode) {
  AloneRun r;
  r.exe = weights.instantiate(opts);
  for (int32_t c : p.chunks) {
    const auto at = p.prompt.begin() + r.pos;
    r.exe->run(graph::StepParams::one(std::vector<int32_t>(at, at + c), r.pos));
    r.pos += c;
    r.rows.emplace_back(r.exe->logits().begin(), r.exe->logits().end());
  }
  for (int d = 0; d < n_decode; ++d) {
    const int32_t next = r.exe->argmax();
    r.tokens.push_back(next);
    r.exe->run(graph::StepParams::one({next}, r.pos++));
    r.rows.emplace_back(r.exe->logits().begin(), r.exe->logits().end());
  }
  return r;
}

class SeqSchedule {
 public:
  // rows[i]: the logits rows sequence i yields in all (one per chunk, then one per decode step).
  SeqSchedule(std::vector<SeqPlan> plan, std::vector<size_t> rows)
      : plan_(std::move(plan)), rows_(std::move(rows)), chunk_(plan_.size(), 0), got_(plan_.size(), 0),
        pos_(plan_.size(), 0) {}

  // The next step: every started sequence's next chunk or, after its chunks, the token decode(i, row)
  // gives for its row `row`. False once every sequence is done. in_step: the parts' plan indices.
  bool next(graph::StepParams& step, std::vector<size_t>& in_step, const std::function<int32_t(size_t, size_t)>& decode) {
    step = {};
    in_step.clear();
    for (size_t i = 0; i < plan_.size(); ++i) {
      if (step_ < plan_[i].start_step || got_[i] >= rows_[i]) continue;
      std::vector<int32_t> part;
      if (chunk_[i] < plan_[i].chunks.size()) {
        const auto at = plan_[i].prompt.begin() + pos_[i];
        part.assign(at, at + plan_[i].chunks[chunk_[i]++]);
      } else {
        part = {decode(i, got_[i])};
      }
      step.add(plan_[i].seq, pos_[i], part);
      pos_[i] += static_cast<int32_t>(part.size());
      in_step.push_back(i);
    }
    ++step_;
    return !in_step.empty();
  }
  // The step ran: each of its sequences has yielded the row row(i) (then counts it).
  size_t row(size_t i) const { return got_[i]; }
  void yielded(const std::vector<size_t>& in_step) {
    for (size_t i : in_step) ++got_[i];
  }
  size_t got(size_t i) const { return got_[i]; }
  int32_t pos(size_t i) const { return pos_[i]; }
  int steps() const { return step_; }

 private:
  std::vector<SeqPlan> plan_;
  std::vector<size_t> rows_, chunk_, got_;
  std::vector<int32_t> pos_;
  int step_ = 0;
};

}  // namespace zinc::test
