// The KFD session and compute queue without an AMD GPU: every request a recording Sys receives,
// checked against the kernel UAPI's structures and the driver's rules for a queue's buffers (queue.h);
// the packets, the write pointer and the doorbell as submit() leaves them in memory; the ring's
// wrap and its one spare dword; the order things are undone in, whole or after a failed step.
#include <fcntl.h>
#include <linux/kfd_ioctl.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "backend/zinc_rt/kfd.h"
#include "backend/zinc_rt/queue.h"
#include "core/error.h"

namespace zinc::backend::zinc_rt {
namespace {

// Records each call with a copy of its request's structure as sent; answers as a driver would
// (handles, mmap offsets, a queue id and doorbell offset); maps real anonymous memory where asked so
// what the CPU writes can be read back.
class RecordingSys final : public Sys {
 public:
  struct Call {
    std::string what;  // "open PATH", "close", "ioctl", "mmap", "munmap"
    int fd = -1;
    unsigned long request = 0;
    std::vector<uint8_t> arg;
    void* at = nullptr;
    size_t bytes = 0;
    int prot = 0, flags = 0;
    uint64_t offset = 0;
    template <class T>
    T as() const {
      T t{};
      std::memcpy(&t, arg.data(), std::min(arg.size(), sizeof t));
      return t;
    }
  };
  std::vector<Call> calls;
  std::map<unsigned long, int> fails;  // request -> -errno
  std::map<int, std::string> fds;      // open descriptors
  // The process's apertures, one entry a GPU (another GPU's first).
  std::vector<kfd_process_device_apertures> apertures = {
      {.lds_base = 0x1000000000000, .lds_limit = 0x10000FFFFFFFF, .scratch_base = 0x2000000000000, .scratch_limit = 0x20000FFFFFFFF,
       .gpuvm_base = 0x200000, .gpuvm_limit = 0x7FFFFFFFFFFF, .gpu_id = 0x1234, .pad = 0},
      {.lds_base = 0x1000100000000, .lds_limit = 0x10001FFFFFFFF, .scratch_base = 0x2000100000000, .scratch_limit = 0x20001FFFFFFFF,
       .gpuvm_base = 0x200000, .gpuvm_limit = 0x7FFFFFFFFFFF, .gpu_id = 0xBEEF, .pad = 0}};
  uint64_t next_handle = 1;
  static constexpr uint64_t kDoorbellOffset = (uint64_t{3} << 56) | 0x808;
  void* doorbell_page = nullptr;

  ~RecordingSys() override {
    for (auto& [at, bytes] : live_) ::munmap(at, bytes);
  }
  int open(const std::string& path) override {
    calls.push_back({"open " + path});
    if (path.find("absent") != std::string::npos) return -ENOENT;
    const int fd = next_fd_++;
    fds[fd] = path;
    return fd;
  }
  void close(int fd) override {
    calls.push_back({"close", fd});
    fds.erase(fd);
  }
  int ioctl(int fd, unsigned long request, void* arg) override {
    Call c{"ioctl", fd, request};
    c.arg.assign(static_cast<uint8_t*>(arg), static_cast<uint8_t*>(arg) + _IOC_SIZE(request));
    calls.push_back(c);
    if (const auto f = fails.find(request); f != fails.end()) return f->second;
    switch (request) {
      case AMDKFD_IOC_GET_VERSION: {
        auto* v = static_cast<kfd_ioctl_get_version_args*>(arg);
        v->major_version = 1, v->minor_version = 17;
        break;
      }
      case AMDKFD_IOC_GET_PROCESS_APERTURES_NEW: {  // (as the driver: the count where none is asked, else up to that many)
        auto* a = static_cast<kfd_ioctl_get_process_apertures_new_args*>(arg);
        if (a->num_of_nodes == 0) {
          a->num_of_nodes = static_cast<uint32_t>(apertures.size());
        } else {
          a->num_of_nodes = std::min(a->num_of_nodes, static_cast<uint32_t>(apertures.size()));
          std::memcpy(reinterpret_cast<void*>(a->kfd_process_device_apertures_ptr), apertures.data(), a->num_of_nodes * sizeof apertures[0]);
        }
        break;
      }
      case AMDKFD_IOC_ALLOC_MEMORY_OF_GPU: {
        auto* a = static_cast<kfd_ioctl_alloc_memory_of_gpu_args*>(arg);
        a->handle = next_handle++;
        a->mmap_offset = a->handle << 32;
        break;
      }
      case AMDKFD_IOC_MAP_MEMORY_TO_GPU: {
        auto* m = static_cast<kfd_ioctl_map_memory_to_gpu_args*>(arg);
        m->n_success = m->n_devices;
        break;
      }
      case AMDKFD_IOC_CREATE_QUEUE: {
        auto* q = static_cast<kfd_ioctl_create_queue_args*>(arg);
        q->queue_id = 5;
        q->doorbell_offset = kDoorbellOffset;
        break;
      }
      default:
        break;
    }
    return 0;
  }
  void* mmap(void* at, size_t bytes, int prot, int flags, int fd, uint64_t offset) override {
    calls.push_back({"mmap", fd, 0, {}, at, bytes, prot, flags, offset});
    void* p = nullptr;
    if (fd < 0) {
      p = ::mmap(at, bytes, prot, flags, -1, 0);
    } else if (flags & MAP_FIXED) {  // (a buffer over its reservation: plain memory here)
      p = ::mmap(at, bytes, PROT_READ | PROT_WRITE, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    } else {  // the doorbell slice
      p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      doorbell_page = p;
    }
    if (p == MAP_FAILED) return nullptr;
    if (!(flags & MAP_FIXED)) live_[p] = bytes;
    return p;
  }
  void munmap(void* at, size_t bytes) override {
    calls.push_back({"munmap", -1, 0, {}, at, bytes});
    EXPECT_EQ(live_.count(at), 1u) << "an unmapping of what was not mapped";
    EXPECT_EQ(live_[at], bytes) << "an unmapping of another size than the mapping's";
    live_.erase(at);
    ::munmap(at, bytes);
  }
  size_t live() const { return live_.size(); }
  std::vector<Call> ioctls(unsigned long request) const {
    std::vector<Call> out;
    for (const Call& c : calls)
      if (c.what == "ioctl" && c.request == request) out.push_back(c);
    return out;
  }
  long index(unsigned long request, size_t nth = 0) const {
    for (size_t i = 0; i < calls.size(); ++i)
      if (calls[i].what == "ioctl" && calls[i].request == request && nth-- == 0) return static_cast<long>(i);
    return -1;
  }

 private:
  int next_fd_ = 10;
  std::map<void*, size_t> live_;
};

// A gfx1100 node as a Radeon RX 7900 XTX's topology lists it (96 CUs of two SIMDs).
KfdGpu gfx1100() {
  return {.node = 1, .gfx_target_version = 110000, .simd_count = 192, .drm_render_minor = 128, .gpu_id = 0xBEEF, .simd_per_cu = 2, .num_xcc = 1};
}

TEST(KfdQueue, ContextSaveAreaSizes) {
  // The driver's formula by hand: 96 CUs, 3072 waves; control stack 40 + 3072 * 12 + 8 = 36912 bytes,
  // a page aligned 40960; per CU 0x60000 + 0x4000 + 0x10000 + 0x1000 = 479232 bytes, 46006272 for 96;
  // the debugger's 3072 * 32 = 98304.
  const QueueSizes s = queue_sizes(gfx1100());
  EXPECT_EQ(s.ctl_stack, 40960u);
  EXPECT_EQ(s.cwsr, 40960u + 46006272u);
  EXPECT_EQ(s.debug, 98304u);
  EXPECT_EQ(s.save_area, 40960u + 46006272u + 98304u);
  EXPECT_EQ(s.save_area % 4096, 0u);
  // Two XCCs share the SIMDs; the area holds one save area each.
  KfdGpu two = gfx1100();
  two.num_xcc = 2;
  const QueueSizes t = queue_sizes(two);
  EXPECT_EQ(t.ctl_stack, 20480u);  // 48 CUs: 40 + 1536 * 12 + 8 = 18480, aligned
  EXPECT_EQ(t.save_area, 2 * (uint64_t{20480} + 48 * 479232 + 49152));
  // Where the node lists its sizes, those.
  KfdGpu listed = gfx1100();
  listed.cwsr_size = 50000000;
  listed.ctl_stack_size = 45056;
  const QueueSizes u = queue_sizes(listed);
  EXPECT_EQ(u.cwsr, 50000000u);
  EXPECT_EQ(u.ctl_stack, 45056u);
  EXPECT_EQ(u.save_area, (uint64_t{50000000} + 98304 + 4095) / 4096 * 4096);
  KfdGpu unknown = gfx1100();
  unknown.simd_per_cu = 0;
  EXPECT_THROW((void)queue_sizes(unknown), Error);
  KfdGpu other = gfx1100();
  other.gfx_target_version = 90010;
  EXPECT_THROW((void)queue_sizes(other), Error);
}

TEST(KfdQueue, SessionAcquiresTheVmAndQueueTakesBuffersAsTheDriverChecksThem) {
  RecordingSys sys;
  const KfdGpu g = gfx1100();
  {
    KfdSession session(sys, g, "/fake/kfd", "/fake/dri");
    ASSERT_GE(sys.calls.size(), 5u);
    EXPECT_EQ(sys.calls[0].what, "open /fake/kfd");
    EXPECT_EQ(sys.calls[1].request, AMDKFD_IOC_GET_VERSION);
    EXPECT_EQ(sys.calls[2].what, "open /fake/dri/renderD128");
    ASSERT_EQ(sys.calls[3].request, AMDKFD_IOC_ACQUIRE_VM);
    const auto vm = sys.calls[3].as<kfd_ioctl_acquire_vm_args>();
    EXPECT_EQ(vm.gpu_id, 0xBEEFu);
    EXPECT_EQ(sys.fds.at(static_cast<int>(vm.drm_fd)), "/fake/dri/renderD128");
    EXPECT_EQ(sys.calls[3].fd, session.kfd_fd());
    ASSERT_EQ(sys.calls[4].request, AMDKFD_IOC_SET_MEMORY_POLICY);
    EXPECT_EQ(sys.calls[4].as<kfd_ioctl_set_memory_policy_args>().gpu_id, 0xBEEFu);
    // The apertures: the count asked for, then that many entries into memory of the session's own;
    // this GPU's entry kept (not the first one listed).
    ASSERT_EQ(sys.calls.size(), 7u);
    ASSERT_EQ(sys.calls[5].request, AMDKFD_IOC_GET_PROCESS_APERTURES_NEW);
    ASSERT_EQ(sys.calls[6].request, AMDKFD_IOC_GET_PROCESS_APERTURES_NEW);
    EXPECT_EQ(sys.calls[5].as<kfd_ioctl_get_process_apertures_new_args>().num_of_nodes, 0u);
    EXPECT_EQ(sys.calls[6].as<kfd_ioctl_get_process_apertures_new_args>().num_of_nodes, 2u);
    EXPECT_NE(sys.calls[6].as<kfd_ioctl_get_process_apertures_new_args>().kfd_process_device_apertures_ptr, 0u);
    EXPECT_EQ(session.apertures().gpuvm_base, 0x200000u);
    EXPECT_EQ(session.apertures().gpuvm_limit, 0x7FFFFFFFFFFFu);
    EXPECT_EQ(session.apertures().lds_base, 0x1000100000000u);
    EXPECT_EQ(session.apertures().scratch_limit, 0x20001FFFFFFFFu);

    const size_t before = sys.calls.size();
    {
      ComputeQueue q(session, 64 << 10);
      const QueueSizes sizes = queue_sizes(g);
      // Four allocations, each at its reservation's aligned address, mapped for this GPU.
      const auto allocs = sys.ioctls(AMDKFD_IOC_ALLOC_MEMORY_OF_GPU);
      ASSERT_EQ(allocs.size(), 4u);
      std::map<uint64_t, kfd_ioctl_alloc_memory_of_gpu_args> by_va;
      std::map<uint64_t, uint64_t> handle_of;  // (the recording driver's handles count from 1)
      for (const auto& c : allocs) {
        const auto a = c.as<kfd_ioctl_alloc_memory_of_gpu_args>();
        const uint64_t handle = handle_of.size() + 1;
        handle_of[a.va_addr] = handle;
        EXPECT_EQ(a.gpu_id, 0xBEEFu);
        EXPECT_NE(a.flags & KFD_IOC_ALLOC_MEM_FLAGS_NO_SUBSTITUTE, 0u);
        EXPECT_EQ(a.va_addr % 4096, 0u);
        by_va[a.va_addr] = a;
      }
      const auto maps = sys.ioctls(AMDKFD_IOC_MAP_MEMORY_TO_GPU);
      ASSERT_EQ(maps.size(), 4u);
      for (const auto& c : maps) {
        const auto m = c.as<kfd_ioctl_map_memory_to_gpu_args>();
        EXPECT_EQ(m.n_devices, 1u);
        EXPECT_EQ(m.n_success, 0u);
      }
      const auto creates = sys.ioctls(AMDKFD_IOC_CREATE_QUEUE);
      ASSERT_EQ(creates.size(), 1u);
      const auto cq = creates[0].as<kfd_ioctl_create_queue_args>();
      EXPECT_EQ(cq.queue_type, static_cast<uint32_t>(KFD_IOC_QUEUE_TYPE_COMPUTE));
      EXPECT_EQ(cq.queue_percentage, 100u);
      EXPECT_LE(cq.queue_priority, static_cast<uint32_t>(KFD_MAX_QUEUE_PRIORITY));
      EXPECT_EQ(cq.gpu_id, 0xBEEFu);
      // The ring: an allocation of exactly its power-of-two size, in GTT the CPU writes uncached.
      EXPECT_EQ(cq.ring_size, 64u << 10);
      ASSERT_EQ(by_va.count(cq.ring_base_address), 1u);
      const auto ring = by_va[cq.ring_base_address];
      EXPECT_EQ(ring.size, 64u << 10);
      EXPECT_EQ(cq.ring_base_address % (64 << 10), 0u);
      EXPECT_EQ(ring.flags & (KFD_IOC_ALLOC_MEM_FLAGS_GTT | KFD_IOC_ALLOC_MEM_FLAGS_UNCACHED | KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE),
                KFD_IOC_ALLOC_MEM_FLAGS_GTT | KFD_IOC_ALLOC_MEM_FLAGS_UNCACHED | KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE);
      // The read and write pointers: 8-byte aligned, in one GTT allocation of exactly a page (not a
      // user pointer: the scheduler firmware pins it).
      const uint64_t page = cq.write_pointer_address & ~uint64_t{4095};
      EXPECT_EQ(cq.read_pointer_address & ~uint64_t{4095}, page);
      EXPECT_EQ(cq.write_pointer_address % 8, 0u);
      EXPECT_EQ(cq.read_pointer_address % 8, 0u);
      EXPECT_NE(cq.write_pointer_address, cq.read_pointer_address);
      ASSERT_EQ(by_va.count(page), 1u);
      EXPECT_EQ(by_va[page].size, 4096u);
      EXPECT_NE(by_va[page].flags & KFD_IOC_ALLOC_MEM_FLAGS_GTT, 0u);
      EXPECT_EQ(by_va[page].flags & KFD_IOC_ALLOC_MEM_FLAGS_USERPTR, 0u);
      // The end-of-pipe buffer: 4096 bytes, an allocation of exactly that.
      EXPECT_EQ(cq.eop_buffer_size, 4096u);
      ASSERT_EQ(by_va.count(cq.eop_buffer_address), 1u);
      EXPECT_EQ(by_va[cq.eop_buffer_address].size, 4096u);
      // The context save area: the node's sizes, an allocation of the whole area for every XCC.
      EXPECT_EQ(cq.ctx_save_restore_size, sizes.cwsr);
      EXPECT_EQ(cq.ctl_stack_size, sizes.ctl_stack);
      ASSERT_EQ(by_va.count(cq.ctx_save_restore_address), 1u);
      EXPECT_EQ(by_va[cq.ctx_save_restore_address].size, sizes.save_area);
      // The CPU's mappings: the ring and the pointers' page, at their own addresses, through the render
      // node at each allocation's mmap offset.
      std::vector<RecordingSys::Call> cpu_maps;
      for (size_t i = before; i < sys.calls.size(); ++i)
        if (sys.calls[i].what == "mmap" && (sys.calls[i].flags & MAP_FIXED)) cpu_maps.push_back(sys.calls[i]);
      ASSERT_EQ(cpu_maps.size(), 2u);
      for (const auto& m : cpu_maps) {
        const uint64_t va = reinterpret_cast<uint64_t>(m.at);
        ASSERT_EQ(by_va.count(va), 1u);
        EXPECT_EQ(sys.fds.at(m.fd), "/fake/dri/renderD128");
        EXPECT_EQ(m.offset, handle_of[va] << 32);  // (the mmap offset the allocation answered)
        EXPECT_EQ(m.flags & MAP_SHARED, MAP_SHARED);
        EXPECT_EQ(m.bytes, by_va[va].size);
      }
      // The doorbell: the 8 KiB slice holding the queue's offset, from the KFD.
      const auto& last = sys.calls.back();
      EXPECT_EQ(last.what, "mmap");
      EXPECT_EQ(last.fd, session.kfd_fd());
      EXPECT_EQ(last.bytes, 8192u);
      EXPECT_EQ(last.offset, RecordingSys::kDoorbellOffset & ~uint64_t{0x1FFF});
      EXPECT_EQ(q.id(), 5u);
      // Every CREATE_QUEUE buffer allocated and mapped before it.
      const long create_at = sys.index(AMDKFD_IOC_CREATE_QUEUE);
      for (size_t k = 0; k < 4; ++k) EXPECT_LT(sys.index(AMDKFD_IOC_MAP_MEMORY_TO_GPU, k), create_at);
    }
    // Undone: the queue first, then each buffer unmapped before it is freed, the doorbell's mapping.
    const long destroy_at = sys.index(AMDKFD_IOC_DESTROY_QUEUE);
    ASSERT_GT(destroy_at, 0);
    EXPECT_EQ(sys.calls[static_cast<size_t>(destroy_at)].as<kfd_ioctl_destroy_queue_args>().queue_id, 5u);
    ASSERT_EQ(sys.ioctls(AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU).size(), 4u);
    ASSERT_EQ(sys.ioctls(AMDKFD_IOC_FREE_MEMORY_OF_GPU).size(), 4u);
    for (size_t k = 0; k < 4; ++k) {
      const long unmap = sys.index(AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU, k), free = sys.index(AMDKFD_IOC_FREE_MEMORY_OF_GPU, k);
      EXPECT_LT(destroy_at, unmap);
      EXPECT_LT(unmap, free);
      EXPECT_EQ(sys.calls[static_cast<size_t>(unmap)].as<kfd_ioctl_unmap_memory_from_gpu_args>().handle,
                sys.calls[static_cast<size_t>(free)].as<kfd_ioctl_free_memory_of_gpu_args>().handle);
    }
    EXPECT_EQ(sys.live(), 0u) << "a mapping left";
  }
  EXPECT_TRUE(sys.fds.empty()) << "a descriptor left open";
}

TEST(KfdQueue, SubmitWritesThePacketsThenTheWritePointerThenTheDoorbell) {
  RecordingSys sys;
  KfdSession session(sys, gfx1100(), "/fake/kfd", "/fake/dri");
  ComputeQueue q(session, 4096);  // 1024 dwords
  const auto* ring = q.ring_buffer().cpu<const uint32_t>();
  const auto wptr = [&] { return *q.pointers().cpu<const uint64_t>(ComputeQueue::kWptrAt); };
  const auto doorbell = [&] { return *reinterpret_cast<const uint64_t*>(static_cast<uint8_t*>(sys.doorbell_page) + 0x808); };
  auto* rptr = q.pointers().cpu<uint32_t>(ComputeQueue::kRptrAt);
  for (size_t i = 0; i < 1024; ++i) ASSERT_EQ(ring[i], pm4::kNop1) << "the new ring's dword " << i;
  pm4::Stream s;
  s.nop(4);
  s.release_mem_fence(0x1000, 1, true, false);
  ASSERT_EQ(q.submit(s), static_cast<int64_t>(s.size()));
  for (size_t i = 0; i < s.size(); ++i) EXPECT_EQ(ring[i], s.dwords()[i]) << "dword " << i;
  EXPECT_EQ(wptr(), s.size());
  EXPECT_EQ(doorbell(), s.size());
  // Nothing read: packets go in until one more would leave no dword free (packets of 16 dwords
  // after the first: 63 more fit, the 64th would fill the ring).
  pm4::Stream sixteen;
  sixteen.nop(16);
  ASSERT_EQ(sixteen.size(), 16u);
  const int64_t first = q.submit(sixteen) - 16;
  ASSERT_EQ(first, static_cast<int64_t>(s.size()));
  pm4::Stream pad;
  pad.nop(16 - s.size() % 16);  // (from here the positions are multiples of 16)
  ASSERT_GT(q.submit(pad), 0);
  int64_t last = 0;
  int n = 0;
  for (; n < 1000; ++n) {
    const int64_t w = q.submit(sixteen);
    if (w < 0) break;
    last = w;
  }
  EXPECT_LT(n, 1000);
  EXPECT_EQ(last, 1024 - 16);  // (a full ring would read as empty)
  EXPECT_EQ(wptr(), static_cast<uint64_t>(last));
  EXPECT_EQ(doorbell(), static_cast<uint64_t>(last));
  EXPECT_EQ(q.read_pos(), 0u);
  // The queue reads it all (its pointer wraps at the ring): packets go on past the end, NOPs padding
  // the ring's end where a packet would cross it, positions still growing.
  *rptr = static_cast<uint32_t>(last % 1024);
  EXPECT_EQ(q.read_pos(), static_cast<uint64_t>(last));
  pm4::Stream big;
  big.nop(200);
  int64_t w = 0;
  for (int k = 0; k < 8; ++k) {
    *rptr = static_cast<uint32_t>(q.write_pos() % 1024);  // (read as it goes)
    w = q.submit(big);
    ASSERT_GT(w, 0) << "submission " << k;
  }
  EXPECT_GT(w, 1024);
  EXPECT_EQ(doorbell(), static_cast<uint64_t>(w));
  EXPECT_EQ(ring[(w - 200) % 1024], big.dwords()[0]);
}

TEST(KfdQueue, FailuresSayWhichStepAndUndoWhatWasMade) {
  {
    RecordingSys sys;
    sys.fails[AMDKFD_IOC_CREATE_QUEUE] = -EINVAL;
    KfdSession session(sys, gfx1100(), "/fake/kfd", "/fake/dri");
    try {
      ComputeQueue q(session);
      FAIL() << "a refused queue was made";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("creating a compute queue"), std::string::npos) << m;
      EXPECT_NE(m.find(std::strerror(EINVAL)), std::string::npos) << m;
    }
    EXPECT_EQ(sys.ioctls(AMDKFD_IOC_DESTROY_QUEUE).size(), 0u);
    EXPECT_EQ(sys.ioctls(AMDKFD_IOC_FREE_MEMORY_OF_GPU).size(), 4u);
    EXPECT_EQ(sys.ioctls(AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU).size(), 4u);
    EXPECT_EQ(sys.live(), 0u);
  }
  {
    RecordingSys sys;
    sys.fails[AMDKFD_IOC_MAP_MEMORY_TO_GPU] = -ENOMEM;
    KfdSession session(sys, gfx1100(), "/fake/kfd", "/fake/dri");
    EXPECT_THROW(ComputeQueue q(session), Error);
    EXPECT_EQ(sys.ioctls(AMDKFD_IOC_ALLOC_MEMORY_OF_GPU).size(), 1u);  // (the first buffer's mapping failed)
    EXPECT_EQ(sys.ioctls(AMDKFD_IOC_FREE_MEMORY_OF_GPU).size(), 1u);
    EXPECT_EQ(sys.ioctls(AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU).size(), 0u);
    EXPECT_EQ(sys.live(), 0u);
  }
  // A session that cannot be made: the error says why, and nothing it opened stays open.
  const auto session_fails = [](RecordingSys& sys, const std::string& why) {
    try {
      KfdSession session(sys, gfx1100(), "/fake/kfd", "/fake/dri");
      ADD_FAILURE() << "a session was made without " << why;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
    EXPECT_TRUE(sys.fds.empty()) << why;
  };
  {
    RecordingSys sys;
    sys.fails[AMDKFD_IOC_ACQUIRE_VM] = -EBUSY;
    session_fails(sys, "acquiring GPU");
  }
  {
    RecordingSys sys;
    EXPECT_THROW(KfdSession(sys, gfx1100(), "/fake/kfd", "/absent/dri"), Error);
    EXPECT_TRUE(sys.fds.empty());
    KfdGpu nameless = gfx1100();
    nameless.gpu_id = 0;
    EXPECT_THROW(KfdSession(sys, nameless, "/fake/kfd", "/fake/dri"), Error);
  }
  {
    RecordingSys sys;
    KfdSession session(sys, gfx1100(), "/fake/kfd", "/fake/dri");
    EXPECT_THROW(ComputeQueue(session, 3000), Error);
    EXPECT_THROW((void)session.alloc(100, mem::kGtt, true), Error);
  }
  {
    // The apertures: refused, or listing only other GPUs, the session says so and closes what it opened.
    RecordingSys refused;
    refused.fails[AMDKFD_IOC_GET_PROCESS_APERTURES_NEW] = -EINVAL;
    session_fails(refused, "the apertures request failed");
    RecordingSys others;
    others.apertures.pop_back();
    session_fails(others, "no apertures for GPU 48879");
  }
  {
    // A GPUVM aperture below the addresses the process reserves: the allocation is refused before the
    // driver is asked, its reservation given back.
    RecordingSys sys;
    sys.apertures.back().gpuvm_limit = 0xFFFFFFFF;
    KfdSession session(sys, gfx1100(), "/fake/kfd", "/fake/dri");
    try {
      (void)session.alloc(4096, mem::kGtt, true);
      FAIL() << "a buffer outside the GPUVM aperture";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("outside GPU 48879's GPUVM aperture 0x200000..0xffffffff"), std::string::npos) << e.what();
    }
    EXPECT_EQ(sys.ioctls(AMDKFD_IOC_ALLOC_MEMORY_OF_GPU).size(), 0u);
    EXPECT_EQ(sys.live(), 0u);
  }
}

}  // namespace
}  // namespace zinc::backend::zinc_rt
