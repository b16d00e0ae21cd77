#include "backend/vulkan/vk_context.h"
#include "backend/vulkan/vk_instance.h"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace zinc::backend::vk {

namespace {

void check(VkResult r, const char* what) {
  if (r != VK_SUCCESS) throw Error(fmt::format("Vulkan: {} failed (VkResult {})", what, static_cast<int>(r)));
}

}  // namespace

std::unique_ptr<Context> Context::create(int device) {
  std::unique_ptr<Context> c(new Context());
  if (std::string why; !open_instance(&c->instance_, &why)) throw Error("Vulkan: " + why);
  uint32_t n = 0;
  vkEnumeratePhysicalDevices(c->instance_, &n, nullptr);
  std::vector<VkPhysicalDevice> devs(n);
  vkEnumeratePhysicalDevices(c->instance_, &n, devs.data());
  if (devs.empty()) throw Error("Vulkan: the loader found no devices: install a Vulkan driver");
  if (device < 0) {
    if (const char* e = std::getenv("ZINC_VULKAN_DEVICE"); e && *e) device = std::atoi(e);
  }
  if (device >= static_cast<int>(devs.size())) {
    throw Error(fmt::format("Vulkan: device {} requested, {} present (zinc check lists them)", device, devs.size()));
  }
  if (device < 0) {
    device = 0;
    for (size_t i = 0; i < devs.size(); ++i) {
      VkPhysicalDeviceProperties p{};
      vkGetPhysicalDeviceProperties(devs[i], &p);
      if (p.deviceType == VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU) {
        device = static_cast<int>(i);
        break;
      }
    }
  }
  c->physical_ = devs[static_cast<size_t>(device)];
  VkPhysicalDeviceProperties props{};
  vkGetPhysicalDeviceProperties(c->physical_, &props);
  c->name_ = props.deviceName;
  vkGetPhysicalDeviceMemoryProperties(c->physical_, &c->memory_);

  uint32_t nq = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(c->physical_, &nq, nullptr);
  std::vector<VkQueueFamilyProperties> families(nq);
  vkGetPhysicalDeviceQueueFamilyProperties(c->physical_, &nq, families.data());
  bool found = false;
  for (uint32_t i = 0; i < nq && !found; ++i) {
    if (families[i].queueFlags & VK_QUEUE_COMPUTE_BIT) {
      c->queue_family_ = i;
      found = true;
    }
  }
  if (!found) throw Error(fmt::format("Vulkan: {} has no compute queue", c->name_));
  const float priority = 1.0f;
  VkDeviceQueueCreateInfo qci{};
  qci.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO;
  qci.queueFamilyIndex = c->queue_family_;
  qci.queueCount = 1;
  qci.pQueuePriorities = &priority;
  VkDeviceCreateInfo dci{};
  dci.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO;
  dci.queueCreateInfoCount = 1;
  dci.pQueueCreateInfos = &qci;
  check(vkCreateDevice(c->physical_, &dci, nullptr, &c->device_), "creating the device");
  volkLoadDevice(c->device_);
  vkGetDeviceQueue(c->device_, c->queue_family_, 0, &c->queue_);

  VkCommandPoolCreateInfo pci{};
  pci.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO;
  pci.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  pci.queueFamilyIndex = c->queue_family_;
  check(vkCreateCommandPool(c->device_, &pci, nullptr, &c->pool_), "creating a command pool");
  const VkDescriptorPoolSize sizes{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 4096};
  VkDescriptorPoolCreateInfo dpci{};
  dpci.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO;
  dpci.flags = VK_DESCRIPTOR_POOL_CREATE_FREE_DESCRIPTOR_SET_BIT;
  dpci.maxSets = 1024;
  dpci.poolSizeCount = 1;
  dpci.pPoolSizes = &sizes;
  check(vkCreateDescriptorPool(c->device_, &dpci, nullptr, &c->descriptors_), "creating a descriptor pool");
  VkFenceCreateInfo fci{};
  fci.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO;
  check(vkCreateFence(c->device_, &fci, nullptr, &c->fence_), "creating a fence");
  return c;
}

Context::~Context() {
  if (device_) {
    vkDeviceWaitIdle(device_);
    vkDestroyFence(device_, fence_, nullptr);
    vkDestroyDescriptorPool(device_, descriptors_, nullptr);
    vkDestroyCommandPool(device_, pool_, nullptr);
    vkDestroyDevice(device_, nullptr);
  }
  if (instance_) vkDestroyInstance(instance_, nullptr);
}

uint32_t Context::memory_type(uint32_t bits, VkMemoryPropertyFlags want) const {
  for (uint32_t i = 0; i < memory_.memoryTypeCount; ++i) {
    if ((bits & (1u << i)) && (memory_.memoryTypes[i].propertyFlags & want) == want) return i;
  }
  throw Error(fmt::format("Vulkan: {} has no memory type with the flags {:#x}", name_, want));
}

Buffer Context::host_buffer(size_t bytes) {
  Buffer b;
  b.size = bytes;
  VkBufferCreateInfo bci{};
  bci.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO;
  bci.size = bytes > 0 ? bytes : 4;
  bci.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  bci.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  check(vkCreateBuffer(device_, &bci, nullptr, &b.buffer), "creating a buffer");
  VkMemoryRequirements req{};
  vkGetBufferMemoryRequirements(device_, b.buffer, &req);
  VkMemoryAllocateInfo mai{};
  mai.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO;
  mai.allocationSize = req.size;
  mai.memoryTypeIndex =
      memory_type(req.memoryTypeBits, VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT);
  if (vkAllocateMemory(device_, &mai, nullptr, &b.memory) != VK_SUCCESS) {
    vkDestroyBuffer(device_, b.buffer, nullptr);
    throw Error(fmt::format("Vulkan: out of memory allocating {} bytes on {}", bytes, name_));
  }
  check(vkBindBufferMemory(device_, b.buffer, b.memory, 0), "binding buffer memory");
  check(vkMapMemory(device_, b.memory, 0, VK_WHOLE_SIZE, 0, &b.mapped), "mapping a buffer");
  return b;
}

void Context::release(Buffer& b) {
  if (b.memory) {
    vkUnmapMemory(device_, b.memory);
    vkFreeMemory(device_, b.memory, nullptr);
  }
  if (b.buffer) vkDestroyBuffer(device_, b.buffer, nullptr);
  b = Buffer{};
}

Kernel Context::kernel(std::string_view shader, uint32_t n_bindings, uint32_t push_bytes) {
  const auto code = spirv(shader);
  if (code.empty()) throw Error(fmt::format("Vulkan: no shader named '{}' is built in", shader));
  std::vector<uint32_t> words(code.size() / 4);
  std::memcpy(words.data(), code.data(), words.size() * 4);
  Kernel k;
  k.n_bindings = n_bindings;
  k.push_bytes = push_bytes;
  VkShaderModuleCreateInfo smci{};
  smci.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO;
  smci.codeSize = words.size() * 4;
  smci.pCode = words.data();
  check(vkCreateShaderModule(device_, &smci, nullptr, &k.module), "creating a shader module");
  std::vector<VkDescriptorSetLayoutBinding> bindings(n_bindings);
  for (uint32_t i = 0; i < n_bindings; ++i) {
    bindings[i].binding = i;
    bindings[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    bindings[i].descriptorCount = 1;
    bindings[i].stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
  }
  VkDescriptorSetLayoutCreateInfo dslci{};
  dslci.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO;
  dslci.bindingCount = n_bindings;
  dslci.pBindings = bindings.data();
  check(vkCreateDescriptorSetLayout(device_, &dslci, nullptr, &k.set_layout), "creating a descriptor set layout");
  const VkPushConstantRange range{VK_SHADER_STAGE_COMPUTE_BIT, 0, push_bytes};
  VkPipelineLayoutCreateInfo plci{};
  plci.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO;
  plci.setLayoutCount = 1;
  plci.pSetLayouts = &k.set_layout;
  plci.pushConstantRangeCount = push_bytes > 0 ? 1 : 0;
  plci.pPushConstantRanges = &range;
  check(vkCreatePipelineLayout(device_, &plci, nullptr, &k.layout), "creating a pipeline layout");
  VkComputePipelineCreateInfo cpci{};
  cpci.sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO;
  cpci.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
  cpci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  cpci.stage.module = k.module;
  cpci.stage.pName = "main";
  cpci.layout = k.layout;
  check(vkCreateComputePipelines(device_, VK_NULL_HANDLE, 1, &cpci, nullptr, &k.pipeline), "creating a compute pipeline");
  return k;
}

void Context::release(Kernel& k) {
  if (k.pipeline) vkDestroyPipeline(device_, k.pipeline, nullptr);
  if (k.layout) vkDestroyPipelineLayout(device_, k.layout, nullptr);
  if (k.set_layout) vkDestroyDescriptorSetLayout(device_, k.set_layout, nullptr);
  if (k.module) vkDestroyShaderModule(device_, k.module, nullptr);
  k = Kernel{};
}

void Context::run(const Kernel& k, std::span<const Buffer* const> bindings, const void* push, uint32_t gx,
                  uint32_t gy, uint32_t gz) {
  if (bindings.size() != k.n_bindings) {
    throw Error(fmt::format("Vulkan: a kernel with {} bindings was given {} buffers", k.n_bindings, bindings.size()));
  }
  VkDescriptorSetAllocateInfo dsai{};
  dsai.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO;
  dsai.descriptorPool = descriptors_;
  dsai.descriptorSetCount = 1;
  dsai.pSetLayouts = &k.set_layout;
  VkDescriptorSet set = VK_NULL_HANDLE;
  check(vkAllocateDescriptorSets(device_, &dsai, &set), "allocating a descriptor set");
  std::vector<VkDescriptorBufferInfo> infos(bindings.size());
  std::vector<VkWriteDescriptorSet> writes(bindings.size());
  for (size_t i = 0; i < bindings.size(); ++i) {
    infos[i] = {bindings[i]->buffer, 0, VK_WHOLE_SIZE};
    writes[i].sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET;
    writes[i].dstSet = set;
    writes[i].dstBinding = static_cast<uint32_t>(i);
    writes[i].descriptorCount = 1;
    writes[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    writes[i].pBufferInfo = &infos[i];
  }
  vkUpdateDescriptorSets(device_, static_cast<uint32_t>(writes.size()), writes.data(), 0, nullptr);
  VkCommandBufferAllocateInfo cbai{};
  cbai.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO;
  cbai.commandPool = pool_;
  cbai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  cbai.commandBufferCount = 1;
  VkCommandBuffer cb = VK_NULL_HANDLE;
  check(vkAllocateCommandBuffers(device_, &cbai, &cb), "allocating a command buffer");
  VkCommandBufferBeginInfo bi{};
  bi.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
  bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  vkBeginCommandBuffer(cb, &bi);
  vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, k.pipeline);
  vkCmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, k.layout, 0, 1, &set, 0, nullptr);
  if (k.push_bytes > 0) vkCmdPushConstants(cb, k.layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, k.push_bytes, push);
  vkCmdDispatch(cb, gx, gy, gz);
  // Shader writes visible to the host once the fence signals.
  VkMemoryBarrier mb{};
  mb.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
  mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
  mb.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
  vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, nullptr, 0,
                       nullptr);
  vkEndCommandBuffer(cb);
  VkSubmitInfo si{};
  si.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO;
  si.commandBufferCount = 1;
  si.pCommandBuffers = &cb;
  const VkResult submitted = vkQueueSubmit(queue_, 1, &si, fence_);
  const VkResult waited = submitted == VK_SUCCESS ? vkWaitForFences(device_, 1, &fence_, VK_TRUE, UINT64_MAX) : submitted;
  vkResetFences(device_, 1, &fence_);
  vkFreeCommandBuffers(device_, pool_, 1, &cb);
  vkFreeDescriptorSets(device_, descriptors_, 1, &set);
  check(submitted, "submitting work");
  check(waited, "waiting for the device");
}

}  // namespace zinc::backend::vk
