// Embeddings: a text's vector from a decoder's hidden states. The model's graph is cut after its final
// norm (model::embedding_graph), so a step returns every requested token's hidden state (the width of
// the model) instead of logits; the states of a text's tokens are pooled (the mean, the last token's,
// or the first's) and optionally scaled to unit length. The pooling a GGUF declares
// (<arch>.pooling_type, as embedding models carry) is the default; decoders without one take it on
// request.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "gguf/reader.h"

namespace zinc::runtime {

enum class Pooling { Mean, Cls, Last };

// The pooling `file` declares (<arch>.pooling_type: 1 mean, 2 cls, 3 last), or none (0, or no key).
// Throws zinc::Error for one this engine does not do (rank).
std::optional<Pooling> declared_pooling(const gguf::File& file);
// "mean", "cls" (the first token) or "last"; throws zinc::Error naming the choices for another.
Pooling pooling_from_name(const std::string& name);
const char* pooling_name(Pooling p);

class Embedder {
 public:
  // Loads the model's graph up to its final norm on `backend` (not the output projection); texts of up
  // to n_ctx tokens, evaluated in steps of up to `batch` tokens. `file` must outlive the embedder.
  Embedder(const gguf::File& file, backend::Backend& backend, int32_t n_ctx, int32_t batch = 512,
           const backend::LoadProgress& progress = {}, backend::KvType kv_type = backend::KvType::F16);
  // A context of its own over weights loaded for generation (a server's: the same copy), running their
  // graph up to its final norm.
  Embedder(std::shared_ptr<backend::Weights> weights, int32_t n_ctx, int32_t batch = 512,
           backend::KvType kv_type = backend::KvType::F16);
  // One text's vector (its tokens as the tokenizer gives them, specials included). Throws zinc::Error
  // for no tokens or more than n_ctx.
  std::vector<float> embed(std::span<const int32_t> tokens, Pooling pooling, bool normalize);
  int64_t dim() const { return dim_; }
  int32_t n_ctx() const { return n_ctx_; }

 private:
  std::shared_ptr<backend::Weights> weights_;
  std::unique_ptr<backend::Executable> exe_;
  int64_t dim_ = 0;
  int32_t n_ctx_ = 0, batch_ = 0;
};

}  // namespace zinc::runtime
