// GGUF writer: metadata, tensor table and aligned tensor data, in the layout every GGUF reader expects
// (tensors laid out in table order, each padded to the alignment with zero bytes; a file without
// tensors ends right after its header).
//
// Tensor data is streamed: a tensor is either a borrowed span (for instance a view into a mapped
// source file) or a callback that emits its bytes in pieces, so writing a model never needs the whole
// model in memory. write_file() writes to a temporary file and renames it into place, so a failed or
// interrupted write never leaves a partial file under the requested name.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "gguf/reader.h"
#include "gguf/types.h"
#include "gguf/value.h"

namespace zinc::gguf {

class ByteSink {
 public:
  virtual ~ByteSink() = default;
  virtual void write(std::span<const uint8_t> bytes) = 0;
};

class VectorSink final : public ByteSink {
 public:
  void write(std::span<const uint8_t> bytes) override { data.insert(data.end(), bytes.begin(), bytes.end()); }
  std::vector<uint8_t> data;
};

// Emits a tensor's bytes by calling `emit` one or more times; the pieces must add up to the
// tensor's byte size exactly.
using TensorSource = std::function<void(const std::function<void(std::span<const uint8_t>)>& emit)>;

// Told the bytes written so far and the file's size as a write goes on (after each piece of tensor
// data, and once at the end with written == total).
using WriteProgress = std::function<void(uint64_t written, uint64_t total)>;

class Writer {
 public:
  explicit Writer(uint32_t version = 3);

  // A writer holding every key and tensor of `file` (tensor data borrowed from it), ready to write an
  // identical file or to be edited first.
  static Writer copy_of(const File& file);

  Metadata& metadata() { return metadata_; }
  const Metadata& metadata() const { return metadata_; }

  // ne[0] is the row length. Throws zinc::Error for an invalid name, shape or duplicate.
  // `data` is borrowed until write(): it must outlive the writer's use of it.
  void add_tensor(std::string name, TensorType type, std::span<const uint64_t> ne, std::span<const uint8_t> data);
  // A temporary buffer would dangle before write(): refuse it at compile time.
  void add_tensor(std::string name, TensorType type, std::span<const uint64_t> ne, std::vector<uint8_t>&& data) = delete;
  void add_tensor(std::string name, TensorType type, std::span<const uint64_t> ne, TensorSource source);

  // Alignment from general.alignment (uint32, power of two) or the default 32.
  uint32_t alignment() const;
  uint64_t file_size() const;  // size of the file write() would produce

  void write(ByteSink& sink, const WriteProgress& progress = {}) const;
  void write_file(const std::filesystem::path& path, const WriteProgress& progress = {}) const;

 private:
  struct Tensor {
    std::string name;
    TensorType type;
    std::vector<uint64_t> ne;
    uint64_t n_bytes;
    TensorSource source;
  };
  void add(std::string name, TensorType type, std::span<const uint64_t> ne, TensorSource source,
           const uint64_t* expected_bytes);
  uint64_t header_size() const;

  uint32_t version_;
  Metadata metadata_;
  std::vector<Tensor> tensors_;
};

}  // namespace zinc::gguf
