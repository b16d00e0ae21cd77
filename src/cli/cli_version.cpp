// `zinc version`: which build this is.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "cli/cli.h"
#include "zinc/version.h"

namespace zinc::cli {

namespace {

void add_version_command(CLI::App& app, const GlobalOptions& global, Runner& run) {
  CLI::App* cmd = app.add_subcommand("version", "Print the version and build configuration");
  cmd->callback([&global, &run] {
    run = [&global] {
      if (global.json) {
        nlohmann::json j = {{"version", ZINC_VERSION},   {"commit", ZINC_GIT_COMMIT},
                            {"build_type", ZINC_BUILD_TYPE}, {"compiler", ZINC_COMPILER},
                            {"backends", ZINC_BACKENDS}};
        fmt::print("{}\n", j.dump(2));
      } else {
        fmt::print("zinc {} (commit {}, {} build, {}, backends: {})\n", ZINC_VERSION, ZINC_GIT_COMMIT, ZINC_BUILD_TYPE,
                   ZINC_COMPILER, ZINC_BACKENDS);
      }
      return 0;
    };
  });
}

}  // namespace

ZINC_COMMAND(100, add_version_command);

}  // namespace zinc::cli
