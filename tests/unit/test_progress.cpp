// The progress line of zinc's long commands (pull, synth, convert, quantize, loading): on a terminal,
// one line redrawn in place and ended once; elsewhere, one plain line per tenth done. And the spinner
// shown while a first token is awaited.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "cli/terminal.h"

namespace zinc::cli {
namespace {

// What `run` printed into a temporary file standing for stderr.
template <class F>
std::string printed(F run) {
  std::FILE* f = std::tmpfile();
  run(f);
  std::fflush(f);
  std::string out(static_cast<size_t>(std::ftell(f)), '\0');
  std::rewind(f);
  const size_t n = std::fread(out.data(), 1, out.size(), f);
  std::fclose(f);
  out.resize(n);
  return out;
}

TEST(Progress, ElsewhereOneLinePerTenth) {
  const std::string out = printed([](std::FILE* f) {
    Progress p("synth", f, false);
    for (uint64_t done = 0; done <= 1000; done += 25) p.update(done, 1000);
    p.finish();
  });
  std::string want;
  for (int tenth = 0; tenth <= 10; ++tenth) {
    want += "synth: " + std::to_string(tenth * 10) + "% (" + std::to_string(tenth * 100) + " B of 1000 B)\n";
  }
  EXPECT_EQ(out, want);
}

TEST(Progress, OnATerminalOneLineRedrawnAndEndedOnce) {
  const std::string out = printed([](std::FILE* f) {
    Progress p("pull", f, true);
    p.update(0, 1000, 2e6);
    for (uint64_t done = 1; done < 1000; ++done) p.update(done, 1000, 2e6);  // within 100 ms: not drawn
    p.update(1000, 1000, 2e6, "done");
    p.finish();
    p.finish();
  });
  EXPECT_EQ(out.rfind("\r\x1b[K", 0), 0u) << out;
  EXPECT_EQ(out.find('\n'), out.size() - 1) << "one line, ended once: " << out;
  // The first draw and the last (the end is always drawn, whatever the time).
  const size_t second = out.find("\r\x1b[K", 1);
  ASSERT_NE(second, std::string::npos);
  EXPECT_EQ(out.find("\r\x1b[K", second + 1), std::string::npos) << out;
  const std::string last = out.substr(second);
  EXPECT_NE(last.find("  pull [####################] 100%  1000 B / 1000 B  2.0 MB/s  done\n"), std::string::npos) << last;
  EXPECT_NE(out.find("  pull [....................]   0%  0 B / 1000 B  2.0 MB/s  ETA 0:00"), std::string::npos) << out;
}

TEST(Progress, NothingDrawnNothingEnded) {
  EXPECT_EQ(printed([](std::FILE* f) { Progress p("convert", f, true); }), "");
  EXPECT_EQ(printed([](std::FILE* f) { Progress p("convert", f, false); p.update(5, 0); }), "");
}

}  // namespace
}  // namespace zinc::cli

namespace zinc::cli {
namespace {

std::string spin(bool enabled, int wait_ms) {
  std::FILE* f = std::tmpfile();
  {
    Spinner s(f, enabled, std::chrono::milliseconds(0));
    std::this_thread::sleep_for(std::chrono::milliseconds(wait_ms));
    s.stop();
    s.stop();  // twice is fine
  }
  std::rewind(f);
  std::string out;
  for (int c; (c = std::fgetc(f)) != EOF;) out.push_back(static_cast<char>(c));
  std::fclose(f);
  return out;
}

TEST(Spinner, DrawsFramesInPlaceAndErasesItself) {
  const std::string out = spin(true, 350);
  // Frames every 100 ms: at least three in 350 ms, each a dim one-column glyph and a backspace.
  size_t frames = 0;
  for (size_t at = 0; (at = out.find("\x1b[0m\b", at)) != std::string::npos; ++at) ++frames;
  EXPECT_GE(frames, 3u) << out;
  EXPECT_TRUE(out.starts_with("\x1b[2m⠋\x1b[0m\b")) << out;
  EXPECT_TRUE(out.ends_with(" \b")) << "the last frame is erased";
  EXPECT_EQ(spin(false, 150), "");  // not a terminal: nothing
}

TEST(Spinner, NothingBeforeItsDelay) {
  std::FILE* f = std::tmpfile();
  { Spinner s(f, true, std::chrono::milliseconds(10000)); }  // stopped (destroyed) long before
  EXPECT_EQ(std::ftell(f), 0);
  std::fclose(f);
}

}  // namespace
}  // namespace zinc::cli
