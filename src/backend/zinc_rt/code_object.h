// ZINC_RT's kernels as AMDGPU code objects (ELF64 shared objects, EM_AMDGPU, built at build time from
// shaders/amdgpu/*.cl and embedded): the target from the ELF header's flags, and for each kernel its
// 64-byte descriptor (the symbol NAME.kd): local (group) and private memory, kernel-argument size,
// the entry point, and the program resource registers a dispatch writes (COMPUTE_PGM_RSRC1..3).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace zinc::backend::zinc_rt {

struct KernelInfo {
  std::string name;
  uint64_t descriptor_address = 0, entry_address = 0;  // addresses within the code object
  uint32_t group_segment_bytes = 0, private_segment_bytes = 0, kernarg_bytes = 0;
  uint32_t rsrc1 = 0, rsrc2 = 0, rsrc3 = 0;
  uint16_t properties = 0;  // kernel_code_properties
  bool wave32() const { return properties & (1u << 10); }
  // Vector registers a wave is given: (COMPUTE_PGM_RSRC1 bits 0-5 + 1) granules of 8 (wave32) or 4.
  uint32_t vgprs() const { return ((rsrc1 & 0x3Fu) + 1) * (wave32() ? 8u : 4u); }
};

struct CodeObject {
  std::string target;  // "gfx1100"
  std::vector<KernelInfo> kernels;
  const KernelInfo* kernel(std::string_view name) const;
};

// Throws zinc::Error naming what is wrong (not ELF64, not AMDGPU, a section or symbol outside the
// bytes, a descriptor that is not 64 bytes).
CodeObject parse_code_object(std::span<const uint8_t> elf);

// The code object as the GPU runs it: each loadable segment's (PT_LOAD) bytes at its address, zeros
// past its file bytes and between segments, up to the end of the highest segment in whole 4096-byte
// pages; copied to a GPU address B, a kernel's entry point is B + entry_address. Throws zinc::Error
// where a segment lies outside the bytes or the image would pass 64 MiB, or the object needs dynamic
// relocations (ZINC_RT's kernels need none).
std::vector<uint8_t> load_image(std::span<const uint8_t> elf);

// The embedded code objects: "KERNEL-TARGET" (e.g. "rms_norm-gfx1100"), and their names (none where
// the build had no AMDGPU compiler).
std::span<const uint8_t> code_object_bytes(std::string_view name);
std::vector<std::string_view> code_object_bytes_names();

}  // namespace zinc::backend::zinc_rt
