// ZINC_RT's tier 1: a process's session with one GPU through the KFD (/dev/kfd and the GPU's DRM
// render node), memory the CPU and the GPU reach at the same address, and a PM4 compute queue rung
// through its doorbell. The requests and their order follow the kernel's UAPI (linux/kfd_ioctl.h)
// and the checks the amdkfd driver makes of a queue's buffers:
//   - the VM acquired with the render node (ACQUIRE_VM) before any allocation or queue, then the
//     process's apertures for the GPU read (GET_PROCESS_APERTURES_NEW: asked for the count, then the
//     entries): every buffer's addresses must lie in its GPUVM aperture;
//   - each buffer reserved in the process's address space first (an anonymous PROT_NONE mapping),
//     allocated at that address (ALLOC_MEMORY_OF_GPU), mapped for the GPU (MAP_MEMORY_TO_GPU) and,
//     where the CPU uses it, mapped over its reservation through the render node at the allocation's
//     mmap offset;
//   - a compute queue (CREATE_QUEUE, PM4) takes a ring whose size in bytes is a power of two, its read
//     and write pointers in a GTT buffer of one page (the scheduler firmware pins it), an end-of-pipe
//     buffer of 4096 bytes and a context save area of the node's sizes (queue_sizes), each an
//     allocation of exactly that size;
//   - the doorbell: the queue's doorbell offset names a place in the process's 8 KiB doorbell slice,
//     mapped from /dev/kfd; a 64-bit store of the write pointer (dwords, only growing) rings it, after
//     the packets and the write pointer's memory are written.
// Nothing here has run on an AMD GPU yet (none on the machines this was written on): the tests check
// every request against these rules through a recording Sys.
#pragma once

#include <cstdint>
#include <string>

#include "backend/zinc_rt/kfd.h"
#include "backend/zinc_rt/pm4.h"

namespace zinc::backend::zinc_rt {

// The system calls, behind an interface (os() makes them; tests record them).
class Sys {
 public:
  virtual ~Sys() = default;
  virtual int open(const std::string& path) = 0;                    // a descriptor, or -errno
  virtual void close(int fd) = 0;
  virtual int ioctl(int fd, unsigned long request, void* arg) = 0;  // 0, or -errno
  // nullptr where it fails (errno set).
  virtual void* mmap(void* at, size_t bytes, int prot, int flags, int fd, uint64_t offset) = 0;
  virtual void munmap(void* at, size_t bytes) = 0;
};
Sys& os();

// A queue's context save area on a node, as the driver checks it: the control stack's and the whole
// area's sizes (the node's own where its properties list them, else the driver's formula for gfx11 and
// gfx12), the debugger's part after it, and the allocation holding them for every XCC.
struct QueueSizes {
  uint32_t ctl_stack = 0, cwsr = 0, debug = 0;
  uint64_t save_area = 0;
  static constexpr uint32_t kEop = 4096;  // the end-of-pipe buffer (gfx8 and later)
};
QueueSizes queue_sizes(const KfdGpu& g);

// A GPU's apertures in this process (struct kfd_process_device_apertures): where the GPU's virtual
// addresses may lie, and its LDS and scratch windows.
struct Apertures {
  uint64_t gpuvm_base = 0, gpuvm_limit = 0, lds_base = 0, lds_limit = 0, scratch_base = 0, scratch_limit = 0;
};

struct GpuBuffer {
  uint64_t va = 0, bytes = 0, handle = 0;
  void* reserved = nullptr;  // the reservation holding it (va, aligned within)
  size_t reserved_bytes = 0;
  bool allocated = false, gpu_mapped = false, cpu_mapped = false;
  template <class T>
  T* cpu(uint64_t offset = 0) const { return reinterpret_cast<T*>(va + offset); }
};

// Memory types and attributes for alloc() (KFD_IOC_ALLOC_MEM_FLAGS_*; NO_SUBSTITUTE always added).
namespace mem {
inline constexpr uint32_t kVram = 1u << 0, kGtt = 1u << 1, kWritable = 1u << 31, kExecutable = 1u << 30, kNoSubstitute = 1u << 28,
                          kCoherent = 1u << 26, kUncached = 1u << 25;
}

class KfdSession {
 public:
  // Opens the KFD and the GPU's render node (dri/renderD<minor>), checks the interface version and
  // acquires the GPU's VM; throws zinc::Error naming the step that failed.
  KfdSession(Sys& sys, const KfdGpu& gpu, const std::string& kfd = "/dev/kfd", const std::string& dri = "/dev/dri");
  ~KfdSession();
  KfdSession(const KfdSession&) = delete;
  KfdSession& operator=(const KfdSession&) = delete;

  // `bytes` (a multiple of 4096) of memory at an address 4096-aligned (larger buffers: up to 2 MiB),
  // mapped for the GPU, and for the CPU at the same address where `cpu`. Throws, releasing what it
  // made, where a step fails.
  GpuBuffer alloc(uint64_t bytes, uint32_t flags, bool cpu);
  // Undoes what alloc did, in reverse (safe on a partly made or empty buffer).
  void release(GpuBuffer& b);

  Sys& sys() const { return sys_; }
  int kfd_fd() const { return kfd_; }
  const KfdGpu& gpu() const { return gpu_; }
  const Apertures& apertures() const { return apertures_; }

 private:
  void close_all();
  Sys& sys_;
  KfdGpu gpu_;
  Apertures apertures_;
  int kfd_ = -1, drm_ = -1;
};

class ComputeQueue {
 public:
  // A PM4 compute queue of `ring_bytes` (a power of two, 4096 or more) on the session's GPU, at normal
  // priority and the whole of its share of the GPU.
  explicit ComputeQueue(KfdSession& s, size_t ring_bytes = size_t{64} << 10);
  ~ComputeQueue();
  ComputeQueue(const ComputeQueue&) = delete;
  ComputeQueue& operator=(const ComputeQueue&) = delete;

  uint32_t id() const { return id_; }
  uint64_t doorbell_offset() const { return doorbell_offset_; }
  // The packets into the ring (keeping a dword free, so a full ring never reads as empty), then the
  // write pointer, then the doorbell. Returns the write position after them, or -1 (nothing written)
  // where the queue has not read far enough yet for them to fit.
  int64_t submit(const pm4::Stream& packets);
  // How far the queue has read: the CP's read pointer (dwords, wrapping at the ring) as a position.
  uint64_t read_pos() const;
  uint64_t write_pos() const { return ring_.write_pos(); }
  const GpuBuffer& ring_buffer() const { return ring_buf_; }
  const GpuBuffer& pointers() const { return pointers_; }

  static constexpr uint64_t kWptrAt = 0, kRptrAt = 64;  // in the pointers' page

 private:
  void destroy();
  KfdSession& s_;
  Ring ring_;
  GpuBuffer ring_buf_, pointers_, eop_, save_;
  uint32_t id_ = 0;
  bool created_ = false;
  uint64_t doorbell_offset_ = 0;
  void* doorbell_map_ = nullptr;
  volatile uint64_t* doorbell_ = nullptr;
};

}  // namespace zinc::backend::zinc_rt
