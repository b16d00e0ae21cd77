// Terminal helpers for interactive commands: whether a stream is a terminal, ANSI styles that turn
// into nothing when it is not, a Ctrl-C flag that interrupts the current work instead of the program,
// and a line reader that notices that flag.
#pragma once

#include <atomic>
#include <cstdio>
#include <string>

namespace zinc::cli {

bool is_terminal(std::FILE* stream);

struct Style {
  bool ansi = false;
  const char* dim() const { return ansi ? "\x1b[2m" : ""; }
  const char* bold() const { return ansi ? "\x1b[1m" : ""; }
  const char* reset() const { return ansi ? "\x1b[0m" : ""; }
};

// Installs a SIGINT handler that sets the returned flag (and lets a blocked read return). A second
// Ctrl-C while the flag is still set ends the program as usual.
std::atomic<bool>& install_interrupt_flag();

enum class ReadStatus { Line, Interrupted, End };

// Reads one line from standard input (without its newline). Interrupted: Ctrl-C while waiting (the
// partial line is discarded); End: end of input.
ReadStatus read_line(std::string& line, const std::atomic<bool>& interrupted);

}  // namespace zinc::cli
