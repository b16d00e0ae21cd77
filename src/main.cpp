// zinc: one binary, many subcommands. Parses the command line, sets up logging, runs the chosen
// subcommand and turns any error into one message on stderr and a non-zero exit status.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <exception>

#include "cli/cli.h"
#include "core/error.h"
#include "core/format.h"
#include "core/log.h"
#include "zinc/version.h"

namespace zinc::cli {

std::vector<CommandEntry>& command_registry() {
  static std::vector<CommandEntry> entries;
  return entries;
}

}  // namespace zinc::cli

int main(int argc, char** argv) {
  zinc::cli::GlobalOptions global;
  zinc::cli::Runner run;

  CLI::App app{"zinc: local LLM inference engine", "zinc"};
  app.set_version_flag("--version", std::string("zinc ") + ZINC_VERSION);
  app.require_subcommand(1);
  app.fallthrough();  // global flags may also follow the subcommand
  app.add_flag("-v,--verbose", global.verbose, "Verbose logging (same as --log-level debug)");
  app.add_option("--log-level", global.log_level, "Log level: trace, debug, info, warn, error, off")
      ->capture_default_str();
  app.add_flag("--json", global.json, "Structured output as JSON on stdout");

  auto commands = zinc::cli::command_registry();
  std::stable_sort(commands.begin(), commands.end(), [](const auto& a, const auto& b) { return a.order < b.order; });
  for (const auto& c : commands) c.add(app, global, run);

  if (argc == 1) {
    fmt::print("{}", app.help());
    return 0;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  try {
    zinc::log::init(global.verbose ? std::string("debug") : global.log_level);
    return run ? run() : 0;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    // Messages quote file names, tensor names and server answers: print them inert.
    fmt::print(stderr, "error: {}\n", zinc::terminal_safe(e.what()));
    return 1;
  }
}
