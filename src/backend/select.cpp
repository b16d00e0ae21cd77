// Backend selection by name. "auto" takes CUDA where it sees an NVIDIA GPU (on NVIDIA it is the faster
// GPU backend: prompts about twice Vulkan's speed, decode ahead on dense and mixture models), else
// Vulkan when the loader offers a GPU (a discrete, integrated or virtual one: a CPU implementation such
// as lavapipe is slower than the CPU backend), else the CPU backend.
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
#if !defined(ZINC_WITH_ZINC_RT)
std::unique_ptr<Backend> make_zinc_rt_backend(int) {
  throw Error("this zinc was built without ZINC_RT (Linux with linux/kfd_ioctl.h, from linux-libc-dev)");
}
#endif

std::string auto_backend(const std::vector<BackendReport>& reports) {
  const auto gpu = [&](const char* name) {
    for (const BackendReport& r : reports) {
      if (r.name != name || !r.ready) continue;
      for (const DeviceReport& d : r.devices) {
        if (d.kind != "CPU") return true;
      }
    }
    return false;
  };
  return gpu("cuda") ? "cuda" : gpu("vulkan") ? "vulkan" : "cpu";
}

std::unique_ptr<Backend> make_backend(const std::string& name, int device, unsigned threads) {
  if (name == "cpu") return make_cpu_backend(threads);
  if (name == "vulkan") return make_vulkan_backend(device);
  if (name == "cuda") return make_cuda_backend(device);
  if (name == "auto") return make_backend(auto_backend(probe_all()), device, threads);
  if (name == "zinc_rt") return make_zinc_rt_backend(device);
  if (name == "metal") {
    throw Error(fmt::format("the {} backend is not in this zinc yet (cpu, vulkan, cuda, zinc_rt or auto are; Vulkan runs on "
                            "NVIDIA, AMD and Intel GPUs)",
                            name));
  }
  throw Error(fmt::format("unknown backend '{}' (cpu, vulkan, cuda, zinc_rt or auto)", name));
}

std::unique_ptr<Backend> make_backend_for(const std::string& name, const graph::Graph& g, int device, unsigned threads) {
  if (name != "auto") return make_backend(name, device, threads);
  // auto's choices in order, each GPU backend passed over (and left out of the next choice) where it
  // cannot run one of the graph's nodes.
  std::vector<BackendReport> reports = probe_all();
  for (;;) {
    const std::string choice = auto_backend(reports);
    auto b = make_backend(choice, device, threads);
    if (choice == "cpu") return b;
    const std::string why = b->why_unsupported(g);
    if (why.empty()) return b;
    for (BackendReport& r : reports)
      if (r.name == choice) r.ready = false;
    const std::string next = auto_backend(reports);
    spdlog::warn("{}; computing on {} instead", why, next == "cpu" ? "the CPU" : next);
  }
}

}  // namespace zinc::backend
