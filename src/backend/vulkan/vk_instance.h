// Opening Vulkan, shared by the device probe (zinc check) and the compute context: the loader through
// volk, then an instance at the newest API version up to 1.3 that the loader offers.
#pragma once

#include <volk.h>

#include <string>

namespace zinc::backend::vk {

// Loads the Vulkan loader and creates an instance (its functions loaded). On failure returns false
// with `why` saying what to install or set.
bool open_instance(VkInstance* instance, std::string* why);

}  // namespace zinc::backend::vk
