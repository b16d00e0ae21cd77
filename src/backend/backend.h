// The backend interface. A backend loads a model's weights once (Backend::load: uploaded to its device,
// or mapped in place) into an immutable Weights object; any number of contexts (Executables) are then
// instantiated from it, each with its own KV cache, recurrent state, scratch and recordings, all
// sharing the one copy of the weights. A context runs the static graph step by step. The core never
// names a concrete backend; each one implements these three classes.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <functional>
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
  int32_t n_ctx = 2048;       // positions each sequence holds at most
  int32_t n_seq = 1;          // sequences the context holds; a step may advance several of them at once
  int32_t max_tokens = 512;   // most tokens one step may carry (prefill chunk size)
  KvType kv_type = KvType::F16;  // Q8_0 halves the cache again (head_dim must be a multiple of 32)
  // Every activation keeps its own memory, readable after a step through Executable::activation()
  // (zinc validate compares backends tensor by tensor). Costs memory; off for inference.
  bool keep_activations = false;
  // KV blocks beyond the sequences' own (n_seq contexts of n_ctx positions): room where a prefix
  // cache keeps blocks no sequence holds any more (Executable::blocks_hold).
  int32_t cache_blocks = 0;
  // The most tokens of one sequence's part of a step that may keep the recurrent state after each of
  // them (SeqStep::keep_states), so the sequence can go back to any of them afterwards (seq_keep): a
  // speculative step verifying drafted tokens. Costs that many copies of each sequence's recurrent
  // state; a context without recurrent state keeps nothing and needs none.
  int32_t kept_states = 0;
  // The context's steps run beside other contexts' of the same weights at a lower priority, instead
  // of one context's step at a time: a long prompt read beside sequences decoding in another context,
  // whose steps go first wherever both want the device. Where the backend cannot (the CPU, Vulkan:
  // one queue), its steps take their turn as any context's do.
  bool background = false;
};

class Executable {
 public:
  virtual ~Executable() = default;
  // Runs one step: each sequence's tokens are appended to its cache at its positions n_past... (what it
  // held from n_past on is dropped). Throws zinc::Error when the step does not fit (too many tokens, a
  // context full).
  virtual void run(const graph::StepParams& step) = 0;
  // Logits of the last step: one row of n_vocab() floats per requested token (StepParams says which),
  // sequence after sequence.
  virtual std::span<const float> logits() const = 0;
  // The rows of the graph's `hidden` tensor in the last step (graph::Graph::hidden; as many rows as it
  // held, in the step's token order), `hidden_width()` floats each. Throws zinc::Error for a graph
  // without one.
  virtual std::span<const float> hidden() const { throw Error("this model's graph hands out no hidden states"); }
  virtual int64_t hidden_width() const { return 0; }
  // The width of a logits row: the vocabulary (for a graph whose output is its hidden states, as an
  // embedding graph's, their width).
  virtual int64_t n_vocab() const = 0;
  // The index of the largest logit of logits row `row` of the last step (the first on ties): greedy
  // decoding's next token. Backends that compute it on the device (for the last row of each
  // sequence's part) return it without reading the logits back.
  virtual int32_t argmax(int64_t row) const {
    const auto l = logits().subspan(static_cast<size_t>(row * n_vocab()), static_cast<size_t>(n_vocab()));
    return static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
  }
  // That of the last row (the last sequence's next token).
  int32_t argmax() const { return argmax(logit_rows() - 1); }
  // The logits rows of the last step (a backend that keeps them on the device says so without reading them).
  virtual int64_t logit_rows() const { return static_cast<int64_t>(logits().size()) / n_vocab(); }
  virtual const ExecOptions& options() const = 0;
  // The most rows a step takes on the kernels the backend runs decode with, past which its cost per
  // row jumps (a GPU's prompt tiles cost the same for a few rows as for a tile of them); 0: no such
  // bound. A scheduler keeps steps beside decoding sequences within it.
  virtual int32_t few_rows() const { return 0; }
  // An activation of the last step, [rows][width] floats (needs ExecOptions::keep_activations; throws
  // zinc::Error without it, or for a tensor that is not an activation).
  virtual std::vector<float> activation(graph::TensorId id) const = 0;
  // False for graphs with recurrent state (linear-attention layers): a step must then start at
  // position 0 (which resets the state) or where the previous step ended.
  virtual bool can_rewind() const { return true; }
  // Bytes this context holds on its backend's device (KV cache, state, activations, scratch; not the
  // shared weights). 0 for the CPU.
  virtual uint64_t device_bytes() const { return 0; }
  // Makes now what the first steps of each size would otherwise make in a request's time (a GPU
  // backend's pipelines, compiled by the driver on first use): a server calls it once at start.
  virtual void warm_up() {}
  // The context after n_past tokens as bytes (the first n_past rows of every KV cache and any recurrent
  // state), and back: a session set aside and resumed continues exactly where it was. load_state()
  // throws zinc::Error for bytes saved by another model, backend or option set.
  virtual std::vector<uint8_t> save_state(int32_t n_past, int32_t seq = 0) const = 0;
  virtual void load_state(std::span<const uint8_t> bytes, int32_t seq = 0) = 0;
  // Forgets what sequence `seq` holds (its next step starts at position 0).
  virtual void seq_clear(int32_t seq) = 0;
  // Sequence `dst` holds the first n_tokens of `src` (their cache rows shared, copied only where one of
  // them later writes; a recurrent state can only be copied whole: n_tokens must be all src holds).
  virtual void seq_copy(int32_t src, int32_t dst, int32_t n_tokens) = 0;
  // Sequence `seq` keeps only its first n_tokens positions (those after them are forgotten): the
  // drafted tokens a speculative step verified and the target model refused. A context with recurrent
  // state goes back only inside the last step, and only where that step kept the states of seq's part
  // (SeqStep::keep_states): to the state after one of its tokens. Throws zinc::Error otherwise.
  virtual void seq_keep(int32_t seq, int32_t n_tokens);
  // Sequence `seq` holds what sequence `from_seq` of `from` (a context over the same weights) holds in
  // its first n_tokens positions, cache rows and recurrent state; what seq held is forgotten. A prompt
  // read on a context of its own (ExecOptions::background) moved into the context that goes on with it.
  // Through save_state() and load_state() here; a backend may copy on its device instead.
  virtual void seq_take(const Executable& from, int32_t from_seq, int32_t seq, int32_t n_tokens) {
    load_state(from.save_state(n_tokens, from_seq), seq);
  }

  // The KV cache as blocks of positions, for a prefix cache shared by the context's sequences (0: this
  // context does not share blocks; the calls below then throw).
  virtual int32_t kv_block_tokens() const { return 0; }
  // Bytes one block holds over all layers (K and V).
  virtual uint64_t kv_block_bytes() const { return 0; }
  // The blocks holding the first n_tokens positions of `seq` (one per started block).
  virtual std::vector<int32_t> seq_blocks(int32_t seq, int32_t n_tokens) const;
  // Takes (hold) or gives back a reference on each block: a held block keeps its rows after every
  // sequence holding it has moved on or been cleared.
  virtual void blocks_hold(std::span<const int32_t> blocks, bool hold);
  // Sequence `seq` holds exactly the first n_tokens positions of `blocks` (shared, copied only where
  // it later writes). A context with recurrent state needs that state after those tokens (`state`, as
  // recurrent_state() gave it); one without takes an empty span.
  virtual void seq_adopt(int32_t seq, std::span<const int32_t> blocks, int32_t n_tokens, std::span<const float> state);
  // The recurrent state of `seq` after its first n_tokens tokens, every state node's in order (empty
  // for a context without recurrent state). Throws zinc::Error unless the state holds exactly those
  // tokens (all the sequence holds).
  virtual std::vector<float> recurrent_state(int32_t seq, int32_t n_tokens) const;
  // One block's rows as bytes (kv_block_bytes() of them: every attending layer's K rows, then its V
  // rows), so a prefix cache can keep them in host memory after giving the block back; and a free
  // block filled from such bytes, returned with one reference held by the caller (blocks_hold(false)
  // gives it back). Throws zinc::Error for a block in no use, bytes of another size, or where no block
  // is free.
  virtual std::vector<uint8_t> block_read(int32_t block) const;
  virtual int32_t block_write(std::span<const uint8_t> bytes);
};

// Throws unless `id` is an activation (or the logits) and `opts` keeps activations.
inline void check_activation(const graph::Graph& g, const ExecOptions& opts, graph::TensorId id) {
  if (!opts.keep_activations) throw Error("activations are read back only with ExecOptions::keep_activations");
  if (id < 0 || static_cast<size_t>(id) >= g.tensors.size() || g.tensor(id).kind == graph::TensorKind::Weight) {
    throw Error(fmt::format("tensor {} is not an activation of the graph", id));
  }
}

// The weights of one model on one backend, loaded once and never changed: every context instantiated
// from them shares them (a server's slots hold one copy of the model, not one each). Holds its own copy
// of the graph; the GGUF file it was loaded from must outlive it (the CPU reads tensors in place).
class Weights : public std::enable_shared_from_this<Weights> {
 public:
  virtual ~Weights() = default;
  Weights(const Weights&) = delete;
  Weights& operator=(const Weights&) = delete;

  const graph::Graph& graph() const { return graph_; }
  // A new context over these weights. Throws zinc::Error when the options cannot work (a KV type the
  // heads do not fit, too little device memory).
  std::unique_ptr<Executable> instantiate(const ExecOptions& opts) { return instantiate(opts, graph_); }
  // The same running `g`: the weights' graph or one cut from it (the same tensors, the first of its
  // nodes, another output), as model::embedding_graph's hidden states, or its multi-token-prediction
  // head (graph().mtp). Throws zinc::Error for a graph
  // with other tensors.
  std::unique_ptr<Executable> instantiate(const ExecOptions& opts, const graph::Graph& g) {
    const size_t nodes = graph_.nodes.size() + (graph_.mtp ? graph_.mtp->nodes.size() : 0);
    bool same = g.tensors.size() == graph_.tensors.size() && g.nodes.size() <= nodes;
    for (size_t i = 0; same && i < g.tensors.size(); ++i) same = g.tensors[i].name == graph_.tensors[i].name;
    if (!same) throw Error("a context runs the weights' own graph or one cut from it");
    return instantiate_graph(opts, g);
  }
  // Bytes these weights occupy on the backend's device (0 where they are read from the mapped file).
  virtual uint64_t device_bytes() const { return 0; }
  // Whether a background context's steps run beside its other contexts' (ExecOptions::background);
  // where not, contexts take turns.
  virtual bool steps_side_by_side() const { return false; }

 protected:
  explicit Weights(graph::Graph g) : graph_(std::move(g)) {}
  // A context running `g` (checked by instantiate), which it keeps a copy of.
  virtual std::unique_ptr<Executable> instantiate_graph(const ExecOptions& opts, const graph::Graph& g) = 0;

 private:
  graph::Graph graph_;
};

// Bytes of weights loaded so far and in all.
using LoadProgress = std::function<void(uint64_t done, uint64_t total)>;

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // The device it computes on ("" for the CPU) and its measured memory bandwidth in GB/s (bytes read
  // plus bytes written per second by a large device-to-device copy; 0 where the caller measures it,
  // as for the CPU).
  virtual std::string device_name() const { return ""; }
  // A device that runs its kernels on the host's CPU (Vulkan's lavapipe): correct, at a small fraction
  // of a GPU's speed.
  virtual bool software_device() const { return false; }
  virtual double measured_bandwidth_gbs() { return 0; }
  // Device memory held now by everything this backend's device has allocated (0 for the CPU).
  virtual uint64_t device_bytes_in_use() const { return 0; }
  // Kernel dispatches and the barriers between them that this backend's device has recorded into
  // step recordings so far (Vulkan; {0, 0} elsewhere): a step's barriers are its chain of dependent
  // stages, what a fusion or reordering shortens.
  struct RecordedCounts {
    uint64_t dispatches = 0, barriers = 0;
  };
  virtual RecordedCounts recorded_counts() const { return {}; }
  // Why this backend cannot run `node` of `g` with the node's weight types, or "" when it can. Asked
  // before anything is uploaded: load() refuses a graph with an unsupported node, and backend
  // selection ("auto") passes over a backend that would.
  virtual std::string unsupported(const graph::Graph& g, const graph::Node& node) const {
    (void)g;
    (void)node;
    return "";
  }
  // The first node of `g` this backend cannot run, as a message ("" when it runs them all).
  std::string why_unsupported(const graph::Graph& g) const {
    for (const graph::Node& n : g.nodes) {
      if (std::string why = unsupported(g, n); !why.empty()) {
        return fmt::format("{} cannot run {}: {}", name(), g.tensor(n.out).name, why);
      }
    }
    return "";
  }
  // Loads the weights `g` names from `file` (which must outlive the result). Throws zinc::Error for a
  // graph this backend cannot run (unsupported() says why) or a tensor it cannot read. With `progress`,
  // tells the bytes of weights loaded so far and their total as it goes (the CPU then reads the mapped
  // file in, which it otherwise does during the first steps), ending with done == total.
  virtual std::shared_ptr<Weights> load(const graph::Graph& g, const gguf::File& file, const LoadProgress& progress) = 0;
  std::shared_ptr<Weights> load(const graph::Graph& g, const gguf::File& file) { return load(g, file, {}); }
  // One context with weights of its own: load() then instantiate(), for a single user of the model.
  std::unique_ptr<Executable> compile(const graph::Graph& g, const gguf::File& file, const ExecOptions& opts) {
    return load(g, file)->instantiate(opts);
  }
};

// The CPU backend computing on `threads` threads (0: every physical core). The threads belong to the
// loaded weights and serve their contexts one step at a time.
std::unique_ptr<Backend> make_cpu_backend(unsigned threads = 0);
// The Vulkan backend on device `device` (-1: ZINC_VULKAN_DEVICE, else the first discrete GPU). Throws
// zinc::Error saying why when there is no usable device or this build has no Vulkan.
std::unique_ptr<Backend> make_vulkan_backend(int device = -1);
// The CUDA backend on device `device` (-1: ZINC_CUDA_DEVICE, else device 0). Throws zinc::Error saying
// why when there is no NVIDIA GPU with a driver, or this build has no CUDA.
std::unique_ptr<Backend> make_cuda_backend(int device = -1);
// The zinc_rt backend (ZINC_RT's tier 1: KFD compute queues and PM4 packets) on supported AMD GPU
// `device` of the KFD topology (-1: the first). Throws zinc::Error saying why where there is none, or
// this build has no ZINC_RT.
std::unique_ptr<Backend> make_zinc_rt_backend(int device = -1);
// A backend by name: "cpu", "vulkan", "cuda", or "auto" (auto_backend() of what the probes find). Throws
// zinc::Error for an unknown name or a backend that cannot start. `threads` is the CPU backend's.
std::unique_ptr<Backend> make_backend(const std::string& name, int device = -1, unsigned threads = 0);
// What "auto" takes given the probes' reports: "cuda" when CUDA is ready with a GPU, else "vulkan" when
// Vulkan is ready with a device that is not a CPU implementation, else "cpu".
struct BackendReport;  // backend/probe.h
std::string auto_backend(const std::vector<BackendReport>& reports);
// The same for a model: "auto" also passes over a GPU backend that cannot run one of the graph's nodes
// (unsupported()), saying why in the log, and takes Vulkan (after CUDA, where it runs the graph) or the
// CPU.
std::unique_ptr<Backend> make_backend_for(const std::string& name, const graph::Graph& g, int device = -1,
                                          unsigned threads = 0);

}  // namespace zinc::backend
