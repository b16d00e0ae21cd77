#include "amdgpu_host_run.h"

#include <sys/mman.h>

#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ZRT_HOST_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(ZRT_HOST_ASAN)
#define ZRT_HOST_ASAN 1
#endif
#if defined(ZRT_HOST_ASAN)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#if defined(__x86_64__)
// Saves the callee-saved registers and the floating-point control words on the current stack, stores
// its pointer at *save, and resumes the stack at `load` (one saved this way, or made by Context::make):
// no system call, unlike swapcontext (which sets the signal mask each time and took 90% of a run).
extern "C" void zrt_host_fiber_switch(void** save, void* load);
asm(R"(
  .text
  .p2align 4
  .type zrt_host_fiber_switch, @function
zrt_host_fiber_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size zrt_host_fiber_switch, .-zrt_host_fiber_switch
)");
#else
#include <ucontext.h>
#endif

namespace {

// Where a fiber stopped, and how to start one on a stack of its own.
#if defined(__x86_64__)
struct Context {
  void* sp = nullptr;
  // The stack as zrt_host_fiber_switch leaves it, so that switching to it calls `entry` (which never
  // returns): the control words (their defaults) and six registers, then `entry` as the return address
  // at a 16-byte boundary, then a zero return address for entry.
  void make(void* bottom, size_t size, void (*entry)()) {
    auto* top = reinterpret_cast<uint64_t*>(static_cast<char*>(bottom) + size);
    top[-1] = 0;
    top[-2] = reinterpret_cast<uint64_t>(entry);
    for (int r = 3; r <= 8; ++r) top[-r] = 0;
    top[-9] = 0x1f80u | (uint64_t{0x037fu} << 32);  // MXCSR, then the x87 control word
    sp = top - 9;
  }
  static void swap(Context& from, const Context& to) { zrt_host_fiber_switch(&from.sp, to.sp); }
};
#else
struct Context {
  ucontext_t uc{};
  void make(void* bottom, size_t size, void (*entry)()) {
    getcontext(&uc);
    uc.uc_stack.ss_sp = bottom;
    uc.uc_stack.ss_size = size;
    uc.uc_link = nullptr;
    makecontext(&uc, entry, 0);
  }
  static void swap(Context& from, Context& to) { swapcontext(&from.uc, &to.uc); }
};
#endif

// A workgroup's work-items as fibers of one thread: each runs until it reaches a barrier or the end of
// the kernel, then the next one runs. When every item has reached the barrier, they all go on; when
// every item has ended, the next workgroup starts. Switching fibers costs far less than waking hundreds
// of threads at every barrier, and the order of the items between barriers is fixed, so a run is
// repeatable.
class Fibers {
 public:
  ~Fibers() {
    for (auto& f : fibers_) munmap(f.stack, kStack + kGuard);
  }

  void run(std::array<uint32_t, 3> groups, std::array<uint32_t, 3> block, const std::function<void()>& kernel) {
    const uint32_t n = block[0] * block[1] * block[2];
    if (n == 0) return;
    while (fibers_.size() < n) fibers_.push_back(make_stack());
    kernel_ = &kernel;
    block_ = block;
    for (uint32_t i = 0; i < n; ++i) start(fibers_[i]);
    for (uint32_t z = 0; z < groups[2]; ++z) {
      for (uint32_t y = 0; y < groups[1]; ++y) {
        for (uint32_t x = 0; x < groups[0]; ++x) {
          group_ = {x, y, z};
          for (;;) {  // rounds: every item to its next barrier or to its end
            uint32_t ended = 0;
            for (uint32_t i = 0; i < n; ++i) ended += enter(i) == Stop::kEnd ? 1 : 0;
            if (ended == n) break;
            if (ended != 0) {
              // Some items ended while others wait at a barrier: on a GPU that hangs or is undefined.
              throw std::logic_error("a workgroup's work-items did not all reach the same barriers (" + std::to_string(ended) + " of " +
                                     std::to_string(n) + " ended)");
            }
          }
        }
      }
    }
  }

  uint32_t group_id(uint32_t dim) const { return group_[dim]; }
  uint32_t item_id(uint32_t dim) const {
    const uint32_t i = current_;
    if (dim == 0) return i % block_[0];
    if (dim == 1) return i / block_[0] % block_[1];
    return i / (block_[0] * block_[1]);
  }
  // Called by the running item: back to the runner until every item of the workgroup is here.
  void barrier() { leave(Stop::kBarrier); }

 private:
  enum class Stop { kBarrier, kEnd };
  struct Fiber {
    void* stack = nullptr;  // its guard page first, then kStack bytes
    Context context;
  };
  static constexpr size_t kGuard = 4096;
  static constexpr size_t kStack = size_t{1} << 20;  // (address space: pages are touched only as used)

  static Fiber make_stack() {
    Fiber f;
    f.stack = mmap(nullptr, kStack + kGuard, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (f.stack == MAP_FAILED) throw std::runtime_error("host runner: no memory for a work-item's stack");
    mprotect(f.stack, kGuard, PROT_NONE);  // (an overflow faults instead of writing the next stack)
    return f;
  }
  void* stack_bottom(const Fiber& f) const { return static_cast<char*>(f.stack) + kGuard; }

  // A fresh context for the item: the kernel once per workgroup, forever (the last one is abandoned at
  // its end, and the next run starts its items afresh).
  void start(Fiber& f) {
#if defined(ZRT_HOST_ASAN)
    __asan_unpoison_memory_region(stack_bottom(f), kStack);  // (the last run's frames, abandoned)
#endif
    f.context.make(stack_bottom(f), kStack, &Fibers::entry);
  }
  [[noreturn]] static void entry();

  Stop enter(uint32_t i) {
    current_ = i;
    Fiber& f = fibers_[i];
#if defined(ZRT_HOST_ASAN)
    void* fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, stack_bottom(f), kStack);
#endif
    Context::swap(runner_, f.context);
#if defined(ZRT_HOST_ASAN)
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
    return stop_;
  }
  void leave(Stop why) {
    stop_ = why;
    Fiber& f = fibers_[current_];
#if defined(ZRT_HOST_ASAN)
    void* fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, runner_bottom_, runner_size_);
#endif
    Context::swap(f.context, runner_);
#if defined(ZRT_HOST_ASAN)
    __sanitizer_finish_switch_fiber(fake, &runner_bottom_, &runner_size_);
#endif
  }
  void arrived() {
#if defined(ZRT_HOST_ASAN)
    __sanitizer_finish_switch_fiber(nullptr, &runner_bottom_, &runner_size_);
#endif
  }

  std::vector<Fiber> fibers_;
  Context runner_;
  const std::function<void()>* kernel_ = nullptr;
  std::array<uint32_t, 3> block_{}, group_{};
  uint32_t current_ = 0;
  Stop stop_ = Stop::kEnd;
#if defined(ZRT_HOST_ASAN)
  const void* runner_bottom_ = nullptr;
  size_t runner_size_ = 0;
#endif
};

Fibers fibers;
std::mutex one_at_a_time;  // (one set of fibers; a kernel's __local arrays are one per kernel on the host too)

void Fibers::entry() {
  fibers.arrived();
  for (;;) {
    (*fibers.kernel_)();
    fibers.leave(Stop::kEnd);
  }
}

}  // namespace

extern "C" {
uint32_t zrt_host_group_id(uint32_t dim) { return fibers.group_id(dim); }
uint32_t zrt_host_item_id(uint32_t dim) { return fibers.item_id(dim); }
void zrt_host_barrier() { fibers.barrier(); }
}

namespace zinc::backend::zinc_rt::host {

void run(std::array<uint32_t, 3> groups, std::array<uint32_t, 3> block, const std::function<void()>& kernel) {
  std::lock_guard lock(one_at_a_time);
  fibers.run(groups, block, kernel);
}

}  // namespace zinc::backend::zinc_rt::host
