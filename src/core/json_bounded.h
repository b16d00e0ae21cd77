// JSON from untrusted bytes (request bodies, tool-call arguments, model output, files a user names)
// parsed with a nesting limit. nlohmann's parser is iterative, but copying, comparing, dumping and our
// own conversions (template values, schemas) recurse once per level: a 40 KB body nesting 20,000
// levels would overflow the stack in any of them. The limit is enforced while parsing, so nothing
// deeper than it is ever built. Real documents stay far below it: OpenAI tool schemas nest about ten
// levels; JSON Schema tooling commonly stops at 100 or so.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.h"

namespace zinc {

inline constexpr int kJsonMaxDepth = 128;  // arrays and objects inside each other

// Thrown when a document nests deeper than the limit (a zinc::Error, so callers that report errors
// already report this one).
class JsonTooDeep : public Error {
 public:
  explicit JsonTooDeep(int limit)
      : Error(fmt::format("the JSON nests arrays and objects more than {} levels deep", limit)) {}
};

// Parses `text` into J (nlohmann::json or ordered_json). Throws JsonTooDeep past `max_depth` levels and
// J's parse_error for malformed text, exactly as J::parse would.
template <typename J>
J parse_json_bounded(std::string_view text, int max_depth = kJsonMaxDepth) {
  // The callback sees every value with its depth; refusing here stops the parse before the nesting
  // is built (the depth reported for an opening bracket is that of the container holding it).
  const typename J::parser_callback_t limit = [max_depth](int depth, typename J::parse_event_t event, J&) {
    if ((event == J::parse_event_t::object_start || event == J::parse_event_t::array_start) && depth >= max_depth) {
      throw JsonTooDeep(max_depth);
    }
    return true;
  };
  return J::parse(text.begin(), text.end(), limit);
}

// The nesting depth of an already built value (0 for a scalar), without recursion.
template <typename J>
int json_depth(const J& root) {
  int deepest = 0;
  std::vector<std::pair<const J*, int>> todo{{&root, 0}};
  while (!todo.empty()) {
    const auto [j, d] = todo.back();
    todo.pop_back();
    if (!j->is_structured()) continue;
    deepest = std::max(deepest, d + 1);
    for (const auto& e : *j) todo.emplace_back(&e, d + 1);
  }
  return deepest;
}

}  // namespace zinc
