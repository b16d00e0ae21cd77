#include "cli/terminal.h"

#include <signal.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <csignal>
#include <iterator>

#include "core/format.h"

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

Progress::Progress(std::string label, std::FILE* out) : Progress(std::move(label), out, is_terminal(out)) {}

Progress::Progress(std::string label, std::FILE* out, bool terminal)
    : label_(std::move(label)), out_(out), terminal_(terminal) {}

Progress::~Progress() { finish(); }

void Progress::update(uint64_t done, uint64_t total, double rate, std::string_view detail) {
  const auto now = std::chrono::steady_clock::now();
  if (start_ == std::chrono::steady_clock::time_point{}) {
    start_ = now;
    first_done_ = done;
  }
  if (!terminal_) {
    if (total == 0) return;
    const int tenth = static_cast<int>(std::min<uint64_t>(done, total) * 10 / total);
    if (tenth == last_tenth_) return;
    last_tenth_ = tenth;
    fmt::print(out_, "{}: {}% ({} of {})\n", label_, tenth * 10, format_bytes(done), format_bytes(total));
    std::fflush(out_);
    return;
  }
  if (drawn_ && done < total && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  const double seconds = std::chrono::duration<double>(now - start_).count();
  if (rate < 0) rate = seconds > 0 ? static_cast<double>(done - first_done_) / seconds : 0.0;
  std::string line = fmt::format("  {}", label_);
  if (total > 0) {
    const double frac = static_cast<double>(std::min(done, total)) / static_cast<double>(total);
    const auto filled = static_cast<size_t>(frac * 20);
    line += fmt::format(" [{}{}] {:3}%  {} / {}", std::string(filled, '#'), std::string(20 - filled, '.'),
                        static_cast<int>(frac * 100), format_bytes(done), format_bytes(total));
  } else {
    line += fmt::format("  {}", format_bytes(done));
  }
  if (rate > 0) line += fmt::format("  {:.1f} MB/s", rate / 1e6);
  if (rate > 0 && total > done) {
    const auto s = static_cast<int64_t>(static_cast<double>(total - done) / rate);
    line += fmt::format("  ETA {}:{:02}", s / 60, s % 60);
  }
  if (!detail.empty()) line += fmt::format("  {}", detail);
  fmt::print(out_, "\r\x1b[K{}", line);
  std::fflush(out_);
  drawn_ = true;
}

void Progress::finish() {
  if (terminal_ && drawn_) {
    fmt::print(out_, "\n");
    std::fflush(out_);
  }
  drawn_ = false;
}

Spinner::Spinner(std::FILE* out, bool enabled, std::chrono::milliseconds delay) : out_(out) {
  if (!enabled) return;
  thread_ = std::thread([this, delay] {
    static const char* const kFrames[] = {"⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"};
    std::unique_lock<std::mutex> lock(mutex_);
    if (wake_.wait_for(lock, delay, [this] { return stopping_; })) return;
    for (size_t i = 0; !stopping_; ++i) {
      fmt::print(out_, "\x1b[2m{}\x1b[0m\b", kFrames[i % std::size(kFrames)]);  // one column, then back over it
      std::fflush(out_);
      drawn_ = true;
      wake_.wait_for(lock, std::chrono::milliseconds(100), [this] { return stopping_; });
    }
  });
}

Spinner::~Spinner() { stop(); }

void Spinner::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (drawn_) {
    fmt::print(out_, " \b");
    std::fflush(out_);
    drawn_ = false;
  }
}

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
