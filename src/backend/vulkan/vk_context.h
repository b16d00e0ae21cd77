// The Vulkan compute context: instance and device through volk, one compute queue, buffers, and
// compute kernels built from the SPIR-V embedded at build time (shaders/vulkan). The first layer of
// the Vulkan backend; the graph executor records its dispatches on top of it.
#pragma once

#include <volk.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace zinc::backend::vk {

// SPIR-V of an embedded shader by name (the .comp file's name), empty when there is none.
std::span<const uint8_t> spirv(std::string_view name);

struct Buffer {
  VkBuffer buffer = VK_NULL_HANDLE;
  VkDeviceMemory memory = VK_NULL_HANDLE;
  size_t size = 0;
  void* mapped = nullptr;  // host-visible buffers: their bytes
};

struct Kernel {
  VkShaderModule module = VK_NULL_HANDLE;
  VkDescriptorSetLayout set_layout = VK_NULL_HANDLE;
  VkPipelineLayout layout = VK_NULL_HANDLE;
  VkPipeline pipeline = VK_NULL_HANDLE;
  uint32_t n_bindings = 0;
  uint32_t push_bytes = 0;
};

class Context {
 public:
  // The device: index `device` of those the loader lists, or (device < 0) ZINC_VULKAN_DEVICE if set,
  // else the first discrete GPU, else the first device. Throws zinc::Error saying why there is none
  // (no loader, no driver, no device, index out of range).
  static std::unique_ptr<Context> create(int device = -1);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  const std::string& device_name() const { return name_; }

  // A host-visible, coherent buffer, mapped for its lifetime.
  Buffer host_buffer(size_t bytes);
  void release(Buffer& b);

  // A compute pipeline from an embedded shader with n_bindings storage buffers (binding 0..n-1) and
  // push_bytes of push constants. Throws for an unknown shader.
  Kernel kernel(std::string_view shader, uint32_t n_bindings, uint32_t push_bytes);
  void release(Kernel& k);

  // Runs one dispatch and waits for it (bindings in binding order).
  void run(const Kernel& k, std::span<const Buffer* const> bindings, const void* push, uint32_t groups_x,
           uint32_t groups_y = 1, uint32_t groups_z = 1);

 private:
  Context() = default;
  uint32_t memory_type(uint32_t bits, VkMemoryPropertyFlags want) const;

  VkInstance instance_ = VK_NULL_HANDLE;
  VkPhysicalDevice physical_ = VK_NULL_HANDLE;
  VkDevice device_ = VK_NULL_HANDLE;
  VkQueue queue_ = VK_NULL_HANDLE;
  uint32_t queue_family_ = 0;
  VkCommandPool pool_ = VK_NULL_HANDLE;
  VkDescriptorPool descriptors_ = VK_NULL_HANDLE;
  VkFence fence_ = VK_NULL_HANDLE;
  VkPhysicalDeviceMemoryProperties memory_{};
  std::string name_;
};

}  // namespace zinc::backend::vk
