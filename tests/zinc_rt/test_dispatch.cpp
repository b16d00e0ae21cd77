// A dispatch programmed from a real kernel's descriptor (the embedded attention_decode for gfx1100): the
// entry point's registers, the resource registers as the compiler wrote them, the workgroup size, the
// kernel arguments' address in the first user SGPRs (no more of them than the descriptor's USER_SGPR
// count), LDS_SIZE from the kernel's local memory, the dispatch with wave32 where the kernel is
// wave32; its per-token slot patched in the ring; and the kernels it must refuse.
#include <gtest/gtest.h>

#include <map>
#include <tuple>
#include <vector>

#include "backend/zinc_rt/dispatch.h"
#include "core/error.h"

namespace zinc::backend::zinc_rt {
namespace {

// SET_SH_REG packets of a stream by register (byte offset), and the DISPATCH_DIRECT body.
struct Parsed {
  std::map<uint32_t, std::vector<uint32_t>> regs;
  std::vector<uint32_t> dispatch;
};
Parsed parse(const pm4::Stream& s) {
  Parsed p;
  const auto d = s.dwords();
  for (size_t i = 0; i < d.size();) {
    const uint32_t h = d[i], op = h >> 8 & 0xFF, body = (h >> 16 & 0x3FFF) + 1;
    EXPECT_EQ(h >> 30, 3u);
    if (op == pm4::kSetShReg) {
      const uint32_t reg = pm4::kShRegBase + 4 * d[i + 1];
      for (uint32_t k = 0; k + 1 < body; ++k) p.regs[reg + 4 * k] = {d[i + 2 + k]};
    } else if (op == pm4::kDispatchDirect) {
      p.dispatch.assign(d.begin() + static_cast<std::ptrdiff_t>(i + 1), d.begin() + static_cast<std::ptrdiff_t>(i + 1 + body));
    }
    i += 1 + body;
  }
  return p;
}

// A one-dimensional dispatch's arguments.
DispatchArgs args_of(uint64_t code_base, uint64_t kernarg, uint32_t groups, uint32_t block) {
  DispatchArgs a;
  a.code_base = code_base;
  a.kernarg = kernarg;
  a.groups = {groups, 1, 1};
  a.block = {block, 1, 1};
  return a;
}

TEST(Dispatch, ProgrammedFromTheDescriptor) {
  const auto bytes = code_object_bytes("attention_decode-gfx1100");
  if (bytes.empty()) GTEST_SKIP() << "this build had no AMDGPU compiler (clang-19 or later with ld.lld): no code objects";
  const CodeObject co = parse_code_object(bytes);
  const KernelInfo& k = *co.kernel("attention_decode");
  const DispatchArgs a = args_of(0x00007F0000000000ull, 0x00007F1234567800ull, 12, 256);
  pm4::Stream s;
  const DispatchSlots slots = emit_dispatch(s, k, a);
  const Parsed p = parse(s);
  const uint64_t entry = a.code_base + k.entry_address;
  EXPECT_EQ(p.regs.at(pm4::kComputePgmLo)[0], static_cast<uint32_t>(entry >> 8));
  EXPECT_EQ(p.regs.at(pm4::kComputePgmHi)[0], static_cast<uint32_t>(entry >> 40));
  EXPECT_EQ(p.regs.at(pm4::kComputePgmRsrc1)[0], k.rsrc1);
  // RSRC2 as the compiler wrote it, with LDS_SIZE (bits 15-23, Mesa's S_00B84C_LDS_SIZE: (x & 0x1FF)
  // << 15) the kernel's 2048 bytes of local memory (its query, weights and sums) in blocks of 128
  // dwords: 4 (the descriptor leaves 0).
  EXPECT_EQ(k.group_segment_bytes, 2048u);
  EXPECT_EQ(k.rsrc2 >> 15 & 0x1FF, 0u);
  EXPECT_EQ(p.regs.at(pm4::kComputePgmRsrc2)[0], k.rsrc2 | 4u << 15);
  EXPECT_EQ(p.regs.at(pm4::kComputePgmRsrc3)[0], k.rsrc3);
  EXPECT_EQ(p.regs.at(pm4::kComputeNumThreadX)[0], 256u);
  EXPECT_EQ(p.regs.at(pm4::kComputeNumThreadX + 4)[0], 1u);
  EXPECT_EQ(p.regs.at(pm4::kComputeUserData0)[0], 0x34567800u);
  EXPECT_EQ(p.regs.at(pm4::kComputeUserData0 + 4)[0], 0x7F12u);
  EXPECT_EQ(p.regs.count(pm4::kComputeUserData0 + 8), 0u);
  const uint32_t user_sgprs = k.rsrc2 >> 1 & 0x1F;  // COMPUTE_PGM_RSRC2.USER_SGPR
  EXPECT_GE(user_sgprs, 2u) << "the descriptor's user SGPRs hold the kernel arguments' address";
  ASSERT_EQ(p.dispatch.size(), 4u);
  EXPECT_EQ((std::vector<uint32_t>(p.dispatch.begin(), p.dispatch.begin() + 3)), (std::vector<uint32_t>{12, 1, 1}));
  EXPECT_TRUE(k.wave32());
  EXPECT_EQ(p.dispatch[3] & (pm4::kInitiatorEnable | pm4::kInitiatorWave32), pm4::kInitiatorEnable | pm4::kInitiatorWave32);
  // The per-token slot: the stream in a ring, its kernel arguments moved.
  ASSERT_GE(slots.kernarg_lo, 0);
  EXPECT_EQ(s.dwords()[static_cast<size_t>(slots.kernarg_lo)], 0x34567800u);
  Ring ring(256);
  const int64_t at = ring.write(s, 0);
  ASSERT_GE(at, 0);
  ring.at(static_cast<uint64_t>(at + slots.kernarg_lo)) = 0x9ABCDE00u;
  EXPECT_EQ(ring.data()[static_cast<size_t>(at + slots.kernarg_lo)], 0x9ABCDE00u);
}

// The trivial dispatch rung's packets: every cache invalidated first (ACQUIRE_MEM with the CPU-written
// code and arguments to be read), fill_ids over 1000 ids in workgroups of 64 (16, the last part masked
// by the kernel), the arguments' address in the user SGPRs, then the 64-bit fence last.
TEST(Dispatch, OneDispatchToAFence) {
  const auto bytes = code_object_bytes("fill_ids-gfx1100");
  if (bytes.empty()) GTEST_SKIP() << "this build had no AMDGPU compiler (clang-19 or later with ld.lld): no code objects";
  const CodeObject co = parse_code_object(bytes);
  const KernelInfo& k = *co.kernel("fill_ids");
  const DispatchArgs a = args_of(0x00007F0000000000ull, 0x00007F0000100000ull, (1000 + kFillIdsGroup - 1) / kFillIdsGroup, kFillIdsGroup);
  const pm4::Stream s = dispatch_to_fence(k, a, 0x00007F0000200008ull, 3);
  std::vector<uint32_t> ops;
  const auto d = s.dwords();
  size_t last = 0;
  for (size_t i = 0; i < d.size(); i += 1 + ((d[i] >> 16 & 0x3FFF) + 1)) ops.push_back(d[i] >> 8 & 0xFF), last = i;
  ASSERT_GE(ops.size(), 3u);
  EXPECT_EQ(ops.front(), pm4::kAcquireMem);
  EXPECT_EQ(ops.back(), pm4::kReleaseMem);
  EXPECT_EQ(ops[ops.size() - 2], pm4::kDispatchDirect);
  EXPECT_EQ(d[7], pm4::kAcquireInvalidateAll) << "(gfx10+ ACQUIRE_MEM: GCR_CNTL in the last of its 7 body dwords)";
  const Parsed p = parse(s);
  ASSERT_EQ(p.dispatch.size(), 4u);
  EXPECT_EQ(p.dispatch[0], 16u);
  EXPECT_EQ(p.regs.at(pm4::kComputeNumThreadX)[0], kFillIdsGroup);
  EXPECT_EQ(p.regs.at(pm4::kComputeUserData0)[0], 0x00100000u);
  EXPECT_EQ(p.regs.at(pm4::kComputeUserData0 + 4)[0], 0x7F00u);
  // RELEASE_MEM's 64-bit data (DATA_SEL 2), address and value (body dwords 2..6).
  EXPECT_EQ(d[last + 2] >> 29, 2u);
  EXPECT_EQ(d[last + 3], 0x00200008u);
  EXPECT_EQ(d[last + 4], 0x7F00u);
  EXPECT_EQ(d[last + 5], 3u);
  EXPECT_EQ(d[last + 6], 0u);
}

// A decode step as one submission: the graph's dispatches (here fill_ids then rms_norm) encoded once
// into memory, and per token only the parameters' WRITE_DATA differs: WRITE_DATA, ACQUIRE_MEM (every
// cache), INDIRECT_BUFFER over exactly the graph's dwords, RELEASE_MEM with the token's fence value.
TEST(Dispatch, AStepIsItsParametersAndTheGraphOnce) {
  const auto fill_bytes = code_object_bytes("fill_ids-gfx1100"), norm_bytes = code_object_bytes("rms_norm-gfx1100");
  if (fill_bytes.empty() || norm_bytes.empty()) GTEST_SKIP() << "this build had no AMDGPU compiler (clang-19 or later with ld.lld): no code objects";
  const CodeObject fill = parse_code_object(fill_bytes), norm = parse_code_object(norm_bytes);
  pm4::Stream graph;
  (void)emit_dispatch(graph, *fill.kernel("fill_ids"), args_of(0x00007F0000000000ull, 0x00007F0000100000ull, 16, kFillIdsGroup));
  (void)emit_dispatch(graph, *norm.kernel("rms_norm"), args_of(0x00007F0000010000ull, 0x00007F0000100100ull, 3, kRmsNormGroup));
  const uint64_t graph_at = 0x00007F0000200000ull, params_at = 0x00007F0000300000ull, fence = 0x00007F0000400000ull;
  const uint32_t n = static_cast<uint32_t>(graph.size());
  std::vector<pm4::Stream> steps;
  for (uint32_t token = 0; token < 2; ++token) {
    const uint32_t params[] = {100 + token, 7};  // (a position, a length)
    steps.push_back(step_stream(params_at, params, graph_at, n, fence, token + 1));
  }
  for (uint32_t token = 0; token < 2; ++token) {
    const auto d = steps[token].dwords();
    std::vector<uint32_t> ops;
    std::vector<size_t> at;
    for (size_t i = 0; i < d.size(); i += 1 + ((d[i] >> 16 & 0x3FFF) + 1)) ops.push_back(d[i] >> 8 & 0xFF), at.push_back(i);
    ASSERT_EQ(ops, (std::vector<uint32_t>{pm4::kWriteData, pm4::kAcquireMem, pm4::kIndirectBuffer, pm4::kReleaseMem}));
    EXPECT_EQ(d[at[0] + 2], 0x00300000u) << "the parameters' address";
    EXPECT_EQ(d[at[0] + 4], 100 + token) << "this token's position";
    EXPECT_EQ(d[at[2] + 1], 0x00200000u);
    EXPECT_EQ(d[at[2] + 2], 0x7F00u);
    EXPECT_EQ(d[at[2] + 3], n | pm4::kIbValid) << "the whole graph";
    EXPECT_EQ(d[at[3] + 5], token + 1) << "the token's fence value";
  }
  // Token to token: the same packets but for the position and the fence value.
  ASSERT_EQ(steps[0].size(), steps[1].size());
  size_t differ = 0;
  for (size_t i = 0; i < steps[0].size(); ++i) differ += steps[0].dwords()[i] != steps[1].dwords()[i];
  EXPECT_EQ(differ, 2u);
  EXPECT_THROW(step_stream(params_at, {}, graph_at + 2, n, fence, 1), Error) << "a graph not 4-byte aligned";
}

TEST(Dispatch, RefusesWhatItCannotProgram) {
  KernelInfo k;
  k.name = "k";
  k.properties = 1u << 3 | 1u << 10;
  k.entry_address = 0x100;
  pm4::Stream s;
  DispatchArgs a;
  a.kernarg = 0x1000;
  a.code_base = 0x80;
  EXPECT_THROW(emit_dispatch(s, k, a), Error) << "entry point not 256-byte aligned";
  a.code_base = 0;
  k.private_segment_bytes = 16;
  EXPECT_THROW(emit_dispatch(s, k, a), Error) << "scratch";
  k.private_segment_bytes = 0;
  k.properties |= 1u << 1;  // the dispatch packet's address, not given
  EXPECT_THROW(emit_dispatch(s, k, a), Error);
  k.properties = 1u << 5;  // flat scratch init
  EXPECT_THROW(emit_dispatch(s, k, a), Error);
  EXPECT_EQ(s.size(), 0u) << "nothing written by a refused dispatch";
  k.properties = 1u << 3;
  a.kernarg = 0;
  EXPECT_THROW(emit_dispatch(s, k, a), Error) << "no kernel arguments' address";
  a.kernarg = 0x1000;
  k.group_segment_bytes = 65536 + 4;
  EXPECT_THROW(emit_dispatch(s, k, a), Error) << "more local memory than a workgroup has";
  EXPECT_EQ(s.size(), 0u);
  // 1 to 512 bytes: one block; 513: two; an LDS_SIZE the descriptor already holds, if larger, kept.
  for (const auto& [bytes, rsrc2, blocks] : {std::tuple{1u, 0u, 1u}, {512u, 0u, 1u}, {513u, 0u, 2u}, {0u, 0u, 0u}, {512u, 5u << 15, 5u}}) {
    k.group_segment_bytes = bytes;
    k.rsrc2 = rsrc2 | 0x9Eu;
    s.clear();
    (void)emit_dispatch(s, k, a);
    EXPECT_EQ(parse(s).regs.at(pm4::kComputePgmRsrc2)[0], 0x9Eu | blocks << 15) << bytes << " bytes";
  }
}

}  // namespace
}  // namespace zinc::backend::zinc_rt
