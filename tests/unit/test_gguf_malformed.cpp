// The reader against broken files: every failure is one zinc::Error naming the file and the byte
// offset, never a crash or an out-of-bounds read (the sanitizer build runs these too).
#include <gtest/gtest.h>

#include <random>

#include "gguf/reader.h"
#include "raw_gguf.h"

namespace zinc::gguf {
namespace {

using test::RawGguf;

// Expects parse() to fail with a message that contains `needle` and names the byte offset `at`.
void expect_rejected(const std::vector<uint8_t>& bytes, const std::string& needle, int64_t at = -1) {
  try {
    File::parse(bytes, "bad.gguf");
    ADD_FAILURE() << "accepted a malformed file; expected: " << needle;
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("bad.gguf: ", 0), 0u) << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << "message: " << msg << "\nexpected to contain: " << needle;
    if (at >= 0) {
      EXPECT_NE(msg.find("byte " + std::to_string(at) + ":"), std::string::npos) << msg;
    }
  }
}

std::vector<uint8_t> small_valid_file() {
  RawGguf g;
  g.header(2, 3);
  g.key("general.architecture", test::STR).str("llama");
  g.key("tokenizer.ggml.tokens", test::ARR).u32(test::STR).u64(2).str("<s>").str("hi");
  g.key("x.nested", test::ARR).u32(test::ARR).u64(1).u32(test::U8).u64(2).put<uint8_t>(1).put<uint8_t>(2);
  g.tensor("w", {8, 2}, 0, 0).tensor("b", {8}, 0, 64);
  g.pad(32).fill(64, 0x3f).fill(32, 0x40);
  return g.b;
}

TEST(GgufMalformed, SmallValidFileParses) {
  const auto bytes = small_valid_file();
  const File f = File::parse(bytes, "ok.gguf");
  EXPECT_EQ(f.tensors().size(), 2u);
}

TEST(GgufMalformed, EveryTruncationIsRejected) {
  const auto full = small_valid_file();
  const File f = File::parse(full, "ok.gguf");
  for (size_t n = 0; n < full.size(); ++n) {
    const std::vector<uint8_t> cut(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n));
    try {
      File::parse(cut, "cut.gguf");
      ADD_FAILURE() << "accepted the file truncated to " << n << " bytes";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("cut.gguf: byte "), std::string::npos) << e.what();
    }
  }
}

TEST(GgufMalformed, RealModelTruncationsAreRejected) {
  ZINC_REQUIRE_TESTDATA();
  const auto full = test::read_bytes(test::testdata_dir() / "models/stories260K.gguf");
  const File f = File::parse(full, "stories");
  // Every offset through the header, then a stride through the tensor data.
  std::vector<size_t> cuts;
  for (size_t n = 0; n <= f.data_offset() + 64; ++n) cuts.push_back(n);
  for (size_t n = f.data_offset() + 64; n < full.size(); n += 997) cuts.push_back(n);
  cuts.push_back(full.size() - 1);
  for (size_t n : cuts) {
    EXPECT_THROW(File::parse(std::span<const uint8_t>(full.data(), n), "cut"), Error) << "length " << n;
  }
}

TEST(GgufMalformed, BadMagicAndVersion) {
  expect_rejected({}, "file is 0 bytes, too small to be a GGUF file", 0);
  expect_rejected(RawGguf().raw("GGML").u32(3).u64(0).u64(0).b, "not a GGUF file", 0);
  expect_rejected(RawGguf().header(0, 0, 1).b, "GGUF version 1 is not supported", 4);
  expect_rejected(RawGguf().header(0, 0, 4).b, "unsupported GGUF version 4", 4);
  expect_rejected(RawGguf().header(0, 0, 0x03000000).b, "big-endian GGUF files are not supported", 4);
}

TEST(GgufMalformed, CountsThatCannotFit) {
  expect_rejected(RawGguf().header(0, 1ull << 60).b, "metadata count 1152921504606846976 cannot fit", 16);
  expect_rejected(RawGguf().header(~0ull, 0).b, "tensor count 18446744073709551615 cannot fit", 8);
  // One declared pair, none present.
  expect_rejected(RawGguf().header(0, 1).fill(12, 0).b, "metadata count 1 cannot fit");
}

TEST(GgufMalformed, HugeLengths) {
  RawGguf key;
  key.header(0, 1).u64(~0ull).fill(16, 0);
  expect_rejected(key.b, "key of metadata pair 0 has length 18446744073709551615", 24);
  RawGguf str;
  str.header(0, 1).key("k", test::STR).u64(1ull << 62).raw("abc");
  expect_rejected(str.b, "string value of 'k' has length 4611686018427387904", 37);
  RawGguf arr;
  arr.header(0, 1).key("k", test::ARR).u32(test::U64).u64(1ull << 61).u64(1);
  expect_rejected(arr.b, "claims 2305843009213693952 uint64 elements", 37);
  RawGguf strs;
  strs.header(0, 1).key("k", test::ARR).u32(test::STR).u64(1ull << 40).fill(64, 0);
  expect_rejected(strs.b, "claims 1099511627776 string elements", 37);
  RawGguf name;
  name.header(1, 0).u64(1ull << 50).fill(32, 0);
  expect_rejected(name.b, "name of tensor 0 has length", 24);
}

TEST(GgufMalformed, UnknownTypes) {
  expect_rejected(RawGguf().header(0, 1).key("k", 13).fill(8, 0).b, "'k' has unknown value type 13", 33);
  expect_rejected(RawGguf().header(0, 1).key("k", test::ARR).u32(99).u64(0).b,
                  "'k' is an array of unknown value type 99", 37);
  RawGguf t;
  t.header(1, 0).tensor("w", {4}, 4 /* retired Q4_2 */, 0).pad(32).fill(32, 0);
  expect_rejected(t.b, "tensor 'w' has unknown type id 4");
  RawGguf t2;
  t2.header(1, 0).tensor("w", {4}, 1000, 0).pad(32).fill(32, 0);
  expect_rejected(t2.b, "tensor 'w' has unknown type id 1000");
}

TEST(GgufMalformed, ArraysNestedTooDeep) {
  RawGguf g;
  g.header(0, 1).key("deep", test::ARR);
  for (int i = 0; i < 20; ++i) g.u32(test::ARR).u64(1);
  g.u32(test::U8).u64(0);
  expect_rejected(g.b, "nests arrays deeper than 8 levels");
}

TEST(GgufMalformed, DuplicateKeysAndTensors) {
  RawGguf k;
  k.header(0, 2).key("a", test::U8).put<uint8_t>(1).key("a", test::U8).put<uint8_t>(2);
  expect_rejected(k.b, "duplicate metadata key 'a' (first defined at byte 24)", 38);
  RawGguf t;
  t.header(2, 0).tensor("w", {8}, 0, 0).tensor("w", {8}, 0, 32).pad(32).fill(64, 0);
  expect_rejected(t.b, "duplicate tensor name 'w'");
}

TEST(GgufMalformed, BadAlignment) {
  RawGguf npot;
  npot.header(0, 1).key("general.alignment", test::U32).u32(48);
  expect_rejected(npot.b, "general.alignment is 48, which is not a power of two", 24);
  RawGguf zero;
  zero.header(0, 1).key("general.alignment", test::U32).u32(0);
  expect_rejected(zero.b, "general.alignment is 0");
  RawGguf type;
  type.header(0, 1).key("general.alignment", test::U64).u64(32);
  expect_rejected(type.b, "general.alignment must be a uint32, found uint64");
  RawGguf off;
  off.header(1, 0).tensor("w", {8}, 0, 16).pad(32).fill(64, 0);
  expect_rejected(off.b, "tensor 'w' has data offset 16, not a multiple of the alignment 32");
}

TEST(GgufMalformed, BadTensorShapes) {
  RawGguf dims;
  dims.header(1, 0).tensor("w", {1, 1, 1, 1, 1}, 0, 0);
  expect_rejected(dims.b, "tensor 'w' has 5 dimensions (at most 4 are allowed)", 24 + 9);
  RawGguf block;
  block.header(1, 0).tensor("q", {33}, 2 /*Q4_0*/, 0).pad(32).fill(64, 0);
  expect_rejected(block.b, "tensor 'q' has row length 33, not a multiple of the Q4_0 block size 32");
  RawGguf big;
  big.header(1, 0).tensor("w", {1ull << 40, 1ull << 40}, 0, 0).pad(32);
  expect_rejected(big.b, "tensor 'w' is too large");
  RawGguf neg;
  neg.header(1, 0).tensor("w", {1ull << 63}, 0, 0).pad(32);
  expect_rejected(neg.b, "dimension 0 is 9223372036854775808, beyond the largest allowed");
}

TEST(GgufMalformed, TensorDataOutsideTheFile) {
  RawGguf past;
  past.header(1, 0).tensor("w", {16}, 0, 0).pad(32).fill(63, 0);
  expect_rejected(past.b, "tensor 'w' (64 bytes at data offset 0) extends past the end of the file", 24);
  RawGguf far;
  far.header(1, 0).tensor("w", {1}, 0, 1ull << 62).pad(32).fill(32, 0);
  expect_rejected(far.b, "extends past the end of the file");
  RawGguf nodata;
  nodata.header(1, 0).tensor("w", {1}, 0, 0);
  expect_rejected(nodata.b, "the tensor data section would start at byte");
}

TEST(GgufMalformed, OverlappingTensors) {
  RawGguf g;
  g.header(2, 0).tensor("a", {16}, 0, 0).tensor("b", {8}, 0, 32).pad(32).fill(96, 0);
  expect_rejected(g.b, "tensor 'b' (data offset 32) overlaps tensor 'a' (data offset 0, 64 bytes)");
}

TEST(GgufMalformed, HostileNamesAreEscapedInMessages) {
  RawGguf g;
  g.header(0, 1).key(std::string_view("k\x01\xff", 3), 77);
  expect_rejected(g.b, "'k\\x01\\xff' has unknown value type 77");
}

TEST(GgufMalformed, RandomByteMutationsNeverCrash) {
  // A cheap deterministic fuzz pass (the libFuzzer target goes much further): flip bytes of a valid
  // file; each result must parse into in-bounds views or be rejected with an Error.
  const auto base = small_valid_file();
  std::mt19937 rng(12345);
  int accepted = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    auto bytes = base;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) bytes[rng() % bytes.size()] = static_cast<uint8_t>(rng());
    try {
      const File f = File::parse(bytes, "mut");
      ++accepted;
      for (const auto& kv : f.metadata()) (void)kv.value.as<std::vector<std::string>>();
      for (const auto& t : f.tensors()) {
        const auto d = f.tensor_data(t);
        ASSERT_LE(d.data() + d.size(), bytes.data() + bytes.size());
      }
    } catch (const Error&) {
    }
  }
  EXPECT_GT(accepted, 0);  // some flips only touch tensor data or string bytes
}

}  // namespace
}  // namespace zinc::gguf
