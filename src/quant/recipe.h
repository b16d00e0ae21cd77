// Which type each tensor gets when a model is quantized to a named mixture ("Q4_K_M", "Q8_0", ...).
// The mixtures follow the established recipes of the GGUF ecosystem, so files quantized by zinc match
// what users know: e.g. Q4_K_M stores output.weight as Q6_K and gives attn_v / ffn_down Q6_K on the
// layers that matter most. Rows that do not fill whole blocks fall back to a compatible type.
#pragma once

#include <optional>
#include <regex>
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
// A user's choices over a mixture's (zinc quantize's --tensor-type, --output-tensor-type,
// --token-embedding-type, --pure and --leave-output-tensor, as the GGUF ecosystem's quantizer takes
// them). They apply to the matrices a mixture may convert (is_quantizable: never a router or a norm);
// rows that do not fill the chosen type's blocks still fall back.
struct TypeOverrides {
  struct Pattern {
    std::string regex;  // searched for in the tensor's name (ECMAScript syntax)
    gguf::TensorType type;
  };
  std::vector<Pattern> tensors;  // the first pattern found in a name gives the tensor its type
  std::optional<gguf::TensorType> output, token_embd;  // output.weight's, token_embd.weight's type
  bool pure = false;          // every matrix in the mixture's base type, without its per-tensor choices
  bool leave_output = false;  // output.weight copied as it is
};

// "PATTERN=TYPE" into a pattern (the type by its GGUF name, any case). Throws zinc::Error for a spec
// without '=', an invalid regex, or a type zinc cannot write.
TypeOverrides::Pattern parse_tensor_type(std::string_view spec);
// A type a user names for a tensor (--output-tensor-type ...): throws zinc::Error where zinc cannot
// write it, naming `what`.
gguf::TensorType parse_type_name(std::string_view name, std::string_view what);

class TypeSelector {
 public:
  TypeSelector(const Mixture& mixture, ModelFacts facts, TypeOverrides overrides = {});
  TensorChoice choose(const gguf::TensorInfo& t);
  // The --tensor-type patterns no matrix chosen so far matched (a misspelt name, or a router or norm).
  std::vector<std::string> unmatched_patterns() const;

 private:
  gguf::TensorType recipe_type(const std::string& name, const gguf::TensorInfo& t);

  Mixture mix_;
  ModelFacts f_;
  TypeOverrides ov_;
  std::vector<std::regex> patterns_;  // ov_.tensors' regexes, compiled
  std::vector<int> matched_;          // matrices each pattern gave its type
  int i_attn_v_ = 0, i_ffn_down_ = 0;
};

// Whether a tensor is a weight matrix that mixtures may convert (norms, biases, routers and a few
// small state tensors are always kept as they are).
bool is_quantizable(const gguf::TensorInfo& t);

}  // namespace zinc::quant
