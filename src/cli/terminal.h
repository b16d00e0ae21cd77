// Terminal helpers for interactive commands: whether a stream is a terminal, ANSI styles that turn
// into nothing when it is not, a Ctrl-C flag that interrupts the current work instead of the program,
// and a line reader that notices that flag.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

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

// Progress of work measured in bytes (a download, a file being written), on `out`. On a terminal one
// line redrawn in place at most ten times a second and at the end:
//   "  label [######........]  45%  1.13 GiB / 2.50 GiB  85.3 MB/s  ETA 0:41  detail"
// Elsewhere one line per tenth done ("label: 40% (1.00 GiB of 2.50 GiB)"), so a log shows it moving
// without carriage returns.
class Progress {
 public:
  explicit Progress(std::string label, std::FILE* out = stderr);
  Progress(std::string label, std::FILE* out, bool terminal);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  // rate in bytes per second, or negative: measured from the first call. detail: shown last on a
  // terminal (the tensor being written, say).
  void update(uint64_t done, uint64_t total, double rate = -1, std::string_view detail = {});
  // Ends the terminal line (once; nothing elsewhere). Also on destruction.
  void finish();

 private:
  std::string label_;
  std::FILE* out_;
  bool terminal_, drawn_ = false;
  int last_tenth_ = -1;
  uint64_t first_done_ = 0;
  std::chrono::steady_clock::time_point start_{}, last_draw_{};
};

// A spinner at the cursor while a first token is awaited (a long prompt, a cold start): after `delay`,
// one frame every 100 ms, each drawn and stepped back over, so whatever is printed next takes its
// place. stop() (also on destruction) erases it; call it before printing anything else. Disabled (not
// a terminal): draws nothing.
class Spinner {
 public:
  Spinner(std::FILE* out, bool enabled, std::chrono::milliseconds delay = std::chrono::milliseconds(250));
  ~Spinner();
  Spinner(const Spinner&) = delete;
  Spinner& operator=(const Spinner&) = delete;
  void stop();

 private:
  std::FILE* out_;
  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false, drawn_ = false;
};

enum class ReadStatus { Line, Interrupted, End };

// Reads one line from standard input (without its newline). Interrupted: Ctrl-C while waiting (the
// partial line is discarded); End: end of input.
ReadStatus read_line(std::string& line, const std::atomic<bool>& interrupted);

}  // namespace zinc::cli
