#include "backend/zinc_rt/pm4.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"

namespace zinc::backend::zinc_rt {

namespace pm4 {

uint32_t header(uint32_t opcode, uint32_t body_dwords, bool compute) {
  if (body_dwords < 1 || body_dwords > 0x4000) throw Error(fmt::format("PM4: a body of {} dwords (1 to 16384)", body_dwords));
  return (3u << 30) | ((body_dwords - 1) & 0x3FFFu) << 16 | (opcode & 0xFFu) << 8 | (compute ? 2u : 0u);
}

void Stream::nop(size_t dwords) {
  if (dwords == 0) return;
  if (dwords == 1) {
    d_.push_back(kNop1);
    return;
  }
  d_.push_back(header(kNop, static_cast<uint32_t>(dwords - 1), false));
  d_.insert(d_.end(), dwords - 1, 0u);
}

void Stream::set_sh_reg(uint32_t reg, std::initializer_list<uint32_t> values) {
  set_sh_reg(reg, std::span<const uint32_t>(values.begin(), values.size()));
}

void Stream::set_sh_reg(uint32_t reg, std::span<const uint32_t> values) {
  if (reg < kShRegBase || reg % 4 != 0 || reg + 4 * values.size() > kShRegEnd || values.empty())
    throw Error(fmt::format("PM4: SET_SH_REG of {} registers at {:#x} (4-byte aligned, within [{:#x}, {:#x}))", values.size(), reg,
                            kShRegBase, kShRegEnd));
  d_.push_back(header(kSetShReg, static_cast<uint32_t>(1 + values.size())));
  d_.push_back((reg - kShRegBase) / 4);
  d_.insert(d_.end(), values.begin(), values.end());
}

void Stream::dispatch_direct(uint32_t x, uint32_t y, uint32_t z, uint32_t initiator) {
  d_.insert(d_.end(), {header(kDispatchDirect, 4), x, y, z, initiator});
}

void Stream::write_data(uint64_t address, std::span<const uint32_t> values) {
  if (address % 4 != 0 || values.empty()) throw Error(fmt::format("PM4: WRITE_DATA of {} dwords at {:#x} (4-byte aligned)", values.size(), address));
  // DST_SEL 5: memory, written directly; WR_CONFIRM; ENGINE_SEL 0: the micro engine.
  d_.push_back(header(kWriteData, static_cast<uint32_t>(3 + values.size())));
  d_.push_back(5u << 8 | 1u << 20);
  d_.push_back(static_cast<uint32_t>(address));
  d_.push_back(static_cast<uint32_t>(address >> 32));
  d_.insert(d_.end(), values.begin(), values.end());
}

void Stream::dma_copy(uint64_t dst, uint64_t src, uint64_t bytes) {
  if (dst % 4 != 0 || src % 4 != 0 || bytes % 4 != 0)
    throw Error(fmt::format("PM4: DMA_DATA of {} bytes from {:#x} to {:#x} (4-byte aligned, a multiple of 4)", bytes, src, dst));
  for (uint64_t done = 0; done < bytes;) {
    const uint64_t n = std::min(bytes - done, kDmaChunk);
    const bool first = done == 0, last = done + n == bytes;
    // CONTROL: ENGINE 0 (the micro engine), DST_SEL 3 and SRC_SEL 3 (addresses through L2), CP_SYNC
    // on the last; COMMAND: the byte count (bits 0-25), memory at both ends (SAS, DAS 0), addresses
    // incrementing (SAIC, DAIC 0), RAW_WAIT (bit 30) on the first.
    d_.push_back(header(kDmaData, 6));
    d_.push_back(3u << 20 | 3u << 29 | (last ? 1u << 31 : 0u));
    d_.push_back(static_cast<uint32_t>(src + done));
    d_.push_back(static_cast<uint32_t>((src + done) >> 32));
    d_.push_back(static_cast<uint32_t>(dst + done));
    d_.push_back(static_cast<uint32_t>((dst + done) >> 32));
    d_.push_back(static_cast<uint32_t>(n) | (first ? 1u << 30 : 0u));
    done += n;
  }
}

void Stream::event_write(uint32_t event_type, uint32_t event_index) {
  d_.insert(d_.end(), {header(kEventWrite, 1), (event_type & 0x3Fu) | (event_index & 0xFu) << 8});
}

void Stream::acquire_mem(uint32_t gcr) {
  // COHER_CNTL 0, the whole address range (COHER_SIZE all ones, SIZE_HI 24 bits of ones, BASE 0),
  // POLL_INTERVAL 10, then GCR_CNTL.
  d_.insert(d_.end(), {header(kAcquireMem, 7), 0u, 0xFFFFFFFFu, 0x00FFFFFFu, 0u, 0u, 10u, gcr});
}

void Stream::indirect_buffer(uint64_t address, uint32_t dwords) {
  if (address % 4 != 0 || dwords == 0 || dwords > kIbMaxDwords)
    throw Error(fmt::format("PM4: INDIRECT_BUFFER of {} dwords at {:#x} (4-byte aligned, 1 to {} dwords)", dwords, address, kIbMaxDwords));
  d_.insert(d_.end(), {header(kIndirectBuffer, 3, false), static_cast<uint32_t>(address), static_cast<uint32_t>(address >> 32), dwords | kIbValid});
}

void Stream::release_mem_fence(uint64_t address, uint64_t value, bool value64, bool interrupt) {
  if (address % (value64 ? 8 : 4) != 0) throw Error(fmt::format("PM4: RELEASE_MEM to {:#x} ({}-byte aligned)", address, value64 ? 8 : 4));
  d_.push_back(header(kReleaseMem, 7));
  d_.push_back(kReleaseWritebackInvalidate | kEventCacheFlushAndInvTs | kEventIndexEop << 8);
  // DATA_SEL (bits 29-31): 1 the low 32 bits, 2 all 64; INT_SEL (bits 24-26): 2 once the data is
  // written; DST_SEL (bits 16-17) 0: memory.
  d_.push_back((value64 ? 2u : 1u) << 29 | (interrupt ? 2u : 0u) << 24);
  d_.push_back(static_cast<uint32_t>(address));
  d_.push_back(static_cast<uint32_t>(address >> 32));
  d_.push_back(static_cast<uint32_t>(value));
  d_.push_back(static_cast<uint32_t>(value >> 32));
  d_.push_back(0u);  // the interrupt's context id
}

}  // namespace pm4

namespace {

// The length in dwords of the packet whose header is h.
size_t packet_length(uint32_t h) {
  if (h == pm4::kNop1) return 1;
  if (h >> 30 != 3u) throw Error(fmt::format("PM4: {:#010x} is not a type-3 packet header", h));
  return ((h >> 16) & 0x3FFFu) + 2;
}

}  // namespace

Ring::Ring(size_t size_dwords) : ring_(size_dwords, pm4::kNop1) {
  if (size_dwords < 16 || (size_dwords & (size_dwords - 1)) != 0) throw Error(fmt::format("ZINC_RT: a ring of {} dwords (a power of two, 16 or more)", size_dwords));
}

size_t Ring::space(uint64_t read_pos) const {
  if (read_pos > write_) throw Error(fmt::format("ZINC_RT: the queue's read position {} is past the write position {}", read_pos, write_));
  return ring_.size() - static_cast<size_t>(write_ - read_pos);
}

size_t Ring::needed(const pm4::Stream& packets) const {
  const std::span<const uint32_t> d = packets.dwords();
  const size_t n = ring_.size();
  // The packets walked as they would land.
  uint64_t at = write_;
  for (size_t i = 0; i < d.size();) {
    const size_t len = packet_length(d[i]);
    if (len > n || i + len > d.size()) throw Error(fmt::format("ZINC_RT: a packet of {} dwords at dword {} of {} (ring of {})", len, i, d.size(), n));
    const size_t in_ring = static_cast<size_t>(at & (n - 1));
    if (in_ring + len > n) at += n - in_ring;
    at += len;
    i += len;
  }
  return static_cast<size_t>(at - write_);
}

int64_t Ring::write(const pm4::Stream& packets, uint64_t read_pos) {
  const std::span<const uint32_t> d = packets.dwords();
  const size_t n = ring_.size();
  if (needed(packets) > space(read_pos)) return -1;
  const auto start = static_cast<int64_t>(write_);
  for (size_t i = 0; i < d.size();) {
    const size_t len = packet_length(d[i]);
    const size_t in_ring = static_cast<size_t>(write_ & (n - 1));
    if (in_ring + len > n) {
      for (size_t k = in_ring; k < n; ++k) ring_[k] = pm4::kNop1;
      write_ += n - in_ring;
    }
    for (size_t k = 0; k < len; ++k) ring_[(write_ + k) & (n - 1)] = d[i + k];
    write_ += len;
    i += len;
  }
  return start;
}

}  // namespace zinc::backend::zinc_rt
