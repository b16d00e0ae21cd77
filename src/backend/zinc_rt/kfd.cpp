#include "backend/zinc_rt/kfd.h"

#include <fcntl.h>
#include <linux/kfd_ioctl.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "core/error.h"

namespace zinc::backend::zinc_rt {

std::string KfdGpu::target() const {
  const uint32_t major = gfx_target_version / 10000, minor = gfx_target_version / 100 % 100, stepping = gfx_target_version % 100;
  return fmt::format("gfx{}{}{:x}", major, minor, stepping);
}

bool KfdGpu::supported() const {
  return gfx_target_version == 110000 || gfx_target_version == 110001 || gfx_target_version == 120000 || gfx_target_version == 120001;
}

namespace {

std::map<std::string, uint64_t> read_properties(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) throw Error(fmt::format("KFD topology: cannot read {}", file.string()));
  std::map<std::string, uint64_t> out;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    const size_t sp = line.find(' ');
    uint64_t v = 0;
    const char* first = sp == std::string::npos ? nullptr : line.data() + sp + 1;
    const char* last = line.data() + line.size();
    if (!first || std::from_chars(first, last, v).ec != std::errc() || std::find(first, last, ' ') != last)
      throw Error(fmt::format("KFD topology: {} line {}: expected 'name value', got '{}'", file.string(), n, line));
    out[line.substr(0, sp)] = v;
  }
  return out;
}

}  // namespace

std::vector<KfdGpu> read_kfd_topology(const std::string& topology_dir) {
  std::vector<KfdGpu> gpus;
  const std::filesystem::path nodes = std::filesystem::path(topology_dir) / "nodes";
  std::error_code ec;
  if (!std::filesystem::is_directory(nodes, ec)) return gpus;
  for (const auto& entry : std::filesystem::directory_iterator(nodes, ec)) {
    const std::string name = entry.path().filename().string();
    int node = -1;
    if (std::from_chars(name.data(), name.data() + name.size(), node).ec != std::errc() || node < 0) continue;
    const auto p = read_properties(entry.path() / "properties");
    const auto get = [&](const char* key) {
      const auto it = p.find(key);
      return it == p.end() ? 0u : static_cast<uint32_t>(it->second);
    };
    if (get("simd_count") == 0) continue;  // a CPU node
    KfdGpu g;
    g.node = node;
    g.gfx_target_version = get("gfx_target_version");
    g.vendor_id = get("vendor_id");
    g.device_id = get("device_id");
    g.simd_count = get("simd_count");
    g.drm_render_minor = get("drm_render_minor");
    g.simd_per_cu = get("simd_per_cu");
    g.num_xcc = std::max(1u, get("num_xcc"));
    g.cwsr_size = get("cwsr_size");
    g.ctl_stack_size = get("ctl_stack_size");
    if (std::ifstream id(entry.path() / "gpu_id"); id) {
      std::string text;
      std::getline(id, text);
      uint32_t v = 0;
      if (std::from_chars(text.data(), text.data() + text.size(), v).ec != std::errc())
        throw Error(fmt::format("KFD topology: {}: expected a number, got '{}'", (entry.path() / "gpu_id").string(), text));
      g.gpu_id = v;
    }
    gpus.push_back(g);
  }
  std::sort(gpus.begin(), gpus.end(), [](const KfdGpu& a, const KfdGpu& b) { return a.node < b.node; });
  return gpus;
}

KfdProbe probe_kfd(const std::string& device, const std::string& topology_dir) {
  KfdProbe p;
  const int fd = ::open(device.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    p.why = e == ENOENT ? fmt::format("no {} (the amdgpu kernel driver with its compute interface is not loaded, or no AMD GPU)", device)
                        : fmt::format("cannot open {}: {} (a user in the render group can)", device, std::strerror(e));
    return p;
  }
  p.opened = true;
  kfd_ioctl_get_version_args v{};
  const int r = ::ioctl(fd, AMDKFD_IOC_GET_VERSION, &v);
  const int e = errno;
  ::close(fd);
  if (r != 0) {
    p.why = fmt::format("{}: the version request failed: {}", device, std::strerror(e));
    return p;
  }
  p.major = v.major_version;
  p.minor = v.minor_version;
  if (p.major != KFD_IOCTL_MAJOR_VERSION) {
    p.why = fmt::format("{}: interface version {}.{}, built for {}.x", device, p.major, p.minor, KFD_IOCTL_MAJOR_VERSION);
    return p;
  }
  p.gpus = read_kfd_topology(topology_dir);
  if (std::none_of(p.gpus.begin(), p.gpus.end(), [](const KfdGpu& g) { return g.supported(); })) {
    std::string seen;
    for (const KfdGpu& g : p.gpus) seen += (seen.empty() ? "" : ", ") + g.target();
    p.why = p.gpus.empty() ? "the KFD topology lists no GPU"
                           : fmt::format("no supported GPU ({} listed; ZINC_RT builds for {})", seen, kSupportedTargets);
  }
  return p;
}

}  // namespace zinc::backend::zinc_rt
