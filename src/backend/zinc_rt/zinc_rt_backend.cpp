// The zinc_rt backend: a model's contexts as decode plans on a Device (runner.h). One sequence a
// context and one token a step (a prompt runs token by token); the model's weights lie once in the
// device's own memory, and each context holds its own region (activations, an F16 cache).
#include <fmt/format.h>

#include <cstring>
#include <memory>
#include <vector>

#include "backend/zinc_rt/kfd.h"
#include "backend/zinc_rt/queue.h"
#include "backend/zinc_rt/runner.h"
#include "core/error.h"

namespace zinc::backend {

namespace zinc_rt {

namespace {

class RtExecutable final : public Executable {
 public:
  RtExecutable(std::shared_ptr<Device> d, std::shared_ptr<const DeviceWeights> w, const graph::Graph& g, const gguf::File& f, const ExecOptions& opts)
      : d_(std::move(d)), g_(g), opts_(opts), runner_(*d_, g_, f, opts.n_ctx, std::move(w)) {}

  void run(const graph::StepParams& step) override {
    if (step.seqs.size() != 1 || step.seqs[0].seq != 0) throw Error("a zinc_rt context runs one sequence (sequence 0) a step");
    if (!step.inputs.empty()) throw Error("zinc_rt runs no graph with input rows");
    const graph::SeqStep& s = step.seqs[0];
    if (s.n_past < 0 || s.n_past + s.n_tokens > opts_.n_ctx)
      throw Error(fmt::format("positions {} to {} are outside the context of {}", s.n_past, s.n_past + s.n_tokens - 1, opts_.n_ctx));
    const auto nv = static_cast<size_t>(g_.n_vocab);
    logits_.assign((s.all_logits ? static_cast<size_t>(s.n_tokens) : 1) * nv, 0.0f);
    for (int32_t i = 0; i < s.n_tokens; ++i) {
      const std::span<const float> l = runner_.step(step.tokens[static_cast<size_t>(i)], s.n_past + i);
      if (s.all_logits) std::memcpy(logits_.data() + static_cast<size_t>(i) * nv, l.data(), nv * sizeof(float));
      else if (i + 1 == s.n_tokens) std::memcpy(logits_.data(), l.data(), nv * sizeof(float));
    }
  }
  std::span<const float> logits() const override { return logits_; }
  int64_t n_vocab() const override { return g_.n_vocab; }
  const ExecOptions& options() const override { return opts_; }
  std::vector<float> activation(graph::TensorId id) const override {
    const int64_t at = runner_.plan().activation_offset(id);
    if (at < 0) throw Error(fmt::format("zinc_rt keeps no row of {}", g_.tensor(id).name));
    const auto* p = reinterpret_cast<const float*>(static_cast<uintptr_t>(runner_.region() + static_cast<uint64_t>(at)));
    return {p, p + g_.tensor(id).ne[0]};
  }
  uint64_t device_bytes() const override { return runner_.plan().bytes(); }  // (the weights are the model's)
  std::vector<uint8_t> save_state(int32_t, int32_t) const override { throw Error("zinc_rt contexts do not save their state yet"); }
  void load_state(std::span<const uint8_t>, int32_t) override { throw Error("zinc_rt contexts do not load a saved state yet"); }
  void seq_clear(int32_t seq) override {
    if (seq != 0) throw Error("a zinc_rt context holds one sequence");  // (its cache rows are rewritten from position 0)
  }
  void seq_copy(int32_t, int32_t, int32_t) override { throw Error("a zinc_rt context holds one sequence"); }

 private:
  std::shared_ptr<Device> d_;  // (kept while the context is: its runner frees its buffers there)
  graph::Graph g_;
  ExecOptions opts_;
  std::vector<float> logits_;
  PlanRunner runner_;
};

class RtWeights final : public Weights {
 public:
  RtWeights(const graph::Graph& g, const gguf::File& f, std::shared_ptr<Device> d)
      : Weights(g), f_(f), d_(std::move(d)), weights_(std::make_shared<const DeviceWeights>(*d_, g, f)) {}
  uint64_t device_bytes() const override { return weights_->buffer().bytes; }

 protected:
  std::unique_ptr<Executable> instantiate_graph(const ExecOptions& opts, const graph::Graph& g) override {
    if (opts.n_seq != 1) throw Error("a zinc_rt context holds one sequence (n_seq 1)");
    if (opts.kv_type != KvType::F16) throw Error("zinc_rt's cache is F16");
    return std::make_unique<RtExecutable>(d_, weights_, g, f_, opts);
  }

 private:
  const gguf::File& f_;
  std::shared_ptr<Device> d_;
  std::shared_ptr<const DeviceWeights> weights_;  // (after d_: freed before the device can go)
};

class RtBackend final : public Backend {
 public:
  RtBackend(std::shared_ptr<Device> d, std::string device_name) : d_(std::move(d)), device_name_(std::move(device_name)) {}
  std::string name() const override { return "zinc_rt"; }
  std::string device_name() const override { return device_name_; }
  std::string unsupported(const graph::Graph& g, const graph::Node& n) const override { return DecodePlan::unsupported(g, n); }
  std::shared_ptr<Weights> load(const graph::Graph& g, const gguf::File& file, const LoadProgress& progress) override {
    if (std::string why = why_unsupported(g); !why.empty()) throw Error(why);
    if (progress) progress(0, 0);
    return std::make_shared<RtWeights>(g, file, d_);
  }

 private:
  std::shared_ptr<Device> d_;
  std::string device_name_;
};

// A KFD session and its queue, kept as long as the device made from them.
struct KfdHeld {
  std::unique_ptr<KfdSession> session;
  std::unique_ptr<ComputeQueue> queue;
  std::unique_ptr<Device> device;  // (destroyed first, then the queue, then the session)
};

}  // namespace

std::unique_ptr<Backend> make_zinc_rt_backend(std::unique_ptr<Device> device, std::string device_name) {
  return std::make_unique<RtBackend>(std::shared_ptr<Device>(std::move(device)), std::move(device_name));
}

}  // namespace zinc_rt

std::unique_ptr<Backend> make_zinc_rt_backend(int device) {
  const zinc_rt::KfdProbe p = zinc_rt::probe_kfd();
  if (!p.ready()) throw Error(fmt::format("zinc_rt: {} (zinc rt-selftest climbs its ladder)", p.why));
  std::vector<const zinc_rt::KfdGpu*> gpus;
  for (const zinc_rt::KfdGpu& g : p.gpus)
    if (g.supported()) gpus.push_back(&g);
  if (gpus.empty()) throw Error(fmt::format("zinc_rt: no supported AMD GPU ({})", zinc_rt::kSupportedTargets));
  const size_t i = device < 0 ? 0 : static_cast<size_t>(device);
  if (i >= gpus.size()) throw Error(fmt::format("zinc_rt: no GPU {} ({} supported)", device, gpus.size()));
  auto held = std::make_shared<zinc_rt::KfdHeld>();
  held->session = std::make_unique<zinc_rt::KfdSession>(zinc_rt::os(), *gpus[i]);
  held->queue = std::make_unique<zinc_rt::ComputeQueue>(*held->session);
  held->device = zinc_rt::kfd_device(*held->session, *held->queue);
  // (the device shares its owner's lifetime: the session and queue go after it)
  std::shared_ptr<zinc_rt::Device> d(held, held->device.get());
  return std::make_unique<zinc_rt::RtBackend>(std::move(d), fmt::format("{} (KFD node {})", gpus[i]->target(), gpus[i]->node));
}

}  // namespace zinc::backend
