// ZINC_RT in `zinc check`: its tiers, each READY or NOT READY with the reason. T1 (KFD compute queues
// and PM4 packets) needs /dev/kfd and a supported GPU; T2 (user-mode queues) is probed through each
// supported GPU's render node (userq.h) and reported, but ZINC_RT submits through T1 only; the CPU
// tier (the CPU backend, ZINC_RT's oracle) is always there. The backend is READY where T1 is and its
// kernels are built, with each supported GPU as a device (models: dense Llama and Qwen3 graphs with
// K-quant weights, one token a step; nothing of it has run on AMD hardware yet).
#include <fmt/format.h>

#include "backend/probe.h"
#include "backend/zinc_rt/code_object.h"
#include "backend/zinc_rt/kfd.h"
#include "backend/zinc_rt/userq.h"
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
  // The GPUs the topology lists, in the status; the supported ones are the backend's devices.
  std::string gpus;
  for (const zinc_rt::KfdGpu& g : p.gpus)
    gpus += fmt::format("{}{} (KFD node {}{})", gpus.empty() ? "" : ", ", g.target(), g.node, g.supported() ? "" : ", not supported");
  std::string t1 = p.ready() ? "READY" : fmt::format("NOT READY ({})", p.why);
  if (!gpus.empty()) t1 += fmt::format(", GPUs: {}", gpus);
  // T2: what the kernel offers, said even where it does (nothing submits through it yet).
  const zinc_rt::UserqProbe u = zinc_rt::probe_userq(p.gpus);
  std::string offered;
  for (const zinc_rt::UserqGpu& g : u.gpus)
    if (g.compute()) offered += fmt::format("{}{} ({})", offered.empty() ? "" : ", ", g.target, g.render_node);
  const std::string t2 = u.available() ? fmt::format("the kernel offers compute user queues on {}; ZINC_RT submits through T1 and does not use them yet", offered)
                                       : u.why;
  const size_t objects = zinc_rt::code_object_bytes_names().size();
  const std::string kernels = objects > 0 ? fmt::format("{} kernel code objects for {}", objects, zinc_rt::kSupportedTargets)
                                          : "no kernels (built without clang-19 or later)";
  r.status = fmt::format("tier T1 (KFD queues, PM4): {}; T2 (user-mode queues): NOT READY ({}); T-CPU: READY (the CPU backend); "
                         "{}; models: dense Llama and Qwen3 graphs with K-quant weights, one token a step, not yet run on AMD "
                         "hardware (its bring-up: zinc rt-selftest)",
                         t1, t2, kernels);
  r.ready = p.ready() && objects > 0;
  if (r.ready) {
    for (const zinc_rt::KfdGpu& g : p.gpus) {
      if (!g.supported()) continue;
      DeviceReport d;
      d.name = fmt::format("{} (KFD node {})", g.target(), g.node);
      d.kind = "GPU";
      d.api = "KFD";
      r.devices.push_back(std::move(d));
    }
  }
  return r;
}

}  // namespace zinc::backend
