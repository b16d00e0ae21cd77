// Logging goes to stderr through spdlog so that stdout carries only a command's result.
#pragma once

#include <spdlog/spdlog.h>

#include <string>

namespace zinc::log {

// Installs the stderr logger. `level` is one of trace, debug, info, warn, error, critical, off.
// Throws zinc::Error for an unknown level name.
void init(const std::string& level);

}  // namespace zinc::log
