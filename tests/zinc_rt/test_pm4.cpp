// PM4 packets against the definitions of the public AMD headers, restated here: the kernel driver's
// nvd.h (PACKET3(op, n) = 3 << 30 | (op & 0xFF) << 8 | (n & 0x3FFF) << 16, PACKET3_COMPUTE adds
// 1 << 1; n is the body's dwords minus one; the opcodes; PACKET3_SET_SH_REG_START = 0x2C00 dwords;
// WRITE_DATA_DST_SEL(x) = x << 8, WR_CONFIRM = 1 << 20; RELEASE_MEM's DATA_SEL(x) = x << 29 and
// INT_SEL(x) = x << 24, EVENT_TYPE(x) = x, EVENT_INDEX(x) = x << 8; the one-dword NOP 0xFFFF1000;
// DMA_DATA 0x50 with CONTROL's DST_SEL(x) = x << 20, SRC_SEL(x) = x << 29 (3: the address through L2)
// and CP_SYNC = 1 << 31, COMMAND's byte count in bits 0-25 and RAW_WAIT = 1 << 30;
// INDIRECT_BUFFER 0x3F with its size in bits 0-19 and INDIRECT_BUFFER_VALID = 1 << 23) and
// Mesa's sid.h (R_00B830_COMPUTE_PGM_LO = 0xB830 and the other compute registers, SET_SH_REG's index
// (reg - 0xB000) >> 2). The ring: packets never split at its end, space counted from the read
// position, a full ring refusing without writing.
#include <gtest/gtest.h>

#include <vector>

#include "backend/zinc_rt/pm4.h"
#include "core/error.h"

namespace zinc::backend::zinc_rt {
namespace {

constexpr uint32_t PACKET3(uint32_t op, uint32_t n) { return 3u << 30 | (op & 0xFFu) << 8 | (n & 0x3FFFu) << 16; }
constexpr uint32_t PACKET3_COMPUTE(uint32_t op, uint32_t n) { return PACKET3(op, n) | 1u << 1; }
constexpr uint32_t kSetShRegStartDwords = 0x2C00;

std::vector<uint32_t> dwords(const pm4::Stream& s) { return {s.dwords().begin(), s.dwords().end()}; }

TEST(Pm4, PacketsAreWhatTheHeadersDefine) {
  pm4::Stream s;
  s.set_sh_reg(0xB830, {0x12345678u, 0x9Au});  // COMPUTE_PGM_LO, _HI
  // Two derivations of the index: Mesa's (reg - 0xB000) >> 2, the kernel's dword offset - 0x2C00.
  ASSERT_EQ((0xB830u - 0xB000u) >> 2, 0xB830u / 4 - kSetShRegStartDwords);
  EXPECT_EQ(dwords(s), (std::vector<uint32_t>{PACKET3_COMPUTE(0x76, 2), 0x20C, 0x12345678u, 0x9Au}));
  s.clear();
  s.set_sh_reg(0xB900, {7u});  // COMPUTE_USER_DATA_0
  EXPECT_EQ(dwords(s), (std::vector<uint32_t>{PACKET3_COMPUTE(0x76, 1), 0x240, 7u}));
  s.clear();
  s.dispatch_direct(3, 2, 1, pm4::kInitiatorEnable | pm4::kInitiatorWave32);
  EXPECT_EQ(dwords(s), (std::vector<uint32_t>{PACKET3_COMPUTE(0x15, 3), 3, 2, 1, 1u | 1u << 15}));
  s.clear();
  const uint32_t data[] = {0xAAAAAAAAu, 0xBBBBBBBBu};
  s.write_data(0x0000123456789ABCull, data);
  EXPECT_EQ(dwords(s), (std::vector<uint32_t>{PACKET3_COMPUTE(0x37, 4), 5u << 8 | 1u << 20, 0x56789ABCu, 0x1234u, 0xAAAAAAAAu, 0xBBBBBBBBu}));
  s.clear();
  s.release_mem_fence(0x0000000100002000ull, 0x1122334455667788ull, true, true);
  const std::vector<uint32_t> rel = dwords(s);
  ASSERT_EQ(rel.size(), 8u);
  EXPECT_EQ(rel[0], PACKET3_COMPUTE(0x49, 6));
  EXPECT_EQ(rel[1] & 0x3Fu, 0x14u) << "EVENT_TYPE: CACHE_FLUSH_AND_INV_TS_EVENT";
  EXPECT_EQ(rel[1] >> 8 & 0xFu, 5u) << "EVENT_INDEX: end of pipe";
  EXPECT_EQ(rel[1] & (1u << 21), 1u << 21) << "GCR_GL2_WB";
  EXPECT_EQ(rel[2] >> 29, 2u) << "DATA_SEL: 64 bits";
  EXPECT_EQ(rel[2] >> 24 & 7u, 2u) << "INT_SEL: once the data is written";
  EXPECT_EQ(rel[2] >> 16 & 3u, 0u) << "DST_SEL: memory";
  EXPECT_EQ((std::vector<uint32_t>(rel.begin() + 3, rel.end())), (std::vector<uint32_t>{0x2000u, 1u, 0x55667788u, 0x11223344u, 0u}));
  s.clear();
  s.release_mem_fence(0x3000, 9, false, false);
  EXPECT_EQ(dwords(s)[2], 1u << 29) << "DATA_SEL 1 (32 bits), no interrupt";
  s.clear();
  s.acquire_mem(pm4::kAcquireInvalidateAll);
  EXPECT_EQ(dwords(s), (std::vector<uint32_t>{PACKET3_COMPUTE(0x58, 6), 0u, 0xFFFFFFFFu, 0xFFFFFFu, 0u, 0u, 10u, pm4::kAcquireInvalidateAll}));
  s.clear();
  s.nop(1);
  s.nop(4);
  EXPECT_EQ(dwords(s), (std::vector<uint32_t>{0xFFFF1000u, PACKET3(0x10, 2), 0u, 0u, 0u}));
  // INDIRECT_BUFFER as the kernel driver writes one on a compute ring: PACKET3 (no shader-type bit),
  // the address (dword aligned) low and high, then the size with INDIRECT_BUFFER_VALID (1 << 23).
  s.clear();
  s.indirect_buffer(0x00007F12345678F4ull, 1000);
  EXPECT_EQ(dwords(s), (std::vector<uint32_t>{PACKET3(0x3F, 2), 0x345678F4u, 0x7F12u, 1000u | 1u << 23}));
  s.clear();
  s.indirect_buffer(0x1000, (1u << 20) - 1);
  EXPECT_EQ(dwords(s).back(), ((1u << 20) - 1) | 1u << 23) << "the largest size its 20 bits hold";
  // EVENT_WRITE (0x46) of CS_PARTIAL_FLUSH (sid.h V_028A90_CS_PARTIAL_FLUSH = 0x07) with EVENT_INDEX 4,
  // as Mesa orders dependent compute dispatches; then the barrier's ACQUIRE_MEM invalidating GLK
  // (S_586_GLK_INV: bit 7), GLV (bit 8) and GL1 (bit 9), L2 kept.
  s.clear();
  s.event_write(pm4::kEventCsPartialFlush, pm4::kEventIndexPartialFlush);
  EXPECT_EQ(dwords(s), (std::vector<uint32_t>{PACKET3_COMPUTE(0x46, 0), 0x07u | 4u << 8}));
  EXPECT_EQ(pm4::kAcquireInvalidateL0L1, 1u << 7 | 1u << 8 | 1u << 9);
}

TEST(Pm4, RefusesWhatTheHardwareWouldMisread) {
  pm4::Stream s;
  EXPECT_THROW(s.set_sh_reg(0xA000, {1u}), Error) << "below the SH range";
  EXPECT_THROW(s.set_sh_reg(0xB832, {1u}), Error) << "not 4-byte aligned";
  EXPECT_THROW(s.set_sh_reg(0xBFFC, {1u, 2u}), Error) << "past the SH range";
  const uint32_t one[] = {1u};
  EXPECT_THROW(s.write_data(0x1002, one), Error);
  EXPECT_THROW(s.release_mem_fence(0x1004, 1, true, false), Error) << "a 64-bit fence 4-byte aligned";
  EXPECT_THROW(s.dma_copy(0x2000, 0x1002, 64), Error) << "a source not 4-byte aligned";
  EXPECT_THROW(s.dma_copy(0x2001, 0x1000, 64), Error) << "a destination not 4-byte aligned";
  EXPECT_THROW(s.dma_copy(0x2000, 0x1000, 66), Error) << "bytes not a multiple of 4";
  EXPECT_THROW(s.indirect_buffer(0x1002, 8), Error) << "an indirect buffer not 4-byte aligned";
  EXPECT_THROW(s.indirect_buffer(0x1000, 0), Error) << "an empty indirect buffer";
  EXPECT_THROW(s.indirect_buffer(0x1000, 1u << 20), Error) << "more dwords than the size field holds";
  EXPECT_EQ(s.size(), 0u) << "nothing written by a refused packet";
  EXPECT_THROW(Ring(48), Error) << "not a power of two";
}

// Walks a ring's dwords from `from` to `to` (positions) packet by packet: every packet whole.
void expect_whole_packets(const Ring& r, uint64_t from, uint64_t to) {
  const size_t n = r.size();
  for (uint64_t p = from; p < to;) {
    const uint32_t h = r.data()[p & (n - 1)];
    const size_t len = h == pm4::kNop1 ? 1 : ((h >> 16) & 0x3FFFu) + 2;
    ASSERT_EQ(h == pm4::kNop1 || h >> 30 == 3u, true) << "a header at position " << p;
    ASSERT_LE((p & (n - 1)) + len, n) << "a packet split at the ring's end, position " << p;
    p += len;
  }
}

TEST(Pm4, CopiesInPacketsTheCountFieldHolds) {
  // Two whole chunks and 8 bytes more: three packets, addresses advancing, the first waiting for
  // earlier writes, the last holding what follows until the copy is done.
  pm4::Stream s;
  const uint64_t src = 0x0000700000001000ull, dst = 0x0000700100002000ull, bytes = 2 * pm4::kDmaChunk + 8;
  s.dma_copy(dst, src, bytes);
  const std::vector<uint32_t> d = dwords(s);
  ASSERT_EQ(d.size(), 3u * 7);
  ASSERT_LT(pm4::kDmaChunk, uint64_t{1} << 26) << "the count field's 26 bits";
  for (size_t k = 0; k < 3; ++k) {
    const uint32_t* p = d.data() + 7 * k;
    const uint64_t off = k * pm4::kDmaChunk, n = k < 2 ? pm4::kDmaChunk : 8;
    EXPECT_EQ(p[0], PACKET3_COMPUTE(0x50, 5)) << "packet " << k;
    EXPECT_EQ(p[1] >> 20 & 3u, 3u) << "DST_SEL: through L2";
    EXPECT_EQ(p[1] >> 29 & 3u, 3u) << "SRC_SEL: through L2";
    EXPECT_EQ(p[1] & 1u, 0u) << "ENGINE: the micro engine";
    EXPECT_EQ(p[1] >> 31, k == 2 ? 1u : 0u) << "CP_SYNC on the last only, packet " << k;
    EXPECT_EQ((uint64_t{p[3]} << 32) | p[2], src + off);
    EXPECT_EQ((uint64_t{p[5]} << 32) | p[4], dst + off);
    EXPECT_EQ(p[6] & ((1u << 26) - 1), n) << "byte count, packet " << k;
    EXPECT_EQ(p[6] >> 26 & 0xFu, 0u) << "memory at both ends, addresses incrementing";
    EXPECT_EQ(p[6] >> 30 & 1u, k == 0 ? 1u : 0u) << "RAW_WAIT on the first only, packet " << k;
  }
  // The ring reads them as whole packets.
  Ring ring(64);
  EXPECT_EQ(ring.write(s, 0), 0);
  expect_whole_packets(ring, 0, ring.write_pos());
  s.clear();
  s.dma_copy(dst, src, 0);
  EXPECT_EQ(s.size(), 0u) << "nothing to copy, no packet";
}

TEST(Pm4, RingPadsToTheEndRatherThanSplitAPacket) {
  Ring ring(32);
  pm4::Stream s;
  s.dispatch_direct(1, 1, 1, pm4::kInitiatorEnable);  // 5 dwords
  s.set_sh_reg(pm4::kComputeUserData0, {1u, 2u, 3u, 4u});  // 6 dwords
  EXPECT_EQ(ring.write(s, 0), 0);
  EXPECT_EQ(ring.write(s, 0), 11);
  EXPECT_EQ(ring.write_pos(), 22u);
  EXPECT_EQ(ring.space(0), 10u);
  // 11 more dwords do not fit in 10 free: refused, nothing written.
  EXPECT_EQ(ring.write(s, 0), -1);
  EXPECT_EQ(ring.write_pos(), 22u);
  // The queue has read the first stream: 21 free. The dispatch fits at 22..26, the next packet (6) does
  // not fit in 27..31: five NOPs, then it lands at 0..5 (position 32).
  EXPECT_EQ(ring.write(s, 11), 22);
  EXPECT_EQ(ring.write_pos(), 38u);
  for (uint64_t p = 27; p < 32; ++p) EXPECT_EQ(ring.data()[p], pm4::kNop1) << "padding at " << p;
  EXPECT_EQ(ring.data()[0], PACKET3_COMPUTE(0x76, 4));
  expect_whole_packets(ring, 11, ring.write_pos());
  // Patching a written packet in place (a per-token value): the user data's first register.
  ring.at(32 + 2) = 99;
  EXPECT_EQ(ring.data()[2], 99u);
  // A read position past the write position is a caller's error, as is a packet longer than the ring.
  EXPECT_THROW((void)ring.space(39), Error);
  pm4::Stream big;
  big.nop(40);
  EXPECT_THROW((void)ring.write(big, ring.write_pos()), Error);
}

}  // namespace
}  // namespace zinc::backend::zinc_rt
