// Test-only GGUF encoder that writes bytes by hand, independent of src/gguf, so the reader and writer
// are checked against an encoding written separately from them. Also small test utilities.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

namespace zinc::test {

// Type ids as the GGUF specification numbers them.
enum : uint32_t { U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7, STR = 8, ARR = 9,
                  U64 = 10, I64 = 11, F64 = 12 };

struct RawGguf {
  std::vector<uint8_t> b;

  template <class T>
  RawGguf& put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    b.insert(b.end(), p, p + sizeof v);
    return *this;
  }
  RawGguf& u32(uint32_t v) { return put(v); }
  RawGguf& u64(uint64_t v) { return put(v); }
  RawGguf& str(std::string_view s) {
    u64(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  RawGguf& raw(std::string_view s) {
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  RawGguf& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    raw("GGUF");
    u32(version);
    u64(n_tensors);
    return u64(n_kv);
  }
  RawGguf& key(std::string_view k, uint32_t type) {
    str(k);
    return u32(type);
  }
  RawGguf& tensor(std::string_view name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset) {
    str(name);
    u32(static_cast<uint32_t>(ne.size()));
    for (uint64_t d : ne) u64(d);
    u32(type);
    return u64(offset);
  }
  RawGguf& pad(size_t alignment) {
    while (b.size() % alignment) b.push_back(0);
    return *this;
  }
  RawGguf& fill(size_t n, uint8_t v) {
    b.insert(b.end(), n, v);
    return *this;
  }
};

inline std::filesystem::path testdata_dir() { return ZINC_TESTDATA_DIR; }

// Skips (with the reason printed) when ../shared/testdata is not beside the checkout.
#define ZINC_REQUIRE_TESTDATA()                                                                        \
  do {                                                                                                 \
    if (!std::filesystem::exists(zinc::test::testdata_dir())) {                                        \
      GTEST_SKIP() << "test data not found at " << zinc::test::testdata_dir()                          \
                   << " (clone with ../shared beside the checkout)";                                   \
    }                                                                                                  \
  } while (0)

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "zinc-test-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path file(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

inline void write_bytes(const std::filesystem::path& p, const std::vector<uint8_t>& bytes) {
  std::ofstream out(p, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

inline std::vector<uint8_t> read_bytes(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace zinc::test
