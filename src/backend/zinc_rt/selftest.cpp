#include "backend/zinc_rt/selftest.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <deque>
#include <thread>
#include <vector>

#include "backend/zinc_rt/code_object.h"
#include "backend/zinc_rt/device.h"
#include "backend/zinc_rt/dispatch.h"
#include "backend/zinc_rt/kfd.h"
#include "backend/zinc_rt/queue.h"
#include "core/error.h"

namespace zinc::backend::zinc_rt {

std::vector<Rung> run_selftest(const SelftestOptions& o) {
  std::vector<Rung> rungs = {
      {fmt::format("the kernels are built for {} and their code objects read", kSupportedTargets), Rung::State::NotRun, ""},
      {"the KFD device opens and reports interface version 1.x", Rung::State::NotRun, ""},
      {fmt::format("the KFD topology lists a supported GPU ({})", kSupportedTargets), Rung::State::NotRun, ""},
      {"a compute queue exists (ring, doorbell, end-of-pipe buffer)", Rung::State::NotRun, ""},
      {"a no-op retires a fence", Rung::State::NotRun, ""},
      {"a copy matches the CPU's", Rung::State::NotRun, ""},
      {"a trivial dispatch writes what the CPU expects", Rung::State::NotRun, ""},
      {"one ZINC kernel matches the CPU backend", Rung::State::NotRun, ""},
      {"one token matches the CPU backend", Rung::State::NotRun, ""},
      {"the decode graph matches the CPU backend", Rung::State::NotRun, ""},
  };
  const auto fail = [&](size_t i, std::string why) {
    rungs[i].state = Rung::State::Failed;
    rungs[i].detail = std::move(why);
    return rungs;
  };
  // The kernels: every embedded code object parses, for its target, with its kernel.
  const auto names = code_object_bytes_names();
  if (names.empty()) return fail(0, "this zinc was built without an AMDGPU compiler (install clang-19 and lld-19, then rebuild)");
  size_t kernels = 0;
  for (const std::string_view n : names) {
    try {
      const CodeObject co = parse_code_object(code_object_bytes(n));
      if (co.target != n.substr(n.find('-') + 1)) return fail(0, fmt::format("{}: built for {}", n, co.target));
      kernels += co.kernels.size();
    } catch (const Error& e) {
      return fail(0, fmt::format("{}: {}", n, e.what()));
    }
  }
  rungs[0].state = Rung::State::Passed;
  rungs[0].detail = fmt::format("{} code objects, {} kernels", names.size(), kernels);
  KfdProbe p;
  try {
    p = probe_kfd(o.device, o.topology);
  } catch (const Error& e) {
    return fail(p.opened ? 2 : 1, e.what());
  }
  if (!p.opened || p.major == 0) return fail(1, p.why);
  rungs[1].state = Rung::State::Passed;
  rungs[1].detail = fmt::format("{}: interface {}.{}", o.device, p.major, p.minor);
  if (!p.ready()) return fail(2, p.why);
  const KfdGpu* gpu = nullptr;
  for (const KfdGpu& g : p.gpus) {
    if (!g.supported()) continue;
    gpu = &g;
    rungs[2].state = Rung::State::Passed;
    rungs[2].detail = fmt::format("node {}: {} ({} SIMDs, render node {})", g.node, g.target(), g.simd_count, g.drm_render_minor);
    break;
  }
  // A compute queue, then a no-op and a fence the CPU polls for.
  size_t at = 3;
  try {
    KfdSession session(os(), *gpu, o.device, o.dri);
    ComputeQueue q(session);
    rungs[3].state = Rung::State::Passed;
    rungs[3].detail = fmt::format("queue {} on GPU {}: a ring of {} KiB, doorbell offset {:#x}, GPUVM aperture {:#x}..{:#x}", q.id(), gpu->gpu_id,
                                  q.ring_buffer().bytes / 1024, q.doorbell_offset(), session.apertures().gpuvm_base, session.apertures().gpuvm_limit);
    at = 4;
    struct Release {
      KfdSession& s;
      GpuBuffer& b;
      ~Release() { s.release(b); }
    };
    GpuBuffer fence = session.alloc(4096, mem::kGtt | mem::kCoherent | mem::kUncached | mem::kWritable, true);
    Release release{session, fence};
    *fence.cpu<volatile uint64_t>() = 0;
    // Submits `st` (ending in the fence's write of `value`) and waits up to 2 s for it: the
    // microseconds from the doorbell, or -1 with why not.
    std::string why;
    const auto run_to_fence = [&](const pm4::Stream& st, uint64_t value) -> int64_t {
      if (q.submit(st) < 0) {
        why = "the ring had no room for the packets";
        return -1;
      }
      const auto t0 = std::chrono::steady_clock::now();
      while (*fence.cpu<volatile uint64_t>() != value) {
        if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(2)) {
          why = fmt::format("the fence ({}) was not written within 2 s (read position {} of {})", value, q.read_pos(), q.write_pos());
          return -1;
        }
        std::this_thread::yield();
      }
      return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count();
    };
    pm4::Stream st;
    st.nop(8);
    st.release_mem_fence(fence.va, 1, true, false);
    const int64_t us = run_to_fence(st, 1);
    if (us < 0) return fail(4, why);
    rungs[4].state = Rung::State::Passed;
    rungs[4].detail = fmt::format("the fence came {} us after the doorbell (read position {})", us, q.read_pos());
    // A copy by the command processor's DMA between two buffers both sides reach, then the fence: the
    // destination must hold the source's bytes, and nothing past them.
    at = 5;
    // (Buffers are whole pages; the copy is not, and the destination's bytes past it are the guard.)
    constexpr uint64_t kCopy = 3 * 65536 + 4, kBuffer = 4 * 65536;
    GpuBuffer src = session.alloc(kBuffer, mem::kGtt | mem::kCoherent | mem::kUncached | mem::kWritable, true);
    Release release_src{session, src};
    GpuBuffer dst = session.alloc(kBuffer, mem::kGtt | mem::kCoherent | mem::kUncached | mem::kWritable, true);
    Release release_dst{session, dst};
    auto* from = src.cpu<uint32_t>();
    auto* to = dst.cpu<volatile uint32_t>();
    for (uint64_t i = 0; i < kBuffer / 4; ++i) from[i] = static_cast<uint32_t>(i * 2654435761u + 12345u);
    for (uint64_t i = 0; i < kBuffer / 4; ++i) to[i] = 0xDEADBEEFu;
    st.clear();
    st.dma_copy(dst.va, src.va, kCopy);
    st.release_mem_fence(fence.va, 2, true, false);
    const int64_t copy_us = run_to_fence(st, 2);
    if (copy_us < 0) return fail(5, why);
    for (uint64_t i = 0; i < kBuffer / 4; ++i) {
      const uint32_t want = i < kCopy / 4 ? from[i] : 0xDEADBEEFu;
      if (to[i] != want)
        return fail(5, fmt::format("byte {} of the {}-byte copy holds {:#010x} where {:#010x} was expected", 4 * i, kCopy, static_cast<uint32_t>(to[i]), want));
    }
    rungs[5].state = Rung::State::Passed;
    rungs[5].detail = fmt::format("{} bytes in {} us", kCopy, copy_us);
    // A trivial dispatch: fill_ids for this GPU's target, its code object's image in memory the GPU
    // may execute, its arguments (the destination's address, n) in a page of their own, then the
    // fence: the destination must hold 3 i + 1 for i < n (n not a whole number of workgroups, so the
    // last one's lanes past n are masked) and its guard after them.
    at = 6;
    // A rung's kernel for this GPU's target, its code object's image copied into `code` (memory the GPU
    // may execute): its descriptor, or null with why not. (The descriptors point into `objects`.)
    std::deque<CodeObject> objects;
    const auto load_kernel = [&](const std::string& kernel, size_t arg_bytes, GpuBuffer& code) -> const KernelInfo* {
      const std::string object = kernel + "-" + gpu->target();
      const std::span<const uint8_t> elf = code_object_bytes(object);
      if (elf.empty()) {
        why = fmt::format("no {} code object in this zinc", object);
        return nullptr;
      }
      const KernelInfo* k = objects.emplace_back(parse_code_object(elf)).kernel(kernel);
      if (!k || k->kernarg_bytes < arg_bytes || k->kernarg_bytes > 4096) {
        why = k ? fmt::format("{} takes {} bytes of arguments ({} expected)", kernel, k->kernarg_bytes, arg_bytes)
                : fmt::format("{} holds no {} kernel", object, kernel);
        return nullptr;
      }
      const std::vector<uint8_t> image = load_image(elf);
      code = session.alloc(image.size(), mem::kGtt | mem::kCoherent | mem::kUncached | mem::kWritable | mem::kExecutable, true);
      std::memcpy(code.cpu<uint8_t>(), image.data(), image.size());
      return k;
    };
    GpuBuffer code;
    Release release_code{session, code};
    const KernelInfo* fill = load_kernel("fill_ids", offsetof(FillIdsArgs, n) + sizeof(uint32_t), code);
    if (!fill) return fail(6, why);
    GpuBuffer args = session.alloc(4096, mem::kGtt | mem::kCoherent | mem::kUncached | mem::kWritable, true);
    Release release_args{session, args};
    constexpr uint32_t kIds = 1000;
    const FillIdsArgs fa{dst.va, kIds};
    std::memcpy(args.cpu<uint8_t>(), &fa, sizeof fa);
    for (uint64_t i = 0; i < kBuffer / 4; ++i) to[i] = 0xDEADBEEFu;
    DispatchArgs da;
    da.code_base = code.va;
    da.kernarg = args.va;
    da.groups = {(kIds + kFillIdsGroup - 1) / kFillIdsGroup, 1, 1};
    da.block = {kFillIdsGroup, 1, 1};
    const int64_t fill_us = run_to_fence(dispatch_to_fence(*fill, da, fence.va, 3), 3);
    if (fill_us < 0) return fail(6, why);
    for (uint64_t i = 0; i < kBuffer / 4; ++i) {
      const uint32_t want = i < kIds ? static_cast<uint32_t>(3 * i + 1) : 0xDEADBEEFu;
      if (to[i] != want)
        return fail(6, fmt::format("word {} holds {:#010x} where {:#010x} was expected (fill_ids of {} words)", i, static_cast<uint32_t>(to[i]), want, kIds));
    }
    rungs[6].state = Rung::State::Passed;
    rungs[6].detail = fmt::format("{} words from {} workgroups of {} in {} us", kIds, da.groups[0], kFillIdsGroup, fill_us);
    // One ZINC kernel: rms_norm over rows of a width that is no multiple of the workgroup, against the
    // CPU backend's (which sums in double: within float rounding), the output's guard untouched.
    at = 7;
    if (!o.rms_norm) return fail(7, "no CPU oracle was given to compare with");
    GpuBuffer norm_code;
    Release release_norm_code{session, norm_code};
    const KernelInfo* norm = load_kernel("rms_norm", sizeof(RmsNormArgs), norm_code);
    if (!norm) return fail(7, why);
    constexpr uint32_t kWidth = 4096 + 100, kRows = 3;
    constexpr float kEps = 1e-6f;
    constexpr uint64_t kRowsBytes = (uint64_t{kRows} * kWidth * 4 + 4095) / 4096 * 4096 + 4096;  // (a page of guard)
    GpuBuffer nx = session.alloc(kRowsBytes, mem::kGtt | mem::kCoherent | mem::kUncached | mem::kWritable, true);
    Release release_nx{session, nx};
    GpuBuffer nw = session.alloc((kWidth * 4 + 4095) / 4096 * 4096, mem::kGtt | mem::kCoherent | mem::kUncached | mem::kWritable, true);
    Release release_nw{session, nw};
    GpuBuffer nout = session.alloc(kRowsBytes, mem::kGtt | mem::kCoherent | mem::kUncached | mem::kWritable, true);
    Release release_nout{session, nout};
    // Rows of values in [-2, 2) (each row its own scale), weights in [0.5, 1.5).
    uint32_t seed = 12345;
    const auto next = [&] {
      seed = seed * 1664525u + 1013904223u;
      return static_cast<float>(seed >> 8) / 16777216.0f;
    };
    float* x = nx.cpu<float>();
    float* w = nw.cpu<float>();
    for (uint32_t r = 0; r < kRows; ++r)
      for (uint32_t i = 0; i < kWidth; ++i) x[r * kWidth + i] = (4.0f * next() - 2.0f) * static_cast<float>(r + 1);
    for (uint32_t i = 0; i < kWidth; ++i) w[i] = 0.5f + next();
    auto* out = nout.cpu<volatile uint32_t>();
    for (uint64_t i = 0; i < kRowsBytes / 4; ++i) out[i] = 0xDEADBEEFu;
    GpuBuffer nargs = session.alloc(4096, mem::kGtt | mem::kCoherent | mem::kUncached | mem::kWritable, true);
    Release release_nargs{session, nargs};
    const RmsNormArgs ra{nx.va, nw.va, nout.va, kWidth, kEps};
    std::memcpy(nargs.cpu<uint8_t>(), &ra, sizeof ra);
    DispatchArgs na;
    na.code_base = norm_code.va;
    na.kernarg = nargs.va;
    na.groups = {kRows, 1, 1};
    na.block = {kRmsNormGroup, 1, 1};
    const int64_t norm_us = run_to_fence(dispatch_to_fence(*norm, na, fence.va, 4), 4);
    if (norm_us < 0) return fail(7, why);
    std::vector<float> want(static_cast<size_t>(kRows) * kWidth);
    o.rms_norm(x, w, want.data(), kWidth, kRows, kEps);
    float worst = 0.0f;
    for (uint64_t i = 0; i < kRowsBytes / 4; ++i) {
      const uint32_t bits = out[i];
      if (i >= want.size()) {
        if (bits != 0xDEADBEEFu) return fail(7, fmt::format("word {} past the output holds {:#010x} (its guard was overwritten)", i, bits));
        continue;
      }
      float got;
      std::memcpy(&got, &bits, 4);
      const float err = std::fabs(got - want[i]), bound = 1e-5f * std::fabs(want[i]) + 1e-6f;
      if (!(err <= bound))
        return fail(7, fmt::format("row {} element {}: {} where the CPU backend has {}", i / kWidth, i % kWidth, got, want[i]));
      worst = std::max(worst, err / (std::fabs(want[i]) + 1e-6f));
    }
    rungs[7].state = Rung::State::Passed;
    rungs[7].detail = fmt::format("rms_norm, {} rows of {} in {} us, largest relative difference {:.1e}", kRows, kWidth, norm_us, worst);
    // One token, then the decode graph over many: a model's plan on this queue against the CPU backend.
    for (const bool graph : {false, true}) {
      at = graph ? 9 : 8;
      if (!o.decode) return fail(at, "no CPU oracle was given to compare with");
      const std::unique_ptr<Device> dev = kfd_device(session, q);
      rungs[at].detail = o.decode(*dev, graph);
      rungs[at].state = Rung::State::Passed;
    }
  } catch (const Error& e) {
    return fail(at, e.what());
  }
  return rungs;
}

}  // namespace zinc::backend::zinc_rt
