// Llama (Llama 2/3.x and the many models sharing its layout): the standard decoder block. GGUF stores
// the q/k rows permuted so that the pairwise ("normal") rotary form applies.
#include "model/model.h"

namespace zinc::model {

graph::Graph build_llama(const gguf::File& f, HParams& hp) {
  return build_standard(f, hp, "llama", {graph::RopeMode::Normal, false});
}

}  // namespace zinc::model
