// Qwen2 and Qwen3: the standard decoder block with NeoX-style rotary embeddings (the first and second
// half of each head rotate together). Qwen2 adds biases to q/k/v (read when present); Qwen3 drops them
// and normalises each head of q and k (RMSNorm over head_dim) before the rotation, with head_dim set
// independently of the model width (attention.key_length).
#include "model/model.h"

namespace zinc::model {

graph::Graph build_qwen2(const gguf::File& f, HParams& hp) {
  return build_standard(f, hp, "qwen2", {graph::RopeMode::NeoX, false});
}

graph::Graph build_qwen3(const gguf::File& f, HParams& hp) {
  return build_standard(f, hp, "qwen3", {graph::RopeMode::NeoX, true});
}

// Qwen3 MoE: Qwen3's attention with every feed-forward network a mixture of SwiGLU experts, the
// selected experts' weights renormalised (as the released models configure).
graph::Graph build_qwen3moe(const gguf::File& f, HParams& hp) {
  StandardOptions o{graph::RopeMode::NeoX, true};
  o.moe = true;
  return build_standard(f, hp, "qwen3moe", o);
}

}  // namespace zinc::model
