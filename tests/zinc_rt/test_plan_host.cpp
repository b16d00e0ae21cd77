// ZINC_RT's decode plan (src/backend/zinc_rt/plan.h) run on the host: every launch of the Qwen3 and
// Llama fixtures' steps (tests/models/fixtures, converted and quantized to Q4_K_M here) by the host
// build of its kernel, over host memory: each node against the CPU's definition; the same plans on a
// host Device whose packets an interpreter runs (PlanRunner, the ladder's decode rungs and the zinc_rt
// backend) against the plan run directly and against the CPU backend on the same file with the same
// F16 cache. What this tests is the plan (which kernels, their arguments, the buffers, the step's
// parameters, the caches from step to step), the packets and the kernels' logic; an AMD GPU runs the
// same packets (none here).
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <span>
#include <cstring>
#include <filesystem>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/zinc_rt/code_object.h"
#include "backend/zinc_rt/dispatch.h"
#include "backend/zinc_rt/plan.h"
#include "backend/zinc_rt/runner.h"
#include "convert/convert.h"
#include "convert/synth.h"
#include "core/error.h"
#include "host_kernels.h"
#include "model/model.h"
#include "quant/model_quantize.h"
#include "quant/dot.h"
#include "quant/fp16.h"
#include "quant/quant.h"
#include "raw_gguf.h"

namespace zinc::backend::zinc_rt {
namespace {

const std::filesystem::path kFixtures = ZINC_FIXTURES_DIR;

// The fixture converted to F32 and quantized to `mixture` in `tmp`, opened.
gguf::File quantized(const std::string& fixture, const std::string& mixture, const test::TempDir& tmp) {
  convert::ConvertOptions copts;
  copts.outtype = "f32";
  convert::convert_hf(kFixtures / fixture, tmp.file("f32.gguf"), copts);
  const gguf::File f32 = gguf::File::open(tmp.file("f32.gguf"));
  quant::QuantizeOptions qo;
  qo.mixture = *quant::mixture_by_name(mixture);
  qo.threads = 2;
  quant::quantize_model(f32, tmp.file("q.gguf"), qo);
  return gguf::File::open(tmp.file("q.gguf"));
}

// A plan over host memory: built once to learn its sizes, then again at the memory's addresses.
struct HostPlan {
  std::vector<uint64_t> memory, weights;
  std::unique_ptr<DecodePlan> plan;
  HostPlan(const graph::Graph& g, const gguf::File& f, int32_t n_ctx) {
    const DecodePlan sizes(g, f, n_ctx, 0, 0);
    memory.resize((sizes.bytes() + 7) / 8);
    weights.resize((sizes.weights_bytes() + 7) / 8);
    plan = std::make_unique<DecodePlan>(g, f, n_ctx, reinterpret_cast<uintptr_t>(memory.data()), reinterpret_cast<uintptr_t>(weights.data()));
    plan->write_weights(f, reinterpret_cast<uint8_t*>(weights.data()));
  }
  std::vector<float> step(int32_t token, int32_t pos) {
    const std::vector<uint32_t> p = plan->params(token, pos);
    std::memcpy(reinterpret_cast<uint8_t*>(memory.data()) + plan->params_offset(), p.data(), p.size() * 4);
    for (const Launch& l : plan->launches()) host::run_launch(l);
    const float* logits = reinterpret_cast<const float*>(reinterpret_cast<const uint8_t*>(memory.data()) + plan->logits_offset());
    return {logits, logits + plan->n_vocab()};
  }
};

// Each node of the step just run against the CPU's definition, on the plan's own inputs (every
// activation keeps its own memory, so after a step each holds this step's value): the embedding row,
// the norms, the products (the CPU's Q8_K codes of the plan's input, quant::dot_ref of each row), the
// rotations and the adds bit for bit; the SwiGLU within 2e-6 relative; the attention's cache row at
// the position the step's own key and value rounded to half, and its output within 2e-5 of the softmax
// in double over the cache's rows 0..pos. A rounding difference never carries from one node to the
// next here, so these bounds are those of the kernels alone.
void expect_each_node(const graph::Graph& g, const gguf::File& f, const HostPlan& rt, int32_t tok, int32_t pos, const std::string& what) {
  const auto* region = reinterpret_cast<const uint8_t*>(rt.memory.data());
  const auto at = [&](graph::TensorId id) -> const float* {
    if (id == g.logits) return reinterpret_cast<const float*>(region + rt.plan->logits_offset());
    const int64_t off = rt.plan->activation_offset(id);
    return off < 0 ? nullptr : reinterpret_cast<const float*>(region + off);
  };
  const auto floats = [&](graph::TensorId id) {
    const gguf::TensorInfo& info = f.tensor(g.tensor(id).name);
    std::vector<float> v(info.n_elements);
    quant::dequantize_row(info.type, f.tensor_data(info).data(), v.data(), static_cast<int64_t>(v.size()));
    return v;
  };
  for (const graph::Node& n : g.nodes) {
    const std::string name = what + " position " + std::to_string(pos) + " " + g.tensor(n.out).name;
    const float* out = at(n.out);
    ASSERT_NE(out, nullptr) << name;
    const int64_t width = g.tensor(n.out).ne[0];
    std::vector<float> want(static_cast<size_t>(width));
    float bound = 0;  // relative; 0: equal floats
    switch (n.op) {
      case graph::Op::Embed: {
        const gguf::TensorInfo& w = f.tensor(g.tensor(n.in[0]).name);
        quant::dequantize_row(w.type, f.tensor_data(w).data() + static_cast<size_t>(tok) * quant::row_size(w.type, width), want.data(), width);
        break;
      }
      case graph::Op::RmsNorm: {
        const std::vector<float> w = floats(n.in[1]);
        cpu::rms_norm(at(n.in[0]), w.data(), want.data(), width, n.norm().group > 0 ? n.norm().group : width, 1, n.norm().eps, 0.0f);
        break;
      }
      case graph::Op::MatMul: {
        const gguf::TensorInfo& w = f.tensor(g.tensor(n.in[0]).name);
        const auto ncols = static_cast<int64_t>(w.ne[0]);
        std::vector<uint8_t> codes(quant::activation_row_size(w.type, ncols));
        quant::quantize_activation(w.type, at(n.in[1]), codes.data(), ncols);
        const size_t row = quant::row_size(w.type, ncols);
        for (int64_t r = 0; r < width; ++r) want[static_cast<size_t>(r)] = quant::dot_ref(w.type, f.tensor_data(w).data() + static_cast<size_t>(r) * row, codes.data(), ncols);
        break;
      }
      case graph::Op::Add:
        for (int64_t i = 0; i < width; ++i) want[static_cast<size_t>(i)] = at(n.in[0])[i] + at(n.in[1])[i];
        break;
      case graph::Op::SwiGLU:
        cpu::swiglu(at(n.in[0]), at(n.in[1]), want.data(), width);
        bound = 2e-6f;
        break;
      case graph::Op::Rope: {
        const graph::RopeOpParams& r = n.rope();
        const std::vector<float> factors = n.in.size() > 1 ? floats(n.in[1]) : std::vector<float>();
        cpu::rope(at(n.in[0]), want.data(), 1, r.n_head, r.head_dim, r.n_rot, r.mode, r.rope, factors.empty() ? nullptr : factors.data(), pos);
        break;
      }
      case graph::Op::SelectLast:
        std::copy(at(n.in[0]), at(n.in[0]) + width, want.begin());
        break;
      case graph::Op::Attention: {
        const graph::AttentionParams& a = n.attention();
        const int64_t kvw = int64_t{a.n_head_kv} * a.head_dim;
        const DecodePlan::Cache c = rt.plan->cache(n.out);
        const auto* kc = reinterpret_cast<const uint16_t*>(region + c.k);
        const auto* vc = reinterpret_cast<const uint16_t*>(region + c.v);
        int wrong_row = 0;
        for (int64_t i = 0; i < kvw; ++i) {
          wrong_row += kc[pos * kvw + i] != quant::f32_to_fp16(at(n.in[1])[i]);
          wrong_row += vc[pos * kvw + i] != quant::f32_to_fp16(at(n.in[2])[i]);
        }
        EXPECT_EQ(wrong_row, 0) << name << ": the cache's row at the position";
        const float* q = at(n.in[0]);
        for (int h = 0; h < a.n_head; ++h) {
          const int64_t off = int64_t{h / (a.n_head / a.n_head_kv)} * a.head_dim;
          std::vector<double> s(static_cast<size_t>(pos) + 1);
          double mx = -1e300, sum = 0;
          for (int32_t j = 0; j <= pos; ++j) {
            double d = 0;
            for (int i = 0; i < a.head_dim; ++i) d += double{q[h * a.head_dim + i]} * quant::fp16_to_f32(kc[j * kvw + off + i]);
            mx = std::max(mx, s[static_cast<size_t>(j)] = d * a.scale);
          }
          for (double& x : s) sum += (x = std::exp(x - mx));
          for (int i = 0; i < a.head_dim; ++i) {
            double o = 0;
            for (int32_t j = 0; j <= pos; ++j) o += s[static_cast<size_t>(j)] * quant::fp16_to_f32(vc[j * kvw + off + i]);
            want[static_cast<size_t>(h * a.head_dim + i)] = static_cast<float>(o / sum);
          }
        }
        bound = -2e-5f;  // absolute (the values' scale is about 1)
        break;
      }
      default:
        FAIL() << name << ": a node the plan should have refused";
    }
    int outside = 0;
    for (int64_t i = 0; i < width; ++i) {
      const float w = want[static_cast<size_t>(i)], o = out[i];
      outside += bound == 0 ? o != w : !(std::fabs(o - w) <= (bound > 0 ? bound * std::fabs(w) : -bound));
    }
    EXPECT_EQ(outside, 0) << name << " (" << graph::op_name(n.op) << ")";
  }
}

class ZincRtHostPlan : public ::testing::TestWithParam<std::string> {};

TEST_P(ZincRtHostPlan, EachNodeIsTheCpusOnItsInputs) {
  // 24 steps of the fixture's plan (Q4_K_M), every node checked after each (expect_each_node).
  if (!host::kBuilt) GTEST_SKIP() << "ZINC_RT's kernels were not built (no clang-19 or later with ld.lld: install clang-19 lld-19)";
  test::TempDir tmp;
  const gguf::File f = quantized(GetParam(), "Q4_K_M", tmp);
  const model::Model m = model::load(f);
  HostPlan rt(m.graph, f, 32);
  for (int32_t pos = 0; pos < 24; ++pos) {
    const int32_t tok = (pos * 131 + 17) % static_cast<int32_t>(m.graph.n_vocab);
    (void)rt.step(tok, pos);
    expect_each_node(m.graph, f, rt, tok, pos, GetParam());
    if (::testing::Test::HasFailure()) break;
  }
}

// A compute queue's packets run on the host: SET_SH_REG into a register file, DISPATCH_DIRECT as the
// kernel whose entry point COMPUTE_PGM_LO/HI name (its arguments read at the address in the user
// SGPRs the kernel's descriptor asks for, per the AMDHSA ABI's order: dispatch packet, queue, then the
// arguments), over COMPUTE_NUM_THREAD_X/Y/Z, by the host build; WRITE_DATA and RELEASE_MEM's value into
// memory; INDIRECT_BUFFER followed. It checks that every dispatch after the first is ordered after the
// previous one: a CS partial flush (or an end-of-pipe fence the host waited for before submitting
// more), then an invalidation of the first-level caches.
class HostQueue {
 public:
  // The kernel whose entry point lies at an address, or null.
  std::function<const KernelInfo*(uint64_t entry)> kernel_at;
  std::string skip_kernel;  // a kernel whose dispatches are dropped (a broken queue the tests must notice)
  int dispatches = 0, copies = 0;
  bool ordered = true;  // every dispatch after the first followed a flush and an invalidation

  void run(const uint32_t* d, size_t n) {
    for (size_t i = 0; i < n;) {
      const uint32_t h = d[i];
      if (h == 0xFFFF1000u) {
        ++i;
        continue;
      }
      ASSERT_EQ(h >> 30, 3u) << "dword " << i << ": not a type-3 packet";
      const uint32_t op = h >> 8 & 0xFFu, body = (h >> 16 & 0x3FFFu) + 1;
      const uint32_t* b = d + i + 1;
      switch (op) {
        case 0x10:
          break;
        case 0x76:
          for (uint32_t j = 1; j < body; ++j) regs_[0xB000 + b[0] * 4 + (j - 1) * 4] = b[j];
          break;
        case 0x46:
          flushed_ = b[0] == (0x07u | 4u << 8);
          break;
        case 0x58:
          if (flushed_ && (b[6] & pm4::kAcquireInvalidateL0L1) == pm4::kAcquireInvalidateL0L1) invalidated_ = true;
          break;
        case 0x37:
          std::memcpy(host(b[1] | uint64_t{b[2]} << 32), b + 3, (body - 3) * 4);
          break;
        case 0x49: {
          const uint64_t v = b[4] | uint64_t{b[5]} << 32;
          std::memcpy(host(b[2] | uint64_t{b[3]} << 32), &v, (b[1] >> 29) == 2 ? 8 : 4);
          flushed_ = true;  // (the host submits the next step once it has seen this fence: the work before it is done)
          break;
        }
        case 0x3F:
          run(reinterpret_cast<const uint32_t*>(host(b[0] | uint64_t{b[1] & 0xFFFFu} << 32)), b[2] & 0xFFFFFu);
          break;
        case 0x15:
          dispatch(b);
          break;
        case 0x50: {  // DMA_DATA: memory to memory through L2 at both ends (DST_SEL 3, SRC_SEL 3), addresses incrementing
          ASSERT_EQ(b[0] >> 20 & 3u, 3u) << "DMA_DATA's destination not through L2";
          ASSERT_EQ(b[0] >> 29 & 3u, 3u) << "DMA_DATA's source not through L2";
          ASSERT_EQ(b[5] >> 26 & 0xFu, 0u) << "DMA_DATA's addresses not memory, incrementing";
          std::memmove(host(b[3] | uint64_t{b[4]} << 32), host(b[1] | uint64_t{b[2]} << 32), b[5] & 0x3FFFFFFu);
          ++copies;
          break;
        }
        default:
          FAIL() << "packet opcode " << op << " at dword " << i;
      }
      i += 1 + body;
    }
  }

 private:
  static uint8_t* host(uint64_t address) { return reinterpret_cast<uint8_t*>(static_cast<uintptr_t>(address)); }
  void dispatch(const uint32_t* b) {
    const uint64_t entry = (regs_[0xB830] | uint64_t{regs_[0xB834]} << 32) << 8;
    const KernelInfo* ki = kernel_at(entry);
    ASSERT_NE(ki, nullptr) << "a dispatch of no loaded kernel's entry point";
    const KernelInfo& k = *ki;
    uint32_t sgpr = 0;
    if (k.properties & 2u) sgpr += 2;  // the dispatch packet's address
    if (k.properties & 4u) sgpr += 2;  // the queue's
    ASSERT_TRUE(k.properties & 8u) << k.name << ": no argument pointer";
    const uint64_t kernarg = regs_[0xB900 + sgpr * 4] | uint64_t{regs_[0xB904 + sgpr * 4]} << 32;
    Launch l;
    l.kernel = k.name;
    l.args.assign(host(kernarg), host(kernarg) + host::args_bytes(l.kernel));
    l.groups = {b[0], b[1], b[2]};
    l.block = {regs_[0xB81C], regs_[0xB820], regs_[0xB824]};
    if (dispatches > 0 && !invalidated_) ordered = false;
    flushed_ = invalidated_ = false;
    ++dispatches;
    if (l.kernel != skip_kernel) host::run_launch(l);
  }
  std::map<uint32_t, uint32_t> regs_;
  bool flushed_ = false, invalidated_ = false;
};

// A Device on the host: memory at host addresses, packets run by a HostQueue, the kernel at an entry
// point found by comparing an executable buffer with each gfx1100 code object's image (so a wrong
// image or a wrong entry point finds none). Its own memory (alloc_device) starts as 0xA5 bytes and is
// closed to the CPU (PROT_NONE) except while the queue runs, so a CPU write to it faults and a weight
// never copied reads as garbage.
class HostDevice final : public Device {
 public:
  HostQueue queue;
  int device_allocs = 0;
  HostDevice() {
    for (const std::string_view name : code_object_bytes_names())
      if (name.substr(name.find('-') + 1) == "gfx1100") objects_.push_back(parse_code_object(code_object_bytes(name))), images_.push_back(load_image(code_object_bytes(name)));
    queue.kernel_at = [this](uint64_t entry) -> const KernelInfo* {
      for (const Buffer& b : code_)
        for (size_t i = 0; i < objects_.size(); ++i) {
          const KernelInfo& k = objects_[i].kernels.at(0);
          if (entry == b.va + k.entry_address && images_[i].size() <= b.bytes && std::memcmp(b.cpu<uint8_t>(), images_[i].data(), images_[i].size()) == 0) return &k;
        }
      return nullptr;
    };
  }
  ~HostDevice() override {
    for (const auto& [va, bytes] : device_) ::munmap(reinterpret_cast<void*>(static_cast<uintptr_t>(va)), bytes);
  }
  std::string target() const override { return "gfx1100"; }
  Buffer alloc(uint64_t bytes, bool executable) override {
    const uint64_t size = (std::max<uint64_t>(bytes, 1) + 4095) / 4096 * 4096;
    std::vector<uint64_t> m(size / 8 + 512, 0);
    const Buffer b{(reinterpret_cast<uintptr_t>(m.data()) + 4095) / 4096 * 4096, size};
    memory_[b.va] = std::move(m);
    if (executable) code_.push_back(b);
    return b;
  }
  Buffer alloc_device(uint64_t bytes) override {
    const uint64_t size = (std::max<uint64_t>(bytes, 1) + 4095) / 4096 * 4096;
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw Error("no host memory for a device buffer");
    std::memset(p, 0xA5, size);
    ::mprotect(p, size, PROT_NONE);
    const Buffer b{reinterpret_cast<uintptr_t>(p), size};
    device_[b.va] = size;
    ++device_allocs;
    return b;
  }
  void free(const Buffer& b) override {
    if (b.va == 0) return;
    if (const auto it = device_.find(b.va); it != device_.end()) {
      EXPECT_EQ(it->second, b.bytes);
      ::munmap(reinterpret_cast<void*>(static_cast<uintptr_t>(b.va)), it->second);
      device_.erase(it);
      return;
    }
    ASSERT_EQ(memory_.count(b.va), 1u) << "freeing what the device did not allocate";
    memory_.erase(b.va);
    std::erase_if(code_, [&](const Buffer& c) { return c.va == b.va; });
  }
  size_t live() const { return memory_.size() + device_.size(); }
  size_t live_device() const { return device_.size(); }
  // A device buffer's bytes, read as the device would (opened for the copy).
  std::vector<uint8_t> peek(const Buffer& b) {
    const Open open(*this);
    return {b.cpu<uint8_t>(), b.cpu<uint8_t>() + b.bytes};
  }
  uint64_t fence() const override { return reinterpret_cast<uintptr_t>(&fence_); }
  void run(const pm4::Stream& packets, uint64_t value, int) override {
    {
      const Open open(*this);
      queue.run(packets.dwords().data(), packets.size());
    }
    if (fence_ != value) throw Error("the fence was not written");
  }

 private:
  struct Open {  // the device's own memory readable and writable while it lives
    const HostDevice& d;
    explicit Open(const HostDevice& dev) : d(dev) {
      for (const auto& [va, bytes] : d.device_) ::mprotect(reinterpret_cast<void*>(static_cast<uintptr_t>(va)), bytes, PROT_READ | PROT_WRITE);
    }
    ~Open() {
      for (const auto& [va, bytes] : d.device_) ::mprotect(reinterpret_cast<void*>(static_cast<uintptr_t>(va)), bytes, PROT_NONE);
    }
  };
  std::map<uint64_t, std::vector<uint64_t>> memory_;
  std::map<uint64_t, uint64_t> device_;
  std::vector<Buffer> code_;
  std::vector<CodeObject> objects_;
  std::vector<std::vector<uint8_t>> images_;
  uint64_t fence_ = 0;
};

TEST(ZincRtHostDevice, RunnerStepsAreThePlansSteps) {
  // The llama fixture's plan on a Device (PlanRunner: the kernels' images loaded, the graph encoded
  // once into packets, each step one submission through step_stream) run by the host queue: every
  // launch dispatched in order after the one before it, and each step's logits equal to the plan's
  // launches run directly on a region of their own. Nothing of the graph is rewritten between steps.
  if (!host::kBuilt) GTEST_SKIP() << "ZINC_RT's kernels were not built (no clang-19 or later with ld.lld: install clang-19 lld-19)";
  test::TempDir tmp;
  const gguf::File f = quantized("llama", "Q4_K_M", tmp);
  const model::Model m = model::load(f);
  HostPlan direct(m.graph, f, 16);
  HostDevice d;
  PlanRunner rt(d, m.graph, f, 16);
  const std::vector<int32_t> tokens = {0, 17, 300, 42, 7, 99};
  for (int32_t pos = 0; pos < static_cast<int32_t>(tokens.size()); ++pos) {
    const std::vector<float> want = direct.step(tokens[static_cast<size_t>(pos)], pos);
    const std::span<const float> got = rt.step(tokens[static_cast<size_t>(pos)], pos);
    ASSERT_EQ(got.size(), want.size());
    int differ = 0;
    for (size_t i = 0; i < want.size(); ++i) differ += got[i] != want[i];
    EXPECT_EQ(differ, 0) << "position " << pos;
  }
  EXPECT_EQ(d.queue.dispatches, static_cast<int>(tokens.size() * rt.plan().launches().size()));
  EXPECT_TRUE(d.queue.ordered) << "a dispatch not ordered after the one before it";
}

TEST_P(ZincRtHostPlan, DecodeRungsPassOnTheHost) {
  // The ladder's one-token and decode-graph rungs (decode_rung, as zinc rt-selftest climbs them on an
  // AMD GPU: 8 prompt tokens then the CPU's greedy choices fed to both, each step's logits within 8% of
  // the CPU backend's largest, every clear choice the CPU's) on the host device with the fixture. The
  // plan's kernels compute what the CPU computes (the activations' Q8_K codes, integer
  // block sums, the norm and rotation bit for bit, the same F16 cache), so the logits agree to float
  // rounding until a value the two sum in different orders lands across the rounding boundary of an
  // 8-bit code or of a half in the cache, which on these fixtures moves them by up to a few percent
  // from then on (the Vulkan and CUDA backends' same test bounds it by 8%).
  if (!host::kBuilt) GTEST_SKIP() << "ZINC_RT's kernels were not built (no clang-19 or later with ld.lld: install clang-19 lld-19)";
  test::TempDir tmp;
  (void)quantized(GetParam(), "Q4_K_M", tmp);
  for (const bool graph : {false, true}) {
    HostDevice d;
    const std::string detail = decode_rung(d, graph, tmp.file("q.gguf"));
    EXPECT_NE(detail.find(graph ? "24 steps" : "1 step"), std::string::npos) << detail;
    std::printf("%s %s rung on the host: %s\n", GetParam().c_str(), graph ? "decode graph" : "one token", detail.c_str());
  }
}

TEST(ZincRtHostDevice, WeightsLieOnceInTheDevicesOwnMemory) {
  // The model's weights in memory only the device reaches, filled by the queue's copies: with a staging
  // buffer of one page (many pieces, a weight split across submissions), every weight's bytes there are
  // those the plan writes on the host. The backend loads them once
  // for all its contexts (two here, each with the CPU's logits), and every buffer goes back to the
  // device when the contexts and the weights go.
  if (!host::kBuilt) GTEST_SKIP() << "ZINC_RT's kernels were not built (no clang-19 or later with ld.lld: install clang-19 lld-19)";
  test::TempDir tmp;
  const gguf::File f = quantized("llama", "Q4_K_M", tmp);
  const model::Model m = model::load(f);
  {
    HostDevice d;
    const DeviceWeights w(d, m.graph, f, 4096);
    EXPECT_EQ(d.device_allocs, 1);
    EXPECT_EQ(d.live(), 1u);  // (the staging buffer given back)
    const DecodePlan& layout = w.layout();
    EXPECT_GT(w.submissions(), static_cast<int>(layout.weights_bytes() / 4096) - 1);
    EXPECT_GT(d.queue.copies, w.submissions());
    const std::vector<uint8_t> on_device = d.peek(w.buffer());
    int weights = 0, odd = 0;
    layout.each_weight(f, [&](uint64_t offset, std::span<const uint8_t> bytes) {
      ++weights;
      odd += bytes.size() % 4 != 0;
      ASSERT_LE(offset + bytes.size(), on_device.size());
      EXPECT_EQ(std::memcmp(on_device.data() + offset, bytes.data(), bytes.size()), 0) << "the weight at " << offset;
    });
    EXPECT_GE(weights, 10);
    std::printf("%d weights (%d of a size not a multiple of 4), %llu bytes in %d submissions of %d copies\n", weights, odd,
                static_cast<unsigned long long>(layout.weights_bytes()), w.submissions(), d.queue.copies);
  }
  auto owned = std::make_unique<HostDevice>();
  HostDevice& d = *owned;
  auto rt = zinc_rt::make_zinc_rt_backend(std::move(owned), "host");
  ExecOptions opts;
  opts.n_ctx = 8;
  auto cpu = make_cpu_backend(1)->compile(m.graph, f, opts);
  {
    const std::shared_ptr<Weights> w = rt->load(m.graph, f);
    EXPECT_EQ(d.device_allocs, 1);
    EXPECT_EQ(w->device_bytes(), (DecodePlan(m.graph, f, 1, 0, 0).weights_bytes() + 4095) / 4096 * 4096);
    const size_t loaded = d.live();
    {
      auto a = w->instantiate(opts), b = w->instantiate(opts);
      EXPECT_EQ(d.device_allocs, 1) << "a context copied the weights";
      const graph::StepParams step = graph::StepParams::one({5, 9}, 0);
      cpu->run(step);
      a->run(step);
      b->run(graph::StepParams::one({5}, 0));
      b->run(graph::StepParams::one({9}, 1));
      float scale = 0, da = 0, db = 0;
      for (size_t i = 0; i < cpu->logits().size(); ++i) {
        scale = std::max(scale, std::fabs(cpu->logits()[i]));
        da = std::max(da, std::fabs(a->logits()[i] - cpu->logits()[i]));
        db = std::max(db, std::fabs(b->logits()[i] - cpu->logits()[i]));
      }
      EXPECT_LE(da, 1e-4f * scale);
      EXPECT_LE(db, 1e-4f * scale);
      EXPECT_GT(d.live(), loaded);
    }
    EXPECT_EQ(d.live(), loaded) << "a context's buffers were kept after it went";
    EXPECT_EQ(d.live_device(), 1u);
  }
  EXPECT_EQ(d.live_device(), 0u) << "the weights were kept after the model went";
}

TEST(ZincRtHostDevice, DecodeRungFailsOnABrokenQueue) {
  // With the queue dropping every attention dispatch, the one-token rung fails, saying where.
  if (!host::kBuilt) GTEST_SKIP() << "ZINC_RT's kernels were not built (no clang-19 or later with ld.lld: install clang-19 lld-19)";
  test::TempDir tmp;
  (void)quantized("llama", "Q4_K_M", tmp);
  HostDevice broken;
  broken.queue.skip_kernel = "attention_decode";
  try {
    decode_rung(broken, false, tmp.file("q.gguf"));
    FAIL() << "a queue dropping the attention passed the one-token rung";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("position 0"), std::string::npos) << e.what();
  }
}

TEST(ZincRtHostDevice, BackendRunsContextsAsTheCpuDoes) {
  // The zinc_rt backend (make_zinc_rt_backend) on the host device with the llama fixture: a prompt of
  // 5 tokens in one step (run token by token) with every position's logits, then a token at position
  // 5; each row within 1e-4 of the CPU backend's largest logit (this fixture's plan agrees with the
  // CPU to float rounding: 5e-7 measured), the activations readable by name as zinc validate reads
  // them; what a context of one sequence cannot do is refused, saying so.
  if (!host::kBuilt) GTEST_SKIP() << "ZINC_RT's kernels were not built (no clang-19 or later with ld.lld: install clang-19 lld-19)";
  test::TempDir tmp;
  const gguf::File f = quantized("llama", "Q4_K_M", tmp);
  const model::Model m = model::load(f);
  auto rt = zinc_rt::make_zinc_rt_backend(std::make_unique<HostDevice>(), "host");
  EXPECT_EQ(rt->name(), "zinc_rt");
  EXPECT_EQ(rt->why_unsupported(m.graph), "");
  ExecOptions opts;
  opts.n_ctx = 16;
  auto cpu = make_cpu_backend(1)->compile(m.graph, f, opts);
  auto exe = rt->compile(m.graph, f, opts);
  const auto close = [&](std::span<const float> got, std::span<const float> want, const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    float scale = 0, diff = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      scale = std::max(scale, std::fabs(want[i]));
      diff = std::max(diff, std::fabs(got[i] - want[i]));
    }
    EXPECT_LE(diff, 1e-4f * scale) << what;
  };
  const graph::StepParams prompt = graph::StepParams::one({0, 17, 300, 42, 7}, 0, true);
  cpu->run(prompt);
  exe->run(prompt);
  EXPECT_EQ(exe->logit_rows(), 5);
  close(exe->logits(), cpu->logits(), "the prompt's rows");
  cpu->run(graph::StepParams::one({cpu->argmax(4)}, 5));
  exe->run(graph::StepParams::one({cpu->argmax(4)}, 5));
  EXPECT_EQ(exe->logit_rows(), 1);
  close(exe->logits(), cpu->logits(), "position 5");
  for (graph::TensorId id = 0; id < static_cast<graph::TensorId>(m.graph.tensors.size()); ++id) {
    if (m.graph.tensor(id).name != "blk.1.attn_norm") continue;
    const std::vector<float> a = exe->activation(id);
    EXPECT_EQ(static_cast<int64_t>(a.size()), m.graph.tensor(id).ne[0]);
  }
  graph::StepParams two = graph::StepParams::one({1}, 6);
  two.add(1, 0, {2});
  EXPECT_THROW(exe->run(two), Error);
  EXPECT_THROW(exe->run(graph::StepParams::one({1}, 16)), Error);
  EXPECT_THROW(exe->save_state(6), Error);
  opts.kv_type = KvType::F32;
  EXPECT_THROW(rt->compile(m.graph, f, opts), Error);
  // An F32 file: refused before anything is loaded, naming the node.
  const gguf::File f32 = gguf::File::open(tmp.file("f32.gguf"));
  const model::Model m32 = model::load(f32);
  EXPECT_NE(rt->why_unsupported(m32.graph).find("zinc_rt cannot run"), std::string::npos) << rt->why_unsupported(m32.graph);
  EXPECT_THROW(rt->load(m32.graph, f32), Error);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ZincRtHostPlan, ::testing::Values("qwen3", "llama"));

TEST(ZincRtPlan, RefusesWhatItsKernelsCannotRunNamingTheNode) {
  // An F32 file: its products are no K-quant, and the plan says which node and why.
  test::TempDir tmp;
  convert::ConvertOptions copts;
  copts.outtype = "f32";
  convert::convert_hf(kFixtures / "qwen3", tmp.file("f32.gguf"), copts);
  const gguf::File f = gguf::File::open(tmp.file("f32.gguf"));
  const model::Model m = model::load(f);
  try {
    DecodePlan(m.graph, f, 16, 0, 0);
    FAIL() << "an F32 graph was planned";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ZINC_RT cannot run"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("F32"), std::string::npos) << e.what();
  }
  const gguf::File q = quantized("qwen3", "Q4_K_M", tmp);
  const DecodePlan p(model::load(q).graph, q, 16, 0, 0);
  EXPECT_THROW(p.params(0, 16), Error);
  EXPECT_THROW(p.params(0, -1), Error);
}

TEST(ZincRtPlan, OneRotationTableWhateverTheParametersPaddingHolds) {
  // Rotations with equal parameters share one table whatever the padding bytes of their RopeParams
  // hold (unspecified: a compiler may leave anything there). Comparing the bytes made a table per
  // node while laying out the parameters and wrote the extra ones over the first weight, which left
  // token 0's embedding row wrong in one build and right in another.
  test::TempDir tmp;
  const gguf::File q = quantized("qwen3", "Q4_K_M", tmp);
  const model::Model m = model::load(q);
  const DecodePlan clean(m.graph, q, 16, 0, 0);
  graph::Graph g = m.graph;
  unsigned char fill = 0x11;
  int ropes = 0;
  for (graph::Node& n : g.nodes) {
    if (n.op != graph::Op::Rope) continue;
    auto& r = std::get<graph::RopeOpParams>(n.params);
    const graph::RopeParams keep = r.rope;
    std::memset(static_cast<void*>(&r.rope), fill, sizeof r.rope);  // (every byte, padding too, then each field again)
    fill = static_cast<unsigned char>(fill + 0x22);
    r.rope.base = keep.base, r.rope.freq_scale = keep.freq_scale, r.rope.ext_factor = keep.ext_factor, r.rope.attn_factor = keep.attn_factor;
    r.rope.beta_fast = keep.beta_fast, r.rope.beta_slow = keep.beta_slow, r.rope.n_ctx_orig = keep.n_ctx_orig, r.rope.yarn_truncate = keep.yarn_truncate;
    ++ropes;
  }
  ASSERT_GE(ropes, 4);
  const DecodePlan scribbled(g, q, 16, 0, 0);
  EXPECT_EQ(scribbled.params(0, 3), clean.params(0, 3));
  EXPECT_EQ(scribbled.logits_offset(), clean.logits_offset());
}

}  // namespace
}  // namespace zinc::backend::zinc_rt
