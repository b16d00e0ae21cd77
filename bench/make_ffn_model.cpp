// Writes a one-layer Llama-shaped GGUF whose decode step is dominated by the three 4096×14336 FFN
// matrices, with every weight matrix in one quantization type. Running it through another engine
// measures that engine's matrix-vector bandwidth on the same shapes zinc_quant_bench uses.
// Usage: zinc_make_ffn_model OUT.gguf TYPE TOKENIZER_SOURCE.gguf [--dim 4096] [--ff 14336]
#include <fmt/format.h>

#include <random>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "gguf/reader.h"
#include "gguf/writer.h"
#include "quant/quant.h"

using namespace zinc;
using gguf::TensorType;

int main(int argc, char** argv) {
  if (argc < 4) {
    fmt::print(stderr, "usage: {} OUT.gguf TYPE TOKENIZER_SOURCE.gguf [--dim N] [--ff N]\n", argv[0]);
    return 2;
  }
  try {
    uint64_t dim = 4096, ff = 14336;
    for (int i = 4; i + 1 < argc; i += 2) {
      if (std::string(argv[i]) == "--dim") dim = std::stoull(argv[i + 1]);
      if (std::string(argv[i]) == "--ff") ff = std::stoull(argv[i + 1]);
    }
    const auto type = gguf::tensor_type_from_name(argv[2]);
    if (!type) throw std::runtime_error(std::string("unknown type ") + argv[2]);
    const gguf::File tok = gguf::File::open(argv[3]);
    const uint64_t vocab = tok.get<gguf::ArrayView>("tokenizer.ggml.tokens").size();
    gguf::Writer w;
    auto& m = w.metadata();
    m.set("general.architecture", gguf::Value::str("llama"));
    m.set("general.name", gguf::Value::str("ffn bandwidth probe"));
    m.set("llama.context_length", gguf::Value::u32(512));
    m.set("llama.embedding_length", gguf::Value::u32(static_cast<uint32_t>(dim)));
    m.set("llama.block_count", gguf::Value::u32(1));
    m.set("llama.feed_forward_length", gguf::Value::u32(static_cast<uint32_t>(ff)));
    m.set("llama.attention.head_count", gguf::Value::u32(32));
    m.set("llama.attention.head_count_kv", gguf::Value::u32(8));
    m.set("llama.rope.dimension_count", gguf::Value::u32(static_cast<uint32_t>(dim / 32)));
    m.set("llama.attention.layer_norm_rms_epsilon", gguf::Value::f32(1e-5f));
    for (const auto& kv : tok.metadata()) {
      if (kv.key.starts_with("tokenizer.")) m.set(kv.key, gguf::Value::copy_of(kv.value));
    }
    auto pool = std::make_shared<ThreadPool>(0);
    uint32_t seed = 1;
    auto add = [&](const std::string& name, uint64_t cols, uint64_t rows, TensorType t, float sigma) {
      const std::vector<uint64_t> ne = rows ? std::vector<uint64_t>{cols, rows} : std::vector<uint64_t>{cols};
      const uint64_t nrows = rows ? rows : 1;
      const uint32_t s = seed++;
      w.add_tensor(name, t, ne, [=](const auto& emit) {
        const size_t rs = quant::row_size(t, static_cast<int64_t>(cols));
        std::vector<uint8_t> buf;
        const uint64_t chunk = 256;
        for (uint64_t r0 = 0; r0 < nrows; r0 += chunk) {
          const uint64_t nr = std::min(chunk, nrows - r0);
          buf.resize(rs * nr);
          pool->parallel_for(static_cast<int64_t>(nr), [&](int64_t b, int64_t e) {
            std::mt19937 rng(s * 7919u + static_cast<uint32_t>(r0 + static_cast<uint64_t>(b)));
            std::normal_distribution<float> g(0.0f, sigma);
            std::vector<float> row(cols);
            for (int64_t i = b; i < e; ++i) {
              for (auto& v : row) v = rows ? g(rng) : 1.0f;
              quant::quantize_row(t, row.data(), buf.data() + static_cast<size_t>(i) * rs, static_cast<int64_t>(cols));
            }
          });
          emit(std::span<const uint8_t>(buf));
        }
      });
    };
    add("token_embd.weight", dim, vocab, TensorType::F32, 0.02f);
    add("output_norm.weight", dim, 0, TensorType::F32, 0);
    add("output.weight", dim, vocab, TensorType::F32, 0.02f);
    add("blk.0.attn_norm.weight", dim, 0, TensorType::F32, 0);
    add("blk.0.attn_q.weight", dim, dim, *type, 0.02f);
    add("blk.0.attn_k.weight", dim, dim / 4, *type, 0.02f);
    add("blk.0.attn_v.weight", dim, dim / 4, *type, 0.02f);
    add("blk.0.attn_output.weight", dim, dim, *type, 0.02f);
    add("blk.0.ffn_norm.weight", dim, 0, TensorType::F32, 0);
    add("blk.0.ffn_gate.weight", dim, ff, *type, 0.02f);
    add("blk.0.ffn_up.weight", dim, ff, *type, 0.02f);
    add("blk.0.ffn_down.weight", ff, dim, *type, 0.02f);
    w.write_file(argv[1]);
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
  return 0;
}
