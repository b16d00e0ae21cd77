// Large buffers of the CPU backend (packed weights, the KV cache): anonymous memory that reads as zeros
// until written, so a context's cache costs memory only as it fills, aligned to 2 MiB and, on Linux,
// offered to transparent huge pages (MADV_HUGEPAGE) unless asked not to: hundreds of page faults
// instead of hundreds of thousands while packed weights are first written, and fewer TLB misses while
// they stream.
#pragma once

#include <cstddef>
#include <cstdint>

namespace zinc {

class BigBuffer {
 public:
  BigBuffer() = default;
  // `bytes` of zeros (none for 0). Throws std::bad_alloc when the memory cannot be mapped. huge_pages
  // false: ordinary pages only (memory written a little at a time, such as a KV cache: a huge page is
  // zeroed whole at its first write, and where free huge pages are short the kernel compacts memory
  // first; a prompt's first attention step ran 2.5x slower in some runs).
  explicit BigBuffer(size_t bytes, bool huge_pages = true);
  BigBuffer(BigBuffer&& o) noexcept;
  BigBuffer& operator=(BigBuffer&& o) noexcept;
  BigBuffer(const BigBuffer&) = delete;
  BigBuffer& operator=(const BigBuffer&) = delete;
  ~BigBuffer();

  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  void release();
  void* map_ = nullptr;  // the whole mapping (data_ is its aligned part)
  size_t map_bytes_ = 0;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace zinc
