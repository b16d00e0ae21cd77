// GGUF reader: maps a file and validates every byte of its header before anything uses it.
//
// Layout (v2/v3, little-endian): "GGUF" u32 version, u64 tensor_count, u64 kv_count, kv_count
// key/value pairs (string key, u32 type, value), tensor_count infos (string name, u32 n_dims,
// u64 ne[n_dims], u32 type, u64 offset), padding to general.alignment (default 32), tensor data.
//
// Whatever the bytes, open()/parse() either return a File whose views are all in bounds or throw one
// zinc::Error of the form "<file>: byte <offset>: <what was wrong>".
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "core/mapped_file.h"
#include "gguf/types.h"
#include "gguf/value.h"

namespace zinc::gguf {

inline constexpr uint32_t kDefaultAlignment = 32;
inline constexpr uint32_t kMaxDims = 4;
inline constexpr int kMaxArrayDepth = 8;

struct KeyValue {
  std::string_view key;
  ValueView value;
  uint64_t file_offset = 0;  // where the pair starts in the file
};

struct TensorInfo {
  std::string_view name;
  TensorType type = TensorType::F32;
  uint32_t n_dims = 0;
  std::array<uint64_t, kMaxDims> ne{1, 1, 1, 1};  // ne[0] is the contiguous (row) dimension
  uint64_t offset = 0;       // from the start of the data section
  uint64_t n_elements = 0;
  uint64_t n_bytes = 0;
  uint64_t info_offset = 0;  // where this tensor's info starts in the file
};

class File {
 public:
  // Maps and validates a file.
  static File open(const std::filesystem::path& path);
  // Validates bytes the caller keeps alive for the File's lifetime; `name` is used in messages.
  static File parse(std::span<const uint8_t> bytes, std::string name);

  const std::string& name() const { return name_; }
  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // absolute offset of the data section
  uint64_t size() const { return bytes_.size(); }
  std::span<const uint8_t> bytes() const { return bytes_; }
  // Whether the bytes are a read-only mapping of the file (open), not the caller's memory (parse).
  bool mapped() const { return !map_.bytes().empty(); }

  // Metadata, in file order.
  std::span<const KeyValue> metadata() const { return kvs_; }
  const KeyValue* find(std::string_view key) const;
  bool contains(std::string_view key) const { return find(key) != nullptr; }

  // Typed metadata access. get() throws for a missing key or a value that does not convert to T;
  // get_optional() returns nullopt for a missing key but still throws for a wrong type.
  template <class T>
  T get(std::string_view key) const {
    const KeyValue* kv = find(key);
    if (!kv) throw_missing_key(key);
    return convert<T>(*kv);
  }
  template <class T>
  std::optional<T> get_optional(std::string_view key) const {
    const KeyValue* kv = find(key);
    if (!kv) return std::nullopt;
    return convert<T>(*kv);
  }
  template <class T>
  T get_or(std::string_view key, T fallback) const {
    auto v = get_optional<T>(key);
    return v ? std::move(*v) : std::move(fallback);
  }

  // Tensors, in file order.
  std::span<const TensorInfo> tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;
  const TensorInfo& tensor(std::string_view name) const;  // throws naming the missing tensor
  std::span<const uint8_t> tensor_data(const TensorInfo& t) const {
    return bytes_.subspan(data_offset_ + t.offset, t.n_bytes);
  }

 private:
  File() = default;
  void parse_all();
  template <class T>
  T convert(const KeyValue& kv) const {
    auto v = kv.value.as<T>();
    if (!v) throw_wrong_type(kv, expected_type_name<T>());
    return std::move(*v);
  }
  [[noreturn]] void throw_missing_key(std::string_view key) const;
  [[noreturn]] void throw_wrong_type(const KeyValue& kv, const std::string& expected) const;

  MappedFile map_;
  std::string name_;
  std::span<const uint8_t> bytes_;
  uint32_t version_ = 0;
  uint32_t alignment_ = kDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<KeyValue> kvs_;
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string_view, size_t> kv_index_;
  std::unordered_map<std::string_view, size_t> tensor_index_;
};

}  // namespace zinc::gguf
