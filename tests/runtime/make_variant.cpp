// Test tool: copies a llama-architecture GGUF with rotary scaling or a pooling type added, so the same
// weights can be run by zinc and by llama.cpp under each scaling scheme, and embedded under each pooling.
// Usage: zinc_make_variant IN.gguf OUT.gguf linear|yarn|freqs|pooling-mean|pooling-cls|pooling-last
//   linear: rope.scaling.type linear, factor 4
//   yarn:   rope.scaling.type yarn, factor 4, original context 16 (short, so a 30-token prompt crosses it)
//   freqs:  a rope_freqs.weight tensor of per-pair divisors 1, 1.5, 2, ... (Llama 3.1's form)
//   pooling-*: <arch>.pooling_type 1 (mean), 2 (cls) or 3 (last), as embedding models declare it
//   harmony: the vocabulary's last 7 tokens become GPT-OSS's control tokens (<|start|>, <|channel|>,
//            <|message|>, <|constrain|>, <|end|>, <|return|>, <|call|>), so a server given GPT-OSS's
//            chat template writes and reads Harmony messages with them
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "gguf/reader.h"
#include "gguf/writer.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s IN.gguf OUT.gguf linear|yarn|freqs|pooling-mean|pooling-cls|pooling-last|harmony\n", argv[0]);
    return 2;
  }
  using zinc::gguf::Value;
  try {
    const auto f = zinc::gguf::File::open(argv[1]);
    auto w = zinc::gguf::Writer::copy_of(f);
    const std::string a = f.get<std::string>("general.architecture"), kind = argv[3];
    auto& m = w.metadata();
    if (kind == "linear" || kind == "yarn") {
      m.set(a + ".rope.scaling.type", Value::str(kind));
      m.set(a + ".rope.scaling.factor", Value::f32(4.0f));
      if (kind == "yarn") m.set(a + ".rope.scaling.original_context_length", Value::u32(16));
    } else if (kind == "freqs") {
      const uint32_t n_rot = f.get_or<uint32_t>(a + ".rope.dimension_count", 0);
      auto factors = std::make_shared<std::vector<float>>();
      for (uint32_t i = 0; i < n_rot / 2; ++i) factors->push_back(1.0f + 0.5f * static_cast<float>(i));
      const std::vector<uint64_t> ne{factors->size()};
      w.add_tensor("rope_freqs.weight", zinc::gguf::TensorType::F32, ne, [factors](const auto& emit) {
        emit(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(factors->data()), factors->size() * 4));
      });
    } else if (kind == "pooling-mean" || kind == "pooling-cls" || kind == "pooling-last") {
      m.set(a + ".pooling_type", Value::u32(kind == "pooling-mean" ? 1 : kind == "pooling-cls" ? 2 : 3));
    } else if (kind == "harmony") {
      const auto* tokens = f.find("tokenizer.ggml.tokens");
      const auto* types = f.find("tokenizer.ggml.token_type");
      if (!tokens || !types) throw std::runtime_error("no tokenizer.ggml.tokens / token_type");
      std::vector<std::string> names;
      for (std::string_view t : tokens->value.array().strings()) names.emplace_back(t);
      auto kinds = types->value.as<std::vector<int32_t>>().value();
      const char* control[] = {"<|start|>", "<|channel|>", "<|message|>", "<|constrain|>", "<|end|>", "<|return|>", "<|call|>"};
      for (size_t i = 0; i < 7; ++i) {
        names[names.size() - 7 + i] = control[i];
        kinds[kinds.size() - 7 + i] = 3;  // control
      }
      m.set("tokenizer.ggml.tokens", Value::strings(names));
      m.set("tokenizer.ggml.token_type", Value::i32s(kinds));
    } else {
      std::fprintf(stderr, "unknown variant '%s'\n", argv[3]);
      return 2;
    }
    w.write_file(argv[2]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
