// Writes the reference twin of a file `zinc quantize` made: the same keys and tensors, each tensor's data
// replaced by what the reference implementation's quantizer (ggml_quantize_chunk, from the pinned oracle's
// libggml-base.so) makes of the F32 source. Only formats defined by their rounding have a twin: a tensor
// stored in a searched format (K-quants, IQ4) is an error, since the two searches legitimately differ.
// Prints how many tensors' bytes differ from zinc's; the oracle script then compares the reference
// implementation's logits on both files.
// Usage: zinc_quant_reference_twin SOURCE_F32.gguf ZINC_QUANTIZED.gguf TWIN.gguf
#include <cstdio>
#include <deque>
#include <string>
#include <vector>

#include "gguf/reader.h"
#include "gguf/writer.h"
#include "reference_quant.h"

using namespace zinc;
using gguf::TensorType;

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s SOURCE_F32.gguf ZINC_QUANTIZED.gguf TWIN.gguf\n", argv[0]);
    return 2;
  }
  std::string why;
  const auto ref = test::ReferenceQuantizer::load(&why);
  if (!ref) {
    std::fprintf(stderr, "%s\n", why.c_str());
    return 1;
  }
  try {
    const gguf::File src = gguf::File::open(argv[1]);
    const gguf::File zq = gguf::File::open(argv[2]);
    gguf::Writer w;
    for (const auto& kv : zq.metadata()) w.metadata().set(kv.key, gguf::Value::copy_of(kv.value));
    std::deque<std::vector<uint8_t>> data;  // outlives write_file
    int differ = 0, quantized = 0;
    for (const auto& t : zq.tensors()) {
      const std::string name(t.name);
      const auto& s = src.tensor(name);
      const std::vector<uint64_t> ne(t.ne.begin(), t.ne.begin() + t.n_dims);
      if (s.type != TensorType::F32) {
        std::fprintf(stderr, "%s: the source tensor is not F32\n", name.c_str());
        return 1;
      }
      switch (t.type) {
        case TensorType::F32: case TensorType::F16: case TensorType::BF16: case TensorType::Q8_0:
        case TensorType::Q4_0: case TensorType::Q4_1: case TensorType::Q5_0: case TensorType::Q5_1:
        case TensorType::MXFP4: break;
        default:
          std::fprintf(stderr, "%s is %s, a searched format: the reference's bytes would differ by design\n",
                       name.c_str(), std::string(gguf::tensor_type_name(t.type)).c_str());
          return 1;
      }
      const int64_t n = static_cast<int64_t>(t.ne[0]), rows = static_cast<int64_t>(t.n_elements) / n;
      const auto sd = src.tensor_data(s);
      if (t.type == TensorType::F32) {
        data.emplace_back(sd.begin(), sd.end());
      } else {
        ++quantized;
        data.push_back(ref->quantize(t.type, reinterpret_cast<const float*>(sd.data()), rows, n));
      }
      const auto zd = zq.tensor_data(t);
      differ += !std::equal(zd.begin(), zd.end(), data.back().begin(), data.back().end());
      w.add_tensor(name, t.type, ne, data.back());
    }
    w.write_file(argv[3]);
    std::printf("%s: %d tensors, %d quantized by the reference; %d differ from zinc's bytes\n", argv[3],
                static_cast<int>(zq.tensors().size()), quantized, differ);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
