// Records a backend's load progress and checks it: the total is the bytes of the graph's weight tensors
// in the file, every report carries it, the bytes done never go back, and the last report is complete.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "gguf/reader.h"
#include "graph/graph.h"

namespace zinc::test {

struct LoadProgressLog {
  std::vector<std::pair<uint64_t, uint64_t>> calls;
  backend::LoadProgress callback() {
    return [this](uint64_t done, uint64_t total) { calls.emplace_back(done, total); };
  }
  void expect_complete(const graph::Graph& g, const gguf::File& f, const std::string& what) const {
    uint64_t weights = 0;
    for (const auto& t : g.tensors) {
      if (t.kind == graph::TensorKind::Weight) weights += f.tensor(t.name).n_bytes;
    }
    ASSERT_FALSE(calls.empty()) << what << ": no progress reported";
    uint64_t last = 0;
    for (const auto& [done, total] : calls) {
      EXPECT_EQ(total, weights) << what;
      EXPECT_GE(done, last) << what << ": progress went back";
      last = done;
    }
    EXPECT_EQ(calls.back().first, weights) << what << ": the last report is not complete";
  }
};

}  // namespace zinc::test
