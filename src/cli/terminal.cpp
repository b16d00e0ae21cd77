#include "cli/terminal.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>

namespace zinc::cli {

namespace {

std::atomic<bool> g_interrupted{false};

extern "C" void on_sigint(int) {
  if (g_interrupted.exchange(true)) {
    // Still set from an earlier Ctrl-C nobody handled: the user means it.
    signal(SIGINT, SIG_DFL);
    raise(SIGINT);
  }
}

}  // namespace

bool is_terminal(std::FILE* stream) { return isatty(fileno(stream)) == 1; }

std::atomic<bool>& install_interrupt_flag() {
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: a read waiting for input returns so the prompt can react
  sigaction(SIGINT, &sa, nullptr);
  return g_interrupted;
}

ReadStatus read_line(std::string& line, const std::atomic<bool>& interrupted) {
  // Bytes read past the end of the previous line wait here for the next call.
  static std::string buffered;
  line.clear();
  for (;;) {
    const size_t nl = buffered.find('\n');
    if (nl != std::string::npos) {
      line = buffered.substr(0, nl);
      buffered.erase(0, nl + 1);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      return ReadStatus::Line;
    }
    char chunk[4096];
    const ssize_t n = read(STDIN_FILENO, chunk, sizeof chunk);
    if (n > 0) {
      buffered.append(chunk, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) {
      if (interrupted.load()) {
        buffered.clear();
        return ReadStatus::Interrupted;
      }
      continue;
    }
    // End of input (or an error reading it): a last line without newline still counts.
    if (!buffered.empty()) {
      line.swap(buffered);
      buffered.clear();
      return ReadStatus::Line;
    }
    return ReadStatus::End;
  }
}

}  // namespace zinc::cli
