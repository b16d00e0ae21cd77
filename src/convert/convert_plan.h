// What a checkpoint conversion is made of, shared by convert.cpp (the common keys, the Llama-like
// families and the writing) and the files that plan the other families' tensors (convert_<family>.cpp).
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "convert/safetensors.h"
#include "core/error.h"
#include "gguf/value.h"

namespace zinc::convert::detail {

using nlohmann::json;

template <class T>
T cfg(const json& c, const char* key, const std::filesystem::path& file) {
  if (!c.contains(key) || c[key].is_null()) throw Error(fmt::format("{}: missing '{}'", file.string(), key));
  try {
    return c[key].get<T>();
  } catch (const json::exception&) {
    throw Error(fmt::format("{}: '{}' has the wrong type", file.string(), key));
  }
}

template <class T>
std::optional<T> cfg_opt(const json& c, const char* key) {
  if (!c.contains(key) || c[key].is_null()) return std::nullopt;
  try {
    return c[key].get<T>();
  } catch (const json::exception&) {
    return std::nullopt;
  }
}

// Source element i of a floating-point tensor, as float.
float load_element(const StTensor& t, int64_t i);

// One GGUF tensor and where its rows come from.
struct PlannedTensor {
  std::string gguf_name;
  const StTensor* src;
  int permute_heads = 0;  // > 0: reorder rows head by head for the pairwise rotary form
  float add = 0.0f;       // added to every element (Gemma's norm weights are stored as 1 + w)
  int64_t max_rows = -1;  // >= 0: keep only the first rows (embeddings cut to the real vocabulary)
  // Experts: per-expert 2-D tensors stacked into one (rows concatenated), or one half of a fused
  // gate/up tensor [experts, 2 * width, in] (half 0: gate, 1: up).
  std::vector<const StTensor*> stack;
  int64_t half_rows = 0;
  int half = 0;
  std::vector<uint64_t> ne;  // the GGUF shape when it differs from the source's reversed shape
  // Any other layout: computes target row r (ne[0] floats) from the sources. Needs `ne`.
  std::function<void(int64_t r, float* row)> make_row;
  bool keep_f32 = false;  // stays F32 whatever the output type (small tensors read as vectors)
};

// The state of one conversion, for the family planners.
struct Job {
  const json& config;
  std::filesystem::path config_path;
  const Checkpoint& ckpt;
  gguf::Metadata& meta;
  std::string arch;  // the GGUF architecture: metadata keys start with it
  uint32_t n_layer = 0, n_embd = 0, n_head = 0, n_head_kv = 0, head_dim = 0;
  float norm_add = 0.0f;  // added to every *norm.weight planned through need()
  std::vector<PlannedTensor> plan;

  template <class T>
  T get(const char* key) const { return cfg<T>(config, key, config_path); }
  template <class T>
  std::optional<T> get_opt(const char* key) const { return cfg_opt<T>(config, key); }
  void set(const std::string& key_after_arch, gguf::Value v) const;
  // The HF tensor `hf` becomes the GGUF tensor `g` (norm weights take norm_add).
  PlannedTensor& need(const std::string& hf, const std::string& g, int permute = 0);
  void maybe(const std::string& hf, const std::string& g);
  // One layer's self-attention: q, k, v and o projections (and their biases where the checkpoint has
  // them), q/k rows reordered for the pairwise rotary form when `permute`, per-head q/k norms when
  // `qk_norm`. v may be absent when `v_optional` (models whose values are the keys).
  void attention(const std::string& hp, const std::string& gp, bool qk_norm, bool permute = false,
                 bool v_optional = false);
  // A tensor computed row by row (see PlannedTensor::make_row); `src` gives the dtype-independent name.
  PlannedTensor& computed(const std::string& g, const StTensor& src, std::vector<uint64_t> ne,
                          std::function<void(int64_t, float*)> make_row);
};

// The experts of one layer (HF prefix hp, GGUF prefix gp) as ffn_{gate,up,down}_exps.
void plan_experts(Job& job, const std::string& hp, const std::string& gp, uint32_t n_expert, uint32_t n_ff_exp);

// Family planners: metadata beyond the common keys, and every tensor of every layer.
void plan_qwen3next(Job& job);  // qwen3next, qwen35, qwen35moe (convert_qwen3next.cpp)
void plan_gemma4(Job& job);     // gemma4, dense and MoE (convert_gemma4.cpp)
void plan_gpt_oss(Job& job);    // gpt-oss (convert_gpt_oss.cpp)

}  // namespace zinc::convert::detail
