// Backend selection by name. "auto" takes Vulkan when the loader offers a GPU (a discrete, integrated
// or virtual one: a CPU implementation such as lavapipe is slower than the CPU backend) and the CPU
// backend otherwise.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "backend/backend.h"
#include "backend/probe.h"
#include "core/error.h"

namespace zinc::backend {

#if !defined(ZINC_WITH_VULKAN)
std::unique_ptr<Backend> make_vulkan_backend(int) {
  throw Error("this zinc was built without Vulkan (install libvulkan-dev, libvulkan-volk-dev and glslang-tools, then rebuild)");
}
#endif
#if !defined(ZINC_WITH_CUDA)
std::unique_ptr<Backend> make_cuda_backend(int) {
  throw Error("this zinc was built without CUDA (install the CUDA toolkit so that nvcc is found, then rebuild)");
}
#endif

namespace {

bool gpu_offered() {
  for (const BackendReport& r : probe_all()) {
    if (r.name != "vulkan" || !r.ready) continue;
    for (const DeviceReport& d : r.devices) {
      if (d.kind != "CPU") return true;
    }
  }
  return false;
}

}  // namespace

std::unique_ptr<Backend> make_backend(const std::string& name, int device, unsigned threads) {
  if (name == "cpu") return make_cpu_backend(threads);
  if (name == "vulkan") return make_vulkan_backend(device);
  if (name == "cuda") return make_cuda_backend(device);
  if (name == "auto") return gpu_offered() ? make_vulkan_backend(device) : make_cpu_backend(threads);
  if (name == "zinc_rt") {
    throw Error("the zinc_rt backend does not run models yet: its bring-up ladder is `zinc rt-selftest` (cpu, vulkan, cuda or auto "
                "run models; Vulkan runs on AMD GPUs)");
  }
  if (name == "metal") {
    throw Error(fmt::format("the {} backend is not in this zinc yet (cpu, vulkan, cuda or auto are; Vulkan runs on NVIDIA, "
                            "AMD and Intel GPUs)",
                            name));
  }
  throw Error(fmt::format("unknown backend '{}' (cpu, vulkan, cuda or auto)", name));
}

std::unique_ptr<Backend> make_backend_for(const std::string& name, const graph::Graph& g, int device, unsigned threads) {
  auto b = make_backend(name, device, threads);
  if (name != "auto" || b->name() == "cpu") return b;
  if (std::string why = b->why_unsupported(g); !why.empty()) {
    spdlog::warn("{}; computing on the CPU instead", why);
    return make_cpu_backend(threads);
  }
  return b;
}

}  // namespace zinc::backend
