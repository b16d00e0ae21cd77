// Whole-model quantization of the real test model: tensor types per recipe (fallbacks for its 172-wide
// rows included), metadata, values close to the source, and failures that leave nothing behind.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "gguf/writer.h"
#include "quant/model_quantize.h"
#include "quant/quant.h"
#include "raw_gguf.h"
#include "reference_quant.h"

namespace zinc::quant {
namespace {

using gguf::TensorType;

std::filesystem::path stories() { return test::testdata_dir() / "models/stories260K.gguf"; }

QuantizeOptions options(const char* mixture, unsigned threads = 2) {
  QuantizeOptions o;
  o.mixture = *mixture_by_name(mixture);
  o.threads = threads;
  return o;
}

TEST(ModelQuantize, Stories260KToQ4_0) {
  ZINC_REQUIRE_TESTDATA();
  test::TempDir tmp;
  const gguf::File in = gguf::File::open(stories());
  const auto out = tmp.file("q4.gguf");
  int progress_calls = 0;
  auto opts = options("Q4_0");
  opts.progress = [&](const QuantizeProgress& p) {
    ++progress_calls;
    EXPECT_LE(p.bytes_done, p.bytes_total);
  };
  const QuantizeReport r = quantize_model(in, out, opts);
  EXPECT_GT(progress_calls, 0);
  const gguf::File q = gguf::File::open(out);
  EXPECT_EQ(q.size(), r.file_size);
  EXPECT_EQ(q.get<uint32_t>("general.file_type"), 2u);
  EXPECT_EQ(q.get<uint32_t>("general.quantization_version"), 2u);
  EXPECT_EQ(q.get<std::string>("general.architecture"), "llama");
  EXPECT_EQ(q.metadata().size(), in.metadata().size() + 2);
  EXPECT_EQ(q.tensor("token_embd.weight").type, TensorType::Q4_0);
  EXPECT_EQ(q.tensor("blk.0.attn_q.weight").type, TensorType::Q4_0);
  EXPECT_EQ(q.tensor("blk.4.ffn_gate.weight").type, TensorType::Q4_0);
  EXPECT_EQ(q.tensor("output.weight").type, TensorType::Q8_0);          // Q6_K does not fit 64 columns
  EXPECT_EQ(q.tensor("blk.2.ffn_down.weight").type, TensorType::F16);   // 172 columns fit no block
  EXPECT_EQ(q.tensor("blk.2.ffn_norm.weight").type, TensorType::F32);   // norms stay
  int fallbacks = 0;
  for (const auto& t : r.tensors) fallbacks += !t.fallback.empty();
  EXPECT_EQ(fallbacks, 6);  // output + five ffn_down
}

// Every tensor of a whole-model quantization is what the reference quantizer makes of the source rows:
// the Q4_0 mixture on this model uses only formats defined by their rounding (Q4_0, Q8_0 for the output,
// F16 for the 172-wide rows), so the bytes must be equal; unquantized tensors are copied.
TEST(ModelQuantize, TensorsAreTheReferenceQuantizersBytes) {
  ZINC_REQUIRE_TESTDATA();
  ZINC_REQUIRE_REFERENCE_QUANTIZER(ref);
  test::TempDir tmp;
  const gguf::File in = gguf::File::open(stories());
  quantize_model(in, tmp.file("q4.gguf"), options("Q4_0"));
  const gguf::File q = gguf::File::open(tmp.file("q4.gguf"));
  int quantized = 0;
  for (const auto& t : q.tensors()) {
    const auto& src = in.tensor(t.name);
    ASSERT_EQ(src.type, TensorType::F32) << t.name;
    const auto got = q.tensor_data(t);
    if (t.type == TensorType::F32) {
      const auto want = in.tensor_data(src);
      EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin(), want.end())) << t.name;
      continue;
    }
    ++quantized;
    const int64_t n = static_cast<int64_t>(t.ne[0]), rows = static_cast<int64_t>(t.n_elements) / n;
    const auto want = ref->quantize(t.type, reinterpret_cast<const float*>(in.tensor_data(src).data()), rows, n);
    EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin(), want.end()))
        << t.name << " (" << gguf::tensor_type_name(t.type) << ") differs from the reference quantizer's bytes";
  }
  EXPECT_GT(quantized, 30);
}

TEST(ModelQuantize, ThreadCountDoesNotChangeTheResult) {
  ZINC_REQUIRE_TESTDATA();
  test::TempDir tmp;
  const gguf::File in = gguf::File::open(stories());
  quantize_model(in, tmp.file("a.gguf"), options("Q4_K_M", 1));
  quantize_model(in, tmp.file("b.gguf"), options("Q4_K_M", 3));
  EXPECT_TRUE(test::read_bytes(tmp.file("a.gguf")) == test::read_bytes(tmp.file("b.gguf")));
}

TEST(ModelQuantize, RefusesQuantizedSourcesUnlessAllowed) {
  ZINC_REQUIRE_TESTDATA();
  test::TempDir tmp;
  const gguf::File in = gguf::File::open(stories());
  quantize_model(in, tmp.file("q8.gguf"), options("Q8_0"));
  const gguf::File q8 = gguf::File::open(tmp.file("q8.gguf"));
  try {
    quantize_model(q8, tmp.file("q4.gguf"), options("Q4_0"));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("already quantized (Q8_0)"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(tmp.file("q4.gguf")));
  auto opts = options("Q4_0");
  opts.allow_requantize = true;
  quantize_model(q8, tmp.file("q4.gguf"), opts);
  EXPECT_EQ(gguf::File::open(tmp.file("q4.gguf")).tensor("token_embd.weight").type, TensorType::Q4_0);
}

TEST(ModelQuantize, UnreadableSourceTypeIsAClearError) {
  test::TempDir tmp;
  gguf::Writer w;
  w.metadata().set("general.architecture", gguf::Value::str("llama"));
  const std::vector<uint64_t> ne = {256, 2};
  const std::vector<uint8_t> data(2 * 66);
  w.add_tensor("blk.0.attn_q.weight", TensorType::IQ2_XXS, ne, data);
  w.write_file(tmp.file("iq2.gguf"));
  const gguf::File in = gguf::File::open(tmp.file("iq2.gguf"));
  auto opts = options("Q8_0");
  opts.allow_requantize = true;
  try {
    quantize_model(in, tmp.file("out.gguf"), opts);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("stored as IQ2_XXS, which zinc cannot read"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(tmp.file("out.gguf")));
}

}  // namespace
}  // namespace zinc::quant
