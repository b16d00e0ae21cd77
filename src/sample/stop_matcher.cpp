// Stop-string matching over text pieces (see stop_matcher.h). The held text is at most the longest
// stop string minus one byte plus one piece, so the naive search per push is cheap and obviously
// right; no automaton is needed.
#include "sample/stop_matcher.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "core/error.h"

namespace zinc::sample {

StopMatcher::StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  for (size_t i = 0; i < stops_.size(); ++i) {
    if (stops_[i].empty()) {
      throw Error(fmt::format("stop strings: entry {} is empty: a stop string needs at least one character", i));
    }
    max_len_ = std::max(max_len_, stops_[i].size());
  }
}

StopMatcher::Out StopMatcher::push(std::string_view piece) {
  Out out;
  if (stopped()) {
    out.stopped = true;
    out.stop_index = stop_index_;
    return out;
  }
  const size_t old = held_.size();
  held_.append(piece);
  const std::string_view text = held_;

  // Every stop occurrence ending at or before `old` was ruled out by earlier pushes, so only ends
  // inside the new piece are tried, earliest first.
  for (size_t end = old + 1; end <= text.size(); ++end) {
    int32_t best = -1;
    for (size_t i = 0; i < stops_.size(); ++i) {
      const std::string& s = stops_[i];
      if (s.size() > end || text.compare(end - s.size(), s.size(), s) != 0) continue;
      if (best < 0 || s.size() > stops_[static_cast<size_t>(best)].size()) best = static_cast<int32_t>(i);
    }
    if (best >= 0) {
      out.text = held_.substr(0, end - stops_[static_cast<size_t>(best)].size());
      out.stopped = true;
      out.stop_index = best;
      stop_index_ = best;
      held_.clear();
      return out;
    }
  }

  // Hold back the longest end of the text that begins some stop string (a proper beginning: a
  // whole one would have matched above).
  size_t keep_from = text.size();
  const size_t first = text.size() >= max_len_ ? text.size() - max_len_ + 1 : 0;
  for (size_t start = first; start < text.size(); ++start) {
    const std::string_view tail = text.substr(start);
    const bool partial = std::any_of(stops_.begin(), stops_.end(), [&](const std::string& s) {
      return s.size() > tail.size() && std::string_view(s).substr(0, tail.size()) == tail;
    });
    if (partial) {
      keep_from = start;
      break;
    }
  }
  out.text = held_.substr(0, keep_from);
  held_.erase(0, keep_from);
  return out;
}

std::string StopMatcher::flush() {
  std::string out;
  out.swap(held_);
  stop_index_ = -1;
  return out;
}

void StopMatcher::reset() {
  held_.clear();
  stop_index_ = -1;
}

}  // namespace zinc::sample
