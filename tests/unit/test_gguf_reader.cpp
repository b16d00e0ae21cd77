// GGUF reader: real files (facts from their published descriptions) and hand-encoded files that use
// every metadata value type.
#include <gtest/gtest.h>

#include <cmath>

#include "gguf/reader.h"
#include "raw_gguf.h"

namespace zinc::gguf {
namespace {

using test::RawGguf;

// A file with one key of every value type, nested arrays, and two tensors of different types.
std::vector<uint8_t> every_type_file(uint32_t version = 3) {
  RawGguf g;
  g.header(2, 16, version);
  g.key("t.u8", test::U8).put<uint8_t>(200);
  g.key("t.i8", test::I8).put<int8_t>(-5);
  g.key("t.u16", test::U16).put<uint16_t>(65000);
  g.key("t.i16", test::I16).put<int16_t>(-30000);
  g.key("t.u32", test::U32).put<uint32_t>(4000000000u);
  g.key("t.i32", test::I32).put<int32_t>(-1);
  g.key("t.f32", test::F32).put<float>(1e-5f);
  g.key("t.bool", test::BOOL).put<uint8_t>(1);
  g.key("t.str", test::STR).str("héllo\n");
  g.key("t.u64", test::U64).put<uint64_t>(1ull << 40);
  g.key("t.i64", test::I64).put<int64_t>(-(1ll << 40));
  g.key("t.f64", test::F64).put<double>(10000.5);
  g.key("t.arr_u32", test::ARR).u32(test::U32).u64(3).u32(7).u32(8).u32(9);
  g.key("t.arr_str", test::ARR).u32(test::STR).u64(3).str("a").str("").str("ccc");
  // [[1, 2], [], [3]] as arrays of int32
  g.key("t.nested", test::ARR).u32(test::ARR).u64(3);
  g.u32(test::I32).u64(2).put<int32_t>(1).put<int32_t>(2);
  g.u32(test::I32).u64(0);
  g.u32(test::I32).u64(1).put<int32_t>(3);
  g.key("t.empty", test::ARR).u32(test::STR).u64(0);
  g.tensor("a.weight", {4, 2}, 0 /*F32*/, 0);
  g.tensor("b.weight", {32}, 8 /*Q8_0*/, 32);
  g.pad(32);
  for (int i = 0; i < 8; ++i) g.put<float>(static_cast<float>(i) * 0.5f);
  g.fill(34, 0x11);  // one Q8_0 block
  g.pad(32);
  return g.b;
}

TEST(GgufReader, ReadsEveryValueType) {
  const auto bytes = every_type_file();
  const File f = File::parse(bytes, "every.gguf");
  EXPECT_EQ(f.version(), 3u);
  ASSERT_EQ(f.metadata().size(), 16u);
  EXPECT_EQ(f.get<uint8_t>("t.u8"), 200);
  EXPECT_EQ(f.get<int8_t>("t.i8"), -5);
  EXPECT_EQ(f.get<uint16_t>("t.u16"), 65000);
  EXPECT_EQ(f.get<int16_t>("t.i16"), -30000);
  EXPECT_EQ(f.get<uint32_t>("t.u32"), 4000000000u);
  EXPECT_EQ(f.get<int32_t>("t.i32"), -1);
  EXPECT_EQ(f.get<float>("t.f32"), 1e-5f);
  EXPECT_TRUE(f.get<bool>("t.bool"));
  EXPECT_EQ(f.get<std::string>("t.str"), "héllo\n");
  EXPECT_EQ(f.get<uint64_t>("t.u64"), 1ull << 40);
  EXPECT_EQ(f.get<int64_t>("t.i64"), -(1ll << 40));
  EXPECT_EQ(f.get<double>("t.f64"), 10000.5);
  EXPECT_EQ(f.get<std::vector<uint32_t>>("t.arr_u32"), (std::vector<uint32_t>{7, 8, 9}));
  EXPECT_EQ(f.get<std::vector<std::string>>("t.arr_str"), (std::vector<std::string>{"a", "", "ccc"}));
  EXPECT_EQ(f.get<std::vector<std::vector<int32_t>>>("t.nested"),
            (std::vector<std::vector<int32_t>>{{1, 2}, {}, {3}}));
  EXPECT_TRUE(f.get<std::vector<std::string>>("t.empty").empty());
  // Metadata keeps file order.
  EXPECT_EQ(f.metadata()[0].key, "t.u8");
  EXPECT_EQ(f.metadata()[15].key, "t.empty");
}

TEST(GgufReader, ArrayViewsAccessElements) {
  const auto bytes = every_type_file();
  const File f = File::parse(bytes, "every.gguf");
  const auto strs = f.get<ArrayView>("t.arr_str");
  EXPECT_EQ(strs.element_type(), ValueType::STRING);
  EXPECT_EQ(strs.size(), 3u);
  EXPECT_EQ(strs.at(2).string(), "ccc");
  EXPECT_EQ(strs.strings(), (std::vector<std::string_view>{"a", "", "ccc"}));
  const auto nested = f.get<ArrayView>("t.nested");
  EXPECT_EQ(nested.at(2).array().at(0).as<int32_t>(), 3);
  EXPECT_EQ(f.get<ArrayView>("t.arr_u32").at(1).as<uint32_t>(), 8u);
}

TEST(GgufReader, IntegerConversionsCheckRange) {
  const auto bytes = every_type_file();
  const File f = File::parse(bytes, "every.gguf");
  EXPECT_EQ(f.get<uint64_t>("t.u8"), 200u);      // widening
  EXPECT_EQ(f.get<int64_t>("t.u32"), 4000000000);
  EXPECT_EQ(f.get<double>("t.i32"), -1.0);        // integers read as numbers
  EXPECT_THROW(f.get<uint32_t>("t.i32"), Error);  // negative into unsigned
  EXPECT_THROW(f.get<int8_t>("t.u8"), Error);     // 200 does not fit
  EXPECT_THROW(f.get<uint32_t>("t.u64"), Error);  // 2^40 does not fit
  EXPECT_THROW(f.get<std::string>("t.u32"), Error);
  EXPECT_THROW(f.get<uint32_t>("t.str"), Error);
  EXPECT_THROW(f.get<bool>("t.u8"), Error);
  EXPECT_THROW((f.get<std::vector<uint32_t>>("t.arr_str")), Error);
}

TEST(GgufReader, AccessorErrorsNameFileAndKey) {
  const auto bytes = every_type_file();
  const File f = File::parse(bytes, "every.gguf");
  try {
    f.get<uint32_t>("llama.block_count");
    FAIL() << "expected a missing-key error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "every.gguf: required metadata key 'llama.block_count' is missing");
  }
  try {
    f.get<uint32_t>("t.i32");
    FAIL() << "expected a wrong-type error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("every.gguf"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'t.i32' is int32 -1"), std::string::npos) << msg;
    EXPECT_NE(msg.find("expected non-negative integer fitting uint32"), std::string::npos) << msg;
  }
  EXPECT_EQ(f.get_optional<uint32_t>("nope"), std::nullopt);
  EXPECT_EQ(f.get_or<uint32_t>("nope", 7), 7u);
  EXPECT_EQ(f.get_or<uint32_t>("t.u16", 7), 65000u);
  EXPECT_THROW(f.get_optional<uint32_t>("t.str"), Error);  // present but wrong type is still an error
  try {
    f.tensor("output.weight");
    FAIL() << "expected a missing-tensor error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "every.gguf: required tensor 'output.weight' is missing");
  }
}

TEST(GgufReader, TensorTableAndData) {
  const auto bytes = every_type_file();
  const File f = File::parse(bytes, "every.gguf");
  ASSERT_EQ(f.tensors().size(), 2u);
  const TensorInfo& a = f.tensor("a.weight");
  EXPECT_EQ(a.type, TensorType::F32);
  EXPECT_EQ(a.n_dims, 2u);
  EXPECT_EQ(a.ne[0], 4u);
  EXPECT_EQ(a.ne[1], 2u);
  EXPECT_EQ(a.ne[2], 1u);
  EXPECT_EQ(a.n_elements, 8u);
  EXPECT_EQ(a.n_bytes, 32u);
  EXPECT_EQ(f.data_offset() % 32, 0u);
  const auto data = f.tensor_data(a);
  ASSERT_EQ(data.size(), 32u);
  float v[8];
  std::memcpy(v, data.data(), 32);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(v[i], static_cast<float>(i) * 0.5f);
  const TensorInfo& b = f.tensor("b.weight");
  EXPECT_EQ(b.type, TensorType::Q8_0);
  EXPECT_EQ(b.n_bytes, 34u);
  EXPECT_EQ(f.tensor_data(b)[0], 0x11);
  EXPECT_EQ(f.tensor_data(b)[33], 0x11);
}

TEST(GgufReader, ReadsVersion2) {
  const auto bytes = every_type_file(2);
  const File f = File::parse(bytes, "v2.gguf");
  EXPECT_EQ(f.version(), 2u);
  EXPECT_EQ(f.get<std::string>("t.str"), "héllo\n");
}

TEST(GgufReader, HonoursCustomAlignment) {
  RawGguf g;
  g.header(2, 1);
  g.key("general.alignment", test::U32).u32(64);
  g.tensor("x", {16}, 0, 0).tensor("y", {4}, 0, 64);
  g.pad(64).fill(64, 1).fill(16, 2).pad(64);
  const File f = File::parse(g.b, "aligned.gguf");
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.data_offset() % 64, 0u);
  EXPECT_EQ(f.tensor_data(f.tensor("y"))[0], 2);
}

TEST(GgufReader, OpensStories260K) {
  ZINC_REQUIRE_TESTDATA();
  // Facts from the model's published description: Llama, 5 layers, dim 64, 8 heads / 4 KV heads,
  // a 512-token SentencePiece vocabulary, all tensors F32.
  const File f = File::open(test::testdata_dir() / "models/stories260K.gguf");
  EXPECT_EQ(f.get<std::string>("general.architecture"), "llama");
  EXPECT_EQ(f.get<uint32_t>("llama.block_count"), 5u);
  EXPECT_EQ(f.get<uint32_t>("llama.embedding_length"), 64u);
  EXPECT_EQ(f.get<uint32_t>("llama.attention.head_count"), 8u);
  EXPECT_EQ(f.get<uint32_t>("llama.attention.head_count_kv"), 4u);
  EXPECT_EQ(f.get<std::string>("tokenizer.ggml.model"), "llama");
  EXPECT_EQ(f.get<ArrayView>("tokenizer.ggml.tokens").size(), 512u);
  EXPECT_EQ(f.tensors().size(), 48u);  // embeddings, output norm, output + 9 per block
  for (const auto& t : f.tensors()) EXPECT_EQ(t.type, TensorType::F32) << t.name;
  const auto& emb = f.tensor("token_embd.weight");
  EXPECT_EQ(emb.ne[0], 64u);
  EXPECT_EQ(emb.ne[1], 512u);
  EXPECT_NE(f.find_tensor("blk.4.ffn_down.weight"), nullptr);
  EXPECT_EQ(f.find_tensor("blk.5.ffn_down.weight"), nullptr);
}

TEST(GgufReader, OpensEveryVocabFile) {
  ZINC_REQUIRE_TESTDATA();
  int n = 0;
  for (const auto& entry : std::filesystem::directory_iterator(test::testdata_dir() / "vocab")) {
    if (entry.path().extension() != ".gguf") continue;
    const File f = File::open(entry.path());
    const auto tokens = f.get<ArrayView>("tokenizer.ggml.tokens");
    EXPECT_GT(tokens.size(), 1000u) << entry.path();
    EXPECT_EQ(f.get<std::vector<std::string_view>>("tokenizer.ggml.tokens").size(), tokens.size());
    ++n;
  }
  EXPECT_GE(n, 10);
}

}  // namespace
}  // namespace zinc::gguf
