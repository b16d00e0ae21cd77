// Subcommand registration. Each cli_*.cpp adds one subcommand to the CLI11 app; its callback stores
// the work to run in `run`, which main() calls after logging is set up. Results go to stdout (text,
// or JSON with --json); diagnostics go to stderr through spdlog.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>

namespace zinc::cli {

struct GlobalOptions {
  bool verbose = false;
  std::string log_level = "warn";
  bool json = false;
};

using Runner = std::function<int()>;

void add_inspect_command(CLI::App& app, const GlobalOptions& global, Runner& run);
void add_check_command(CLI::App& app, const GlobalOptions& global, Runner& run);
void add_version_command(CLI::App& app, const GlobalOptions& global, Runner& run);

}  // namespace zinc::cli
