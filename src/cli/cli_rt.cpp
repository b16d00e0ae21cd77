// `zinc rt-selftest`: ZINC_RT's bring-up ladder on this machine, rung by rung, stopping at the first
// that fails and saying why (status 1), or 0 when every rung passes.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "cli/cli.h"
#if defined(ZINC_WITH_ZINC_RT)
#include "backend/cpu/cpu_ops.h"
#include "backend/zinc_rt/runner.h"
#include "backend/zinc_rt/selftest.h"
#endif

namespace zinc::cli {

namespace {

void add_rt_selftest_command(CLI::App& app, const GlobalOptions& global, Runner& run) {
  struct Paths {
    std::string kfd = "/dev/kfd", topology = "/sys/devices/virtual/kfd/kfd/topology", dri = "/dev/dri";
  };
  auto opts = std::make_shared<Paths>();
  CLI::App* cmd = app.add_subcommand("rt-selftest", "Climb ZINC_RT's bring-up ladder on this machine's AMD GPU and stop at the first rung that fails");
  cmd->add_option("--kfd", opts->kfd, "The KFD device")->capture_default_str();
  cmd->add_option("--topology", opts->topology, "The KFD topology directory")->capture_default_str();
  cmd->add_option("--dri", opts->dri, "The directory of the GPUs' render nodes")->capture_default_str();
  cmd->callback([opts, &global, &run] {
    run = [opts, &global] {
#if defined(ZINC_WITH_ZINC_RT)
      using backend::zinc_rt::Rung;
      const auto cpu_norm = [](const float* x, const float* w, float* out, int64_t width, int64_t rows, float eps) {
        backend::cpu::rms_norm(x, w, out, width, width, rows, eps, 0.0f);
      };
      const auto decode = [](backend::zinc_rt::Device& d, bool graph) { return backend::zinc_rt::decode_rung(d, graph); };
      const std::vector<Rung> rungs = backend::zinc_rt::run_selftest({opts->kfd, opts->topology, opts->dri, cpu_norm, decode});
      int status = 0;
      nlohmann::json j = nlohmann::json::array();
      for (size_t i = 0; i < rungs.size(); ++i) {
        const Rung& r = rungs[i];
        const char* state = r.state == Rung::State::Passed ? "pass" : r.state == Rung::State::Failed ? "FAIL" : "not run";
        if (r.state == Rung::State::Failed) status = 1;
        if (global.json) {
          j.push_back({{"rung", i + 1}, {"name", r.name}, {"state", state}, {"detail", r.detail}});
        } else {
          fmt::print("rung {} {:<7} {}{}\n", i + 1, state, r.name, r.detail.empty() ? "" : ": " + r.detail);
        }
      }
      if (global.json) fmt::print("{}\n", nlohmann::json{{"rungs", j}, {"passed", status == 0}}.dump(2));
      return status;
#else
      (void)global;
      fmt::print(stderr, "this zinc was built without ZINC_RT (Linux with linux/kfd_ioctl.h, from linux-libc-dev)\n");
      return 1;
#endif
    };
  });
}

}  // namespace

ZINC_COMMAND(92, add_rt_selftest_command);

}  // namespace zinc::cli
