// Reader for Hugging Face safetensors checkpoints: one file, or shards listed by
// model.safetensors.index.json. Files are memory-mapped; the JSON header is validated before any
// tensor is handed out (known dtype, shape × element size = byte range, ranges inside the file).
//
// Layout: u64 little-endian header length N, N bytes of JSON {"name": {"dtype", "shape",
// "data_offsets": [begin, end]}, "__metadata__": {...}}, then the data; offsets count from the data start.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/mapped_file.h"

namespace zinc::convert {

enum class StDType { F32, F16, BF16, F64, I64, I32, I16, I8, U8, BOOL };

struct StTensor {
  std::string name;
  StDType dtype = StDType::F32;
  std::vector<int64_t> shape;       // as stored: outermost dimension first (row-major)
  std::span<const uint8_t> data;
  int64_t n_elements() const;
};

size_t st_dtype_size(StDType t);
const char* st_dtype_name(StDType t);

class SafetensorsFile {
 public:
  static SafetensorsFile open(const std::filesystem::path& path);
  // Validates bytes the caller keeps alive (for tests and fuzzing); `name` is used in messages.
  static SafetensorsFile parse(std::span<const uint8_t> bytes, const std::string& name);

  const std::vector<StTensor>& tensors() const { return tensors_; }

 private:
  void parse_all(std::span<const uint8_t> bytes, const std::string& name);
  MappedFile map_;
  std::vector<StTensor> tensors_;
};

// All tensors of a checkpoint directory (model.safetensors, or the shards of its index).
class Checkpoint {
 public:
  static Checkpoint open(const std::filesystem::path& dir);
  const StTensor* find(const std::string& name) const;
  const StTensor& get(const std::string& name) const;  // throws naming the missing tensor
  std::vector<const StTensor*> tensors() const;         // sorted by name

 private:
  std::filesystem::path dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::unordered_map<std::string, const StTensor*> by_name_;
};

}  // namespace zinc::convert
