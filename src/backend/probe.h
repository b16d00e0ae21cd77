// Device discovery per backend: what `zinc check` reports. Each backend that CMake builds provides a
// probe; backends that were not built are reported with the reason CMake gave, so a user learns what
// to install. The full compute interface (upload, compile, run) joins this when the engine lands.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace zinc::backend {

struct DeviceReport {
  std::string name;
  std::string kind;           // "discrete GPU", "integrated GPU", "CPU", "virtual GPU", "GPU" (which is not known), "other"
  uint64_t memory_bytes = 0;  // device-local memory (system memory for the CPU)
  std::string api;            // API / driver versions as the runtime reports them
  std::vector<std::string> features;
  std::optional<double> peak_bandwidth_gbs;  // theoretical, where the API reports clocks and bus width
};

struct BackendReport {
  std::string name;
  bool compiled = false;
  bool ready = false;  // compiled in and at least one usable device was found
  std::string status;  // why not ready, or a one-line summary when ready
  std::vector<DeviceReport> devices;
};

// Every backend ZINC knows, built or not, in a fixed order (cpu first).
std::vector<BackendReport> probe_all();

}  // namespace zinc::backend
