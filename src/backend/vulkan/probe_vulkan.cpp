// Vulkan device discovery through volk (the loader is opened at run time, so a machine without
// libvulkan.so.1 gets a clear NOT READY instead of a failure to start).
#include <fmt/format.h>
#include <volk.h>

#include <cstring>

#include "backend/probe.h"
#include "backend/vulkan/vk_instance.h"

namespace zinc::backend {

namespace {

std::string version_string(uint32_t v) {
  return fmt::format("{}.{}.{}", VK_API_VERSION_MAJOR(v), VK_API_VERSION_MINOR(v), VK_API_VERSION_PATCH(v));
}

const char* result_name(VkResult r) {
  switch (r) {
    case VK_ERROR_INCOMPATIBLE_DRIVER: return "VK_ERROR_INCOMPATIBLE_DRIVER";
    case VK_ERROR_INITIALIZATION_FAILED: return "VK_ERROR_INITIALIZATION_FAILED";
    case VK_ERROR_LAYER_NOT_PRESENT: return "VK_ERROR_LAYER_NOT_PRESENT";
    case VK_ERROR_EXTENSION_NOT_PRESENT: return "VK_ERROR_EXTENSION_NOT_PRESENT";
    case VK_ERROR_OUT_OF_HOST_MEMORY: return "VK_ERROR_OUT_OF_HOST_MEMORY";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY: return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
    default: return "VkResult";
  }
}

const char* kind_name(VkPhysicalDeviceType t) {
  switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete GPU";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated GPU";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual GPU";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "CPU";
    default: return "other";
  }
}

DeviceReport describe(VkPhysicalDevice dev) {
  VkPhysicalDeviceProperties props{};
  vkGetPhysicalDeviceProperties(dev, &props);
  DeviceReport d;
  d.name = props.deviceName;
  d.kind = kind_name(props.deviceType);
  d.api = fmt::format("Vulkan {}", version_string(props.apiVersion));

  VkPhysicalDeviceMemoryProperties mem{};
  vkGetPhysicalDeviceMemoryProperties(dev, &mem);
  for (uint32_t i = 0; i < mem.memoryHeapCount; ++i) {
    if (mem.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) d.memory_bytes += mem.memoryHeaps[i].size;
  }

  uint32_t n_ext = 0;
  vkEnumerateDeviceExtensionProperties(dev, nullptr, &n_ext, nullptr);
  std::vector<VkExtensionProperties> exts(n_ext);
  vkEnumerateDeviceExtensionProperties(dev, nullptr, &n_ext, exts.data());
  auto has_ext = [&](const char* name) {
    for (const auto& e : exts) {
      if (std::strcmp(e.extensionName, name) == 0) return true;
    }
    return false;
  };

  if (props.apiVersion >= VK_API_VERSION_1_2 && vkGetPhysicalDeviceFeatures2) {
    VkPhysicalDeviceVulkan12Features f12{};
    f12.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES;
    VkPhysicalDeviceShaderIntegerDotProductFeatures dot{};
    dot.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES;
    VkPhysicalDeviceFeatures2 f2{};
    f2.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
    f2.pNext = &f12;
    if (props.apiVersion >= VK_API_VERSION_1_3) f12.pNext = &dot;
    vkGetPhysicalDeviceFeatures2(dev, &f2);
    if (f12.shaderFloat16) d.features.emplace_back("fp16");
    if (f12.shaderInt8) d.features.emplace_back("int8");
    if (dot.shaderIntegerDotProduct) d.features.emplace_back("int-dot");

    VkPhysicalDeviceSubgroupProperties sub{};
    sub.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES;
    VkPhysicalDeviceProperties2 p2{};
    p2.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2;
    p2.pNext = &sub;
    vkGetPhysicalDeviceProperties2(dev, &p2);
    d.features.push_back(fmt::format("subgroup {}", sub.subgroupSize));
  }
  if (has_ext("VK_KHR_cooperative_matrix")) d.features.emplace_back("coopmat");
  if (has_ext("VK_NV_cooperative_matrix2")) d.features.emplace_back("coopmat2");
  return d;
}

}  // namespace

bool vk::open_instance(VkInstance* instance, std::string* why) {
  if (volkInitialize() != VK_SUCCESS) {
    *why = "no Vulkan loader (libvulkan.so.1) found: install libvulkan1 and a driver (mesa-vulkan-drivers, or your GPU "
           "vendor's)";
    return false;
  }
  const uint32_t loader_version = volkGetInstanceVersion();
  VkApplicationInfo app{};
  app.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO;
  app.pApplicationName = "zinc";
  app.apiVersion = loader_version >= VK_API_VERSION_1_3 ? VK_API_VERSION_1_3 : loader_version;
  VkInstanceCreateInfo ci{};
  ci.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO;
  ci.pApplicationInfo = &app;
  const VkResult res = vkCreateInstance(&ci, nullptr, instance);
  if (res != VK_SUCCESS) {
    *why = fmt::format("creating a Vulkan instance failed ({} {})", result_name(res), static_cast<int>(res));
    if (res == VK_ERROR_INCOMPATIBLE_DRIVER) {
      *why += ": no usable Vulkan driver was found; install one (mesa-vulkan-drivers, or your GPU vendor's), "
              "or point VK_DRIVER_FILES at its ICD json (VK_LOADER_DEBUG=error shows why drivers were skipped)";
    }
    return false;
  }
  volkLoadInstanceOnly(*instance);
  return true;
}

BackendReport probe_vulkan() {
  BackendReport r;
  r.name = "vulkan";
  r.compiled = true;
  VkInstance instance = VK_NULL_HANDLE;
  if (!vk::open_instance(&instance, &r.status)) return r;
  uint32_t n = 0;
  vkEnumeratePhysicalDevices(instance, &n, nullptr);
  std::vector<VkPhysicalDevice> devs(n);
  vkEnumeratePhysicalDevices(instance, &n, devs.data());
  for (VkPhysicalDevice dev : devs) r.devices.push_back(describe(dev));
  vkDestroyInstance(instance, nullptr);
  r.ready = !r.devices.empty();
  r.status = r.ready ? fmt::format("{} device{}", n, n == 1 ? "" : "s")
                     : "the Vulkan loader found no devices: install a Vulkan driver";
  return r;
}

}  // namespace zinc::backend
