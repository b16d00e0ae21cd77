// ZINC_RT's view of the amdgpu kernel driver's compute interface (KFD, /dev/kfd): its interface
// version (AMDKFD_IOC_GET_VERSION from linux/kfd_ioctl.h) and the GPU nodes of its topology
// (/sys/devices/virtual/kfd/kfd/topology/nodes/N/properties: one "name value" pair a line). Nothing
// here needs a GPU to fail well: each step says what it lacks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace zinc::backend::zinc_rt {

struct KfdGpu {
  int node = -1;
  uint32_t gfx_target_version = 0;  // major·10000 + minor·100 + stepping (gfx1100: 110000)
  uint32_t vendor_id = 0, device_id = 0;
  uint32_t simd_count = 0, drm_render_minor = 0;
  uint32_t gpu_id = 0;  // the node's gpu_id file: the KFD's name for the GPU in its requests
  uint32_t simd_per_cu = 0, num_xcc = 1;
  uint32_t cwsr_size = 0, ctl_stack_size = 0;  // the context save area's sizes, where the kernel lists them (else 0)
  std::string target() const;  // "gfx1100", "gfx90a"
  bool supported() const;      // a target ZINC_RT builds kernels for
};

// The GPU nodes of a KFD topology directory (CPU-only nodes, with no SIMDs, left out), in node order,
// with each node's gpu_id file where it has one. A missing directory gives none; a properties or
// gpu_id file that cannot be parsed throws a clear error.
std::vector<KfdGpu> read_kfd_topology(const std::string& topology_dir);

struct KfdProbe {
  bool opened = false;
  uint32_t major = 0, minor = 0;  // the interface version, where opened
  std::vector<KfdGpu> gpus;
  std::string why;  // why tier 1 is not ready ("" where it is)
  bool ready() const { return why.empty(); }
};

// Opens the device, reads its version and the topology: tier 1 is ready where the device opens, its
// interface major version is 1 and a supported GPU is listed.
KfdProbe probe_kfd(const std::string& device = "/dev/kfd", const std::string& topology_dir = "/sys/devices/virtual/kfd/kfd/topology");

inline constexpr const char* kSupportedTargets = "gfx1100, gfx1101, gfx1200, gfx1201";

}  // namespace zinc::backend::zinc_rt
