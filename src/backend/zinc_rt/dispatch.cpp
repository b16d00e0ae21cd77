#include "backend/zinc_rt/dispatch.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "core/error.h"

namespace zinc::backend::zinc_rt {

DispatchSlots emit_dispatch(pm4::Stream& s, const KernelInfo& k, const DispatchArgs& a) {
  const uint64_t entry = a.code_base + k.entry_address;
  if (entry % 256 != 0) throw Error(fmt::format("ZINC_RT: {}'s entry point {:#x} is not 256-byte aligned", k.name, entry));
  if (k.private_segment_bytes > 0) throw Error(fmt::format("ZINC_RT: {} needs {} bytes of scratch a lane (not supported yet)", k.name, k.private_segment_bytes));
  // The workgroup's local memory: a code object's RSRC2 leaves LDS_SIZE 0 (under the HSA runtime the
  // command processor fills it from the dispatch packet's group segment size); a PM4 dispatch writes
  // it, or the kernel's local memory would not be allocated.
  constexpr uint32_t kMaxLds = 65536;
  if (k.group_segment_bytes > kMaxLds) throw Error(fmt::format("ZINC_RT: {} needs {} bytes of local memory (at most {})", k.name, k.group_segment_bytes, kMaxLds));
  const uint32_t lds_blocks = std::max((k.group_segment_bytes + pm4::kLdsBlockBytes - 1) / pm4::kLdsBlockBytes,
                                       k.rsrc2 >> pm4::kRsrc2LdsSizeShift & pm4::kRsrc2LdsSizeMask);
  const uint32_t rsrc2 = (k.rsrc2 & ~(pm4::kRsrc2LdsSizeMask << pm4::kRsrc2LdsSizeShift)) | lds_blocks << pm4::kRsrc2LdsSizeShift;
  // kernel_code_properties: bit 0 private segment buffer, 1 dispatch ptr, 2 queue ptr, 3 kernarg
  // segment ptr, 4 dispatch id, 5 flat scratch init, 6 private segment size.
  constexpr uint16_t kDispatchPtr = 1u << 1, kQueuePtr = 1u << 2, kKernarg = 1u << 3, kOthers = (1u << 0) | (1u << 4) | (1u << 5) | (1u << 6);
  if (k.properties & kOthers) throw Error(fmt::format("ZINC_RT: {} asks for user SGPRs not supported yet (properties {:#x})", k.name, k.properties));
  std::vector<uint32_t> user;
  const auto pointer = [&](uint16_t bit, uint64_t v, const char* what) {
    if (!(k.properties & bit)) return;
    if (v == 0) throw Error(fmt::format("ZINC_RT: {} needs the {} and none was given", k.name, what));
    user.push_back(static_cast<uint32_t>(v));
    user.push_back(static_cast<uint32_t>(v >> 32));
  };
  pointer(kDispatchPtr, a.dispatch_ptr, "dispatch packet's address");
  pointer(kQueuePtr, a.queue_ptr, "queue's address");
  const size_t kernarg_at = user.size();
  pointer(kKernarg, a.kernarg, "kernel arguments' address");
  s.set_sh_reg(pm4::kComputePgmLo, {static_cast<uint32_t>(entry >> 8), static_cast<uint32_t>(entry >> 40)});
  s.set_sh_reg(pm4::kComputePgmRsrc1, {k.rsrc1, rsrc2});
  s.set_sh_reg(pm4::kComputePgmRsrc3, {k.rsrc3});
  s.set_sh_reg(pm4::kComputeTmpringSize, {0u});
  s.set_sh_reg(pm4::kComputeResourceLimits, {0u});
  s.set_sh_reg(pm4::kComputeNumThreadX, {a.block[0], a.block[1], a.block[2]});
  DispatchSlots slots;
  if (!user.empty()) {
    const size_t at = s.size();
    s.set_sh_reg(pm4::kComputeUserData0, user);
    if (k.properties & kKernarg) slots.kernarg_lo = static_cast<int64_t>(at + 2 + kernarg_at);
  }
  s.dispatch_direct(a.groups[0], a.groups[1], a.groups[2],
                    pm4::kInitiatorEnable | pm4::kInitiatorForceStartAt000 | pm4::kInitiatorOrderMode | (k.wave32() ? pm4::kInitiatorWave32 : 0u));
  return slots;
}

pm4::Stream dispatch_to_fence(const KernelInfo& k, const DispatchArgs& a, uint64_t fence, uint64_t value) {
  pm4::Stream s;
  s.acquire_mem(pm4::kAcquireInvalidateAll);
  (void)emit_dispatch(s, k, a);
  s.release_mem_fence(fence, value, true, false);
  return s;
}

pm4::Stream step_stream(uint64_t params_at, std::span<const uint32_t> params, uint64_t graph, uint32_t graph_dwords, uint64_t fence,
                        uint64_t value) {
  pm4::Stream s;
  if (!params.empty()) s.write_data(params_at, params);
  s.acquire_mem(pm4::kAcquireInvalidateAll);
  s.indirect_buffer(graph, graph_dwords);
  s.release_mem_fence(fence, value, true, false);
  return s;
}

}  // namespace zinc::backend::zinc_rt
