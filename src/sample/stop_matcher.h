// Stop strings over a stream of text pieces (the detokenizer's output).
//
//   StopMatcher stop({"</s>", "\nUser:"});
//   for (...) { auto out = stop.push(detok.push(id)); send(out.text); if (out.stopped) break; }
//   send(stop.flush());   // when generation ended for another reason
//
// push() returns only text that can no longer belong to a stop string: the longest end of the text
// seen so far that is the beginning of some stop string is held back until the next piece decides
// it. When a stop string is complete the text before it is returned with stopped = true; the stop
// string and everything after it in that piece are dropped.
//
// Which stop wins does not depend on how the text was cut into pieces: the first stop string to be
// complete in the text (smallest end position) wins, and of those ending at the same byte the longest
// (it starts first). Matching is byte-exact, so multi-byte UTF-8 stop strings work, and output cut
// points fall on character boundaries whenever the pieces and stop strings are valid UTF-8.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace zinc::sample {

class StopMatcher {
 public:
  // Throws zinc::Error for an empty stop string (it would match before any text).
  explicit StopMatcher(std::vector<std::string> stops);

  struct Out {
    std::string text;         // safe to show
    bool stopped = false;     // a stop string is complete; later pushes return nothing
    int32_t stop_index = -1;  // which one (index into the constructor's list), -1 if none
  };
  Out push(std::string_view piece);
  // The held-back text (a stop string that never completed), empty after a stop. The matcher then
  // starts over, as after reset().
  std::string flush();
  void reset();

  bool stopped() const { return stop_index_ >= 0; }
  size_t held_bytes() const { return held_.size(); }
  const std::vector<std::string>& stops() const { return stops_; }

 private:
  std::vector<std::string> stops_;
  size_t max_len_ = 0;
  std::string held_;
  int32_t stop_index_ = -1;
};

}  // namespace zinc::sample
