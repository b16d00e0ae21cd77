// CUDA device discovery through the CUDA runtime (linked statically, so the binary starts on machines
// without CUDA and reports NOT READY there).
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "backend/probe.h"

namespace zinc::backend {

BackendReport probe_cuda() {
  BackendReport r;
  r.name = "cuda";
  r.compiled = true;
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    r.status = fmt::format("{} ({})", cudaGetErrorString(err),
                           err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver
                               ? "no NVIDIA GPU with a current driver is visible"
                               : "CUDA runtime error");
    return r;
  }
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    DeviceReport d;
    d.name = p.name;
    d.kind = p.integrated ? "integrated GPU" : "discrete GPU";
    d.memory_bytes = p.totalGlobalMem;
    d.api = fmt::format("CUDA driver {}.{}, runtime {}.{}, sm_{}{}", driver / 1000, driver % 1000 / 10,
                        runtime / 1000, runtime % 1000 / 10, p.major, p.minor);
    d.features.push_back(fmt::format("{} SMs", p.multiProcessorCount));
    int clock_khz = 0, bus_bits = 0;
    if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, i) == cudaSuccess &&
        cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, i) == cudaSuccess && clock_khz > 0) {
      // Double data rate: two transfers per memory clock across the whole bus.
      d.peak_bandwidth_gbs = 2.0 * clock_khz * 1e3 * (bus_bits / 8.0) / 1e9;
    }
    r.devices.push_back(std::move(d));
  }
  r.ready = !r.devices.empty();
  r.status = r.ready ? fmt::format("{} device{}", r.devices.size(), r.devices.size() == 1 ? "" : "s")
                     : "no CUDA device could be queried";
  return r;
}

}  // namespace zinc::backend
