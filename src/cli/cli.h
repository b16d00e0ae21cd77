// Subcommand registration. Each src/cli/cli_*.cpp registers its subcommands with ZINC_COMMAND; main()
// adds them to the CLI11 app in `order`. A subcommand's callback stores the work to run in `run`, which
// main() calls after logging is set up. Results go to stdout (text, or JSON with --json); diagnostics
// go to stderr through spdlog.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

namespace zinc::cli {

struct GlobalOptions {
  bool verbose = false;
  std::string log_level = "warn";
  bool json = false;
};

using Runner = std::function<int()>;
using CommandAdder = void (*)(CLI::App& app, const GlobalOptions& global, Runner& run);

struct CommandEntry {
  int order;  // position in `zinc --help`
  CommandAdder add;
};
std::vector<CommandEntry>& command_registry();

struct CommandRegistration {
  CommandRegistration(int order, CommandAdder add) { command_registry().push_back({order, add}); }
};

// -t/--threads: from 1 to this machine's logical CPUs (more threads than CPUs only contend).
CLI::Validator threads_range();

// The candidate closest to `word` by edit distance, if it is close (at most a third of its length,
// at least 1, away); else "".
std::string nearest(const std::string& word, const std::vector<std::string>& candidates);

// The CLI sources are compiled into the executable itself, so these registrations are always linked.
#define ZINC_COMMAND(order, adder) static const ::zinc::cli::CommandRegistration zinc_command_##adder(order, adder)

}  // namespace zinc::cli
