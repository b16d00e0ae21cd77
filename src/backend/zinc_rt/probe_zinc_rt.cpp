// ZINC_RT in `zinc check`: its tiers, each READY or NOT READY with the reason. T1 (KFD compute queues
// and PM4 packets) needs /dev/kfd and a supported GPU; T2 (user-mode queues) is not built yet; the CPU
// tier (the CPU backend, ZINC_RT's oracle) is always there. The backend itself is NOT READY, with no
// devices, until models run on it (the GPUs the topology lists are named in the status).
#include <fmt/format.h>

#include "backend/probe.h"
#include "backend/zinc_rt/code_object.h"
#include "backend/zinc_rt/kfd.h"
#include "core/error.h"

namespace zinc::backend {

BackendReport probe_zinc_rt() {
  BackendReport r;
  r.name = "zinc_rt";
  r.compiled = true;
  zinc_rt::KfdProbe p;
  try {
    p = zinc_rt::probe_kfd();
  } catch (const Error& e) {
    p.why = e.what();
  }
  // The GPUs the topology lists, in the status: the backend has no devices to run models on yet.
  std::string gpus;
  for (const zinc_rt::KfdGpu& g : p.gpus)
    gpus += fmt::format("{}{} (KFD node {}{})", gpus.empty() ? "" : ", ", g.target(), g.node, g.supported() ? "" : ", not supported");
  std::string t1 = p.ready() ? "READY" : fmt::format("NOT READY ({})", p.why);
  if (!gpus.empty()) t1 += fmt::format(", GPUs: {}", gpus);
  const size_t objects = zinc_rt::code_object_bytes_names().size();
  const std::string kernels = objects > 0 ? fmt::format("{} kernel code objects for {}", objects, zinc_rt::kSupportedTargets)
                                          : "no kernels (built without clang-19 or later)";
  r.status = fmt::format("tier T1 (KFD queues, PM4): {}; T2 (user-mode queues): NOT READY (not built yet); T-CPU: READY (the CPU backend); "
                         "{}; models do not run on ZINC_RT yet (its bring-up: zinc rt-selftest)",
                         t1, kernels);
  return r;
}

}  // namespace zinc::backend
