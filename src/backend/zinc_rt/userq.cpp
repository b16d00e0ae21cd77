#include "backend/zinc_rt/userq.h"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

namespace zinc::backend::zinc_rt {

namespace {

// struct drm_amdgpu_info: where the reply goes, its size, the query, then a 16-byte union unused by
// the device-info query.
struct AmdgpuInfoRequest {
  uint64_t return_pointer = 0;
  uint32_t return_size = 0;
  uint32_t query = 0;
  uint32_t unused[4] = {};
};
static_assert(sizeof(AmdgpuInfoRequest) == 32);

const char* kHowToEnable = "Linux 6.16 or later with the amdgpu module parameter user_queue=1 or 2 offers them on gfx11 and gfx12";

}  // namespace

uint32_t userq_ip_mask(std::span<const uint8_t> dev_info) {
  if (dev_info.size() < kAmdgpuDevInfoUserqMask + 4) return 0;
  uint32_t mask = 0;
  std::memcpy(&mask, dev_info.data() + kAmdgpuDevInfoUserqMask, sizeof mask);
  return mask;
}

UserqProbe probe_userq(const std::vector<KfdGpu>& gpus, const std::string& dri_dir) {
  UserqProbe p;
  for (const KfdGpu& g : gpus) {
    if (!g.supported()) continue;
    UserqGpu u;
    u.target = g.target();
    u.render_node = fmt::format("{}/renderD{}", dri_dir, g.drm_render_minor);
    const int fd = ::open(u.render_node.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) {
      const int e = errno;
      u.why = e == ENOENT ? fmt::format("no {}", u.render_node) : fmt::format("cannot open {}: {} (a user in the render group can)", u.render_node, std::strerror(e));
    } else {
      std::array<uint8_t, kAmdgpuDevInfoBytes> reply{};
      AmdgpuInfoRequest req;
      req.return_pointer = reinterpret_cast<uintptr_t>(reply.data());
      req.return_size = static_cast<uint32_t>(reply.size());
      req.query = kAmdgpuInfoDevInfo;
      const int r = ::ioctl(fd, kDrmIoctlAmdgpuInfo, &req);
      const int e = errno;
      ::close(fd);
      if (r != 0) {
        u.why = fmt::format("{}: the device-info request failed: {}", u.render_node, std::strerror(e));
      } else {
        u.ip_mask = userq_ip_mask(reply);
        if ((u.ip_mask >> kAmdgpuHwIpCompute & 1u) == 0)
          u.why = fmt::format("{} offers no compute user queues (user-queue mask {:#x}; {})", u.render_node, u.ip_mask, kHowToEnable);
      }
    }
    p.gpus.push_back(std::move(u));
  }
  if (p.gpus.empty()) {
    p.why = "the KFD topology lists no supported GPU whose render node to ask";
  } else if (std::none_of(p.gpus.begin(), p.gpus.end(), [](const UserqGpu& u) { return u.compute(); })) {
    for (const UserqGpu& u : p.gpus) p.why += (p.why.empty() ? "" : "; ") + u.target + ": " + u.why;
  }
  return p;
}

}  // namespace zinc::backend::zinc_rt
