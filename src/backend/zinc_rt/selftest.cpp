#include "backend/zinc_rt/selftest.h"

#include <fmt/format.h>

#include "backend/zinc_rt/kfd.h"
#include "core/error.h"

namespace zinc::backend::zinc_rt {

std::vector<Rung> run_selftest(const SelftestOptions& o) {
  std::vector<Rung> rungs = {
      {"the KFD device opens and reports interface version 1.x", Rung::State::NotRun, ""},
      {fmt::format("the KFD topology lists a supported GPU ({})", kSupportedTargets), Rung::State::NotRun, ""},
      {"a compute queue exists (ring, doorbell, end-of-pipe buffer)", Rung::State::NotRun, ""},
      {"a no-op retires a fence", Rung::State::NotRun, ""},
      {"a copy matches the CPU's", Rung::State::NotRun, ""},
      {"a trivial dispatch writes what the CPU expects", Rung::State::NotRun, ""},
      {"one ZINC kernel matches the CPU backend", Rung::State::NotRun, ""},
      {"one token matches the CPU backend", Rung::State::NotRun, ""},
      {"the decode graph matches the CPU backend", Rung::State::NotRun, ""},
  };
  const auto fail = [&](size_t i, std::string why) {
    rungs[i].state = Rung::State::Failed;
    rungs[i].detail = std::move(why);
    return rungs;
  };
  KfdProbe p;
  try {
    p = probe_kfd(o.device, o.topology);
  } catch (const Error& e) {
    return fail(p.opened ? 1 : 0, e.what());
  }
  if (!p.opened || p.major == 0) return fail(0, p.why);
  rungs[0].state = Rung::State::Passed;
  rungs[0].detail = fmt::format("{}: interface {}.{}", o.device, p.major, p.minor);
  if (!p.ready()) return fail(1, p.why);
  for (const KfdGpu& g : p.gpus) {
    if (!g.supported()) continue;
    rungs[1].state = Rung::State::Passed;
    rungs[1].detail = fmt::format("node {}: {} ({} SIMDs, render node {})", g.node, g.target(), g.simd_count, g.drm_render_minor);
    break;
  }
  return fail(2, "not built yet in this zinc: the queue rung is next (KFD queue creation, doorbell mapping)");
}

}  // namespace zinc::backend::zinc_rt
