// `zinc check`: what this machine offers ZINC: CPU features, memory, and per backend whether it was
// compiled in and which devices it can see right now, with one READY / NOT READY line each.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "backend/probe.h"
#include "cli/cli.h"
#include "cli/json_util.h"
#include "core/error.h"
#include "core/format.h"
#include "core/knobs.h"
#include "core/system_info.h"
#include "quant/dot.h"
#include "quant/packed.h"
#include "zinc/version.h"

namespace zinc::cli {

namespace {

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : sep) + s;
  return out;
}

}  // namespace

namespace {

void add_check_command(CLI::App& app, const GlobalOptions& global, Runner& run) {
  auto require = std::make_shared<std::vector<std::string>>();
  CLI::App* cmd = app.add_subcommand("check", "Report CPU features, memory and which backends and devices are usable");
  cmd->add_option("--require", *require, "Exit with status 1 unless these backends are READY (e.g. --require vulkan)");
  cmd->callback([require, &global, &run] {
    run = [require, &global] {
      const CpuInfo cpu = cpu_info();
      const MemoryInfo mem = memory_info();
      const auto backends = backend::probe_all();
      int status = 0;
      for (const auto& name : *require) {
        const auto it = std::find_if(backends.begin(), backends.end(), [&](const auto& b) { return b.name == name; });
        if (it == backends.end()) throw Error("--require: unknown backend '" + name + "'");
        if (!it->ready) status = 1;
      }
      if (global.json) {
        nlohmann::json j;
        j["version"] = ZINC_VERSION;
        j["cpu"] = {{"arch", cpu.arch},
                    {"name", cpu.name},
                    {"logical_cores", cpu.logical_cores},
                    {"physical_cores", cpu.physical_cores},
                    {"features", cpu.feature_names()},
                    {"kernels", quant::dot_isa_in_use()},
                    {"kernels_available", quant::dot_isas_available()},
                    {"amx_prompts", quant::packed_amx_in_use(gguf::TensorType::Q8_0)}};
        j["memory"] = {{"total_bytes", mem.total_bytes}, {"available_bytes", mem.available_bytes}};
        nlohmann::json bs = nlohmann::json::array();
        for (const auto& b : backends) {
          nlohmann::json devs = nlohmann::json::array();
          for (const auto& d : b.devices) {
            devs.push_back({{"name", d.name},
                            {"kind", d.kind},
                            {"memory_bytes", d.memory_bytes},
                            {"api", d.api},
                            {"features", d.features},
                            {"peak_bandwidth_gbs", d.peak_bandwidth_gbs ? nlohmann::json(*d.peak_bandwidth_gbs)
                                                                        : nlohmann::json()}});
          }
          bs.push_back({{"name", b.name},
                        {"compiled", b.compiled},
                        {"ready", b.ready},
                        {"status", b.status},
                        {"devices", devs}});
        }
        j["backends"] = bs;
        nlohmann::json ks = nlohmann::json::array();
        for (const Knob& k : knobs()) {
          const char* v = knob(k.name);
          ks.push_back({{"name", k.name}, {"values", k.values}, {"default", k.fallback}, {"meaning", k.meaning},
                        {"set", v ? nlohmann::json(v) : nlohmann::json()}});
        }
        j["knobs"] = ks;
        j["home"] = zinc_home();
        fmt::print("{}\n", dump_json(j));
        return status;
      }
      fmt::print("zinc {} · {} · {} ({} cores, {} threads)\n", ZINC_VERSION, cpu.arch, cpu.name, cpu.physical_cores,
                 cpu.logical_cores);
      fmt::print("cpu features: {}\n", cpu.feature_names().empty() ? "none detected" : join(cpu.feature_names(), " "));
      fmt::print("cpu kernels: {} (this CPU runs: {}; ZINC_CPU_ISA caps it){}\n", quant::dot_isa_in_use(),
                 join(quant::dot_isas_available(), " "),
                 quant::packed_amx_in_use(gguf::TensorType::Q8_0) ? "; prompts' Q8_0 products on AMX tiles (ZINC_CPU_AMX=0 turns them off)" : "");
      fmt::print("memory: {} total, {} available\n\n", format_bytes(mem.total_bytes),
                 format_bytes(mem.available_bytes));
      for (const auto& b : backends) {
        fmt::print("{:<8}{:<11}{}\n", b.name, b.ready ? "READY" : "NOT READY", b.status);
        for (size_t i = 0; i < b.devices.size(); ++i) {
          const auto& d = b.devices[i];
          std::string line = fmt::format("  [{}] {} · {} · {} · {}", i, d.name, d.kind, d.api, format_bytes(d.memory_bytes));
          if (d.peak_bandwidth_gbs) line += fmt::format(" · {:.0f} GB/s peak (spec)", *d.peak_bandwidth_gbs);
          if (!d.features.empty()) line += " · " + join(d.features, ", ");
          fmt::print("{}\n", line);
        }
      }
      if (global.verbose) {
        // Every environment variable zinc reads (core/knobs.cpp), with what is set now.
        fmt::print("\nfiles: {} (ZINC_HOME)\n\n| variable | set now | values | default | meaning |\n|---|---|---|---|---|\n",
                   terminal_safe(zinc_home()));
        for (const Knob& k : knobs()) {
          const char* v = knob(k.name);
          fmt::print("| {} | {} | {} | {} | {} |\n", k.name, v ? terminal_safe(v) : "–", k.values, k.fallback, k.meaning);
        }
      } else {
        fmt::print("\n(-v also lists the environment variables zinc reads)\n");
      }
      return status;
    };
  });
}

}  // namespace

ZINC_COMMAND(90, add_check_command);

}  // namespace zinc::cli
