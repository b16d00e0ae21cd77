// Backend selection by name. "auto" takes Vulkan when the loader offers a GPU (a discrete, integrated
// or virtual one: a CPU implementation such as lavapipe is slower than the CPU backend) and the CPU
// backend otherwise.
#include <fmt/format.h>

#include "backend/backend.h"
#include "backend/probe.h"
#include "core/error.h"

namespace zinc::backend {

#if !defined(ZINC_WITH_VULKAN)
std::unique_ptr<Backend> make_vulkan_backend(int) {
  throw Error("this zinc was built without Vulkan (install libvulkan-dev, libvulkan-volk-dev and glslang-tools, then rebuild)");
}
#endif

std::unique_ptr<Backend> make_backend(const std::string& name, int device) {
  if (name == "cpu") return make_cpu_backend();
  if (name == "vulkan") return make_vulkan_backend(device);
  if (name == "auto") {
    for (const BackendReport& r : probe_all()) {
      if (r.name != "vulkan" || !r.ready) continue;
      for (const DeviceReport& d : r.devices) {
        if (d.kind != "CPU") return make_vulkan_backend(device);
      }
    }
    return make_cpu_backend();
  }
  throw Error(fmt::format("unknown backend '{}' (cpu, vulkan or auto)", name));
}

}  // namespace zinc::backend
