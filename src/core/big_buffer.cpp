#include "core/big_buffer.h"

#include <sys/mman.h>

#include <new>
#include <utility>

namespace zinc {

namespace {
constexpr size_t kHuge = size_t{2} << 20;
}

BigBuffer::BigBuffer(size_t bytes, bool huge_pages) : size_(bytes) {
  if (bytes == 0) return;
  // Over-map by one huge page and keep the 2 MiB-aligned part: huge pages need aligned ranges. A
  // buffer under a huge page keeps ordinary pages (a huge one would hold mostly nothing).
  const bool huge = huge_pages && bytes >= kHuge;
  const size_t rounded = huge ? (bytes + kHuge - 1) / kHuge * kHuge : bytes;
  map_bytes_ = huge ? rounded + kHuge : bytes;
  map_ = ::mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    throw std::bad_alloc();
  }
  const auto base = reinterpret_cast<uintptr_t>(map_);
  data_ = reinterpret_cast<uint8_t*>(huge ? (base + kHuge - 1) / kHuge * kHuge : base);
#ifdef MADV_HUGEPAGE
  if (huge) ::madvise(data_, rounded, MADV_HUGEPAGE);  // advice only: without THP the pages are ordinary ones
#endif
}

BigBuffer::BigBuffer(BigBuffer&& o) noexcept
    : map_(std::exchange(o.map_, nullptr)),
      map_bytes_(std::exchange(o.map_bytes_, 0)),
      data_(std::exchange(o.data_, nullptr)),
      size_(std::exchange(o.size_, 0)) {}

BigBuffer& BigBuffer::operator=(BigBuffer&& o) noexcept {
  if (this != &o) {
    release();
    map_ = std::exchange(o.map_, nullptr);
    map_bytes_ = std::exchange(o.map_bytes_, 0);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

BigBuffer::~BigBuffer() { release(); }

void BigBuffer::release() {
  if (map_) ::munmap(map_, map_bytes_);
  map_ = nullptr;
  data_ = nullptr;
  size_ = 0;
}

}  // namespace zinc
