// The Vulkan compute context: instance and device through volk, one compute queue, device-local and
// host-visible buffers with staging uploads, compute kernels built from the SPIR-V embedded at build
// time (shaders/vulkan) and cached (in memory, and on disk through a pipeline cache), and the two ways
// to issue dispatches: at once (tests) or recorded into a command buffer that is replayed (the graph
// executor).
#pragma once

#include <volk.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace zinc::backend::vk {

// SPIR-V of an embedded shader by name (the .comp file's name, plus _variant), empty when there is none.
std::span<const uint8_t> spirv(std::string_view name);
std::vector<std::string_view> spirv_names();  // every embedded shader

struct Buffer {
  VkBuffer buffer = VK_NULL_HANDLE;
  VkDeviceMemory memory = VK_NULL_HANDLE;
  size_t size = 0;
  void* mapped = nullptr;  // host-visible buffers: their bytes
  size_t device_bytes = 0;  // device-local memory it holds (the allocation, rounded up by the driver)
};

class Context;

// A buffer that releases itself: what an owner (weights, a context) holds. Movable, not copyable.
class OwnedBuffer {
 public:
  OwnedBuffer() = default;
  OwnedBuffer(Context& ctx, Buffer b) : ctx_(&ctx), b_(b) {}
  OwnedBuffer(OwnedBuffer&& o) noexcept : ctx_(o.ctx_), b_(o.b_) { o.b_ = Buffer{}; }
  OwnedBuffer& operator=(OwnedBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      ctx_ = o.ctx_;
      b_ = o.b_;
      o.b_ = Buffer{};
    }
    return *this;
  }
  OwnedBuffer(const OwnedBuffer&) = delete;
  OwnedBuffer& operator=(const OwnedBuffer&) = delete;
  ~OwnedBuffer() { reset(); }
  void reset();
  const Buffer* get() const { return &b_; }
  const Buffer& operator*() const { return b_; }
  const Buffer* operator->() const { return &b_; }
  explicit operator bool() const { return b_.buffer != VK_NULL_HANDLE; }

 private:
  Context* ctx_ = nullptr;
  Buffer b_;
};

// A range of a buffer bound to one binding (bytes = 0: to the end). Offsets must be multiples of
// Features::offset_alignment.
struct View {
  const Buffer* buffer = nullptr;
  size_t offset = 0;
  size_t bytes = 0;
};
// The bytes a view covers: its own, or (bytes 0) to its buffer's end; 0 without a buffer.
inline size_t view_bytes(const View& v) { return !v.buffer ? 0 : v.bytes > 0 ? v.bytes : v.buffer->size - v.offset; }

// A whole-row RMSNorm left to the kernels that read its output (mul_mv_k.comp's MUL_MV_NORM wrote the
// residual sum h, the codes of h * (w + offset) and `blocks` partial sums of h^2, one per 256 values,
// in `partials`): they multiply their sums by 1 / sqrt(sum / width + eps). moe_router, which reads h as
// floats, also takes the weights (none: an empty view) and offset. partials.buffer == nullptr: no norm.
struct NormScale {
  View partials, weights;
  uint32_t blocks = 0;
  float eps = 0, offset = 0;
};

struct Kernel {
  VkShaderModule module = VK_NULL_HANDLE;
  VkDescriptorSetLayout set_layout = VK_NULL_HANDLE;
  VkPipelineLayout layout = VK_NULL_HANDLE;
  VkPipeline pipeline = VK_NULL_HANDLE;
  uint32_t n_bindings = 0;
  uint32_t push_bytes = 0;
  std::string name;  // the shader's, for profiles
};

// What the device offers beyond Vulkan 1.1 (each enabled when present) and the limits kernels plan by.
struct Features {
  bool fp16 = false;            // shaderFloat16 + 16-bit storage
  bool int8 = false;            // shaderInt8 + 8-bit storage
  bool int_dot = false;         // shaderIntegerDotProduct
  bool fp64 = false;            // shaderFloat64 (the CPU-exact normalisation)
  bool subgroup_control = false;  // subgroupSizeControl + computeFullSubgroups
  bool coopmat_nv = false;      // VK_NV_cooperative_matrix (fp16 x fp16 -> fp32)
  uint32_t subgroup_size = 32;
  uint32_t max_groups_x = 65535;     // maxComputeWorkGroupCount[0]
  uint32_t max_invocations = 128;   // per workgroup along x (maxComputeWorkGroupInvocations, ...Size[0])
  uint64_t max_storage_range = 1u << 27;
  uint64_t offset_alignment = 256;  // minStorageBufferOffsetAlignment, at least 16
  uint32_t shared_memory = 16384;   // maxComputeSharedMemorySize
  uint32_t max_bindings = 12;       // storage buffers a kernel may bind: maxPerStageDescriptorStorageBuffers, at most 16
  bool unified_memory = false;      // every device-local type is also host-visible (lavapipe, APUs)
  bool cpu_device = false;          // VK_PHYSICAL_DEVICE_TYPE_CPU: a software device (lavapipe)
};

inline constexpr uint32_t kMaxGroupsYZ = 65535;

// n rounded up to a multiple of a (offsets and sizes to the device's alignments).
inline size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }  // the least maxComputeWorkGroupCount[1..2] Vulkan allows


// Where dispatches go: run at once (Context::immediate) or recorded into a command buffer (Recording).
class Dispatcher {
 public:
  virtual ~Dispatcher() = default;
  // bindings in binding order; push: k.push_bytes bytes.
  virtual void dispatch(const Kernel& k, std::span<const View> bindings, const void* push, uint32_t groups_x,
                        uint32_t groups_y = 1, uint32_t groups_z = 1) = 0;
  // Makes the writes of every earlier dispatch visible to later ones.
  virtual void barrier() = 0;
};

// A command buffer recorded once and submitted any number of times (the graph executor's step). Its
// descriptor sets live as long as it does, so the buffers it binds must too.
class Recording final : public Dispatcher {
 public:
  Recording(Context& ctx, size_t max_dispatches);
  ~Recording() override;
  Recording(const Recording&) = delete;
  Recording& operator=(const Recording&) = delete;
  void dispatch(const Kernel& k, std::span<const View> bindings, const void* push, uint32_t groups_x,
                uint32_t groups_y = 1, uint32_t groups_z = 1) override;
  void barrier() override;
  // Ends recording (with a barrier that makes shader writes visible to the host and to transfers).
  void finish();
  // Submits and waits until the device has run it (a timeline semaphore value per submission).
  void submit_and_wait();
  size_t dispatches() const { return n_dispatch_; }
  // Pipeline barriers recorded between dispatches (and the one at its start).
  size_t barriers() const { return n_barrier_; }

 private:
  void collect_profile();

  Context& ctx_;
  VkQueryPool queries_ = VK_NULL_HANDLE;  // with ZINC_VULKAN_PROFILE: a timestamp before and after each dispatch
  std::vector<const Kernel*> profiled_;
  VkCommandBuffer cb_ = VK_NULL_HANDLE;
  VkDescriptorPool pool_ = VK_NULL_HANDLE;
  size_t n_dispatch_ = 0, max_dispatch_ = 0, n_barrier_ = 0;
  bool finished_ = false;
  // Measuring only (the results are then wrong): kernels left out by name prefix (ZINC_VULKAN_SKIP).
  std::vector<std::string> skip_;
  // Measuring only: kernels recorded twice, a barrier between (ZINC_VULKAN_REPEAT): what each costs
  // in a real step, its inputs then warm in the caches.
  std::vector<std::string> repeat_;
  // Debugging (ZINC_VULKAN_BARRIERS): a barrier before every dispatch, or before those of the kernels
  // named by prefix, so a hazard the recorder missed shows as a change of results.
  bool barrier_all_ = false;
  std::vector<std::string> barrier_before_;
  // Measuring only (the results are then wrong): the barrier before the dispatches of the kernels
  // named by prefix left out (ZINC_VULKAN_UNORDERED), so each runs beside the one before it: what
  // that dependency costs the step, the most a fusion that removes it could gain. A barrier is then
  // pending until the next dispatch, which records it or, named, drops it.
  std::vector<std::string> unordered_;
  bool barrier_pending_ = false;
  bool idle_ = false;  // no dispatch since the last barrier: another would order nothing
  // Debugging (ZINC_VULKAN_TRACE): the kernels in recording order, "|" where a barrier stands, printed
  // to stderr when the recording ends: which dispatches a step's chain holds, stage by stage.
  bool tracing_ = false;
  std::string trace_;
  void record_barrier();
};

class Context {
 public:
  // The device: index `device` of those the loader lists, or (device < 0) ZINC_VULKAN_DEVICE if set,
  // else the first discrete GPU, else the first device. Throws zinc::Error saying why there is none
  // (no loader, no driver, no device, index out of range).
  static std::unique_ptr<Context> create(int device = -1);
  // The context of a device shared by everything in the process, created on first use and kept until
  // exit: drivers limit how many devices one process may open over its life, so backends and tests
  // share one instead of opening their own.
  static std::shared_ptr<Context> shared(int device = -1);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  const std::string& device_name() const { return name_; }
  const Features& features() const { return features_; }

  // A host-visible, coherent buffer, mapped for its lifetime.
  Buffer host_buffer(size_t bytes);
  // A device-local buffer (filled through upload(), read back through download()).
  Buffer device_buffer(size_t bytes);
  void release(Buffer& b);
  // The same, released when the result goes.
  OwnedBuffer owned_host_buffer(size_t bytes) { return OwnedBuffer(*this, host_buffer(bytes)); }
  OwnedBuffer owned_device_buffer(size_t bytes) { return OwnedBuffer(*this, device_buffer(bytes)); }
  // Device-local memory held by the buffers of this context now (weights, caches, scratch).
  uint64_t device_bytes_in_use() const { return device_bytes_.load(); }
  // Copies through a staging buffer (or directly where the buffer is mapped), waiting until done.
  void upload(const Buffer& dst, size_t offset, const void* src, size_t bytes);
  void download(const Buffer& src, size_t offset, void* dst, size_t bytes);
  void fill_zero(const Buffer& dst, size_t offset, size_t bytes) { fill_words(dst, offset, bytes, 0); }
  // Every 32-bit word of the range (rounded up to whole words) set to `word`.
  void fill_words(const Buffer& dst, size_t offset, size_t bytes, uint32_t word);
  // Many runs of bytes between device buffers and host memory in as few submissions as the staging
  // buffer allows, waiting until done.
  struct HostRun {
    const Buffer* buffer;
    size_t offset;
    void* host;  // where the bytes go (download) or come from (upload)
    size_t bytes;
  };
  void upload(std::span<const HostRun> runs);
  void download(std::span<const HostRun> runs);
  // Copies bytes between device buffers (the ranges must not overlap), waiting until done.
  void copy(const Buffer& src, size_t src_offset, const Buffer& dst, size_t dst_offset, size_t bytes);
  // Many such copies in one submission.
  struct CopyRun {
    const Buffer* src;
    size_t src_offset;
    const Buffer* dst;
    size_t dst_offset, bytes;
  };
  void copy(std::span<const CopyRun> runs);

  // A compute pipeline from an embedded shader with n_bindings storage buffers (binding 0..n-1),
  // push_bytes of push constants and specialization constants 0..spec.size()-1. The caller owns it.
  // Throws for an unknown shader.
  Kernel kernel(std::string_view shader, uint32_t n_bindings, uint32_t push_bytes, std::span<const uint32_t> spec = {});
  void release(Kernel& k);
  // The same, built once per (shader, spec) and owned by the context.
  const Kernel& pipeline(std::string_view shader, uint32_t n_bindings, uint32_t push_bytes,
                         std::span<const uint32_t> spec = {});

  // Runs one dispatch and waits for it (bindings in binding order, whole buffers).
  void run(const Kernel& k, std::span<const Buffer* const> bindings, const void* push, uint32_t groups_x,
           uint32_t groups_y = 1, uint32_t groups_z = 1);
  // A dispatcher that runs each dispatch at once and waits (tests, one-off work).
  Dispatcher& immediate();

  VkDevice device() const { return device_; }

  // ZINC_VULKAN_PROFILE=1: recordings time every dispatch; the context prints the time per kernel when it
  // closes (to stderr), and profile() returns it as text.
  bool profiling() const { return profiling_; }
  // Pipelines made by pipeline() so far (each a driver compile, unless its cache had it).
  uint64_t pipelines_made() const { return pipelines_made_; }
  // Dispatches recorded into Recordings on this context so far (what a step's recording holds, for tests).
  uint64_t dispatches_recorded() const { return dispatches_recorded_; }
  // Pipeline barriers recorded into recordings so far (each step's chain of dependent stages).
  uint64_t barriers_recorded() const { return barriers_recorded_; }
  // A step recorded (a shape seen for the first time, or again after its recording was evicted), for
  // the profile: how many, and the host time they took.
  void note_recording(double seconds) {
    ++recordings_;
    recording_ns_ += seconds * 1e9;
  }
  std::string profile() const;

  // Device memory bandwidth in GB/s: bytes read plus bytes written per second by device-to-device
  // copies of a large buffer (the roofline decode speed is measured against). Measured once.
  double copy_bandwidth_gbs();
  VkPhysicalDevice physical_device() const { return physical_; }

 private:
  // ZINC_VULKAN_PIPELINE_STATS: the driver's statistics of a pipeline made with them, one line to stderr.
  void print_pipeline_stats(VkPipeline pipeline, std::string_view shader, std::span<const uint32_t> spec) const;
  friend class Recording;
  Context() = default;
  uint32_t memory_type(uint32_t bits, VkMemoryPropertyFlags want, VkMemoryPropertyFlags avoid = 0) const;
  bool has_memory_type(uint32_t bits, VkMemoryPropertyFlags want) const;
  Buffer make_buffer(size_t bytes, bool host);
  VkCommandBuffer begin_one_shot();
  void submit_one_shot(VkCommandBuffer cb);
  void submit(VkCommandBuffer cb);  // signals and waits for the next timeline value
  void save_pipeline_cache();

  VkInstance instance_ = VK_NULL_HANDLE;
  VkPhysicalDevice physical_ = VK_NULL_HANDLE;
  VkDevice device_ = VK_NULL_HANDLE;
  VkQueue queue_ = VK_NULL_HANDLE;
  uint32_t queue_family_ = 0;
  VkCommandPool pool_ = VK_NULL_HANDLE;
  VkSemaphore timeline_ = VK_NULL_HANDLE;
  uint64_t timeline_value_ = 0;
  bool spin_wait_ = false;  // poll for a step's end before blocking (not on a CPU device: it takes the core)
  VkPipelineCache pipeline_cache_ = VK_NULL_HANDLE;
  std::string pipeline_cache_path_;
  bool pipeline_cache_dirty_ = false;
  VkPhysicalDeviceMemoryProperties memory_{};
  Features features_;
  std::string name_;
  Buffer staging_;
  std::atomic<uint64_t> device_bytes_{0};
  std::map<std::string, Kernel, std::less<>> pipelines_;
  std::unique_ptr<Dispatcher> immediate_;
  double copy_bandwidth_ = 0;
  bool profiling_ = false;
  bool pipeline_stats_ = false;  // ZINC_VULKAN_PIPELINE_STATS, where the extension is there
  float timestamp_ns_ = 1;  // nanoseconds per timestamp tick
  struct KernelTime {
    double ns = 0;
    uint64_t count = 0;
  };
  std::map<std::string, KernelTime> kernel_times_;
  double submitted_ns_ = 0;  // wall time of the profiled submissions
  uint64_t submissions_ = 0;
  uint64_t recordings_ = 0, pipelines_made_ = 0;
  std::atomic<uint64_t> dispatches_recorded_{0};
  std::atomic<uint64_t> barriers_recorded_{0};
  std::string pipeline_log_;  // profiling: each pipeline made, when
  double recording_ns_ = 0, pipeline_ns_ = 0;
};

// Splits a 1-D grid of `groups` workgroups into x * y within the device's per-dimension limit.
void grid(const Context& ctx, uint32_t groups, uint32_t* gx, uint32_t* gy);

}  // namespace zinc::backend::vk
