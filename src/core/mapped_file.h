// A read-only memory map of a whole file. Weights are read in place from the map, so a model is never
// copied into process memory just to be parsed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>

namespace zinc {

class MappedFile {
 public:
  // Throws zinc::Error naming the path when the file cannot be opened or mapped.
  static MappedFile open(const std::filesystem::path& path);

  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace zinc
