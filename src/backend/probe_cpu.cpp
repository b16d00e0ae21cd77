// The CPU is always present: its report is the host CPU and system memory.
#include <fmt/format.h>

#include "backend/probe.h"
#include "core/system_info.h"

namespace zinc::backend {

BackendReport probe_cpu() {
  const CpuInfo cpu = cpu_info();
  const MemoryInfo mem = memory_info();
  BackendReport r;
  r.name = "cpu";
  r.compiled = true;
  r.ready = true;
  r.status = fmt::format("{} threads", cpu.logical_cores);
  DeviceReport d;
  d.name = cpu.name;
  d.kind = "CPU";
  d.memory_bytes = mem.total_bytes;
  d.api = cpu.arch;
  d.features = cpu.feature_names();
  r.devices.push_back(std::move(d));
  return r;
}

}  // namespace zinc::backend
