// Synthetic models for benchmarks: random weights with the exact tensor names, shapes and metadata of a
// real model, stored with a quantization mixture's per-tensor types, and the real model's tokenizer
// (from its tokenizer.json). Throughput can then be compared anywhere without downloading weights.
// Usage: zinc_synth_model PRESET MIXTURE TOKENIZER_DIR OUT.gguf [--layers N]
//   PRESET: qwen3-0.6b, qwen3-8b, llama3-8b; TOKENIZER_DIR holds tokenizer.json (+ tokenizer_config.json)
#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "gguf/writer.h"
#include "quant/quant.h"
#include "quant/recipe.h"
#include "tokenizer/hf_tokenizer.h"

using namespace zinc;
using gguf::TensorType;
using gguf::Value;

namespace {

struct Preset {
  const char* name;
  const char* arch;
  int n_layer;
  int64_t n_embd, n_ff, n_vocab;
  int n_head, n_head_kv, head_dim;
  float rope_base, eps;
  bool tied, qk_norm;
};

const Preset kPresets[] = {
    {"qwen3-0.6b", "qwen3", 28, 1024, 3072, 151936, 16, 8, 128, 1000000.0f, 1e-6f, true, true},
    {"qwen3-8b", "qwen3", 36, 4096, 12288, 151936, 32, 8, 128, 1000000.0f, 1e-6f, false, true},
    {"llama3-8b", "llama", 32, 4096, 14336, 128256, 32, 8, 128, 500000.0f, 1e-5f, false, false},
};

nlohmann::json read_json(const std::string& path, bool required) {
  std::ifstream in(path);
  if (!in) {
    if (required) throw std::runtime_error(path + ": not found");
    return nullptr;
  }
  return nlohmann::json::parse(in);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    fmt::print(stderr, "usage: {} PRESET MIXTURE TOKENIZER_DIR OUT.gguf [--layers N]\n", argv[0]);
    return 2;
  }
  try {
    const std::string preset_name = argv[1];
    const Preset* p = nullptr;
    for (const auto& q : kPresets) {
      if (preset_name == q.name) p = &q;
    }
    if (!p) throw std::runtime_error("unknown preset " + preset_name);
    const auto mixture = quant::mixture_by_name(argv[2]);
    if (!mixture) throw std::runtime_error(std::string("unknown mixture ") + argv[2]);
    int n_layer = p->n_layer;
    if (argc >= 7 && std::string(argv[5]) == "--layers") n_layer = std::stoi(argv[6]);
    const std::string tdir = argv[3];

    gguf::Writer w;
    auto& m = w.metadata();
    const std::string a = p->arch;
    m.set("general.architecture", Value::str(a));
    m.set("general.name", Value::str(std::string("synthetic ") + p->name));
    m.set("general.file_type", Value::u32(mixture->file_type));
    m.set(a + ".context_length", Value::u32(40960));
    m.set(a + ".embedding_length", Value::u32(static_cast<uint32_t>(p->n_embd)));
    m.set(a + ".block_count", Value::u32(static_cast<uint32_t>(n_layer)));
    m.set(a + ".feed_forward_length", Value::u32(static_cast<uint32_t>(p->n_ff)));
    m.set(a + ".attention.head_count", Value::u32(static_cast<uint32_t>(p->n_head)));
    m.set(a + ".attention.head_count_kv", Value::u32(static_cast<uint32_t>(p->n_head_kv)));
    m.set(a + ".rope.freq_base", Value::f32(p->rope_base));
    m.set(a + ".attention.layer_norm_rms_epsilon", Value::f32(p->eps));
    m.set(a + ".attention.key_length", Value::u32(static_cast<uint32_t>(p->head_dim)));
    m.set(a + ".attention.value_length", Value::u32(static_cast<uint32_t>(p->head_dim)));
    if (a == "llama") m.set(a + ".rope.dimension_count", Value::u32(static_cast<uint32_t>(p->head_dim)));
    if (mixture->quantized) m.set("general.quantization_version", Value::u32(2));
    tokenizer::HfTokenizerOptions topts;
    topts.vocab_size = static_cast<uint32_t>(p->n_vocab);
    const auto tok = tokenizer::convert_hf_tokenizer(read_json(tdir + "/tokenizer.json", true),
                                                     read_json(tdir + "/tokenizer_config.json", false), nullptr, topts);
    for (const auto& [k, v] : tok.metadata.items()) m.set(k, v);

    // Tensor list in file order, then types from the mixture's recipe.
    struct T {
      std::string name;
      std::vector<uint64_t> ne;
      bool norm;
    };
    std::vector<T> ts;
    const auto d = static_cast<uint64_t>(p->n_embd), ff = static_cast<uint64_t>(p->n_ff);
    const auto qw = static_cast<uint64_t>(p->n_head * p->head_dim), kvw = static_cast<uint64_t>(p->n_head_kv * p->head_dim);
    ts.push_back({"token_embd.weight", {d, static_cast<uint64_t>(p->n_vocab)}, false});
    for (int l = 0; l < n_layer; ++l) {
      const std::string b = "blk." + std::to_string(l) + ".";
      ts.push_back({b + "attn_norm.weight", {d}, true});
      ts.push_back({b + "attn_q.weight", {d, qw}, false});
      ts.push_back({b + "attn_k.weight", {d, kvw}, false});
      ts.push_back({b + "attn_v.weight", {d, kvw}, false});
      ts.push_back({b + "attn_output.weight", {qw, d}, false});
      if (p->qk_norm) {
        ts.push_back({b + "attn_q_norm.weight", {static_cast<uint64_t>(p->head_dim)}, true});
        ts.push_back({b + "attn_k_norm.weight", {static_cast<uint64_t>(p->head_dim)}, true});
      }
      ts.push_back({b + "ffn_norm.weight", {d}, true});
      ts.push_back({b + "ffn_gate.weight", {d, ff}, false});
      ts.push_back({b + "ffn_up.weight", {d, ff}, false});
      ts.push_back({b + "ffn_down.weight", {ff, d}, false});
    }
    ts.push_back({"output_norm.weight", {d}, true});
    if (!p->tied) ts.push_back({"output.weight", {d, static_cast<uint64_t>(p->n_vocab)}, false});

    quant::ModelFacts facts;
    facts.arch = a;
    facts.n_layer = n_layer;
    facts.n_gqa = p->n_head / p->n_head_kv;
    facts.tied_embeddings = p->tied;
    facts.n_attn_v = facts.n_ffn_down = n_layer;
    quant::TypeSelector selector(*mixture, facts);
    auto pool = std::make_shared<ThreadPool>(0);
    uint32_t seed = 1;
    for (const auto& t : ts) {
      gguf::TensorInfo info;
      info.name = t.name;
      info.type = TensorType::F32;
      info.n_dims = static_cast<uint32_t>(t.ne.size());
      info.ne = {t.ne[0], t.ne.size() > 1 ? t.ne[1] : 1, 1, 1};
      const auto choice = selector.choose(info);
      const TensorType type = choice.convert ? choice.type : TensorType::F32;
      const int64_t cols = static_cast<int64_t>(t.ne[0]);
      const int64_t rows = t.ne.size() > 1 ? static_cast<int64_t>(t.ne[1]) : 1;
      const bool norm = t.norm;
      const uint32_t s = seed++;
      w.add_tensor(t.name, type, t.ne, [=](const auto& emit) {
        const size_t rs = quant::row_size(type, cols);
        const int64_t chunk = std::max<int64_t>(1, static_cast<int64_t>((8u << 20) / rs));
        std::vector<uint8_t> buf;
        for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
          const int64_t nr = std::min(chunk, rows - r0);
          buf.resize(rs * static_cast<size_t>(nr));
          pool->parallel_for(nr, [&](int64_t b0, int64_t e0) {
            std::mt19937 rng(s * 2654435761u + static_cast<uint32_t>(r0 + b0));
            std::normal_distribution<float> g(0.0f, 0.02f);
            std::vector<float> row(static_cast<size_t>(cols));
            for (int64_t i = b0; i < e0; ++i) {
              for (auto& v : row) v = norm ? 1.0f : g(rng);
              quant::quantize_row(type, row.data(), buf.data() + static_cast<size_t>(i) * rs, cols);
            }
          });
          emit(std::span<const uint8_t>(buf));
        }
      });
    }
    w.write_file(argv[4]);
    fmt::print("{}: {} ({} layers, {}) {:.1f} MiB\n", argv[4], p->name, n_layer, mixture->name,
               static_cast<double>(w.file_size()) / (1 << 20));
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
  return 0;
}
