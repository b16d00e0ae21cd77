// The CUDA backend's device and weights: the backend object (which device, its copy bandwidth, what
// its kernels cannot run) and the upload of a model's weights, shared by every context
// (cuda_backend.cpp).
#include "backend/cuda/cuda_weights.h"

#include <cuda.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "backend/cuda/cuda_kernels.h"
#include "backend/exec_common.h"
#include "core/knobs.h"
#include "quant/quant.h"

namespace zinc::backend {
namespace cuda {

using graph::Node;
using graph::Op;
using graph::TensorId;
using graph::TensorKind;
namespace ck = ::zinc::backend::cuda;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error(fmt::format("CUDA: {} failed: {}", what, cudaGetErrorString(e)));
}

std::atomic<uint64_t> g_allocated{0};

std::string cuda_unsupported(const graph::Graph& g, const Node& n) {
  for (size_t k = 0; k < n.in.size(); ++k) {
    const auto& t = g.tensor(n.in[k]);
    if (t.kind != TensorKind::Weight || n.small_f32_input(k)) continue;
    if (n.op == Op::SsmConv) {
      if (!quant::can_dequantize(t.type)) return fmt::format("its weight '{}' cannot be read as floats", t.name);
      continue;
    }
    if (!ck::weight_type_supported(static_cast<int>(t.type))) {
      return fmt::format("its weight '{}' is stored as {}, which the CUDA kernels do not read", t.name, gguf::tensor_type_name(t.type));
    }
    // A product's weight rows of other lengths are stored as float32 rows padded to a multiple of 32.
    const bool padded = n.op == Op::MatMul && k == 0 && quant::can_dequantize(t.type);
    if (t.ne[0] % 32 != 0 && !padded) {
      return fmt::format("its weight '{}' has rows of {} elements (the kernels read multiples of 32)", t.name, t.ne[0]);
    }
  }
  switch (n.op) {
    case Op::Attention:
      if (n.attention().head_dim > 512) return "heads wider than 512";
      break;
    case Op::MoE:
      if (n.moe().n_expert_used > 64) return "more than 64 experts per token";
      if (n.moe().n_expert > 1024) return "more than 1024 experts";
      break;
    case Op::SsmConv:
      if (g.tensor(n.in[1]).ne[0] > 9) return "convolutions of more than 9 taps";
      break;
    case Op::DeltaNet:
      if (n.delta_net().dk > 256) return "key heads wider than 256";
      break;
    default: break;
  }
  return "";
}

CudaWeights::CudaWeights(const graph::Graph& g, const gguf::File& file, const LoadProgress& progress) : Weights(g) {
  // The convolution's taps are read as floats too.
  const WeightUses uses = weight_uses(
      g, "cuda", [&](const Node& n) { return cuda_unsupported(g, n); }, [](const Node& n, size_t) { return n.op == Op::SsmConv; });
  raw_.resize(g.tensors.size());
  f32_.resize(g.tensors.size());
  read_weights(
      g, file, uses, progress,
      [&](TensorId id, std::span<const uint8_t> bytes) {
        DeviceBuffer& b = raw_[static_cast<size_t>(id)];
        const auto& t = g.tensor(id);
        if (t.ne[0] % 32 != 0) {  // a product's rows (cuda_unsupported): float32, zeros to a multiple of 32
          const int64_t cols = (t.ne[0] + 31) / 32 * 32, rows = elements(t) / t.ne[0];
          const size_t rb = quant::row_size(t.type, t.ne[0]);
          std::vector<float> f(static_cast<size_t>(rows * cols), 0.0f);
          for (int64_t r = 0; r < rows; ++r) quant::dequantize_row(t.type, bytes.data() + static_cast<size_t>(r) * rb, f.data() + r * cols, t.ne[0]);
          padded_.emplace(id, cols);
          b = DeviceBuffer(f.size() * 4);
          check(cudaMemcpy(b.get(), f.data(), f.size() * 4, cudaMemcpyHostToDevice), "weight upload");
          bytes_ += b.size();
          return;
        }
        b = DeviceBuffer(bytes.size() + 16);
        check(cudaMemcpy(b.get(), bytes.data(), bytes.size(), cudaMemcpyHostToDevice), "weight upload");
        bytes_ += b.size();
      },
      [&](TensorId id, std::vector<float> f) {
        DeviceBuffer& b = f32_[static_cast<size_t>(id)];
        b = DeviceBuffer(f.size() * 4);
        check(cudaMemcpy(b.get(), f.data(), f.size() * 4, cudaMemcpyHostToDevice), "weight upload");
        bytes_ += b.size();
        host_f32_.emplace(id, std::move(f));
      });
}

namespace {
// A driver entry point (the runtime links statically; the driver is the one loaded at run time), as
// this build's cuda.h declares it: asked for by an older version, a function that came later (such as
// cuGreenCtxStreamCreate, 12.5) is not found.
template <class F>
F driver_entry(const char* name) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion(name, &fn, CUDA_VERSION, cudaEnableDefault, &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  return reinterpret_cast<F>(fn);
}
}  // namespace

GreenPair make_green_pair(int sms) {
  GreenPair g;
  const auto get_resource = driver_entry<decltype(&cuDeviceGetDevResource)>("cuDeviceGetDevResource");
  const auto split = driver_entry<decltype(&cuDevSmResourceSplitByCount)>("cuDevSmResourceSplitByCount");
  const auto describe = driver_entry<decltype(&cuDevResourceGenerateDesc)>("cuDevResourceGenerateDesc");
  const auto create = driver_entry<decltype(&cuGreenCtxCreate)>("cuGreenCtxCreate");
  if (!get_resource || !split || !describe || !create) {
    g.error = "the driver has no green contexts";
    return g;
  }
  int dev = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  CUdevResource all{}, part{}, rest{};
  unsigned int groups = 1;
  CUdevResourceDesc desc{}, rest_desc{};
  CUgreenCtx made[2] = {nullptr, nullptr};
  if (get_resource(dev, &all, CU_DEV_RESOURCE_TYPE_SM) != CUDA_SUCCESS) {
    g.error = "cuDeviceGetDevResource failed";
  } else if (split(&part, &groups, &all, &rest, 0, static_cast<unsigned>(sms)) != CUDA_SUCCESS || groups < 1 || rest.sm.smCount == 0) {
    g.error = fmt::format("the device's {} multiprocessors do not split into {} and more", all.sm.smCount, sms);
  } else if (describe(&desc, &part, 1) != CUDA_SUCCESS || describe(&rest_desc, &rest, 1) != CUDA_SUCCESS) {
    g.error = "cuDevResourceGenerateDesc failed";
  } else if (create(&made[0], desc, dev, CU_GREEN_CTX_DEFAULT_STREAM) != CUDA_SUCCESS ||
             create(&made[1], rest_desc, dev, CU_GREEN_CTX_DEFAULT_STREAM) != CUDA_SUCCESS) {
    g.error = "cuGreenCtxCreate failed";
    destroy_green(made[0]);
  } else {
    g.part = made[0];
    g.rest = made[1];
    g.part_sms = static_cast<int>(part.sm.smCount);
    g.rest_sms = static_cast<int>(rest.sm.smCount);
  }
  return g;
}

cudaStream_t green_stream(void* green, int priority) {
  const auto stream_create = driver_entry<decltype(&cuGreenCtxStreamCreate)>("cuGreenCtxStreamCreate");
  CUstream s = nullptr;
  if (!green || !stream_create || stream_create(&s, static_cast<CUgreenCtx>(green), CU_STREAM_NON_BLOCKING, priority) != CUDA_SUCCESS)
    return nullptr;
  return s;
}

void destroy_green(void* green) {
  if (!green) return;
  if (const auto destroy = driver_entry<decltype(&cuGreenCtxDestroy)>("cuGreenCtxDestroy")) destroy(static_cast<CUgreenCtx>(green));
}

namespace {
// The device's least stream priority (a background context's), or its greatest.
int stream_priority(bool least) {
  int lo = 0, hi = 0;
  check(cudaDeviceGetStreamPriorityRange(&lo, &hi), "cudaDeviceGetStreamPriorityRange");
  return least ? lo : hi;
}
// The background context's multiprocessors: 8 of every 11 of the device's (96 of 132) unless set (0:
// no green contexts). (qwen3-8b Q4_K_M, a 4,096-token prompt beside 8 streams, its first token against
// its time alone and the streams' p99 gap against their median: H100 on 96 1.36-1.38x and 2.52x, on
// 88 1.46x and 2.07x, on 64 1.91x and 2.05x, on 104 1.28x and 3.10x; H200 on 96 1.37-1.38x and
// 2.70x, on 88 1.46-1.48x and 2.23-2.49x.)
uint32_t lane_sms() {
  static const uint32_t sms = [] {
    int dev = 0, count = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) count = 0;
    return knob_u32("ZINC_CUDA_LANE_SMS", static_cast<uint32_t>(8 * count / 11), 0, 4096);
  }();
  return sms;
}
}  // namespace

const GreenPair& CudaWeights::green() {
  std::call_once(green_once_, [&] {
    green_ = make_green_pair(static_cast<int>(lane_sms()));
    if (!green_.error.empty()) {
      spdlog::warn("ZINC_CUDA_LANE_SMS={}: {}; the background context's stream takes every multiprocessor", lane_sms(), green_.error);
    } else {
      spdlog::info("CUDA: a background context's steps run on {} multiprocessors, the others' beside them on {}", green_.part_sms,
                   green_.rest_sms);
    }
  });
  return green_;
}

cudaStream_t CudaWeights::make_stream(bool background) {
  const int priority = stream_priority(background && knob_u32("ZINC_CUDA_LANE_PRIORITY", 0, 0, 1) == 0);
  if (background && lane_sms() > 0) {
    if (cudaStream_t s = green_stream(green().part, priority)) return s;
    if (green().error.empty()) spdlog::warn("CUDA: no stream on the background context's multiprocessors; its steps take every one");
  }
  cudaStream_t s = nullptr;
  check(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, priority), "cudaStreamCreate");
  return s;
}

cudaStream_t CudaWeights::make_side_stream() { return lane_sms() > 0 ? green_stream(green().rest, stream_priority(false)) : nullptr; }

CudaWeights::~CudaWeights() {
  destroy_green(green_.part);
  destroy_green(green_.rest);
}

}  // namespace cuda

namespace {

using cuda::check;
using cuda::DeviceBuffer;
using cuda::g_allocated;
using graph::Node;

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
      (void)cudaGetLastError();
      throw Error(fmt::format("no CUDA device: {}", e != cudaSuccess ? cudaGetErrorString(e) : "none is visible"));
    }
    if (device < 0) device = static_cast<int>(knob_u32("ZINC_CUDA_DEVICE", 0, 0, 1023));
    if (device >= n) throw Error(fmt::format("CUDA device {} does not exist ({} visible)", device, n));
    check(cudaSetDevice(device), "cudaSetDevice");
    cudaDeviceProp p{};
    check(cudaGetDeviceProperties(&p, device), "cudaGetDeviceProperties");
    name_ = p.name;
  }
  std::string name() const override { return "cuda"; }
  std::string device_name() const override { return name_; }
  uint64_t device_bytes_in_use() const override { return g_allocated; }
  // A 256 MiB device-to-device copy, best of a few: bytes read plus bytes written per second.
  double measured_bandwidth_gbs() override {
    if (bandwidth_ > 0) return bandwidth_;
    constexpr size_t bytes = 256u << 20;
    DeviceBuffer a(bytes), b(bytes);
    check(cudaMemset(a.get(), 1, bytes), "cudaMemset");
    double best = 1e30;
    for (int i = 0; i < 5; ++i) {
      check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
      const auto t0 = std::chrono::steady_clock::now();
      check(cudaMemcpy(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice), "cudaMemcpy");
      check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    bandwidth_ = 2.0 * bytes / best / 1e9;
    return bandwidth_;
  }
  std::string unsupported(const graph::Graph& g, const Node& n) const override { return cuda::cuda_unsupported(g, n); }
  using Backend::load;
  std::shared_ptr<Weights> load(const graph::Graph& g, const gguf::File& file, const LoadProgress& progress) override {
    return std::make_shared<cuda::CudaWeights>(g, file, progress);
  }

 private:
  std::string name_;
  double bandwidth_ = 0;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int device) { return std::make_unique<CudaBackend>(device); }

}  // namespace zinc::backend
