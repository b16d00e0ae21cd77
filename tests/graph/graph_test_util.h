// Helpers for graph-op tests: F32 tensors written to a GGUF file for the backend to bind by name, and
// one step of a graph on the CPU backend.
#pragma once

#include <array>
#include <deque>
#include <filesystem>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "gguf/reader.h"
#include "gguf/writer.h"
#include "graph/graph.h"

namespace zinc::test {

class GraphWeights {
 public:
  // Stores `values` as tensor `name` of GGUF shape `ne`; the reference stays valid.
  std::vector<float>& put(const std::string& name, std::vector<uint64_t> ne, std::vector<float> values) {
    shapes_.emplace_back(name, std::move(ne));
    data_.push_back(std::move(values));
    return data_.back();
  }
  gguf::File write(const std::filesystem::path& path) const {
    gguf::Writer w;
    w.metadata().set("general.architecture", gguf::Value::str("test"));
    for (size_t i = 0; i < shapes_.size(); ++i) {
      const auto& d = data_[i];
      w.add_tensor(shapes_[i].first, gguf::TensorType::F32, shapes_[i].second,
                   std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(d.data()), d.size() * sizeof(float)));
    }
    w.write_file(path);
    return gguf::File::open(path);
  }
  // Declares tensor `name` in the graph with its shape.
  graph::TensorId bind(graph::Builder& b, const std::string& name) const {
    for (const auto& [n, ne] : shapes_) {
      if (n != name) continue;
      std::array<int64_t, 4> shape{1, 1, 1, 1};
      for (size_t i = 0; i < ne.size(); ++i) shape[i] = static_cast<int64_t>(ne[i]);
      return b.weight(name, gguf::TensorType::F32, shape);
    }
    throw std::out_of_range("no test tensor " + name);
  }

 private:
  std::vector<std::pair<std::string, std::vector<uint64_t>>> shapes_;
  std::deque<std::vector<float>> data_;
};

// Runs the graph over `tokens` in one step (exact F32 cache) and returns every token's output row.
inline std::vector<float> run_graph(const graph::Graph& g, const gguf::File& f, const std::vector<int32_t>& tokens) {
  auto backend = backend::make_cpu_backend(2);
  backend::ExecOptions opts;
  opts.n_ctx = 16;
  opts.max_tokens = 16;
  opts.kv_type = backend::KvType::F32;
  auto exe = backend->compile(g, f, opts);
  exe->run(graph::StepParams::one(tokens, 0, true));
  const auto l = exe->logits();
  return {l.begin(), l.end()};
}

}  // namespace zinc::test
