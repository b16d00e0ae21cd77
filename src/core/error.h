// Errors that carry their context. Every failure a user can cause (a bad file, a bad flag, a missing
// device) is reported as one zinc::Error whose message says what went wrong, where, and what to do.
#pragma once

#include <stdexcept>
#include <string>

namespace zinc {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace zinc
