// zinc: one binary, many subcommands. Parses the command line, sets up logging, runs the chosen
// subcommand and turns any error into one message on stderr and a non-zero exit status.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <string_view>

#include <unistd.h>

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

std::string nearest(const std::string& word, const std::vector<std::string>& candidates) {
  const auto distance = [](const std::string& a, const std::string& b) {
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
      size_t diag = row[0];
      row[0] = i;
      for (size_t j = 1; j <= b.size(); ++j) {
        const size_t up = row[j];
        row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
        diag = up;
      }
    }
    return row[b.size()];
  };
  std::string best;
  size_t best_d = std::max<size_t>(1, word.size() / 3) + 1;
  for (const std::string& c : candidates) {
    if (const size_t d = distance(word, c); d < best_d) {
      best = c;
      best_d = d;
    }
  }
  return best;
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
  // llama.cpp's -ngl and -md are one flag each, not -n gl or -m d: read them as --n-gpu-layers and
  // --model-draft.
  std::vector<std::string> owned(argv, argv + argc);  // the arguments, as rewritten below
  std::vector<char*> args;
  for (auto& s : owned) {
    if (s == "-ngl") s = "--n-gpu-layers";
    else if (s.rfind("-ngl=", 0) == 0) s = "--n-gpu-layers=" + s.substr(5);
    else if (s == "-md") s = "--model-draft";
    else if (s.rfind("-md=", 0) == 0) s = "--model-draft=" + s.substr(4);
    args.push_back(s.data());
  }
  argv = args.data();
  // Ollama's habit: `zinc run MODEL` with no prompt, in a terminal, opens a chat.
  if (argc > 2 && std::string_view(argv[1]) == "run" && ::isatty(STDIN_FILENO) && ::isatty(STDOUT_FILENO) &&
      std::none_of(argv + 2, argv + argc, [](const char* a) {
        const std::string_view s(a);
        return s == "-p" || s == "-f" || s.starts_with("--prompt") || s.starts_with("--file") || s == "-h" || s == "--help";
      })) {
    owned[1] = "chat";
    args[1] = owned[1].data();
  }
  // An unknown command: say which, and the nearest one.
  if (argv[1][0] != '-') {
    std::vector<std::string> names;
    for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) names.push_back(sub->get_name());
    if (std::find(names.begin(), names.end(), argv[1]) == names.end()) {
      const std::string near = zinc::cli::nearest(argv[1], names);
      fmt::print(stderr, "error: unknown command '{}'{} (zinc --help lists them)\n", zinc::terminal_safe(argv[1]),
                 near.empty() ? "" : fmt::format("; did you mean '{}'?", near));
      return 1;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One error line and status 1, as for every other failure. An option the command does not know is
    // named first (with the nearest it does know): CLI11 would report a missing required one first.
    std::string message = e.what();
    const auto subs = app.get_subcommands([&](const CLI::App* a) { return a->get_name() == argv[1]; });
    if (!subs.empty()) {
      const CLI::App* sub = subs.front();
      std::vector<std::string> flags;
      for (const CLI::App* a : {static_cast<const CLI::App*>(&app), sub}) {
        for (const CLI::Option* o : a->get_options()) {
          for (const std::string& l : o->get_lnames()) flags.push_back("--" + l);
        }
      }
      for (int i = 2; i < argc; ++i) {
        const std::string arg = std::string(argv[i]).substr(0, std::string(argv[i]).find('='));
        if (arg.size() > 2 && arg.rfind("--", 0) == 0 && std::find(flags.begin(), flags.end(), arg) == flags.end()) {
          const std::string near = zinc::cli::nearest(arg, flags);
          message = fmt::format("unknown option {}{}", arg, near.empty() ? "" : fmt::format("; did you mean {}?", near));
          break;
        }
      }
    }
    fmt::print(stderr, "error: {} (--help shows the options)\n", zinc::terminal_safe(message));
    return 1;
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
