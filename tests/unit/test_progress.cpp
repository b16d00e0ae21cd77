// The progress line of zinc's long commands (pull, synth, convert, quantize): on a terminal, one line
// redrawn in place and ended once; elsewhere, one plain line per tenth done.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

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
