#include "backend/zinc_rt/runner.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

#include "backend/backend.h"
#include "backend/zinc_rt/code_object.h"
#include "backend/zinc_rt/dispatch.h"
#include "convert/synth.h"
#include "core/error.h"
#include "model/model.h"

namespace zinc::backend::zinc_rt {

DeviceWeights::DeviceWeights(Device& d, const graph::Graph& g, const gguf::File& f, uint64_t staging_bytes) : d_(d) {
  if (staging_bytes == 0 || staging_bytes % 4096 != 0) throw Error(fmt::format("ZINC_RT: staging of {} bytes (a multiple of 4096)", staging_bytes));
  buffer_ = d.alloc_device(std::max<uint64_t>(DecodePlan(g, f, 1, 0, 0).weights_bytes(), 1));
  Device::Buffer staging;
  try {
    staging = d.alloc(staging_bytes, false);
    layout_ = std::make_unique<DecodePlan>(g, f, 1, 0, buffer_.va);
    // Pieces of the weights into staging, 4-byte aligned (a weight's last piece rounded up into the
    // padding after it: weights lie kAlign apart), copied when staging is full and at the end.
    struct Copy {
      uint64_t from, to, bytes;
    };
    std::vector<Copy> pending;
    uint64_t used = 0;
    const auto flush = [&] {
      if (pending.empty()) return;
      pm4::Stream s;
      for (const Copy& c : pending) s.dma_copy(buffer_.va + c.to, staging.va + c.from, c.bytes);
      const std::lock_guard lock(d.lock());
      const uint64_t value = d.next_fence_value();
      s.release_mem_fence(d.fence(), value, true, false);
      d.run(s, value);
      ++submissions_;
      pending.clear();
      used = 0;
    };
    layout_->each_weight(f, [&](uint64_t offset, std::span<const uint8_t> bytes) {
      for (uint64_t done = 0; done < bytes.size();) {
        if (used == staging_bytes) flush();
        const uint64_t n = std::min<uint64_t>(bytes.size() - done, staging_bytes - used), rounded = (n + 3) / 4 * 4;
        std::memcpy(staging.cpu<uint8_t>(used), bytes.data() + done, n);
        pending.push_back({used, offset + done, rounded});
        used += rounded;
        done += n;
      }
    });
    flush();
  } catch (...) {
    d.free(staging);
    d.free(buffer_);
    throw;
  }
  d.free(staging);
}

DeviceWeights::~DeviceWeights() { d_.free(buffer_); }

PlanRunner::PlanRunner(Device& d, const graph::Graph& g, const gguf::File& f, int32_t n_ctx, std::shared_ptr<const DeviceWeights> weights)
    : d_(d), weights_(weights ? std::move(weights) : std::make_shared<const DeviceWeights>(d, g, f)) {
  struct Undo {  // (a constructor that throws runs no destructor: what it allocated goes back here)
    PlanRunner* r;
    ~Undo() {
      if (r)
        for (const Device::Buffer& b : r->owned_) r->d_.free(b);
    }
  } undo{this};
  const uint64_t wbase = weights_->buffer().va;
  region_ = own(d.alloc(DecodePlan(g, f, n_ctx, 0, wbase).bytes(), false));
  plan_ = std::make_unique<DecodePlan>(g, f, n_ctx, region_.va, wbase);
  if (!plan_->same_weights(weights_->layout())) throw Error("ZINC_RT: the weights on the device are laid out for another graph");
  // Each kernel the plan launches, from its code object for this target, loaded once.
  std::map<std::string, LoadedKernel, std::less<>> loaded;
  for (const Launch& l : plan_->launches()) {
    if (loaded.count(l.kernel)) continue;
    const std::string object = l.kernel + "-" + d.target();
    const std::span<const uint8_t> elf = code_object_bytes(object);
    if (elf.empty()) throw Error(fmt::format("ZINC_RT: no {} code object in this zinc", object));
    const CodeObject co = parse_code_object(elf);
    const KernelInfo* k = co.kernel(l.kernel);
    if (!k) throw Error(fmt::format("ZINC_RT: {} holds no {} kernel", object, l.kernel));
    const std::vector<uint8_t> image = load_image(elf);
    const Device::Buffer code = own(d.alloc(image.size(), true));
    std::memcpy(code.cpu<uint8_t>(), image.data(), image.size());
    loaded[l.kernel] = {*k, code.va};
  }
  // The graph's arguments and packets, once (a page of slack: the arguments start 64-byte aligned).
  const auto find = [&](std::string_view n) -> const LoadedKernel* {
    const auto it = loaded.find(n);
    return it == loaded.end() ? nullptr : &it->second;
  };
  const uint64_t args_bytes = encode_graph(plan_->launches(), find, 4096).kernargs.size();  // (sized at a stand-in address)
  const Device::Buffer args = own(d.alloc(args_bytes, false));
  const GraphPackets p = encode_graph(plan_->launches(), find, args.va);
  std::memcpy(args.cpu<uint8_t>(), p.kernargs.data(), p.kernargs.size());
  if (p.stream.size() > pm4::kIbMaxDwords) throw Error(fmt::format("ZINC_RT: a graph of {} dwords (an indirect buffer holds at most {})", p.stream.size(), pm4::kIbMaxDwords));
  graph_ = own(d.alloc(p.stream.size() * 4, false));
  std::memcpy(graph_.cpu<uint32_t>(), p.stream.dwords().data(), p.stream.size() * 4);
  graph_dwords_ = static_cast<uint32_t>(p.stream.size());
  undo.r = nullptr;
}

PlanRunner::~PlanRunner() {
  for (const Device::Buffer& b : owned_) d_.free(b);
}

std::span<const float> PlanRunner::step(int32_t token, int32_t pos) {
  const std::vector<uint32_t> params = plan_->params(token, pos);
  const std::lock_guard lock(d_.lock());
  const uint64_t value = d_.next_fence_value();
  d_.run(step_stream(region_.va + plan_->params_offset(), params, graph_.va, graph_dwords_, d_.fence(), value), value);
  return {region_.cpu<const float>(plan_->logits_offset()), static_cast<size_t>(plan_->n_vocab())};
}

std::string decode_rung(Device& d, bool graph, const std::filesystem::path& model) {
  std::filesystem::path path = model;
  struct Remove {
    std::filesystem::path p;
    ~Remove() {
      std::error_code ec;
      if (!p.empty()) std::filesystem::remove(p, ec);
    }
  } remove;
  if (path.empty()) {
    convert::SynthOptions so;
    so.preset = "qwen3-0.6b";
    so.layers = 2;
    path = remove.p = std::filesystem::temp_directory_path() / fmt::format("zinc-rt-selftest-{}.gguf", ::getpid());
    convert::synthesize(so, path);
  }
  const gguf::File f = gguf::File::open(path);
  const model::Model m = model::load(f);
  auto cpu = make_cpu_backend(0);
  ExecOptions opts;
  opts.n_ctx = 64;
  opts.kv_type = KvType::F16;
  auto exec = cpu->load(m.graph, f, {})->instantiate(opts);
  PlanRunner rt(d, m.graph, f, opts.n_ctx);
  std::vector<int32_t> tokens = {1, 17, 300, 42, 7, 99, 256, 3};
  const int32_t steps = graph ? 24 : 1;
  double worst = 0, step_ms = 0;
  int clear = 0;
  const auto argmax = [](std::span<const float> v) { return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin()); };
  for (int32_t pos = 0; pos < steps; ++pos) {
    const int32_t tok = tokens[static_cast<size_t>(pos)] % static_cast<int32_t>(m.graph.n_vocab);
    exec->run(graph::StepParams::one({tok}, pos));
    const std::span<const float> want = exec->logits();
    const auto t0 = std::chrono::steady_clock::now();
    const std::span<const float> got = rt.step(tok, pos);
    step_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    float scale = 0, diff = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      scale = std::max(scale, std::fabs(want[i]));
      diff = std::max(diff, std::fabs(got[i] - want[i]));  // (a NaN fails below)
    }
    if (!(diff <= 0.08f * scale))
      throw Error(fmt::format("position {}: the logits differ from the CPU backend's by {:.3g}, {:.1f}% of its largest", pos, diff,
                              100.0 * diff / scale));
    worst = std::max(worst, double{diff / scale});
    std::vector<float> sorted(want.begin(), want.end());
    std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
    if (sorted[0] - sorted[1] > 2 * diff) {
      ++clear;
      if (argmax(got) != argmax(want))
        throw Error(fmt::format("position {}: token {} where the CPU backend clearly chooses {}", pos, argmax(got), argmax(want)));
    }
    if (pos + 1 >= static_cast<int32_t>(tokens.size())) tokens.push_back(argmax(want));
  }
  if (graph && clear < steps / 2) throw Error(fmt::format("only {} of {} choices clear enough to judge", clear, steps));
  return fmt::format("{} ({} launches a step): {} step{} of {:.2f} ms, logits within {:.1e} of the CPU's largest, {} clear choice{} the CPU's",
                     f.get_or<std::string>("general.architecture", "model"), rt.plan().launches().size(), steps,
                     steps == 1 ? "" : "s", step_ms / steps, worst, clear, clear == 1 ? "" : "s");
}

}  // namespace zinc::backend::zinc_rt
