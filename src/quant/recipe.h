// Which type each tensor gets when a model is quantized to a named mixture ("Q4_K_M", "Q8_0", ...).
// The mixtures follow the established recipes of the GGUF ecosystem, so files quantized by zinc match
// what users know: e.g. Q4_K_M stores output.weight as Q6_K and gives attn_v / ffn_down Q6_K on the
// layers that matter most. Rows that do not fill whole blocks fall back to a compatible type.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/reader.h"
#include "gguf/types.h"

namespace zinc::quant {

struct Mixture {
  std::string name;        // "Q4_K_M"
  uint32_t file_type = 0;  // value of general.file_type
  gguf::TensorType base;   // the type most weights get
  bool quantized = true;   // false for F32/F16/BF16: no per-tensor adjustments
};

std::optional<Mixture> mixture_by_name(std::string_view name);  // case-insensitive
std::vector<std::string> mixture_names();

struct TensorChoice {
  bool convert = false;          // false: the tensor is copied unchanged
  gguf::TensorType type{};       // target type when convert
  std::string fallback;          // set when the recipe's type did not fit the row length: why
};

// What the recipes need to know about a model.
struct ModelFacts {
  std::string arch;
  int n_layer = 1;
  int n_gqa = 1;       // attention heads per KV head
  int n_expert = 0;
  bool tied_embeddings = false;  // no output.weight: token_embd doubles as the output projection
  int n_attn_v = 0;    // quantizable attn_v tensors
  int n_ffn_down = 0;  // quantizable ffn_down tensors (experts included)
};
ModelFacts model_facts(const gguf::File& model);

// Chooses target types tensor by tensor. Call choose() for every tensor in file order: the recipes
// count attn_v and ffn_down tensors as they go, as the established tool does.
class TypeSelector {
 public:
  TypeSelector(const Mixture& mixture, ModelFacts facts) : mix_(mixture), f_(std::move(facts)) {}
  TensorChoice choose(const gguf::TensorInfo& t);

 private:
  gguf::TensorType recipe_type(const std::string& name, const gguf::TensorInfo& t);

  Mixture mix_;
  ModelFacts f_;
  int i_attn_v_ = 0, i_ffn_down_ = 0;
};

// Whether a tensor is a weight matrix that mixtures may convert (norms, biases, routers and a few
// small state tensors are always kept as they are).
bool is_quantizable(const gguf::TensorInfo& t);

}  // namespace zinc::quant
