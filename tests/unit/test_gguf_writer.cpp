// GGUF writer: byte-identical rewrites of real files, streamed tensor data, and atomic output.
#include <gtest/gtest.h>

#include "gguf/writer.h"
#include "raw_gguf.h"

namespace zinc::gguf {
namespace {

std::vector<uint8_t> to_bytes(const Writer& w) {
  VectorSink sink;
  w.write(sink);
  EXPECT_EQ(sink.data.size(), w.file_size());
  return sink.data;
}

TEST(GgufWriter, RewritesEveryTestFileByteForByte) {
  ZINC_REQUIRE_TESTDATA();
  std::vector<std::filesystem::path> files = {test::testdata_dir() / "models/stories260K.gguf"};
  for (const auto& e : std::filesystem::directory_iterator(test::testdata_dir() / "vocab")) {
    if (e.path().extension() == ".gguf") files.push_back(e.path());
  }
  ASSERT_GE(files.size(), 11u);
  test::TempDir tmp;
  for (const auto& path : files) {
    const File f = File::open(path);
    const auto out = tmp.file(path.filename().string());
    Writer::copy_of(f).write_file(out);
    const auto original = test::read_bytes(path);
    const auto rewritten = test::read_bytes(out);
    ASSERT_EQ(rewritten.size(), original.size()) << path;
    EXPECT_TRUE(rewritten == original) << path << " differs after a read/write round trip";
  }
}

TEST(GgufWriter, LayoutMatchesTheFormat) {
  // Check the bytes with the independent encoder: header, key, tensor info, padding, data.
  Writer w;
  w.metadata().set("general.architecture", Value::str("llama"));
  const std::vector<float> a = {1, 2, 3};
  const std::vector<uint64_t> ne = {3};
  const std::span<const uint8_t> data(reinterpret_cast<const uint8_t*>(a.data()), 12);
  w.add_tensor("a", TensorType::F32, ne, data);
  w.add_tensor("b", TensorType::F32, ne, data);
  test::RawGguf expect;
  expect.header(2, 1).key("general.architecture", test::STR).str("llama");
  expect.tensor("a", {3}, 0, 0).tensor("b", {3}, 0, 32).pad(32);
  expect.put(1.0f).put(2.0f).put(3.0f).pad(32).put(1.0f).put(2.0f).put(3.0f).pad(32);
  EXPECT_TRUE(to_bytes(w) == expect.b);
}

TEST(GgufWriter, MetadataSetReplacesInPlace) {
  Writer w;
  w.metadata().set("a", Value::u32(1));
  w.metadata().set("b", Value::u32(2));
  w.metadata().set("a", Value::str("x"));
  ASSERT_EQ(w.metadata().items().size(), 2u);
  EXPECT_EQ(w.metadata().items()[0].first, "a");
  EXPECT_EQ(w.metadata().items()[0].second.view().string(), "x");
  EXPECT_TRUE(w.metadata().remove("b"));
  EXPECT_FALSE(w.metadata().remove("b"));
}

TEST(GgufWriter, EveryValueKindRoundTrips) {
  Writer w(2);
  const std::vector<float> fs = {0.5f, -1.0f};
  const std::vector<int32_t> is = {-1, 7};
  w.metadata().set("u8", Value::u8(1));
  w.metadata().set("i8", Value::i8(-2));
  w.metadata().set("u16", Value::u16(3));
  w.metadata().set("i16", Value::i16(-4));
  w.metadata().set("u32", Value::u32(5));
  w.metadata().set("i32", Value::i32(-6));
  w.metadata().set("u64", Value::u64(7));
  w.metadata().set("i64", Value::i64(-8));
  w.metadata().set("f32", Value::f32(0.25f));
  w.metadata().set("f64", Value::f64(-0.125));
  w.metadata().set("bool", Value::boolean(false));
  w.metadata().set("str", Value::str("s"));
  w.metadata().set("fs", Value::f32s(fs));
  w.metadata().set("is", Value::i32s(is));
  w.metadata().set("strs", Value::strings({"x", "yz"}));
  w.metadata().set("nested", Value::array(ValueType::ARRAY, {Value::i32s(is), Value::i32s({})}));
  const auto bytes = to_bytes(w);
  const File f = File::parse(bytes, "mem");
  EXPECT_EQ(f.version(), 2u);
  EXPECT_EQ(f.get<int8_t>("i8"), -2);
  EXPECT_EQ(f.get<int64_t>("i64"), -8);
  EXPECT_EQ(f.get<float>("f32"), 0.25f);
  EXPECT_EQ(f.get<double>("f64"), -0.125);
  EXPECT_FALSE(f.get<bool>("bool"));
  EXPECT_EQ(f.get<std::vector<float>>("fs"), fs);
  EXPECT_EQ(f.get<std::vector<std::string>>("strs"), (std::vector<std::string>{"x", "yz"}));
  EXPECT_EQ(f.get<std::vector<std::vector<int32_t>>>("nested"), (std::vector<std::vector<int32_t>>{is, {}}));
  EXPECT_THROW(Value::array(ValueType::UINT8, {Value::u32(1)}), Error);
}

TEST(GgufWriter, StreamsTensorDataInPieces) {
  Writer w;
  w.metadata().set("general.alignment", Value::u32(64));
  const std::vector<uint64_t> ne = {256, 3};  // 3 rows of one Q4_K block (144 bytes) each
  w.add_tensor("q", TensorType::Q4_K, ne, [](const auto& emit) {
    for (uint8_t row = 0; row < 3; ++row) {
      const std::vector<uint8_t> block(144, row);
      emit(block);
    }
  });
  const auto bytes = to_bytes(w);
  const File f = File::parse(bytes, "mem");
  EXPECT_EQ(f.alignment(), 64u);
  const auto data = f.tensor_data(f.tensor("q"));
  ASSERT_EQ(data.size(), 432u);
  EXPECT_EQ(data[0], 0);
  EXPECT_EQ(data[144], 1);
  EXPECT_EQ(data[431], 2);
}

TEST(GgufWriter, ReportsProgressAsTheDataIsWritten) {
  // After each piece of tensor data: the bytes written so far, of the file's size; last, the whole file.
  Writer w;
  w.metadata().set("general.alignment", Value::u32(64));
  const std::vector<uint64_t> ne = {256, 3};
  w.add_tensor("q", TensorType::Q4_K, ne, [](const auto& emit) {
    for (uint8_t row = 0; row < 3; ++row) emit(std::vector<uint8_t>(144, row));
  });
  w.add_tensor("r", TensorType::Q4_K, ne, [](const auto& emit) { emit(std::vector<uint8_t>(432, 7)); });
  VectorSink sink;
  std::vector<std::pair<uint64_t, uint64_t>> calls;
  w.write(sink, [&](uint64_t done, uint64_t total) { calls.emplace_back(done, total); });
  ASSERT_EQ(calls.size(), 5u);  // three pieces, one piece, the end
  const uint64_t data0 = sink.data.size() - 2 * 448;  // each tensor's 432 bytes padded to 448
  EXPECT_EQ(calls[0].first, data0 + 144);
  EXPECT_EQ(calls[2].first, data0 + 432);
  EXPECT_EQ(calls[3].first, data0 + 448 + 432);
  EXPECT_EQ(calls[4].first, sink.data.size());
  for (const auto& [done, total] : calls) EXPECT_EQ(total, w.file_size());
  EXPECT_EQ(w.file_size(), sink.data.size());
}

TEST(GgufWriter, RejectsInvalidTensors) {
  Writer w;
  const std::vector<uint64_t> ne = {32};
  const std::vector<uint8_t> q80(34);
  w.add_tensor("ok", TensorType::Q8_0, ne, q80);
  EXPECT_THROW(w.add_tensor("ok", TensorType::Q8_0, ne, q80), Error);  // duplicate
  EXPECT_THROW(w.add_tensor("", TensorType::Q8_0, ne, q80), Error);
  EXPECT_THROW(w.add_tensor(std::string(64, 'n'), TensorType::Q8_0, ne, q80), Error);
  const std::vector<uint64_t> odd = {33};
  const std::vector<uint8_t> b36(36), b33(33);
  EXPECT_THROW(w.add_tensor("odd", TensorType::Q8_0, odd, b36), Error);
  EXPECT_THROW(w.add_tensor("short", TensorType::Q8_0, ne, b33), Error);
  const std::vector<uint64_t> five = {32, 1, 1, 1, 1};
  EXPECT_THROW(w.add_tensor("five", TensorType::Q8_0, five, q80), Error);
  EXPECT_THROW(Writer{1}, Error);
}

TEST(GgufWriter, FailedWriteLeavesNoFile) {
  test::TempDir tmp;
  Writer w;
  const std::vector<uint64_t> ne = {8};
  w.add_tensor("t", TensorType::F32, ne, [](const auto& emit) {
    const std::vector<uint8_t> half(16, 0);
    emit(half);  // 16 of the 32 bytes, then the source gives up
  });
  const auto out = tmp.file("model.gguf");
  EXPECT_THROW(w.write_file(out), Error);
  EXPECT_TRUE(std::filesystem::is_empty(tmp.path())) << "a partial file was left behind";

  Writer big;
  big.add_tensor("t", TensorType::F32, ne, [](const auto& emit) { emit(std::vector<uint8_t>(40, 0)); });
  EXPECT_THROW(big.write_file(out), Error);
  EXPECT_TRUE(std::filesystem::is_empty(tmp.path()));
}

TEST(GgufWriter, UnwritableDestinationIsAClearError) {
  Writer w;
  try {
    w.write_file("/nonexistent-dir/x.gguf");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent-dir/x.gguf"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("No such file or directory"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace zinc::gguf
