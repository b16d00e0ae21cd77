// Writes small GGUF files with zinc's writer: v2 and v3, every value type, nested arrays, several
// tensor types, a custom alignment, no tensors. They seed the fuzzer and are read back by an
// independent parser in the oracle test, so the writer's output is checked outside zinc too.
#include <cstdio>
#include <string>
#include <vector>

#include "gguf/writer.h"

using namespace zinc::gguf;

namespace {

void tensor(Writer& w, const std::string& name, TensorType type, std::vector<uint64_t> ne) {
  const auto info = tensor_type_info(static_cast<uint32_t>(type));
  uint64_t bytes = ne[0] / info->block_size * info->type_size;
  for (size_t d = 1; d < ne.size(); ++d) bytes *= ne[d];
  std::vector<uint8_t> data(bytes);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 7);
  auto shared = std::make_shared<std::vector<uint8_t>>(std::move(data));
  w.add_tensor(name, type, ne, [shared](const auto& emit) { emit(*shared); });
}

void every_type(Writer& w) {
  const std::vector<float> f = {1.5f, -2.0f};
  const std::vector<int32_t> i = {1, -1, 3};
  w.metadata().set("general.architecture", Value::str("llama"));
  w.metadata().set("a.u8", Value::u8(1));
  w.metadata().set("a.i8", Value::i8(-1));
  w.metadata().set("a.u16", Value::u16(2));
  w.metadata().set("a.i16", Value::i16(-2));
  w.metadata().set("a.u32", Value::u32(3));
  w.metadata().set("a.i32", Value::i32(-3));
  w.metadata().set("a.u64", Value::u64(4));
  w.metadata().set("a.i64", Value::i64(-4));
  w.metadata().set("a.f32", Value::f32(0.5f));
  w.metadata().set("a.f64", Value::f64(0.25));
  w.metadata().set("a.bool", Value::boolean(true));
  w.metadata().set("a.str", Value::str("text"));
  w.metadata().set("a.f32s", Value::f32s(f));
  w.metadata().set("a.strs", Value::strings({"<s>", "</s>", "a"}));
  w.metadata().set("a.nested", Value::array(ValueType::ARRAY, {Value::i32s(i), Value::i32s({})}));
}

void save(const Writer& w, const std::string& dir, const char* name) {
  w.write_file(dir + "/" + name);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTDIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  try {
    Writer a(3);
    every_type(a);
    tensor(a, "token_embd.weight", TensorType::F32, {8, 4});
    tensor(a, "blk.0.attn_q.weight", TensorType::Q8_0, {32, 2});
    tensor(a, "blk.0.ffn_up.weight", TensorType::Q4_K, {256, 1});
    tensor(a, "output_norm.weight", TensorType::F16, {8});
    save(a, dir, "every_type_v3.gguf");

    Writer b(2);
    every_type(b);
    tensor(b, "x", TensorType::BF16, {4, 2, 2});
    save(b, dir, "every_type_v2.gguf");

    Writer c(3);
    c.metadata().set("general.alignment", Value::u32(64));
    tensor(c, "m", TensorType::MXFP4, {32, 2});
    tensor(c, "q", TensorType::Q6_K, {256});
    save(c, dir, "aligned64.gguf");

    Writer d(3);
    d.metadata().set("tokenizer.ggml.model", Value::str("gpt2"));
    d.metadata().set("tokenizer.ggml.tokens", Value::strings({"a", "b", "ab"}));
    d.metadata().set("tokenizer.ggml.merges", Value::strings({"a b"}));
    save(d, dir, "vocab_only.gguf");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
