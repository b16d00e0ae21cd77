// Stop strings over streamed pieces: what is held back and released, stops split across pieces at
// every position, stop strings that overlap each other, multi-byte UTF-8 stops, and random texts cut
// at random places against a whole-text reference written here.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "sample/stop_matcher.h"

namespace zinc::sample {
namespace {

struct Result {
  std::string text;
  bool stopped = false;
  int32_t stop_index = -1;
  bool operator==(const Result&) const = default;
};

std::ostream& operator<<(std::ostream& os, const Result& r) {
  return os << "{\"" << r.text << "\", stopped " << r.stopped << ", index " << r.stop_index << "}";
}

// Streams the pieces; after a stop nothing more is pushed, otherwise the held text is flushed.
Result stream(const std::vector<std::string>& stops, const std::vector<std::string>& pieces) {
  StopMatcher m(stops);
  Result r;
  for (const std::string& piece : pieces) {
    const StopMatcher::Out out = m.push(piece);
    r.text += out.text;
    if (out.stopped) {
      r.stopped = true;
      r.stop_index = out.stop_index;
      return r;
    }
  }
  r.text += m.flush();
  return r;
}

// The whole text at once, from the definition: the first stop to be complete (smallest end; the
// longest of those ending there) cuts the text at its start.
Result reference(const std::vector<std::string>& stops, const std::string& text) {
  for (size_t end = 1; end <= text.size(); ++end) {
    int32_t best = -1;
    for (size_t i = 0; i < stops.size(); ++i) {
      const std::string& s = stops[i];
      if (s.size() <= end && text.compare(end - s.size(), s.size(), s) == 0 &&
          (best < 0 || s.size() > stops[static_cast<size_t>(best)].size())) {
        best = static_cast<int32_t>(i);
      }
    }
    if (best >= 0) return {text.substr(0, end - stops[static_cast<size_t>(best)].size()), true, best};
  }
  return {text, false, -1};
}

// Every way of cutting `text` into two and three pieces, plus one byte per piece.
std::vector<std::vector<std::string>> cuts(const std::string& text) {
  std::vector<std::vector<std::string>> out;
  for (size_t i = 0; i <= text.size(); ++i) {
    out.push_back({text.substr(0, i), text.substr(i)});
    for (size_t j = i; j <= text.size(); ++j) out.push_back({text.substr(0, i), text.substr(i, j - i), text.substr(j)});
  }
  std::vector<std::string> bytes;
  for (const char c : text) bytes.emplace_back(1, c);
  out.push_back(bytes);
  return out;
}

void expect_every_cut(const std::vector<std::string>& stops, const std::string& text, const Result& want) {
  ASSERT_EQ(reference(stops, text), want) << "the hand-worked expectation disagrees with the definition";
  for (const auto& pieces : cuts(text)) {
    std::string joined;
    for (const auto& p : pieces) joined += "|" + p;
    ASSERT_EQ(stream(stops, pieces), want) << "pieces " << joined;
  }
}

TEST(StopMatcher, HoldsBackAPossibleStartAndReleasesIt) {
  StopMatcher m({"</s>"});
  auto out = m.push("Hello <");
  EXPECT_EQ(out.text, "Hello ");
  EXPECT_FALSE(out.stopped);
  EXPECT_EQ(m.held_bytes(), 1u);
  out = m.push("/");
  EXPECT_EQ(out.text, "");
  EXPECT_EQ(m.held_bytes(), 2u);
  out = m.push("x> <");  // "</x" cannot become "</s>"; the last "<" might
  EXPECT_EQ(out.text, "</x> ");
  EXPECT_EQ(m.held_bytes(), 1u);
  EXPECT_EQ(m.flush(), "<");
  EXPECT_EQ(m.held_bytes(), 0u);
}

TEST(StopMatcher, StopsAndDropsTheStopAndWhatFollows) {
  StopMatcher m({"STOP"});
  EXPECT_EQ(m.push("one ST").text, "one ");
  const auto out = m.push("OP two");
  EXPECT_EQ(out.text, "");
  EXPECT_TRUE(out.stopped);
  EXPECT_EQ(out.stop_index, 0);
  EXPECT_TRUE(m.stopped());
  // Sticky: nothing more comes out.
  const auto later = m.push("three");
  EXPECT_EQ(later.text, "");
  EXPECT_TRUE(later.stopped);
  EXPECT_EQ(m.flush(), "");
  EXPECT_FALSE(m.stopped());  // flush starts over
}

TEST(StopMatcher, StopInsideOnePiece) {
  StopMatcher m({"\n\nUser:"});
  const auto out = m.push("answer.\n\nUser: more");
  EXPECT_EQ(out.text, "answer.");
  EXPECT_TRUE(out.stopped);
}

TEST(StopMatcher, EveryCutGivesTheSameResult) {
  expect_every_cut({"<|im_end|>"}, "abc<|im_end|>def", {"abc", true, 0});
  expect_every_cut({"<|im_end|>"}, "abc<|im_en|>def", {"abc<|im_en|>def", false, -1});
  expect_every_cut({"aab"}, "aaab", {"a", true, 0});            // a partial match restarts inside itself
  expect_every_cut({"abcd", "bc"}, "xabcdy", {"xa", true, 1});  // "bc" is complete first
  expect_every_cut({"ab", "b"}, "xab", {"x", true, 0});         // same end: the longer one
  expect_every_cut({"aba", "bab"}, "zbabab", {"z", true, 1});
  expect_every_cut({"x", "yy"}, "aaa", {"aaa", false, -1});
  expect_every_cut({"end", "endless"}, "the endless", {"the ", true, 0});
}

TEST(StopMatcher, MultiByteStops) {
  // 。 is E3 80 82; 🦙 is F0 9F A6 99. Every byte position is tried as a cut.
  expect_every_cut({"\xE3\x80\x82\n"}, "\xE4\xBD\xA0\xE5\xA5\xBD\xE3\x80\x82\n\xE5\x86\x8D\xE8\xA7\x81",
                   {"\xE4\xBD\xA0\xE5\xA5\xBD", true, 0});
  expect_every_cut({"\xF0\x9F\xA6\x99"}, "I like \xF0\x9F\xA6\x99s", {"I like ", true, 0});
  // A stop sharing its first character with the text: 日本 against 日曜日.
  expect_every_cut({"\xE6\x97\xA5\xE6\x9C\xAC"}, "\xE6\x97\xA5\xE6\x9B\x9C\xE6\x97\xA5",
                   {"\xE6\x97\xA5\xE6\x9B\x9C\xE6\x97\xA5", false, -1});
  // Whole characters in, whole characters out.
  StopMatcher m({"\xE6\x97\xA5\xE6\x9C\xAC"});
  EXPECT_EQ(m.push("\xE6\x97\xA5").text, "");
  EXPECT_EQ(m.push("\xE6\x9B\x9C").text, "\xE6\x97\xA5\xE6\x9B\x9C");
  EXPECT_EQ(m.push("\xE6\x97\xA5").text, "");
  EXPECT_EQ(m.flush(), "\xE6\x97\xA5");
}

TEST(StopMatcher, RandomTextsAndCutsAgreeWithTheWholeText) {
  std::mt19937 rng(5);
  const auto random_string = [&](size_t max_len, const char* alphabet, size_t n_alpha) {
    std::string s(1 + rng() % max_len, ' ');
    for (char& c : s) c = alphabet[rng() % n_alpha];
    return s;
  };
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<std::string> stops;
    for (size_t i = 0, n = rng() % 4; i < n; ++i) stops.push_back(random_string(4, "abc", 3));
    const std::string text = random_string(30, "abc", 3);
    std::vector<std::string> pieces;
    for (size_t at = 0; at < text.size();) {
      const size_t len = std::min<size_t>(text.size() - at, rng() % 5);
      pieces.push_back(text.substr(at, len));
      at += len;
    }
    ASSERT_EQ(stream(stops, pieces), reference(stops, text)) << "trial " << trial << " text " << text;
  }
}

TEST(StopMatcher, NoStopsPassesEverythingThrough) {
  StopMatcher m({});
  EXPECT_EQ(m.push("anything <|").text, "anything <|");
  EXPECT_EQ(m.held_bytes(), 0u);
}

TEST(StopMatcher, EmptyStopStringIsAnError) { EXPECT_THROW(StopMatcher({"ok", ""}), Error); }

}  // namespace
}  // namespace zinc::sample
