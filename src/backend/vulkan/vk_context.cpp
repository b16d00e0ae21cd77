#include "backend/vulkan/vk_context.h"
#include "backend/vulkan/vk_instance.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <string_view>
#include <thread>

#include "core/error.h"
#include "core/knobs.h"

namespace zinc::backend::vk {

namespace {

void check(VkResult r, const char* what) {
  if (r != VK_SUCCESS) throw Error(fmt::format("Vulkan: {} failed (VkResult {})", what, static_cast<int>(r)));
}

constexpr size_t kStagingBytes = size_t{64} << 20;

bool has_extension(VkPhysicalDevice dev, const char* name) {
  uint32_t n = 0;
  vkEnumerateDeviceExtensionProperties(dev, nullptr, &n, nullptr);
  std::vector<VkExtensionProperties> exts(n);
  vkEnumerateDeviceExtensionProperties(dev, nullptr, &n, exts.data());
  return std::any_of(exts.begin(), exts.end(), [&](const VkExtensionProperties& e) { return std::strcmp(e.extensionName, name) == 0; });
}

// The on-disk pipeline cache in zinc_home(), one file per device and driver version.
std::string pipeline_cache_file(const VkPhysicalDeviceProperties& p) {
  return (std::filesystem::path(zinc_home()) /
          fmt::format("vulkan-pipelines-{:04x}-{:04x}-{:08x}.bin", p.vendorID, p.deviceID, p.driverVersion))
      .string();
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
    if (const char* e = knob("ZINC_VULKAN_DEVICE")) device = std::atoi(e);
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
  const char* wait = knob("ZINC_VULKAN_WAIT");
  c->spin_wait_ = props.deviceType != VK_PHYSICAL_DEVICE_TYPE_CPU && !(wait && std::string_view(wait) == "block");
  if (props.apiVersion < VK_API_VERSION_1_2) {
    throw Error(fmt::format("Vulkan: {} offers Vulkan {}.{}; zinc needs 1.2 (timeline semaphores)", c->name_,
                            VK_API_VERSION_MAJOR(props.apiVersion), VK_API_VERSION_MINOR(props.apiVersion)));
  }
  vkGetPhysicalDeviceMemoryProperties(c->physical_, &c->memory_);

  // Features: query what is there, enable what is used.
  Features& f = c->features_;
  VkPhysicalDeviceVulkan11Features f11{};
  f11.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES;
  VkPhysicalDeviceVulkan12Features f12{};
  f12.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES;
  VkPhysicalDeviceVulkan13Features f13{};
  f13.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES;
  VkPhysicalDeviceCooperativeMatrixFeaturesNV fcm{};
  fcm.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV;
  VkPhysicalDeviceFeatures2 f2{};
  f2.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
  f2.pNext = &f11;
  f11.pNext = &f12;
  const bool v13 = props.apiVersion >= VK_API_VERSION_1_3;
  const bool nv_coopmat = has_extension(c->physical_, VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME);
  void** tail = &f12.pNext;
  if (v13) {
    *tail = &f13;
    tail = &f13.pNext;
  }
  if (nv_coopmat) *tail = &fcm;
  vkGetPhysicalDeviceFeatures2(c->physical_, &f2);
  f.fp16 = f12.shaderFloat16 && f11.storageBuffer16BitAccess;
  f.int8 = f12.shaderInt8 && f12.storageBuffer8BitAccess;
  f.int_dot = v13 && f13.shaderIntegerDotProduct;
  f.fp64 = f2.features.shaderFloat64;
  f.subgroup_control = v13 && f13.subgroupSizeControl && f13.computeFullSubgroups;
  f.coopmat_nv = nv_coopmat && fcm.cooperativeMatrix && f.fp16 && knob("ZINC_VULKAN_NO_COOPMAT") == nullptr;
  if (!f12.timelineSemaphore) throw Error(fmt::format("Vulkan: {} has no timeline semaphores", c->name_));
  // Enable exactly those (and nothing else the device happens to offer).
  VkPhysicalDeviceVulkan11Features e11{};
  e11.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES;
  e11.storageBuffer16BitAccess = f.fp16;
  VkPhysicalDeviceVulkan12Features e12{};
  e12.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES;
  e12.shaderFloat16 = f.fp16;
  e12.shaderInt8 = f.int8;
  e12.storageBuffer8BitAccess = f.int8;
  e12.timelineSemaphore = VK_TRUE;
  e12.vulkanMemoryModel = f12.vulkanMemoryModel;
  VkPhysicalDeviceVulkan13Features e13{};
  e13.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES;
  e13.shaderIntegerDotProduct = f.int_dot;
  e13.subgroupSizeControl = f.subgroup_control;
  e13.computeFullSubgroups = f.subgroup_control;
  VkPhysicalDeviceCooperativeMatrixFeaturesNV ecm{};
  ecm.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV;
  ecm.cooperativeMatrix = f.coopmat_nv;
  VkPhysicalDeviceFeatures2 e2{};
  e2.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
  e2.features.shaderFloat64 = f.fp64;
  e2.pNext = &e11;
  e11.pNext = &e12;
  tail = &e12.pNext;
  if (v13) {
    *tail = &e13;
    tail = &e13.pNext;
  }
  std::vector<const char*> extensions;
  if (f.coopmat_nv) {
    *tail = &ecm;
    tail = &ecm.pNext;
    extensions.push_back(VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME);
  }
  // ZINC_VULKAN_PIPELINE_STATS: the compiler's statistics of each pipeline (measuring only).
  VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR epe{};
  epe.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR;
  if (const char* e = knob("ZINC_VULKAN_PIPELINE_STATS"); e && *e != '0') {
    if (has_extension(c->physical_, VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME)) {
      epe.pipelineExecutableInfo = VK_TRUE;
      *tail = &epe;
      extensions.push_back(VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME);
      c->pipeline_stats_ = true;
    } else {
      fmt::print(stderr, "ZINC_VULKAN_PIPELINE_STATS: {} has no {}\n", c->name_, VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME);
    }
  }

  VkPhysicalDeviceSubgroupProperties sub{};
  sub.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES;
  VkPhysicalDeviceProperties2 p2{};
  p2.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2;
  p2.pNext = &sub;
  vkGetPhysicalDeviceProperties2(c->physical_, &p2);
  f.subgroup_size = sub.subgroupSize;
  f.max_groups_x = props.limits.maxComputeWorkGroupCount[0];
  f.max_invocations = std::min(props.limits.maxComputeWorkGroupInvocations, props.limits.maxComputeWorkGroupSize[0]);
  f.max_storage_range = props.limits.maxStorageBufferRange;
  f.max_bindings = std::min<uint32_t>(16, std::min(props.limits.maxPerStageDescriptorStorageBuffers,
                                                   props.limits.maxPerStageResources));
  f.offset_alignment = std::max<uint64_t>(16, props.limits.minStorageBufferOffsetAlignment);
  f.shared_memory = props.limits.maxComputeSharedMemorySize;
  f.cpu_device = props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
  c->timestamp_ns_ = props.limits.timestampPeriod;
  if (const char* e = knob("ZINC_VULKAN_PROFILE"); e && *e != '0') c->profiling_ = props.limits.timestampComputeAndGraphics;
  f.unified_memory = true;
  for (uint32_t i = 0; i < c->memory_.memoryTypeCount; ++i) {
    const auto flags = c->memory_.memoryTypes[i].propertyFlags;
    if ((flags & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT) && !(flags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT)) {
      f.unified_memory = false;
    }
  }

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
  dci.pNext = &e2;
  dci.queueCreateInfoCount = 1;
  dci.pQueueCreateInfos = &qci;
  dci.enabledExtensionCount = static_cast<uint32_t>(extensions.size());
  dci.ppEnabledExtensionNames = extensions.data();
  check(vkCreateDevice(c->physical_, &dci, nullptr, &c->device_), "creating the device");
  volkLoadDevice(c->device_);
  vkGetDeviceQueue(c->device_, c->queue_family_, 0, &c->queue_);

  VkCommandPoolCreateInfo pci{};
  pci.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO;
  pci.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  pci.queueFamilyIndex = c->queue_family_;
  check(vkCreateCommandPool(c->device_, &pci, nullptr, &c->pool_), "creating a command pool");
  VkSemaphoreTypeCreateInfo stci{};
  stci.sType = VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO;
  stci.semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE;
  VkSemaphoreCreateInfo sci{};
  sci.sType = VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO;
  sci.pNext = &stci;
  check(vkCreateSemaphore(c->device_, &sci, nullptr, &c->timeline_), "creating a timeline semaphore");

  // The pipeline cache: loaded from disk when a file for this device and driver exists (the driver
  // checks the header and ignores data it did not write).
  c->pipeline_cache_path_ = pipeline_cache_file(props);
  std::vector<char> cached;
  if (!c->pipeline_cache_path_.empty()) {
    std::ifstream in(c->pipeline_cache_path_, std::ios::binary);
    if (in) cached.assign(std::istreambuf_iterator<char>(in), {});
  }
  VkPipelineCacheCreateInfo pcci{};
  pcci.sType = VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO;
  pcci.initialDataSize = cached.size();
  pcci.pInitialData = cached.empty() ? nullptr : cached.data();
  if (vkCreatePipelineCache(c->device_, &pcci, nullptr, &c->pipeline_cache_) != VK_SUCCESS) {
    pcci.initialDataSize = 0;
    pcci.pInitialData = nullptr;
    check(vkCreatePipelineCache(c->device_, &pcci, nullptr, &c->pipeline_cache_), "creating a pipeline cache");
  }
  return c;
}

namespace {

// The process's shared contexts. Released by an exit handler registered after the first device was
// created, so they are destroyed before the driver tears itself down at exit (handlers run in the
// reverse order of registration; a static map would be destroyed after the driver's own handlers, and
// vkDestroyDevice then crashes on NVIDIA's driver). Never destroyed itself, so nothing races the handler.
struct SharedContexts {
  std::mutex mu;
  std::map<int, std::shared_ptr<Context>> contexts;
  bool release_registered = false;
};
SharedContexts& shared_contexts() {
  static auto* s = new SharedContexts;
  return *s;
}
void release_shared_contexts() {
  SharedContexts& s = shared_contexts();
  std::map<int, std::shared_ptr<Context>> doomed;
  {
    const std::lock_guard<std::mutex> lock(s.mu);
    doomed.swap(s.contexts);
  }
}

}  // namespace

std::shared_ptr<Context> Context::shared(int device) {
  SharedContexts& s = shared_contexts();
  const std::lock_guard<std::mutex> lock(s.mu);
  auto& c = s.contexts[device];
  if (!c) c = create(device);
  if (!s.release_registered) {
    std::atexit(release_shared_contexts);
    s.release_registered = true;
  }
  return c;
}

std::string Context::profile() const {
  std::vector<std::pair<std::string, KernelTime>> rows(kernel_times_.begin(), kernel_times_.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.ns > b.second.ns; });
  double total = 0;
  for (const auto& r : rows) total += r.second.ns;
  std::string out = fmt::format("Vulkan profile: {} submissions, {:.3f} ms each on the host clock, {:.3f} ms of kernels\n",
                                submissions_, submissions_ ? submitted_ns_ / submissions_ / 1e6 : 0.0,
                                submissions_ ? total / submissions_ / 1e6 : 0.0);
  if (recordings_ > 0) {
    out += fmt::format("{} step recordings (a shape of step seen anew), {:.1f} ms each on the host; {} pipelines made in "
                       "{:.1f} ms\n", recordings_, recording_ns_ / static_cast<double>(recordings_) / 1e6, pipelines_made_,
                       pipeline_ns_ / 1e6);
    out += pipeline_log_;
  }
  out += "| kernel | calls per submission | us per call | % of kernel time |\n|---|---|---|---|\n";
  for (const auto& [name, t] : rows) {
    out += fmt::format("| {} | {:.1f} | {:.2f} | {:.1f}% |\n", name, submissions_ ? static_cast<double>(t.count) / submissions_ : 0.0,
                       t.ns / static_cast<double>(std::max<uint64_t>(t.count, 1)) / 1e3, 100.0 * t.ns / std::max(total, 1.0));
  }
  return out;
}

Context::~Context() {
  if (profiling_ && submissions_ > 0) std::fputs(profile().c_str(), stderr);
  if (device_) {
    vkDeviceWaitIdle(device_);
    for (auto& [name, k] : pipelines_) release(k);
    save_pipeline_cache();
    release(staging_);
    vkDestroyPipelineCache(device_, pipeline_cache_, nullptr);
    vkDestroySemaphore(device_, timeline_, nullptr);
    vkDestroyCommandPool(device_, pool_, nullptr);
    vkDestroyDevice(device_, nullptr);
  }
  if (instance_) vkDestroyInstance(instance_, nullptr);
}

void Context::save_pipeline_cache() {
  if (!pipeline_cache_dirty_ || pipeline_cache_path_.empty()) return;
  size_t size = 0;
  if (vkGetPipelineCacheData(device_, pipeline_cache_, &size, nullptr) != VK_SUCCESS || size == 0) return;
  std::vector<char> data(size);
  if (vkGetPipelineCacheData(device_, pipeline_cache_, &size, data.data()) != VK_SUCCESS) return;
  // Written beside and renamed, so a reader never sees half a file; failures only cost a rebuild.
  std::error_code ec;
  const std::filesystem::path path(pipeline_cache_path_);
  std::filesystem::create_directories(path.parent_path(), ec);
  const auto tmp = path.string() + fmt::format(".{}.tmp", static_cast<const void*>(this));
  {
    std::ofstream out(tmp, std::ios::binary);
    if (!out) return;
    out.write(data.data(), static_cast<std::streamsize>(size));
    if (!out) return;
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) std::filesystem::remove(tmp, ec);
}

bool Context::has_memory_type(uint32_t bits, VkMemoryPropertyFlags want) const {
  for (uint32_t i = 0; i < memory_.memoryTypeCount; ++i) {
    if ((bits & (1u << i)) && (memory_.memoryTypes[i].propertyFlags & want) == want) return true;
  }
  return false;
}

uint32_t Context::memory_type(uint32_t bits, VkMemoryPropertyFlags want, VkMemoryPropertyFlags avoid) const {
  for (int pass = 0; pass < 2; ++pass) {
    for (uint32_t i = 0; i < memory_.memoryTypeCount; ++i) {
      const auto flags = memory_.memoryTypes[i].propertyFlags;
      if ((bits & (1u << i)) && (flags & want) == want && (pass == 1 || (flags & avoid) == 0)) return i;
    }
  }
  throw Error(fmt::format("Vulkan: {} has no memory type with the flags {:#x}", name_, want));
}

Buffer Context::make_buffer(size_t bytes, bool host) {
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
  // Host buffers: coherent, preferably not device-local (that is scarce BAR memory on discrete GPUs)
  // and cached, since the host reads them back (logits every step; uncached reads crawl).
  const VkMemoryPropertyFlags coherent = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  const bool cached = host && has_memory_type(req.memoryTypeBits, coherent | VK_MEMORY_PROPERTY_HOST_CACHED_BIT);
  mai.memoryTypeIndex =
      host ? memory_type(req.memoryTypeBits, cached ? coherent | VK_MEMORY_PROPERTY_HOST_CACHED_BIT : coherent,
                         VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT)
           : memory_type(req.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
  if (vkAllocateMemory(device_, &mai, nullptr, &b.memory) != VK_SUCCESS) {
    vkDestroyBuffer(device_, b.buffer, nullptr);
    throw Error(fmt::format("Vulkan: out of {} memory allocating {:.1f} MiB on {}", host ? "host-visible" : "device",
                            static_cast<double>(bytes) / (1 << 20), name_));
  }
  check(vkBindBufferMemory(device_, b.buffer, b.memory, 0), "binding buffer memory");
  if (!host) {
    b.device_bytes = req.size;
    device_bytes_ += req.size;
  }
  if (host || (memory_.memoryTypes[mai.memoryTypeIndex].propertyFlags & VK_MEMORY_PROPERTY_HOST_COHERENT_BIT)) {
    check(vkMapMemory(device_, b.memory, 0, VK_WHOLE_SIZE, 0, &b.mapped), "mapping a buffer");
  }
  return b;
}

Buffer Context::host_buffer(size_t bytes) { return make_buffer(bytes, true); }
Buffer Context::device_buffer(size_t bytes) { return make_buffer(bytes, false); }

void Context::release(Buffer& b) {
  device_bytes_ -= b.device_bytes;
  if (b.memory) {
    if (b.mapped) vkUnmapMemory(device_, b.memory);
    vkFreeMemory(device_, b.memory, nullptr);
  }
  if (b.buffer) vkDestroyBuffer(device_, b.buffer, nullptr);
  b = Buffer{};
}

void OwnedBuffer::reset() {
  if (ctx_ && b_.buffer) ctx_->release(b_);
  b_ = Buffer{};
}

VkCommandBuffer Context::begin_one_shot() {
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
  return cb;
}

void Context::submit(VkCommandBuffer cb) {
  const uint64_t value = ++timeline_value_;
  VkTimelineSemaphoreSubmitInfo tsi{};
  tsi.sType = VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO;
  tsi.signalSemaphoreValueCount = 1;
  tsi.pSignalSemaphoreValues = &value;
  VkSubmitInfo si{};
  si.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO;
  si.pNext = &tsi;
  si.commandBufferCount = 1;
  si.pCommandBuffers = &cb;
  si.signalSemaphoreCount = 1;
  si.pSignalSemaphores = &timeline_;
  check(vkQueueSubmit(queue_, 1, &si, VK_NULL_HANDLE), "submitting work");
  // Decode steps take milliseconds and the host has the next one to submit as soon as this one ends:
  // poll the semaphore (yielding the core) for up to kSpinNs before blocking, so the host does not
  // pay a sleeping thread's wake-up on every token (+2.7% tg128 on an H100). Not where the device is
  // the CPU itself, and not with ZINC_VULKAN_WAIT=block (measurements): spin_wait_.
  if (spin_wait_) {
    constexpr auto kSpinNs = std::chrono::milliseconds(20);
    const auto start = std::chrono::steady_clock::now();
    uint64_t now = 0;
    while (std::chrono::steady_clock::now() - start < kSpinNs) {
      check(vkGetSemaphoreCounterValue(device_, timeline_, &now), "reading the device's progress");
      if (now >= value) return;
      std::this_thread::yield();
    }
  }
  VkSemaphoreWaitInfo wi{};
  wi.sType = VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO;
  wi.semaphoreCount = 1;
  wi.pSemaphores = &timeline_;
  wi.pValues = &value;
  check(vkWaitSemaphores(device_, &wi, UINT64_MAX), "waiting for the device");
}

void Context::submit_one_shot(VkCommandBuffer cb) {
  vkEndCommandBuffer(cb);
  try {
    submit(cb);
  } catch (...) {
    vkFreeCommandBuffers(device_, pool_, 1, &cb);
    throw;
  }
  vkFreeCommandBuffers(device_, pool_, 1, &cb);
}

void Context::upload(const Buffer& dst, size_t offset, const void* src, size_t bytes) {
  const HostRun run{&dst, offset, const_cast<void*>(src), bytes};  // read from, not written
  upload(std::span<const HostRun>(&run, 1));
}

void Context::download(const Buffer& src, size_t offset, void* dst, size_t bytes) {
  const HostRun run{&src, offset, dst, bytes};
  download(std::span<const HostRun>(&run, 1));
}

namespace {

// The runs through the staging buffer, none longer than it (longer ones cut), after the ones in mapped
// buffers have been copied directly by `direct`.
template <class Direct>
std::vector<Context::HostRun> staged_runs(std::span<const Context::HostRun> runs, size_t limit, const Direct& direct) {
  std::vector<Context::HostRun> out;
  for (const Context::HostRun& r : runs) {
    if (r.bytes == 0) continue;
    if (r.buffer->mapped) {
      direct(r);
      continue;
    }
    for (size_t done = 0; done < r.bytes; done += limit) {
      out.push_back({r.buffer, r.offset + done, static_cast<uint8_t*>(r.host) + done, std::min(limit, r.bytes - done)});
    }
  }
  return out;
}

}  // namespace

void Context::upload(std::span<const HostRun> runs) {
  const auto staged = staged_runs(runs, kStagingBytes, [](const HostRun& r) {
    std::memcpy(static_cast<uint8_t*>(r.buffer->mapped) + r.offset, r.host, r.bytes);
  });
  // As many runs as fill the staging buffer in each submission.
  for (size_t i = 0; i < staged.size();) {
    if (!staging_.buffer) staging_ = host_buffer(kStagingBytes);
    VkCommandBuffer cb = begin_one_shot();
    for (size_t at = 0; i < staged.size() && staged[i].bytes <= kStagingBytes - at; ++i) {
      std::memcpy(static_cast<uint8_t*>(staging_.mapped) + at, staged[i].host, staged[i].bytes);
      const VkBufferCopy region{at, staged[i].offset, staged[i].bytes};
      vkCmdCopyBuffer(cb, staging_.buffer, staged[i].buffer->buffer, 1, &region);
      at += staged[i].bytes;
    }
    submit_one_shot(cb);
  }
}

void Context::download(std::span<const HostRun> runs) {
  const auto staged = staged_runs(runs, kStagingBytes, [](const HostRun& r) {
    std::memcpy(r.host, static_cast<const uint8_t*>(r.buffer->mapped) + r.offset, r.bytes);
  });
  for (size_t i = 0; i < staged.size();) {
    if (!staging_.buffer) staging_ = host_buffer(kStagingBytes);
    VkCommandBuffer cb = begin_one_shot();
    const size_t first = i;
    for (size_t at = 0; i < staged.size() && staged[i].bytes <= kStagingBytes - at; ++i) {
      const VkBufferCopy region{staged[i].offset, at, staged[i].bytes};
      vkCmdCopyBuffer(cb, staged[i].buffer->buffer, staging_.buffer, 1, &region);
      at += staged[i].bytes;
    }
    VkMemoryBarrier mb{};
    mb.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
    mb.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
    mb.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
    vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, nullptr, 0, nullptr);
    submit_one_shot(cb);
    for (size_t k = first, at = 0; k < i; ++k) {
      std::memcpy(staged[k].host, static_cast<const uint8_t*>(staging_.mapped) + at, staged[k].bytes);
      at += staged[k].bytes;
    }
  }
}

void Context::fill_words(const Buffer& dst, size_t offset, size_t bytes, uint32_t word) {
  if (bytes == 0) return;
  if (dst.mapped) {
    auto* at = static_cast<uint8_t*>(dst.mapped) + offset;
    for (size_t i = 0; i < bytes; i += 4) std::memcpy(at + i, &word, std::min<size_t>(4, bytes - i));
    return;
  }
  VkCommandBuffer cb = begin_one_shot();
  vkCmdFillBuffer(cb, dst.buffer, offset, (bytes + 3) & ~size_t{3}, word);
  submit_one_shot(cb);
}

void Context::copy(const Buffer& src, size_t src_offset, const Buffer& dst, size_t dst_offset, size_t bytes) {
  const CopyRun run{&src, src_offset, &dst, dst_offset, bytes};
  copy(std::span<const CopyRun>(&run, 1));
}

void Context::copy(std::span<const CopyRun> runs) {
  VkCommandBuffer cb = VK_NULL_HANDLE;
  for (const CopyRun& r : runs) {
    if (r.bytes == 0) continue;
    if (cb == VK_NULL_HANDLE) cb = begin_one_shot();
    const VkBufferCopy region{r.src_offset, r.dst_offset, r.bytes};
    vkCmdCopyBuffer(cb, r.src->buffer, r.dst->buffer, 1, &region);
  }
  if (cb != VK_NULL_HANDLE) submit_one_shot(cb);
}

double Context::copy_bandwidth_gbs() {
  if (copy_bandwidth_ > 0) return copy_bandwidth_;
  // 256 MiB each way (far beyond any cache), copied back and forth by a compute kernel (the copy
  // engines of some GPUs move less than the shader cores can); the best round of at least three and of
  // at least 0.25 s of copying, since a GPU that idled may run its first milliseconds at low clocks.
  // (zinc bench measures it before loading the weights: after 17-20 GB of them an H200 read about
  // 1,600 GB/s in one process of two, however long the copying.)
  const size_t bytes = features_.unified_memory ? size_t{64} << 20 : size_t{256} << 20;
  Buffer a = device_buffer(bytes), b = device_buffer(bytes);
  double best = 0;
  try {
    const Kernel& k = pipeline("copy_bandwidth", 2, 4);
    const auto words = static_cast<uint32_t>(bytes / 16);
    constexpr int kCopies = 8;
    const auto start = std::chrono::steady_clock::now();
    for (int round = 0; round < 3 || (round < 400 && std::chrono::steady_clock::now() - start < std::chrono::milliseconds(250));
         ++round) {
      Recording r(*this, kCopies);
      for (int i = 0; i < kCopies; ++i) {
        const View views[] = {View{i % 2 ? &b : &a, 0, 0}, View{i % 2 ? &a : &b, 0, 0}};
        r.dispatch(k, views, &words, 4096);
        r.barrier();
      }
      r.finish();
      const auto t0 = std::chrono::steady_clock::now();
      r.submit_and_wait();
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      best = std::max(best, 2.0 * static_cast<double>(bytes) * kCopies / s / 1e9);
    }
  } catch (...) {
    release(a);
    release(b);
    throw;
  }
  release(a);
  release(b);
  return copy_bandwidth_ = best;
}

// A pipeline's name with its specialization: the key of Context::pipeline's cache, and how the
// profile and the statistics name it.
namespace {
std::string pipeline_key(std::string_view shader, std::span<const uint32_t> spec) {
  std::string key(shader);
  for (uint32_t s : spec) key += fmt::format(":{}", s);
  return key;
}
}  // namespace

Kernel Context::kernel(std::string_view shader, uint32_t n_bindings, uint32_t push_bytes, std::span<const uint32_t> spec) {
  const auto code = spirv(shader);
  if (code.empty()) throw Error(fmt::format("Vulkan: no shader named '{}' is built in", shader));
  if (n_bindings > features_.max_bindings) {
    throw Error(fmt::format("Vulkan: '{}' binds {} buffers, this device at most {}", shader, n_bindings, features_.max_bindings));
  }
  std::vector<uint32_t> words(code.size() / 4);
  std::memcpy(words.data(), code.data(), words.size() * 4);
  Kernel k;
  k.n_bindings = n_bindings;
  k.push_bytes = push_bytes;
  k.name = std::string(shader);
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
  std::vector<VkSpecializationMapEntry> entries(spec.size());
  for (uint32_t i = 0; i < spec.size(); ++i) entries[i] = {i, i * 4, 4};
  VkSpecializationInfo si{};
  si.mapEntryCount = static_cast<uint32_t>(entries.size());
  si.pMapEntries = entries.data();
  si.dataSize = spec.size() * 4;
  si.pData = spec.data();
  VkComputePipelineCreateInfo cpci{};
  cpci.sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO;
  cpci.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
  cpci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  cpci.stage.module = k.module;
  cpci.stage.pName = "main";
  cpci.stage.pSpecializationInfo = spec.empty() ? nullptr : &si;
  cpci.layout = k.layout;
  if (pipeline_stats_) cpci.flags |= VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR;
  check(vkCreateComputePipelines(device_, pipeline_cache_, 1, &cpci, nullptr, &k.pipeline), "creating a compute pipeline");
  pipeline_cache_dirty_ = true;
  if (pipeline_stats_) print_pipeline_stats(k.pipeline, shader, spec);
  return k;
}

void Context::print_pipeline_stats(VkPipeline pipeline, std::string_view shader, std::span<const uint32_t> spec) const {
  std::string line = "pipeline " + pipeline_key(shader, spec);
  VkPipelineInfoKHR pi{};
  pi.sType = VK_STRUCTURE_TYPE_PIPELINE_INFO_KHR;
  pi.pipeline = pipeline;
  uint32_t n_exec = 0;
  vkGetPipelineExecutablePropertiesKHR(device_, &pi, &n_exec, nullptr);
  for (uint32_t i = 0; i < n_exec; ++i) {
    VkPipelineExecutableInfoKHR ei{};
    ei.sType = VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR;
    ei.pipeline = pipeline;
    ei.executableIndex = i;
    uint32_t n = 0;
    vkGetPipelineExecutableStatisticsKHR(device_, &ei, &n, nullptr);
    std::vector<VkPipelineExecutableStatisticKHR> stats(n);
    for (auto& st : stats) st.sType = VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR;
    vkGetPipelineExecutableStatisticsKHR(device_, &ei, &n, stats.data());
    for (uint32_t j = 0; j < n; ++j) {
      const VkPipelineExecutableStatisticKHR& st = stats[j];
      switch (st.format) {
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR: line += fmt::format(" | {}: {}", st.name, st.value.b32 ? 1 : 0); break;
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR: line += fmt::format(" | {}: {}", st.name, st.value.i64); break;
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR: line += fmt::format(" | {}: {}", st.name, st.value.u64); break;
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_FLOAT64_KHR: line += fmt::format(" | {}: {}", st.name, st.value.f64); break;
        default: break;
      }
    }
  }
  fmt::print(stderr, "{}\n", line);
}

void Context::release(Kernel& k) {
  if (k.pipeline) vkDestroyPipeline(device_, k.pipeline, nullptr);
  if (k.layout) vkDestroyPipelineLayout(device_, k.layout, nullptr);
  if (k.set_layout) vkDestroyDescriptorSetLayout(device_, k.set_layout, nullptr);
  if (k.module) vkDestroyShaderModule(device_, k.module, nullptr);
  k = Kernel{};
}

const Kernel& Context::pipeline(std::string_view shader, uint32_t n_bindings, uint32_t push_bytes,
                                std::span<const uint32_t> spec) {
  const std::string key = pipeline_key(shader, spec);
  if (auto it = pipelines_.find(key); it != pipelines_.end()) return it->second;
  const auto t0 = std::chrono::steady_clock::now();
  const Kernel& k = pipelines_.emplace(key, kernel(shader, n_bindings, push_bytes, spec)).first->second;
  ++pipelines_made_;
  const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
  pipeline_ns_ += ns;
  if (profiling_) pipeline_log_ += fmt::format("  {} ({:.1f} ms, after {} recordings)\n", key, ns / 1e6, recordings_);
  return k;
}

namespace {

// Descriptor writes for a dispatch's bindings.
void write_set(VkDevice device, VkDescriptorSet set, std::span<const View> bindings) {
  std::vector<VkDescriptorBufferInfo> infos(bindings.size());
  std::vector<VkWriteDescriptorSet> writes(bindings.size());
  for (size_t i = 0; i < bindings.size(); ++i) {
    const View& v = bindings[i];
    infos[i] = {v.buffer->buffer, v.offset, v.bytes > 0 ? v.bytes : VK_WHOLE_SIZE};
    writes[i].sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET;
    writes[i].dstSet = set;
    writes[i].dstBinding = static_cast<uint32_t>(i);
    writes[i].descriptorCount = 1;
    writes[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    writes[i].pBufferInfo = &infos[i];
  }
  vkUpdateDescriptorSets(device, static_cast<uint32_t>(writes.size()), writes.data(), 0, nullptr);
}

VkDescriptorPool make_pool(VkDevice device, size_t sets, size_t buffers) {
  const VkDescriptorPoolSize sizes{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, static_cast<uint32_t>(std::max<size_t>(buffers, 1))};
  VkDescriptorPoolCreateInfo dpci{};
  dpci.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO;
  dpci.maxSets = static_cast<uint32_t>(std::max<size_t>(sets, 1));
  dpci.poolSizeCount = 1;
  dpci.pPoolSizes = &sizes;
  VkDescriptorPool pool = VK_NULL_HANDLE;
  check(vkCreateDescriptorPool(device, &dpci, nullptr, &pool), "creating a descriptor pool");
  return pool;
}

VkDescriptorSet allocate_set(VkDevice device, VkDescriptorPool pool, const Kernel& k) {
  VkDescriptorSetAllocateInfo dsai{};
  dsai.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO;
  dsai.descriptorPool = pool;
  dsai.descriptorSetCount = 1;
  dsai.pSetLayouts = &k.set_layout;
  VkDescriptorSet set = VK_NULL_HANDLE;
  check(vkAllocateDescriptorSets(device, &dsai, &set), "allocating a descriptor set");
  return set;
}

void record_dispatch(VkCommandBuffer cb, const Kernel& k, VkDescriptorSet set, const void* push, uint32_t gx, uint32_t gy,
                     uint32_t gz) {
  vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, k.pipeline);
  vkCmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, k.layout, 0, 1, &set, 0, nullptr);
  if (k.push_bytes > 0) vkCmdPushConstants(cb, k.layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, k.push_bytes, push);
  vkCmdDispatch(cb, gx, gy, gz);
}

void host_barrier(VkCommandBuffer cb) {
  VkMemoryBarrier mb{};
  mb.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
  mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
  mb.dstAccessMask = VK_ACCESS_HOST_READ_BIT | VK_ACCESS_TRANSFER_READ_BIT;
  vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_HOST_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                       0, 1, &mb, 0, nullptr, 0, nullptr);
}

void check_bindings(const Kernel& k, size_t n) {
  if (n != k.n_bindings) throw Error(fmt::format("Vulkan: a kernel with {} bindings was given {} buffers", k.n_bindings, n));
}

// Runs every dispatch at once and waits for it.
class Immediate final : public Dispatcher {
 public:
  explicit Immediate(Context& ctx) : ctx_(ctx) {}
  void dispatch(const Kernel& k, std::span<const View> bindings, const void* push, uint32_t gx, uint32_t gy,
                uint32_t gz) override {
    Recording r(ctx_, 1);
    r.dispatch(k, bindings, push, gx, gy, gz);
    r.finish();
    r.submit_and_wait();
  }
  void barrier() override {}

 private:
  Context& ctx_;
};

}  // namespace

void Context::run(const Kernel& k, std::span<const Buffer* const> bindings, const void* push, uint32_t gx, uint32_t gy,
                  uint32_t gz) {
  std::vector<View> views;
  for (const Buffer* b : bindings) views.push_back(View{b, 0, 0});
  immediate().dispatch(k, views, push, gx, gy, gz);
}

Dispatcher& Context::immediate() {
  if (!immediate_) immediate_ = std::make_unique<Immediate>(*this);
  return *immediate_;
}

Recording::Recording(Context& ctx, size_t max_dispatches) : ctx_(ctx), max_dispatch_(max_dispatches) {
  pool_ = make_pool(ctx_.device_, max_dispatches, max_dispatches * 16);
  if (ctx_.profiling_) {
    VkQueryPoolCreateInfo qci{};
    qci.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO;
    qci.queryType = VK_QUERY_TYPE_TIMESTAMP;
    qci.queryCount = static_cast<uint32_t>(2 * max_dispatches);
    check(vkCreateQueryPool(ctx_.device_, &qci, nullptr, &queries_), "creating a timestamp query pool");
  }
  VkCommandBufferAllocateInfo cbai{};
  cbai.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO;
  cbai.commandPool = ctx_.pool_;
  cbai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  cbai.commandBufferCount = 1;
  check(vkAllocateCommandBuffers(ctx_.device_, &cbai, &cb_), "allocating a command buffer");
  VkCommandBufferBeginInfo bi{};
  bi.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
  vkBeginCommandBuffer(cb_, &bi);
  if (queries_) vkCmdResetQueryPool(cb_, queries_, 0, static_cast<uint32_t>(2 * max_dispatch_));
  record_barrier();  // the previous submission's writes, visible to this one's reads
  const auto names = [](const char* e, std::vector<std::string>& out) {
    if (!e) return;
    const std::string list = e;
    for (size_t at = 0; at <= list.size();) {
      const size_t end = std::min(list.find(',', at), list.size());
      if (end > at) out.push_back(list.substr(at, end - at));
      at = end + 1;
    }
  };
  names(knob("ZINC_VULKAN_SKIP"), skip_);
  names(knob("ZINC_VULKAN_REPEAT"), repeat_);
  names(knob("ZINC_VULKAN_BARRIERS"), barrier_before_);
  names(knob("ZINC_VULKAN_UNORDERED"), unordered_);
  barrier_all_ = std::find(barrier_before_.begin(), barrier_before_.end(), "all") != barrier_before_.end();
  tracing_ = knob("ZINC_VULKAN_TRACE") != nullptr;
}

Recording::~Recording() {
  if (queries_) vkDestroyQueryPool(ctx_.device_, queries_, nullptr);
  vkFreeCommandBuffers(ctx_.device_, ctx_.pool_, 1, &cb_);
  vkDestroyDescriptorPool(ctx_.device_, pool_, nullptr);
}

void Recording::dispatch(const Kernel& k, std::span<const View> bindings, const void* push, uint32_t gx, uint32_t gy,
                         uint32_t gz) {
  check_bindings(k, bindings.size());
  if (n_dispatch_ >= max_dispatch_ || finished_) throw Error("Vulkan: a recording was given more dispatches than planned");
  if (bindings.size() > 16) throw Error("Vulkan: a kernel binds at most 16 buffers");
  if (gx == 0 || gy == 0 || gz == 0) return;
  const auto named = [&](const std::vector<std::string>& prefixes) {
    return std::any_of(prefixes.begin(), prefixes.end(), [&](const std::string& n) { return std::string_view(k.name).starts_with(n); });
  };
  if (named(skip_)) return;
  if (barrier_all_ || named(barrier_before_)) barrier();
  if (barrier_pending_) {
    if (named(unordered_)) {
      barrier_pending_ = false;  // measuring: this dispatch runs beside the one before
    } else {
      record_barrier();
    }
  }
  const VkDescriptorSet set = allocate_set(ctx_.device_, pool_, k);
  write_set(ctx_.device_, set, bindings);
  const auto q = static_cast<uint32_t>(2 * n_dispatch_);
  if (queries_) vkCmdWriteTimestamp(cb_, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, queries_, q);
  record_dispatch(cb_, k, set, push, gx, gy, gz);
  idle_ = false;
  if (tracing_) trace_ += fmt::format("{} ", k.name);
  if (queries_) {
    vkCmdWriteTimestamp(cb_, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, queries_, q + 1);
    profiled_.push_back(&k);
  }
  ++n_dispatch_;
  ++ctx_.dispatches_recorded_;
  if (named(repeat_)) {  // measuring: the same dispatch again, behind a barrier
    record_barrier();
    record_dispatch(cb_, k, set, push, gx, gy, gz);
    idle_ = false;
  }
}

void Recording::barrier() {
  if (!unordered_.empty()) {
    barrier_pending_ = true;
    return;
  }
  record_barrier();
}

void Recording::record_barrier() {
  barrier_pending_ = false;
  if (idle_) return;  // (a barrier right after another, as around a dispatch of no workgroups)
  idle_ = true;
  ++n_barrier_;
  ++ctx_.barriers_recorded_;
  if (tracing_) trace_ += "| ";
  VkMemoryBarrier mb{};
  mb.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
  mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
  mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;
  vkCmdPipelineBarrier(cb_, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &mb, 0,
                       nullptr, 0, nullptr);
}

void Recording::finish() {
  if (finished_) return;
  if (barrier_pending_) record_barrier();
  if (tracing_) std::fprintf(stderr, "vulkan recording: %zu dispatches, %zu barriers: %s\n", n_dispatch_, n_barrier_, trace_.c_str());
  host_barrier(cb_);
  check(vkEndCommandBuffer(cb_), "ending a command buffer");
  finished_ = true;
}

void Recording::submit_and_wait() {
  finish();
  const auto t0 = std::chrono::steady_clock::now();
  ctx_.submit(cb_);
  if (queries_) {
    ctx_.submitted_ns_ += std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
    collect_profile();
  }
}

void Recording::collect_profile() {
  std::vector<uint64_t> ticks(2 * profiled_.size());
  if (ticks.empty()) return;
  if (vkGetQueryPoolResults(ctx_.device_, queries_, 0, static_cast<uint32_t>(ticks.size()), ticks.size() * 8, ticks.data(), 8,
                            VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT) != VK_SUCCESS) {
    return;
  }
  for (size_t i = 0; i < profiled_.size(); ++i) {
    auto& t = ctx_.kernel_times_[profiled_[i]->name];
    t.ns += static_cast<double>(ticks[2 * i + 1] - ticks[2 * i]) * ctx_.timestamp_ns_;
    ++t.count;
  }
  ++ctx_.submissions_;
}


void grid(const Context& ctx, uint32_t groups, uint32_t* gx, uint32_t* gy) {
  const uint32_t max_x = ctx.features().max_groups_x;
  *gy = (groups + max_x - 1) / max_x;
  *gx = (groups + *gy - 1) / *gy;
}

}  // namespace zinc::backend::vk
