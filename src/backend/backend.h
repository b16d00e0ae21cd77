// The backend interface: compile a static graph against a model's weights into an Executable, then
// run it step by step. The core never names a concrete backend; each one implements these two classes.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "gguf/reader.h"
#include "graph/graph.h"

namespace zinc::backend {

enum class KvType { F32, F16, Q8_0 };

struct ExecOptions {
  int32_t n_ctx = 2048;       // KV cache capacity in tokens
  int32_t max_tokens = 512;   // most tokens one step may carry (prefill chunk size)
  KvType kv_type = KvType::F16;  // Q8_0 halves the cache again (head_dim must be a multiple of 32)
  unsigned threads = 0;       // CPU threads; 0 = all physical cores
  // Every activation keeps its own memory, readable after a step through Executable::activation()
  // (zinc validate compares backends tensor by tensor). Costs memory; off for inference.
  bool keep_activations = false;
};

class Executable {
 public:
  virtual ~Executable() = default;
  // Runs one step: the step's tokens are appended to the KV cache at positions n_past... Throws
  // zinc::Error when the step does not fit (too many tokens, context full).
  virtual void run(const graph::StepParams& step) = 0;
  // Logits of the last step: one row of n_vocab floats per requested token (the last token only,
  // unless the step asked for all).
  virtual std::span<const float> logits() const = 0;
  virtual int64_t n_vocab() const = 0;
  // The index of the largest logit of the last row (the first on ties): greedy decoding's next token.
  // Backends that compute it on the device return it without reading the logits back.
  virtual int32_t argmax() const {
    const auto l = logits();
    const auto row = l.subspan(l.size() - static_cast<size_t>(n_vocab()));
    return static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
  }
  virtual const ExecOptions& options() const = 0;
  // An activation of the last step, [rows][width] floats (needs ExecOptions::keep_activations; throws
  // zinc::Error without it, or for a tensor that is not an activation).
  virtual std::vector<float> activation(graph::TensorId id) const = 0;
  // False for graphs with recurrent state (linear-attention layers): a step must then start at
  // position 0 (which resets the state) or where the previous step ended.
  virtual bool can_rewind() const { return true; }
  // The context after n_past tokens as bytes (the first n_past rows of every KV cache and any recurrent
  // state), and back: a session set aside and resumed continues exactly where it was. load_state()
  // throws zinc::Error for bytes saved by another model, backend or option set.
  virtual std::vector<uint8_t> save_state(int32_t n_past) const = 0;
  virtual void load_state(std::span<const uint8_t> bytes) = 0;
};

// Throws unless `id` is an activation (or the logits) and `opts` keeps activations.
inline void check_activation(const graph::Graph& g, const ExecOptions& opts, graph::TensorId id) {
  if (!opts.keep_activations) throw Error("activations are read back only with ExecOptions::keep_activations");
  if (id < 0 || static_cast<size_t>(id) >= g.tensors.size() || g.tensor(id).kind == graph::TensorKind::Weight) {
    throw Error(fmt::format("tensor {} is not an activation of the graph", id));
  }
}

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // The device it computes on ("" for the CPU) and its measured memory bandwidth in GB/s (bytes read
  // plus bytes written per second by a large device-to-device copy; 0 where the caller measures it,
  // as for the CPU).
  virtual std::string device_name() const { return ""; }
  virtual double measured_bandwidth_gbs() { return 0; }
  // `weights` must outlive the executable (CPU backends read tensors in place from the mapped file).
  virtual std::unique_ptr<Executable> compile(const graph::Graph& g, const gguf::File& weights,
                                              const ExecOptions& opts) = 0;
};

std::unique_ptr<Backend> make_cpu_backend();
// The Vulkan backend on device `device` (-1: ZINC_VULKAN_DEVICE, else the first discrete GPU). Throws
// zinc::Error saying why when there is no usable device or this build has no Vulkan.
std::unique_ptr<Backend> make_vulkan_backend(int device = -1);
// A backend by name: "cpu", "vulkan", or "auto" (Vulkan when a GPU offers it, else the CPU). Throws
// zinc::Error for an unknown name or a backend that cannot start.
std::unique_ptr<Backend> make_backend(const std::string& name, int device = -1);

}  // namespace zinc::backend
