// ZINC_RT's tier 2: user-mode queues, where the amdgpu kernel driver lets a process own a queue's
// ring and doorbell through the render node (DRM_AMDGPU_USERQ) instead of the KFD. The render node's
// INFO query of the device (AMDGPU_INFO_DEV_INFO, struct drm_amdgpu_info_device of
// include/uapi/drm/amdgpu_drm.h) says which engines offer them: its userq_ip_mask, one bit per
// AMDGPU_HW_IP_* (compute is bit 1). Linux 6.16 added the field; older kernels copy a shorter struct
// and leave it 0, and the driver sets it only with the module parameter amdgpu.user_queue=1 or 2.
// ZINC_RT probes the tier and reports it; it submits through tier 1 (the KFD) in every case.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "backend/zinc_rt/kfd.h"

namespace zinc::backend::zinc_rt {

// struct drm_amdgpu_info_device as Linux 6.16 lays it out: 448 bytes, userq_ip_mask at byte 436.
inline constexpr size_t kAmdgpuDevInfoBytes = 448;
inline constexpr size_t kAmdgpuDevInfoUserqMask = 436;
inline constexpr uint32_t kAmdgpuHwIpCompute = 1;
// DRM_IOCTL_AMDGPU_INFO: _IOW('d', 0x40 + 0x05, struct drm_amdgpu_info), a 32-byte request.
inline constexpr unsigned long kDrmIoctlAmdgpuInfo = 0x40206445ul;
inline constexpr uint32_t kAmdgpuInfoDevInfo = 0x16;

// The engines' user-queue mask of a device-info reply (the bytes the kernel wrote into a zeroed
// buffer of kAmdgpuDevInfoBytes; a shorter kernel struct leaves the mask 0).
uint32_t userq_ip_mask(std::span<const uint8_t> dev_info);

struct UserqGpu {
  std::string target;       // "gfx1100"
  std::string render_node;  // "/dev/dri/renderD128"
  uint32_t ip_mask = 0;     // userq_ip_mask, where the query answered
  std::string why;          // why compute user queues are not offered ("" where they are)
  bool compute() const { return why.empty(); }
};

struct UserqProbe {
  std::vector<UserqGpu> gpus;  // one per supported GPU of the KFD topology
  std::string why;             // why no GPU offers compute user queues ("" where one does)
  bool available() const { return why.empty(); }
};

// Asks each supported GPU's render node (dri_dir/renderD<drm_render_minor>) for its user-queue mask.
// Nothing here needs a GPU to fail well: a missing node, a file that is not one, or a kernel without
// the field each give a reason.
UserqProbe probe_userq(const std::vector<KfdGpu>& gpus, const std::string& dri_dir = "/dev/dri");

}  // namespace zinc::backend::zinc_rt
