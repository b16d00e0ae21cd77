#include "quant/recipe.h"

#include <fmt/format.h>

#include <cctype>
#include <cstdio>

#include "core/error.h"
#include "quant/quant.h"

namespace zinc::quant {

using gguf::TensorType;

namespace {

// general.file_type values as the GGUF ecosystem numbers them.
const Mixture kMixtures[] = {
    {"F32", 0, TensorType::F32, false},      {"F16", 1, TensorType::F16, false},
    {"BF16", 32, TensorType::BF16, false},   {"Q8_0", 7, TensorType::Q8_0, true},
    {"Q4_0", 2, TensorType::Q4_0, true},     {"Q4_1", 3, TensorType::Q4_1, true},
    {"Q5_0", 8, TensorType::Q5_0, true},     {"Q5_1", 9, TensorType::Q5_1, true},
    {"Q2_K", 10, TensorType::Q2_K, true},    {"Q3_K_S", 11, TensorType::Q3_K, true},
    {"Q3_K_M", 12, TensorType::Q3_K, true},  {"Q3_K_L", 13, TensorType::Q3_K, true},
    {"Q4_K_S", 14, TensorType::Q4_K, true},  {"Q4_K_M", 15, TensorType::Q4_K, true},
    {"Q5_K_S", 16, TensorType::Q5_K, true},  {"Q5_K_M", 17, TensorType::Q5_K, true},
    {"Q6_K", 18, TensorType::Q6_K, true},    {"IQ4_NL", 25, TensorType::IQ4_NL, true},
    {"IQ4_XS", 30, TensorType::IQ4_XS, true},
    // Experts (3-D tensors) in MXFP4, every other matrix in Q8_0: the released GPT-OSS files' layout.
    {"MXFP4_MOE", 38, TensorType::MXFP4, true},
};

bool iequal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::toupper(static_cast<unsigned char>(a[i])) != std::toupper(static_cast<unsigned char>(b[i]))) return false;
  }
  return true;
}

bool ends_with(std::string_view s, std::string_view suffix) { return s.ends_with(suffix); }
bool contains(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }

bool is_attn_v(std::string_view n) { return contains(n, "attn_v.weight"); }
bool is_ffn_down(std::string_view n) { return contains(n, "ffn_down"); }

// Layer index from "blk.N.", or -1.
int layer_of(std::string_view name) {
  int layer = -1;
  if (std::sscanf(std::string(name).c_str(), "blk.%d.", &layer) != 1) return -1;
  return layer;
}

bool use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

int64_t block_of(TensorType t) { return block_size(t); }

}  // namespace

std::optional<Mixture> mixture_by_name(std::string_view name) {
  for (const auto& m : kMixtures) {
    if (iequal(m.name, name)) return m;
  }
  return std::nullopt;
}

std::vector<std::string> mixture_names() {
  std::vector<std::string> out;
  for (const auto& m : kMixtures) out.push_back(m.name);
  return out;
}

bool is_quantizable(const gguf::TensorInfo& t) {
  const std::string_view n = t.name;
  if (!ends_with(n, "weight") || t.n_dims < 2) return false;
  for (const char* keep : {"ffn_gate_inp", "ssm_conv1d", "position_embd", "attn_rel_b", "_norm.weight"}) {
    if (contains(n, keep)) return false;
  }
  return true;
}

ModelFacts model_facts(const gguf::File& model) {
  ModelFacts f;
  f.arch = model.get_or<std::string>("general.architecture", "");
  const std::string p = f.arch + ".";
  f.n_layer = std::max(1, static_cast<int>(model.get_or<uint32_t>(p + "block_count", 1)));
  f.n_expert = static_cast<int>(model.get_or<uint32_t>(p + "expert_count", 0));
  // Head counts may be per-layer arrays in some architectures: only scalars feed the GQA ratio.
  const auto* hkv = model.find(p + "attention.head_count_kv");
  const auto* h = model.find(p + "attention.head_count");
  if (h && hkv && h->value.is_integer() && hkv->value.is_integer()) {
    const auto nh = h->value.as<int64_t>().value_or(1), nkv = hkv->value.as<int64_t>().value_or(1);
    if (nkv > 0) f.n_gqa = static_cast<int>(nh / nkv);
  }
  f.tied_embeddings = model.find_tensor("output.weight") == nullptr;
  for (const auto& t : model.tensors()) {
    if (!is_quantizable(t)) continue;
    if (is_attn_v(t.name)) ++f.n_attn_v;
    if (is_ffn_down(t.name)) ++f.n_ffn_down;
  }
  return f;
}

TensorType TypeSelector::recipe_type(const std::string& name, const gguf::TensorInfo& t) {
  TensorType type = mix_.base;
  const std::string& m = mix_.name;
  if (m == "MXFP4_MOE") return t.n_dims >= 3 && t.ne[2] > 1 ? TensorType::MXFP4 : TensorType::Q8_0;
  if (name == "output.weight" || (f_.tied_embeddings && name == "token_embd.weight")) {
    // The output projection gets at least Q6_K, or Q8_0 when its rows do not fit the base type's blocks.
    if (f_.arch == "falcon" || static_cast<int64_t>(t.ne[0]) % block_of(type) != 0) return TensorType::Q8_0;
    return type == TensorType::Q8_0 ? type : TensorType::Q6_K;
  }
  if (name == "token_embd.weight") return type;
  if (is_attn_v(name)) {
    const int i = i_attn_v_++;
    if (m == "Q2_K") type = f_.n_gqa >= 4 ? TensorType::Q4_K : TensorType::Q3_K;
    else if (m == "Q3_K_M") type = i < 2 ? TensorType::Q5_K : TensorType::Q4_K;
    else if (m == "Q3_K_L") type = TensorType::Q5_K;
    else if ((m == "IQ4_NL" || m == "IQ4_XS") && f_.n_gqa >= 4) type = TensorType::Q5_K;
    else if ((m == "Q4_K_M" || m == "Q5_K_M") && use_more_bits(i, f_.n_attn_v)) type = TensorType::Q6_K;
    else if (m == "Q4_K_S" && i < 4) type = TensorType::Q5_K;
    if (f_.n_expert == 8) type = TensorType::Q8_0;
    return type;
  }
  if (contains(name, "attn_k.weight") && f_.n_expert == 8) return TensorType::Q8_0;
  if (is_ffn_down(name)) {
    int i = i_ffn_down_++;
    int n = f_.n_ffn_down;
    if (f_.n_expert > 1) {  // expert tensors are not one per layer: use the layer in the name
      const int layer = layer_of(name);
      if (layer >= 0) {
        i = layer;
        n = f_.n_layer;
      }
    }
    if (m == "Q2_K") type = TensorType::Q3_K;
    else if (m == "Q3_K_M") type = i < n / 16 ? TensorType::Q5_K : (f_.arch != "falcon" || use_more_bits(i, n)) ? TensorType::Q4_K : TensorType::Q3_K;
    else if (m == "Q3_K_L") type = f_.arch == "falcon" ? TensorType::Q4_K : TensorType::Q5_K;
    else if (m == "Q4_K_M") {
      if (f_.arch == "falcon") type = i < n / 16 ? TensorType::Q6_K : use_more_bits(i, n) ? TensorType::Q5_K : TensorType::Q4_K;
      else if (use_more_bits(i, n)) type = TensorType::Q6_K;
    } else if (i < n / 8 && (m == "IQ4_NL" || m == "IQ4_XS")) type = TensorType::Q5_K;
    else if (m == "Q5_K_M" && use_more_bits(i, n)) type = TensorType::Q6_K;
    else if (m == "Q4_K_S" && f_.arch != "falcon" && i < n / 8) type = TensorType::Q5_K;
    return type;
  }
  if (contains(name, "attn_output.weight")) {
    if (f_.arch != "falcon") {
      if (f_.n_expert == 8) {
        if (m == "Q2_K" || m == "Q3_K_S" || m == "Q3_K_M" || m == "IQ4_NL" || m == "Q4_K_S" || m == "Q4_K_M" ||
            m == "IQ4_XS") {
          type = TensorType::Q5_K;
        }
      } else if (m == "Q2_K") type = TensorType::Q3_K;
      else if (m == "Q3_K_M") type = TensorType::Q4_K;
      else if (m == "Q3_K_L") type = TensorType::Q5_K;
    } else if (m == "Q3_K_L") type = TensorType::Q4_K;
    return type;
  }
  if (contains(name, "attn_qkv.weight")) {
    if (m == "Q3_K_M" || m == "Q3_K_L") type = TensorType::Q4_K;
    else if (m == "Q4_K_M") type = TensorType::Q5_K;
    else if (m == "Q5_K_M") type = TensorType::Q6_K;
    return type;
  }
  return type;
}

gguf::TensorType parse_type_name(std::string_view name, std::string_view what) {
  const auto type = gguf::tensor_type_from_name(name);
  if (!type || !can_quantize(*type) || *type == TensorType::Q8_K) {  // (Q8_K: activations' codes only)
    throw Error(fmt::format("{}: '{}' is not a type zinc can write (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, "
                            "Q2_K .. Q6_K, IQ4_NL, IQ4_XS, MXFP4)",
                            what, name));
  }
  return *type;
}

TypeOverrides::Pattern parse_tensor_type(std::string_view spec) {
  const size_t eq = spec.rfind('=');
  if (eq == std::string_view::npos || eq == 0 || eq + 1 == spec.size()) {
    throw Error(fmt::format("--tensor-type '{}': expected PATTERN=TYPE, e.g. attn_v=q8_0", spec));
  }
  TypeOverrides::Pattern p{std::string(spec.substr(0, eq)), parse_type_name(spec.substr(eq + 1), fmt::format("--tensor-type '{}'", spec))};
  try {
    std::regex check(p.regex);
  } catch (const std::regex_error& e) {
    throw Error(fmt::format("--tensor-type '{}': '{}' is not a valid regular expression ({})", spec, p.regex, e.what()));
  }
  return p;
}

TypeSelector::TypeSelector(const Mixture& mixture, ModelFacts facts, TypeOverrides overrides)
    : mix_(mixture), f_(std::move(facts)), ov_(std::move(overrides)) {
  for (const auto& p : ov_.tensors) patterns_.emplace_back(p.regex);
  matched_.assign(patterns_.size(), 0);
}

std::vector<std::string> TypeSelector::unmatched_patterns() const {
  std::vector<std::string> out;
  for (size_t i = 0; i < patterns_.size(); ++i) {
    if (matched_[i] == 0) out.push_back(ov_.tensors[i].regex);
  }
  return out;
}

TensorChoice TypeSelector::choose(const gguf::TensorInfo& t) {
  TensorChoice c;
  if (!is_quantizable(t)) return c;
  const std::string name(t.name);
  TensorType type = mix_.quantized ? recipe_type(name, t) : mix_.base;  // (counted even where overridden)
  if (ov_.pure) type = mix_.base;
  for (size_t i = 0; i < patterns_.size(); ++i) {
    if (std::regex_search(name, patterns_[i])) {
      type = ov_.tensors[i].type;
      ++matched_[i];
      break;
    }
  }
  if (name == "token_embd.weight" && ov_.token_embd) type = *ov_.token_embd;
  if (name == "output.weight") {
    if (ov_.leave_output) return c;
    if (ov_.output) type = *ov_.output;
  }
  const auto cols = static_cast<int64_t>(t.ne[0]);
  if (cols % block_of(type) != 0) {
    TensorType fb;
    switch (type) {
      case TensorType::IQ4_XS: fb = TensorType::IQ4_NL; break;
      case TensorType::Q2_K: case TensorType::Q3_K: fb = TensorType::Q4_0; break;
      case TensorType::Q4_K: fb = TensorType::Q5_0; break;
      case TensorType::Q5_K: fb = TensorType::Q5_1; break;
      case TensorType::Q6_K: fb = TensorType::Q8_0; break;
      default: fb = TensorType::F16; break;
    }
    if (cols % block_of(fb) != 0) fb = TensorType::F16;
    c.fallback = fmt::format("{} columns do not fill {}-element {} blocks: using {}", cols, block_of(type),
                             gguf::tensor_type_name(type), gguf::tensor_type_name(fb));
    type = fb;
  }
  c.convert = type != t.type;
  c.type = type;
  return c;
}

}  // namespace zinc::quant
