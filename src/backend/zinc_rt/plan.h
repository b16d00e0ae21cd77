// A model's decode step as ZINC_RT's kernels run it: one token of one sequence a step, every launch
// (kernel, argument segment, grid) written once from the graph, over the weights (their own buffer,
// laid out from the graph and the file alone, so every context of a model shares one copy) and one
// region holding the step's parameters, the activations, the activations' Q8_K codes and each layer's
// F16 cache. Only the parameters change from one token to the next (the token, its position, the number
// of keys and the rotation's angles): the kernels read them from memory, so the launches, and the
// packets a queue encodes them into once (dispatch.h step_stream), are never rewritten.
//
// The region's addresses are absolute in the arguments: the plan is built for the address the region
// lies at, which ZINC_RT's sessions give the CPU and the GPU alike (queue.h), and the host runner of
// the tests gives its own memory.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <string>
#include <vector>

#include "backend/zinc_rt/code_object.h"
#include "backend/zinc_rt/pm4.h"
#include "gguf/reader.h"
#include "graph/graph.h"

namespace zinc::backend::zinc_rt {

// One kernel launch: the kernel's name (its code object's), its argument segment as the kernel reads
// it (dispatch.h's structure for the kernel), its grid.
struct Launch {
  std::string kernel;
  std::vector<uint8_t> args;
  std::array<uint32_t, 3> groups{1, 1, 1}, block{1, 1, 1};
};

class DecodePlan {
 public:
  // Why these kernels cannot run node n of g, "" where they can. So far: K-quant (Q4_K, Q6_K) products
  // and embeddings without biases, whole-row and per-head RMS norms with F32 weights and no offset,
  // rotations, causal attention over the whole cache (no window, cap or sinks) of heads up to 256 wide,
  // SwiGLU, adds and the last row's selection: the dense Llama and Qwen3 graphs.
  static std::string unsupported(const graph::Graph& g, const graph::Node& n);

  // The region at `base`, the weights at `weights_base`. Throws zinc::Error naming the first node it
  // cannot run, or a weight the file lacks.
  DecodePlan(const graph::Graph& g, const gguf::File& file, int32_t n_ctx, uint64_t base, uint64_t weights_base);

  uint64_t bytes() const { return bytes_; }  // the region's size (the weights not included)
  uint64_t base() const { return base_; }
  uint64_t weights_bytes() const { return weights_bytes_; }
  uint64_t weights_base() const { return weights_base_; }
  int32_t n_ctx() const { return n_ctx_; }
  const std::vector<Launch>& launches() const { return launches_; }
  // Each weight's bytes as the kernels read them, from `file` (the one the plan was made from), with
  // its offset from weights_base(): the file's own bytes, or floats for a small weight read as F32
  // (valid during the call). In offset order; the gaps between them need no value.
  void each_weight(const gguf::File& file, const std::function<void(uint64_t offset, std::span<const uint8_t> bytes)>& fn) const;
  // The weights into `weights` (weights_bytes() bytes as the CPU reaches them).
  void write_weights(const gguf::File& file, uint8_t* weights) const;
  // Whether another plan reads its weights from the same layout (the same tensors at the same offsets),
  // so that one copy serves both.
  bool same_weights(const DecodePlan& other) const;
  // The parameters of a step running `token` at position `pos` (0 <= pos < n_ctx): params_words() words
  // at params_offset() of the region.
  std::vector<uint32_t> params(int32_t token, int32_t pos) const;
  uint64_t params_offset() const { return 0; }
  uint64_t logits_offset() const { return logits_; }  // n_vocab() floats after each step
  int64_t n_vocab() const { return n_vocab_; }
  // Where activation `id` lies after a step (its width in floats), -1 for a tensor the plan keeps no
  // row of: what `zinc validate` and the tests compare with another backend's, node by node.
  int64_t activation_offset(graph::TensorId id) const { return act_at_.at(static_cast<size_t>(id)); }
  // The F16 key and value caches (n_ctx rows of the layer's KV width) an attention node (its output)
  // appends to and reads: their offsets in the region.
  struct Cache {
    uint64_t k = 0, v = 0;
  };
  Cache cache(graph::TensorId attention_out) const { return caches_.at(static_cast<size_t>(attention_out)); }

 private:
  struct Weight {
    uint64_t offset = 0;
    const gguf::TensorInfo* info = nullptr;
    bool as_f32 = false;  // a small weight written as floats whatever its storage type
  };
  struct RopeTable {
    int n_rot = 0;
    graph::RopeParams params;
    std::vector<float> factors;  // per-pair divisors, empty for none
    uint32_t word = 0;           // where its n_rot floats lie in the parameters
  };
  uint64_t take(uint64_t bytes);
  uint64_t weight(const graph::Graph& g, const gguf::File& file, graph::TensorId id, bool as_f32);
  uint64_t act(const graph::Graph& g, graph::TensorId id);
  // The word where a rotation's table lies; with `add` false (the parameters already laid out) one
  // not seen before is an error rather than a table past their end.
  uint32_t rope_table(const graph::Graph& g, const gguf::File& file, const graph::Node& n, bool add);
  template <class Args>
  void launch(const char* kernel, const Args& args, std::array<uint32_t, 3> groups, uint32_t block);

  uint64_t base_ = 0, bytes_ = 0, logits_ = 0, weights_base_ = 0, weights_bytes_ = 0;
  int32_t n_ctx_ = 0;
  int64_t n_vocab_ = 0;
  uint32_t param_words_ = 4;  // token, position, keys, (unused); then the rotation tables
  std::vector<Launch> launches_;
  std::vector<Weight> weights_;
  std::vector<RopeTable> ropes_;
  std::vector<int64_t> act_at_;    // per tensor: its activation's offset, -1 none yet
  std::vector<int64_t> codes_at_;  // per tensor: its Q8_K codes' offset, -1 none yet
  std::vector<Cache> caches_;      // per tensor: an attention's caches
};

// A kernel as a queue runs it: its descriptor's facts and the GPU address its code object's image lies
// at (code_object.h load_image).
struct LoadedKernel {
  KernelInfo info;
  uint64_t code_base = 0;
};

// A plan's launches as the packets of one step, written once: launch i's arguments at kernarg_base +
// kernarg_offsets[i] (the caller copies `kernargs` there), each dispatch programmed from its kernel's
// descriptor (dispatch.h emit_dispatch), and before every dispatch but the first a CS partial flush and
// the first-level caches invalidated, so each kernel reads what the ones before it wrote. A step runs
// these from an indirect buffer after the step's parameters are written (dispatch.h step_stream).
struct GraphPackets {
  pm4::Stream stream;
  std::vector<uint8_t> kernargs;
  std::vector<uint64_t> kernarg_offsets;
};
// `kernel` gives each launched kernel by name, or null for one not loaded. Throws zinc::Error for a
// kernel not loaded, or whose argument segment is longer than the launch's arguments.
GraphPackets encode_graph(const std::vector<Launch>& launches, const std::function<const LoadedKernel*(std::string_view)>& kernel,
                          uint64_t kernarg_base);

}  // namespace zinc::backend::zinc_rt
