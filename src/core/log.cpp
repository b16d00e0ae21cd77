#include "core/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include "core/error.h"

namespace zinc::log {

void init(const std::string& level) {
  const auto lvl = spdlog::level::from_str(level);
  // from_str maps unknown names to "off"; only accept "off" when it was asked for.
  if (lvl == spdlog::level::off && level != "off") {
    throw Error("unknown log level '" + level + "' (use trace, debug, info, warn, error, critical or off)");
  }
  auto logger = spdlog::stderr_color_mt("zinc");
  logger->set_pattern("%^%l%$: %v");
  logger->set_level(lvl);
  spdlog::set_default_logger(logger);
}

}  // namespace zinc::log
