#include "backend/zinc_rt/queue.h"

#include <fcntl.h>
#include <linux/kfd_ioctl.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <vector>

#include "core/error.h"

namespace zinc::backend::zinc_rt {

namespace {

class OsSys final : public Sys {
 public:
  int open(const std::string& path) override {
    const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    return fd < 0 ? -errno : fd;
  }
  void close(int fd) override { ::close(fd); }
  int ioctl(int fd, unsigned long request, void* arg) override {
    for (;;) {  // (interrupted or asked to retry: again, as the driver expects)
      if (::ioctl(fd, request, arg) == 0) return 0;
      if (errno != EINTR && errno != EAGAIN) return -errno;
    }
  }
  void* mmap(void* at, size_t bytes, int prot, int flags, int fd, uint64_t offset) override {
    void* p = ::mmap(at, bytes, prot, flags, fd, static_cast<off_t>(offset));
    return p == MAP_FAILED ? nullptr : p;
  }
  void munmap(void* at, size_t bytes) override { ::munmap(at, bytes); }
};

constexpr uint64_t kPage = 4096, kDoorbellSlice = 8192;

uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

std::string errno_text(int negative) { return std::strerror(-negative); }

}  // namespace

Sys& os() {
  static OsSys s;
  return s;
}

QueueSizes queue_sizes(const KfdGpu& g) {
  if (g.simd_per_cu == 0 || g.simd_count == 0)
    throw Error(fmt::format("ZINC_RT: KFD node {} lists no SIMDs per CU: the context save area's size is unknown", g.node));
  const uint32_t xcc = std::max(1u, g.num_xcc), cu = g.simd_count / g.simd_per_cu / xcc, waves = cu * 32;
  QueueSizes s;
  if (g.cwsr_size != 0 && g.ctl_stack_size != 0) {
    s.ctl_stack = g.ctl_stack_size;
    s.cwsr = g.cwsr_size;
  } else {
    // The driver's formula (kfd_queue.c): a 40-byte header, 12 bytes a wave and 8 more, a page
    // aligned; then each CU's VGPRs (0x60000 on gfx1100, gfx1101, gfx1200, gfx1201), SGPRs (0x4000),
    // LDS (0x10000) and hardware registers (0x1000), page aligned.
    if (!g.supported()) throw Error(fmt::format("ZINC_RT: no context save area sizes for {}", g.target()));
    s.ctl_stack = static_cast<uint32_t>(align_up(40 + uint64_t{waves} * 12 + 8, kPage));
    s.cwsr = s.ctl_stack + static_cast<uint32_t>(align_up(uint64_t{cu} * (0x60000 + 0x4000 + 0x10000 + 0x1000), kPage));
  }
  s.debug = static_cast<uint32_t>(align_up(uint64_t{waves} * 32, 64));
  s.save_area = align_up((uint64_t{s.cwsr} + s.debug) * xcc, kPage);
  return s;
}

KfdSession::KfdSession(Sys& sys, const KfdGpu& gpu, const std::string& kfd, const std::string& dri) : sys_(sys), gpu_(gpu) {
  const auto fail = [&](const std::string& what) {
    close_all();
    throw Error("ZINC_RT: " + what);
  };
  if (gpu_.gpu_id == 0) fail(fmt::format("KFD node {} has no gpu_id", gpu_.node));
  kfd_ = sys_.open(kfd);
  if (kfd_ < 0) fail(fmt::format("cannot open {}: {}", kfd, errno_text(kfd_)));
  kfd_ioctl_get_version_args v{};
  if (const int r = sys_.ioctl(kfd_, AMDKFD_IOC_GET_VERSION, &v); r != 0) fail(fmt::format("{}: the version request failed: {}", kfd, errno_text(r)));
  if (v.major_version != KFD_IOCTL_MAJOR_VERSION)
    fail(fmt::format("{}: interface version {}.{}, built for {}.x", kfd, v.major_version, v.minor_version, KFD_IOCTL_MAJOR_VERSION));
  const std::string render = fmt::format("{}/renderD{}", dri, gpu_.drm_render_minor);
  drm_ = sys_.open(render);
  if (drm_ < 0) fail(fmt::format("cannot open {}: {}", render, errno_text(drm_)));
  kfd_ioctl_acquire_vm_args vm{static_cast<uint32_t>(drm_), gpu_.gpu_id};
  if (const int r = sys_.ioctl(kfd_, AMDKFD_IOC_ACQUIRE_VM, &vm); r != 0)
    fail(fmt::format("acquiring GPU {}'s VM through {}: {}", gpu_.gpu_id, render, errno_text(r)));
  // The caches' default policy (gfx11 takes the shader memory configuration from it).
  kfd_ioctl_set_memory_policy_args mp{};
  mp.gpu_id = gpu_.gpu_id;
  mp.default_policy = KFD_IOC_CACHE_POLICY_NONCOHERENT;
  mp.alternate_policy = KFD_IOC_CACHE_POLICY_COHERENT;
  if (const int r = sys_.ioctl(kfd_, AMDKFD_IOC_SET_MEMORY_POLICY, &mp); r != 0)
    fail(fmt::format("setting GPU {}'s memory policy: {}", gpu_.gpu_id, errno_text(r)));
  // The apertures: the count of the process's GPUs first, then an entry each.
  kfd_ioctl_get_process_apertures_new_args ap{};
  const auto apertures = [&] {
    if (const int r = sys_.ioctl(kfd_, AMDKFD_IOC_GET_PROCESS_APERTURES_NEW, &ap); r != 0) fail(fmt::format("{}: the apertures request failed: {}", kfd, errno_text(r)));
  };
  apertures();
  if (ap.num_of_nodes == 0 || ap.num_of_nodes > 1024) fail(fmt::format("{}: the apertures of {} GPUs", kfd, ap.num_of_nodes));
  std::vector<kfd_process_device_apertures> each(ap.num_of_nodes);
  ap.kfd_process_device_apertures_ptr = reinterpret_cast<uint64_t>(each.data());
  apertures();
  each.resize(std::min<size_t>(ap.num_of_nodes, each.size()));  // (the entries it filled)
  const auto it = std::find_if(each.begin(), each.end(), [&](const kfd_process_device_apertures& a) { return a.gpu_id == gpu_.gpu_id; });
  if (it == each.end()) fail(fmt::format("{} lists no apertures for GPU {}", kfd, gpu_.gpu_id));
  apertures_ = {it->gpuvm_base, it->gpuvm_limit, it->lds_base, it->lds_limit, it->scratch_base, it->scratch_limit};
  if (apertures_.gpuvm_limit <= apertures_.gpuvm_base) fail(fmt::format("GPU {}'s GPUVM aperture {:#x}..{:#x} is empty", gpu_.gpu_id, apertures_.gpuvm_base, apertures_.gpuvm_limit));
}

KfdSession::~KfdSession() { close_all(); }

void KfdSession::close_all() {
  if (drm_ >= 0) sys_.close(drm_);
  if (kfd_ >= 0) sys_.close(kfd_);
  drm_ = kfd_ = -1;
}

GpuBuffer KfdSession::alloc(uint64_t bytes, uint32_t flags, bool cpu) {
  if (bytes == 0 || bytes % kPage != 0) throw Error(fmt::format("ZINC_RT: a buffer of {} bytes (a multiple of {})", bytes, kPage));
  GpuBuffer b;
  b.bytes = bytes;
  const auto fail = [&](const std::string& what) {
    release(b);
    throw Error(fmt::format("ZINC_RT: {} bytes of memory: {}", bytes, what));
  };
  // The address: doubling alignment while the buffer spans twice it, up to 2 MiB.
  uint64_t align = kPage;
  while (bytes >= 2 * align && align < (uint64_t{2} << 20)) align *= 2;
  b.reserved_bytes = static_cast<size_t>(bytes + align);
  b.reserved = sys_.mmap(nullptr, b.reserved_bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (!b.reserved) {
    b.reserved_bytes = 0;
    fail(fmt::format("reserving address space: {}", std::strerror(errno)));
  }
  b.va = align_up(reinterpret_cast<uint64_t>(b.reserved), align);
  if (b.va < apertures_.gpuvm_base || b.va + bytes - 1 > apertures_.gpuvm_limit)
    fail(fmt::format("address {:#x}..{:#x} outside GPU {}'s GPUVM aperture {:#x}..{:#x}", b.va, b.va + bytes - 1, gpu_.gpu_id, apertures_.gpuvm_base,
                     apertures_.gpuvm_limit));
  kfd_ioctl_alloc_memory_of_gpu_args a{};
  a.va_addr = b.va;
  a.size = bytes;
  a.gpu_id = gpu_.gpu_id;
  a.flags = flags | mem::kNoSubstitute;
  if (const int r = sys_.ioctl(kfd_, AMDKFD_IOC_ALLOC_MEMORY_OF_GPU, &a); r != 0) fail(fmt::format("allocation (flags {:#x}): {}", a.flags, errno_text(r)));
  b.handle = a.handle;
  b.allocated = true;
  uint32_t id = gpu_.gpu_id;
  kfd_ioctl_map_memory_to_gpu_args m{b.handle, reinterpret_cast<uint64_t>(&id), 1, 0};
  if (const int r = sys_.ioctl(kfd_, AMDKFD_IOC_MAP_MEMORY_TO_GPU, &m); r != 0 || m.n_success != 1)
    fail(fmt::format("mapping for GPU {}: {}", gpu_.gpu_id, r != 0 ? errno_text(r) : "not mapped"));
  b.gpu_mapped = true;
  if (cpu) {
    void* at = sys_.mmap(reinterpret_cast<void*>(b.va), static_cast<size_t>(bytes), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, drm_, a.mmap_offset);
    if (at != reinterpret_cast<void*>(b.va)) fail(fmt::format("mapping for the CPU: {}", at ? "moved" : std::strerror(errno)));
    b.cpu_mapped = true;
  }
  return b;
}

void KfdSession::release(GpuBuffer& b) {
  uint32_t id = gpu_.gpu_id;
  if (b.gpu_mapped) {
    kfd_ioctl_unmap_memory_from_gpu_args u{b.handle, reinterpret_cast<uint64_t>(&id), 1, 0};
    (void)sys_.ioctl(kfd_, AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU, &u);
  }
  if (b.allocated) {
    kfd_ioctl_free_memory_of_gpu_args f{b.handle};
    (void)sys_.ioctl(kfd_, AMDKFD_IOC_FREE_MEMORY_OF_GPU, &f);
  }
  if (b.reserved) sys_.munmap(b.reserved, b.reserved_bytes);  // (the CPU's mapping inside it too)
  b = GpuBuffer{};
}

ComputeQueue::ComputeQueue(KfdSession& s, size_t ring_bytes) : s_(s), ring_(ring_bytes / 4) {
  if (ring_bytes < kPage || (ring_bytes & (ring_bytes - 1)) != 0)
    throw Error(fmt::format("ZINC_RT: a queue ring of {} bytes (a power of two, {} or more)", ring_bytes, kPage));
  try {
    const QueueSizes sizes = queue_sizes(s_.gpu());
    const uint32_t host = mem::kGtt | mem::kCoherent | mem::kUncached | mem::kWritable | mem::kExecutable;
    ring_buf_ = s_.alloc(ring_bytes, host, true);
    std::memcpy(ring_buf_.cpu<void>(), ring_.data(), ring_bytes);  // (NOPs)
    pointers_ = s_.alloc(kPage, host, true);
    std::memset(pointers_.cpu<void>(), 0, kPage);
    eop_ = s_.alloc(QueueSizes::kEop, mem::kVram | mem::kWritable | mem::kExecutable, false);
    save_ = s_.alloc(sizes.save_area, mem::kGtt | mem::kWritable | mem::kExecutable, false);
    kfd_ioctl_create_queue_args q{};
    q.ring_base_address = ring_buf_.va;
    q.write_pointer_address = pointers_.va + kWptrAt;
    q.read_pointer_address = pointers_.va + kRptrAt;
    q.ring_size = static_cast<uint32_t>(ring_bytes);
    q.gpu_id = s_.gpu().gpu_id;
    q.queue_type = KFD_IOC_QUEUE_TYPE_COMPUTE;
    q.queue_percentage = 100;
    q.queue_priority = 7;  // (normal, of 0 .. KFD_MAX_QUEUE_PRIORITY)
    q.eop_buffer_address = eop_.va;
    q.eop_buffer_size = QueueSizes::kEop;
    q.ctx_save_restore_address = save_.va;
    q.ctx_save_restore_size = sizes.cwsr;
    q.ctl_stack_size = sizes.ctl_stack;
    if (const int r = s_.sys().ioctl(s_.kfd_fd(), AMDKFD_IOC_CREATE_QUEUE, &q); r != 0)
      throw Error(fmt::format("ZINC_RT: creating a compute queue on GPU {}: {}", q.gpu_id, errno_text(r)));
    id_ = q.queue_id;
    created_ = true;
    doorbell_offset_ = q.doorbell_offset;
    doorbell_map_ = s_.sys().mmap(nullptr, kDoorbellSlice, PROT_READ | PROT_WRITE, MAP_SHARED, s_.kfd_fd(), doorbell_offset_ & ~(kDoorbellSlice - 1));
    if (!doorbell_map_) throw Error(fmt::format("ZINC_RT: mapping queue {}'s doorbell: {}", id_, std::strerror(errno)));
    doorbell_ = reinterpret_cast<volatile uint64_t*>(static_cast<uint8_t*>(doorbell_map_) + (doorbell_offset_ & (kDoorbellSlice - 1)));
  } catch (...) {
    destroy();
    throw;
  }
}

ComputeQueue::~ComputeQueue() { destroy(); }

void ComputeQueue::destroy() {
  if (created_) {
    kfd_ioctl_destroy_queue_args d{id_, 0};
    (void)s_.sys().ioctl(s_.kfd_fd(), AMDKFD_IOC_DESTROY_QUEUE, &d);
    created_ = false;
  }
  s_.release(save_);
  s_.release(eop_);
  s_.release(pointers_);
  s_.release(ring_buf_);
  if (doorbell_map_) s_.sys().munmap(doorbell_map_, kDoorbellSlice);
  doorbell_map_ = nullptr;
  doorbell_ = nullptr;
}

uint64_t ComputeQueue::read_pos() const {
  const uint32_t rptr = *pointers_.cpu<volatile uint32_t>(kRptrAt);
  const uint64_t w = ring_.write_pos(), n = ring_.size();
  return w - ((w - rptr) & (n - 1));
}

int64_t ComputeQueue::submit(const pm4::Stream& packets) {
  const uint64_t read = read_pos();
  if (ring_.needed(packets) >= ring_.space(read)) return -1;
  const uint64_t from = ring_.write_pos();
  if (ring_.write(packets, read) < 0) return -1;
  const uint64_t to = ring_.write_pos(), mask = ring_.size() - 1;
  auto* dst = ring_buf_.cpu<volatile uint32_t>();
  for (uint64_t p = from; p < to; ++p) dst[p & mask] = ring_.data()[p & mask];
  std::atomic_thread_fence(std::memory_order_seq_cst);
  *pointers_.cpu<volatile uint64_t>(kWptrAt) = to;
  std::atomic_thread_fence(std::memory_order_seq_cst);
  *doorbell_ = to;
  return static_cast<int64_t>(to);
}

}  // namespace zinc::backend::zinc_rt
