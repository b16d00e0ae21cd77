// Writes pairs of tiny Llama models for the dequantization oracle. In each pair the token embedding is
// stored once quantized by zinc (type T) and once as zinc's F32 dequantization of those same bytes; every
// other tensor is identical F32. An embedding lookup in the reference implementation dequantizes the row
// without further arithmetic. The block's attention and FFN outputs are zeroed and the output matrix is
// the identity on the first kDim logits, so the logits at each position are that token's embedding row,
// RMS-normalised: evaluating every token id once compares every dequantized element, and both models
// give bit-identical logits exactly when zinc's dequantization of T matches the reference's.
// Usage: zinc_quant_oracle_models OUTDIR TOKENIZER_SOURCE.gguf
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "gguf/reader.h"
#include "gguf/writer.h"
#include "quant/quant.h"

using namespace zinc;
using gguf::TensorType;

namespace {

constexpr uint64_t kDim = 256, kFF = 512, kHeads = 4;

struct Tensor {
  std::string name;
  std::vector<uint64_t> ne;
  std::vector<float> data;
};

std::vector<float> random_values(size_t n, std::mt19937& rng, float sigma) {
  std::normal_distribution<float> g(0.0f, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = g(rng);
  return v;
}

void write_model(const gguf::File& tok, const std::string& path, uint64_t vocab, const std::vector<Tensor>& f32,
                 TensorType emb_type, const std::vector<uint8_t>& emb_bytes) {
  gguf::Writer w;
  auto& m = w.metadata();
  m.set("general.architecture", gguf::Value::str("llama"));
  m.set("general.name", gguf::Value::str("zinc dequantization oracle"));
  m.set("llama.context_length", gguf::Value::u32(1024));
  m.set("llama.embedding_length", gguf::Value::u32(kDim));
  m.set("llama.block_count", gguf::Value::u32(1));
  m.set("llama.feed_forward_length", gguf::Value::u32(kFF));
  m.set("llama.attention.head_count", gguf::Value::u32(kHeads));
  m.set("llama.attention.head_count_kv", gguf::Value::u32(kHeads));
  m.set("llama.rope.dimension_count", gguf::Value::u32(kDim / kHeads));
  m.set("llama.attention.layer_norm_rms_epsilon", gguf::Value::f32(1e-5f));
  for (const auto& kv : tok.metadata()) {
    if (kv.key.starts_with("tokenizer.")) m.set(kv.key, gguf::Value::copy_of(kv.value));
  }
  const std::vector<uint64_t> emb_ne = {kDim, vocab};
  w.add_tensor("token_embd.weight", emb_type, emb_ne, emb_bytes);
  for (const auto& t : f32) {
    w.add_tensor(t.name, TensorType::F32, t.ne,
                 std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(t.data.data()), t.data.size() * 4));
  }
  w.write_file(path);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s OUTDIR TOKENIZER_SOURCE.gguf\n", argv[0]);
    return 2;
  }
  try {
    const std::string out = argv[1];
    const gguf::File tok = gguf::File::open(argv[2]);
    const uint64_t vocab = tok.get<gguf::ArrayView>("tokenizer.ggml.tokens").size();
    std::mt19937 rng(42);
    std::vector<Tensor> f32;
    auto add = [&](const std::string& name, std::vector<uint64_t> ne, float sigma) {
      size_t n = 1;
      for (auto d : ne) n *= d;
      f32.push_back({name, ne, random_values(n, rng, sigma)});
    };
    auto ones = [&](const std::string& name) { f32.push_back({name, {kDim}, std::vector<float>(kDim, 1.0f)}); };
    ones("output_norm.weight");
    Tensor identity{"output.weight", {kDim, vocab}, std::vector<float>(kDim * vocab, 0.0f)};
    for (uint64_t k = 0; k < kDim && k < vocab; ++k) identity.data[k * kDim + k] = 1.0f;
    f32.push_back(identity);
    ones("blk.0.attn_norm.weight");
    for (const char* n : {"attn_q", "attn_k", "attn_v"}) add(std::string("blk.0.") + n + ".weight", {kDim, kDim}, 0.06f);
    f32.push_back({"blk.0.attn_output.weight", {kDim, kDim}, std::vector<float>(kDim * kDim, 0.0f)});
    ones("blk.0.ffn_norm.weight");
    add("blk.0.ffn_gate.weight", {kDim, kFF}, 0.06f);
    add("blk.0.ffn_up.weight", {kDim, kFF}, 0.06f);
    f32.push_back({"blk.0.ffn_down.weight", {kFF, kDim}, std::vector<float>(kFF * kDim, 0.0f)});
    // Small values make the normalisation factor large, so neighbouring floats stay distinct after it.
    const auto emb = random_values(kDim * vocab, rng, 0.01f);

    const TensorType types[] = {TensorType::F16,  TensorType::BF16, TensorType::Q4_0,   TensorType::Q4_1,
                                TensorType::Q5_0, TensorType::Q5_1, TensorType::Q8_0,   TensorType::Q2_K,
                                TensorType::Q3_K, TensorType::Q4_K, TensorType::Q5_K,   TensorType::Q6_K,
                                TensorType::IQ4_NL, TensorType::IQ4_XS, TensorType::MXFP4};
    for (TensorType t : types) {
      std::vector<uint8_t> q(quant::row_size(t, kDim) * vocab);
      const size_t rs = quant::row_size(t, kDim);
      for (uint64_t r = 0; r < vocab; ++r) quant::quantize_row(t, emb.data() + r * kDim, q.data() + r * rs, kDim);
      std::vector<float> deq(kDim * vocab);
      for (uint64_t r = 0; r < vocab; ++r) quant::dequantize_row(t, q.data() + r * rs, deq.data() + r * kDim, kDim);
      const std::string name(gguf::tensor_type_name(t));
      write_model(tok, out + "/emb_" + name + ".gguf", vocab, f32, t, q);
      auto as_bytes = [](const std::vector<float>& v) {
        return std::vector<uint8_t>(reinterpret_cast<const uint8_t*>(v.data()),
                                    reinterpret_cast<const uint8_t*>(v.data() + v.size()));
      };
      write_model(tok, out + "/emb_" + name + "_zinc_f32.gguf", vocab, f32, TensorType::F32, as_bytes(deq));
      if (t == TensorType::Q4_K) {
        // Negative control: the same dequantization with one element of a used row moved by one ulp.
        // The comparison must notice it, or the oracle is not sensitive enough to prove anything.
        auto nudged = deq;
        float& v = nudged[20 * kDim + 3];
        v = std::nextafter(v, 1e9f);
        write_model(tok, out + "/control_" + name + "_one_ulp_f32.gguf", vocab, f32, TensorType::F32, as_bytes(nudged));
      }
      std::printf("%s\n", name.c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
