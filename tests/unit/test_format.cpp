// terminal_safe(): what a terminal would obey becomes visible text; everything else passes unchanged.
#include <gtest/gtest.h>

#include "core/format.h"

namespace zinc {
namespace {

TEST(TerminalSafe, EscapesControlsAndKeepsText) {
  EXPECT_EQ(terminal_safe("plain text, ünïcödé, 日本語, emoji 🙂, back\\slash"),
            "plain text, ünïcödé, 日本語, emoji 🙂, back\\slash");
  EXPECT_EQ(terminal_safe("a\x1b]0;title\x07z"), "a\\x1b]0;title\\x07z");             // OSC: retitle the window
  EXPECT_EQ(terminal_safe("\x1b[2J\x1b[H"), "\\x1b[2J\\x1b[H");                        // clear the screen
  EXPECT_EQ(terminal_safe("x\x7fy\x01"), "x\\x7fy\\x01");
  EXPECT_EQ(terminal_safe("one\ntwo\tthree\r"), "one\\x0atwo\\x09three\\x0d");
  EXPECT_EQ(terminal_safe("one\ntwo\tthree\r", true), "one\ntwo\tthree\\x0d");         // generated text keeps lines
  EXPECT_EQ(terminal_safe("\xc2\x9b" "31m"), "\\u009b31m");                           // C1 CSI, as UTF-8
  EXPECT_EQ(terminal_safe("\xc2\x85"), "\\u0085");
  EXPECT_EQ(terminal_safe("\xc2\xa0"), "\xc2\xa0");                                    // U+00A0 is text
}

TEST(TerminalSafe, EscapesBytesThatAreNotUtf8) {
  EXPECT_EQ(terminal_safe("\x9b" "31m"), "\\x9b31m");            // a raw 8-bit CSI
  EXPECT_EQ(terminal_safe("\xe6\x97"), "\\xe6\\x97");            // a sequence cut short
  EXPECT_EQ(terminal_safe("\xc0\xaf"), "\\xc0\\xaf");            // overlong
  EXPECT_EQ(terminal_safe("\xed\xa0\x80"), "\\xed\\xa0\\x80");   // a surrogate
  EXPECT_EQ(terminal_safe("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");  // past U+10FFFF
  EXPECT_EQ(terminal_safe(std::string_view("a\0b", 3)), "a\\x00b");
}

}  // namespace
}  // namespace zinc
