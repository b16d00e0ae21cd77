#include "runtime/embed.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "model/model.h"

namespace zinc::runtime {

std::optional<Pooling> declared_pooling(const gguf::File& file) {
  const auto arch = file.get_or<std::string>("general.architecture", "");
  const auto* kv = file.find(arch + ".pooling_type");
  if (!kv) return std::nullopt;
  switch (file.get<uint32_t>(arch + ".pooling_type")) {
    case 0: return std::nullopt;
    case 1: return Pooling::Mean;
    case 2: return Pooling::Cls;
    case 3: return Pooling::Last;
    default:
      throw Error(fmt::format("{}: pooling type {} (ranking) is not one zinc computes embeddings with", file.name(),
                              file.get<uint32_t>(arch + ".pooling_type")));
  }
}

Pooling pooling_from_name(const std::string& name) {
  if (name == "mean") return Pooling::Mean;
  if (name == "cls" || name == "first") return Pooling::Cls;
  if (name == "last") return Pooling::Last;
  throw Error(fmt::format("pooling '{}': use mean, cls or last", name));
}

const char* pooling_name(Pooling p) {
  switch (p) {
    case Pooling::Mean: return "mean";
    case Pooling::Cls: return "cls";
    case Pooling::Last: return "last";
  }
  return "?";
}

// Only the weights the cut graph reads are loaded (not the output projection); the context is then made
// as over any weights.
Embedder::Embedder(const gguf::File& file, backend::Backend& backend, int32_t n_ctx, int32_t batch,
                   const backend::LoadProgress& progress, backend::KvType kv_type)
    : Embedder(backend.load(model::embedding_graph(model::load(file).graph), file, progress), n_ctx, batch, kv_type) {}

Embedder::Embedder(std::shared_ptr<backend::Weights> weights, int32_t n_ctx, int32_t batch, backend::KvType kv_type)
    : weights_(std::move(weights)), n_ctx_(n_ctx), batch_(std::min(batch, n_ctx)) {
  if (n_ctx < 1 || batch < 1) throw Error("embeddings need a positive context and batch size");
  const graph::Graph g = model::embedding_graph(weights_->graph());
  dim_ = g.tensor(g.logits).ne[0];
  backend::ExecOptions opts;
  opts.n_ctx = n_ctx_;
  opts.max_tokens = batch_;
  opts.kv_type = kv_type;
  exe_ = weights_->instantiate(opts, g);
}

std::vector<float> Embedder::embed(std::span<const int32_t> tokens, Pooling pooling, bool normalize) {
  const auto n = static_cast<int64_t>(tokens.size());
  if (n == 0) throw Error("an embedding needs at least one token");
  if (n > n_ctx_) throw Error(fmt::format("the input is {} tokens, more than the context of {}", n, n_ctx_));
  std::vector<double> sum(static_cast<size_t>(dim_), 0.0);
  std::vector<float> out(static_cast<size_t>(dim_));
  exe_->seq_clear(0);
  for (int64_t at = 0; at < n; at += batch_) {
    const int64_t m = std::min<int64_t>(batch_, n - at);
    // Mean pooling reads every row; cls the first step's first; last the last row of the last step.
    const bool rows = pooling == Pooling::Mean || (pooling == Pooling::Cls && at == 0);
    exe_->run(graph::StepParams::one(std::vector<int32_t>(tokens.begin() + at, tokens.begin() + at + m),
                                     static_cast<int32_t>(at), rows));
    const auto h = exe_->logits();
    if (pooling == Pooling::Mean) {
      for (int64_t r = 0; r < m; ++r) {
        for (int64_t i = 0; i < dim_; ++i) sum[static_cast<size_t>(i)] += h[static_cast<size_t>(r * dim_ + i)];
      }
    } else if (pooling == Pooling::Cls && at == 0) {
      std::copy(h.begin(), h.begin() + dim_, out.begin());
    } else if (pooling == Pooling::Last && at + m == n) {
      std::copy(h.end() - dim_, h.end(), out.begin());
    }
  }
  if (pooling == Pooling::Mean) {
    for (int64_t i = 0; i < dim_; ++i) out[static_cast<size_t>(i)] = static_cast<float>(sum[static_cast<size_t>(i)] / n);
  }
  if (normalize) {
    double norm = 0;
    for (float v : out) norm += static_cast<double>(v) * v;
    norm = std::sqrt(norm);
    if (norm > 0) {
      for (float& v : out) v = static_cast<float>(v / norm);
    }
  }
  return out;
}

}  // namespace zinc::runtime
