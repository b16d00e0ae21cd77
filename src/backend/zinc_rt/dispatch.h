// A kernel dispatch on a ZINC_RT compute queue, programmed from the kernel's descriptor: the entry
// point (COMPUTE_PGM_LO/HI: its address / 256), the resource registers as the compiler wrote them
// (RSRC1..3) with RSRC2's LDS_SIZE from the kernel's local memory, no scratch, the workgroup size, the
// user SGPRs the descriptor asks for in the order the AMDHSA ABI gives them (the dispatch packet
// pointer, the queue pointer, the kernel arguments' address), then DISPATCH_DIRECT with the workgroup
// counts (wave32 where the kernel was built for it).
#pragma once

#include <array>
#include <cstdint>
#include <span>

#include "backend/zinc_rt/code_object.h"
#include "backend/zinc_rt/pm4.h"

namespace zinc::backend::zinc_rt {

struct DispatchArgs {
  uint64_t code_base = 0;  // the GPU address the code object is loaded at (its address 0)
  uint64_t kernarg = 0;    // the kernel arguments' GPU address
  uint64_t dispatch_ptr = 0, queue_ptr = 0;  // where the kernel asks for them
  std::array<uint32_t, 3> groups = {1, 1, 1}, block = {1, 1, 1};
};

// Where a written dispatch keeps what changes per token: the dword of the stream holding the low half
// of the kernel arguments' address (the high half follows), or -1 where the kernel takes none.
struct DispatchSlots {
  int64_t kernarg_lo = -1;
};

// Throws zinc::Error where the kernel needs what is not given or not supported yet (scratch memory,
// user SGPRs other than those three, more than 64 KiB of local memory), or the entry point is not
// 256-byte aligned.
DispatchSlots emit_dispatch(pm4::Stream& s, const KernelInfo& k, const DispatchArgs& a);

// One dispatch on its own, as a rung of the ladder submits it: every cache invalidated first (the CPU
// wrote the code and the arguments), the dispatch, then `value` (64 bits) written at `fence` once it
// has finished and the caches are written back.
pm4::Stream dispatch_to_fence(const KernelInfo& k, const DispatchArgs& a, uint64_t fence, uint64_t value);

// A decode step as one doorbell: the step's parameters (position, lengths, routing) written where the
// graph's kernels read them (WRITE_DATA, confirmed before what follows), every cache invalidated, the
// graph's packets (encoded once, `graph_dwords` of them in GPU memory at `graph`) run from an indirect
// buffer, then `value` (64 bits) at `fence`. Only `params` change from one token to the next: the graph
// is never rewritten.
pm4::Stream step_stream(uint64_t params_at, std::span<const uint32_t> params, uint64_t graph, uint32_t graph_dwords, uint64_t fence,
                        uint64_t value);

// The trivial dispatch rung's kernel (shaders/amdgpu/fill_ids.cl: out[i] = 3 i + 1 for i < n, in
// workgroups of kFillIdsGroup lanes): its arguments as they lie in the kernel-argument segment.
struct FillIdsArgs {
  uint64_t out;
  uint32_t n;
};
inline constexpr uint32_t kFillIdsGroup = 64;

// The kernel rung's kernel (shaders/amdgpu/rms_norm.cl: each of a dispatch's workgroups of
// kRmsNormGroup lanes normalises one row of `width` floats): its arguments.
struct RmsNormArgs {
  uint64_t x, w, out;
  uint32_t width;
  float eps;
};
inline constexpr uint32_t kRmsNormGroup = 256;

// The activation quantizer (shaders/amdgpu/quantize_q8_k.cl: each block of 256 floats of x into a Q8_K
// block of out, a workgroup of kQuantizeQ8KGroup lanes a block): its arguments.
struct QuantizeQ8KArgs {
  uint64_t x, out;
};
inline constexpr uint32_t kQuantizeQ8KGroup = 64;

// The K-quant products (shaders/amdgpu/mul_mv_q4_k.cl, mul_mv_q6_k.cl: y[r] = W[r] . x for rows of
// row_bytes bytes and x as Q8_K codes, a workgroup of kMulMvKGroup lanes a row): their arguments.
struct MulMvKArgs {
  uint64_t w, xq, y;
  uint32_t ncols, row_bytes;
};
inline constexpr uint32_t kMulMvKGroup = 64;

// Rows of a Q4_K or Q6_K matrix as floats (shaders/amdgpu/get_rows_q4_k.cl, get_rows_q6_k.cl: out[i] =
// row ids[i], a workgroup of kGetRowsGroup lanes a row): their arguments.
struct GetRowsArgs {
  uint64_t w, ids, out;
  uint32_t ncols, row_bytes;
};
inline constexpr uint32_t kGetRowsGroup = 64;

// The rotation of a step's heads (shaders/amdgpu/rope.cl: a workgroup of kRopeGroup lanes a (head,
// token), angles from the host's table cs): its arguments.
struct RopeArgs {
  uint64_t x, cs, out;
  uint32_t n_head, head_dim, n_rot, neox;
};
inline constexpr uint32_t kRopeGroup = 64;

// The FFN's activation (shaders/amdgpu/swiglu.cl: out = silu(gate) * up, kSwigluGroup elements a
// workgroup): its arguments.
struct SwigluArgs {
  uint64_t gate, up, out;
  uint32_t n;
};
inline constexpr uint32_t kSwigluGroup = 256;

}  // namespace zinc::backend::zinc_rt

// The residual add (shaders/amdgpu/add.cl: out = a + b, kAddGroup elements a workgroup): its arguments.
struct AddArgs {
  uint64_t a, b, out;
  uint32_t n;
};
inline constexpr uint32_t kAddGroup = 256;

// A decode step's key and value rows into a layer's F16 cache (shaders/amdgpu/kv_store.cl: row *pos of
// kc and vc, `width` halves a row, kKvStoreGroup elements a workgroup): its arguments. `pos` points at
// the step's position in its parameters.
struct KvStoreArgs {
  uint64_t k, v, kc, vc, pos;
  uint32_t width;
};
inline constexpr uint32_t kKvStoreGroup = 256;

// One token's attention over a layer's F16 cache (shaders/amdgpu/attention_decode.cl: a workgroup of
// kAttentionDecodeGroup a query head, *n_kv keys, head_dim at most 2 x kAttentionDecodeGroup): its
// arguments. `n_kv` points at the step's number of keys in its parameters.
struct AttentionDecodeArgs {
  uint64_t q, kc, vc, out, n_kv;
  uint32_t n_head, n_head_kv, head_dim, kv_width;
  float scale;
};
inline constexpr uint32_t kAttentionDecodeGroup = 128;
