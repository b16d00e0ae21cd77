// ZINC_RT's command stream: PM4 type-3 packets for an AMD compute queue (gfx10 and later: gfx11
// RDNA3, gfx12 RDNA4), as the amdgpu kernel driver's and Mesa's public headers define them, and the
// ring they are written to. A packet is a header dword — type 3 in bits 30-31, the count of dwords
// after the header minus one in bits 16-29, the opcode in bits 8-15, bit 1 set for the compute
// shader type — then its body. Registers are named by their byte offsets as Mesa names them
// (R_00B830_COMPUTE_PGM_LO is 0xB830); SET_SH_REG carries (offset - 0xB000) / 4.
//
// The ring never splits a packet: a packet that does not fit before the end is preceded by NOPs to
// the end and written from the start. Positions are dword counts that only grow (the queue's write
// pointer); the place in the ring is the position modulo its size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <vector>

namespace zinc::backend::zinc_rt {

namespace pm4 {

inline constexpr uint32_t kNop = 0x10, kDispatchDirect = 0x15, kWriteData = 0x37, kWaitRegMem = 0x3C, kIndirectBuffer = 0x3F,
                          kEventWrite = 0x46, kReleaseMem = 0x49, kDmaData = 0x50, kAcquireMem = 0x58, kSetShReg = 0x76;
// The bytes one DMA_DATA packet copies at most here (its count field holds 26 bits).
inline constexpr uint64_t kDmaChunk = uint64_t{1} << 22;
// The single-dword NOP (count 0x3FFF is that special case).
inline constexpr uint32_t kNop1 = 0xFFFF1000u;

// Compute registers (byte offsets).
inline constexpr uint32_t kComputeDispatchInitiator = 0xB800, kComputeNumThreadX = 0xB81C, kComputePgmLo = 0xB830,
                          kComputePgmHi = 0xB834, kComputePgmRsrc1 = 0xB848, kComputePgmRsrc2 = 0xB84C,
                          kComputeResourceLimits = 0xB854, kComputeTmpringSize = 0xB860, kComputePgmRsrc3 = 0xB8A0,
                          kComputeUserData0 = 0xB900;
inline constexpr uint32_t kShRegBase = 0xB000, kShRegEnd = 0xC000;

// DISPATCH_INITIATOR bits: COMPUTE_SHADER_EN, FORCE_START_AT_000, ORDER_MODE, and wave32 (CS_W32_EN).
inline constexpr uint32_t kInitiatorEnable = 1u << 0, kInitiatorForceStartAt000 = 1u << 1, kInitiatorOrderMode = 1u << 3,
                          kInitiatorWave32 = 1u << 15;

// COMPUTE_PGM_RSRC2.LDS_SIZE: bits 15-23, the workgroup's local memory in blocks of 128 dwords (gfx7
// and later). Code objects leave it 0 for the runtime to fill from their group segment size.
inline constexpr uint32_t kRsrc2LdsSizeShift = 15, kRsrc2LdsSizeMask = 0x1FFu, kLdsBlockBytes = 512;

// INDIRECT_BUFFER's last dword: the size in dwords (bits 0-19) and VALID (bit 23).
inline constexpr uint32_t kIbValid = 1u << 23, kIbMaxDwords = (1u << 20) - 1;

// RELEASE_MEM's event: a cache flush and invalidate with a time stamp, end of pipe (event index 5),
// as the kernel driver's fences on gfx10+ rings write it.
inline constexpr uint32_t kEventCacheFlushAndInvTs = 0x14, kEventIndexEop = 5;

uint32_t header(uint32_t opcode, uint32_t body_dwords, bool compute = true);

// Packets as dwords.
class Stream {
 public:
  // `dwords` dwords of padding: one-dword NOPs, or one NOP packet with a body of dwords - 1.
  void nop(size_t dwords);
  // Consecutive registers from `reg` (byte offset in [0xB000, 0xC000)), one packet.
  void set_sh_reg(uint32_t reg, std::initializer_list<uint32_t> values);
  void set_sh_reg(uint32_t reg, std::span<const uint32_t> values);
  // Workgroups in x, y, z.
  void dispatch_direct(uint32_t x, uint32_t y, uint32_t z, uint32_t initiator);
  // `values` written to memory at `address` (4-byte aligned) by the micro engine, confirmed before
  // the next packet runs.
  void write_data(uint64_t address, std::span<const uint32_t> values);
  // `bytes` copied from `src` to `dst` (each 4-byte aligned, bytes a multiple of 4) by the command
  // processor's DMA, through L2 at both ends, in packets of at most kDmaChunk bytes: the first waits
  // for earlier writes to land, the last holds the packets after it until the copy is done. Nothing for
  // 0 bytes.
  void dma_copy(uint64_t dst, uint64_t src, uint64_t bytes);
  // Caches made coherent before what follows (gfx10+ form: GCR_CNTL in the last dword): `gcr`
  // the GCR_CNTL bits (e.g. kAcquireInvalidateAll).
  void acquire_mem(uint32_t gcr);
  // An event of the pipeline (EVENT_WRITE; e.g. kEventCsPartialFlush: the dispatches before it finish
  // before the packets after it run).
  void event_write(uint32_t event_type, uint32_t event_index);
  // Once all earlier work has finished: caches written back, then `value` (32 or 64 bits) written to
  // `address` (8-byte aligned for 64 bits), with an interrupt if asked (a KFD event's signal).
  void release_mem_fence(uint64_t address, uint64_t value, bool value64, bool interrupt);
  // The `dwords` packets in memory at `address` (4-byte aligned; 1 to kIbMaxDwords of them) run as if
  // they stood here, then the stream goes on (INDIRECT_BUFFER, valid, in the queue's own address space,
  // written as the kernel driver writes a compute ring's: no shader-type bit).
  void indirect_buffer(uint64_t address, uint32_t dwords);

  // The dword index where the next packet starts, and the body of a packet already written (for
  // patching: a position or a buffer address changed per token).
  size_t size() const { return d_.size(); }
  std::span<uint32_t> dwords() { return d_; }
  std::span<const uint32_t> dwords() const { return d_; }
  uint32_t& at(size_t i) { return d_[i]; }
  void clear() { d_.clear(); }

 private:
  std::vector<uint32_t> d_;
};

// EVENT_WRITE's CS_PARTIAL_FLUSH (VGT event 0x07, event index 4): the compute work before it has
// finished before what follows starts.
inline constexpr uint32_t kEventCsPartialFlush = 0x07, kEventIndexPartialFlush = 4;

// GCR_CNTL of ACQUIRE_MEM between dependent dispatches: the scalar, vector and L1 caches invalidated
// (GLK_INV, GLV_INV, GL1_INV), so a kernel reads what the one before it wrote to L2, which every
// compute unit shares (kept).
inline constexpr uint32_t kAcquireInvalidateL0L1 = (1u << 7) | (1u << 8) | (1u << 9);

// GCR_CNTL of ACQUIRE_MEM invalidating the instruction, scalar, vector, L1 and L2 caches (GLI_INV all,
// GLK_INV, GLV_INV, GL1_INV, GL2_INV) and writing L2 and the metadata back (GLM_WB, GL2_WB).
inline constexpr uint32_t kAcquireInvalidateAll = (1u << 0) | (1u << 4) | (1u << 5) | (1u << 7) | (1u << 8) | (1u << 9) |
                                                  (1u << 14) | (1u << 15);
// The same bits of RELEASE_MEM's first body dword: write back L2 (GL2_WB) and the metadata
// (GLM_WB), invalidate L2 (GL2_INV), L1, vector and metadata caches.
inline constexpr uint32_t kReleaseWritebackInvalidate = (1u << 12) | (1u << 13) | (1u << 14) | (1u << 15) | (1u << 20) | (1u << 21);

}  // namespace pm4

// A ring of `size` dwords (a power of two) that packets are copied into at a write position that
// only grows; the queue reads up to the position the doorbell was last rung with.
class Ring {
 public:
  explicit Ring(size_t size_dwords);
  size_t size() const { return ring_.size(); }
  uint64_t write_pos() const { return write_; }
  // Dwords free given the queue's read position (at most write_pos()).
  size_t space(uint64_t read_pos) const;
  // Dwords `packets` would take from write_pos() on, padding to the end of the ring included.
  size_t needed(const pm4::Stream& packets) const;
  // Copies `packets` (whole packets of a Stream, each no longer than the ring) in, padding to the end
  // of the ring first where a packet would cross it. Returns the position the stream starts at, or -1
  // (nothing written) where the ring lacks space for it and its padding.
  int64_t write(const pm4::Stream& packets, uint64_t read_pos);
  const uint32_t* data() const { return ring_.data(); }
  uint32_t& at(uint64_t pos) { return ring_[pos & (ring_.size() - 1)]; }

 private:
  std::vector<uint32_t> ring_;
  uint64_t write_ = 0;
};

}  // namespace zinc::backend::zinc_rt
