// Models: hyper-parameters read from GGUF metadata, tensors checked against the shapes the architecture
// needs, and the architecture's static graph. One file per architecture emits the graph; this header
// is the registry they plug into.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "gguf/reader.h"
#include "graph/graph.h"

namespace zinc::model {

struct HParams {
  std::string arch;
  int n_layer = 0;
  int64_t n_embd = 0, n_ff = 0, n_vocab = 0;
  int n_head = 0, n_head_kv = 0, head_dim = 0, n_rot = 0;
  // KV heads per layer when the file lists them (attention.head_count_kv as an array); n_head_kv is
  // then the first layer's.
  std::vector<int> n_head_kv_layer;
  int kv_heads(int layer) const {
    return layer >= 0 && static_cast<size_t>(layer) < n_head_kv_layer.size() ? n_head_kv_layer[static_cast<size_t>(layer)]
                                                                              : n_head_kv;
  }
  int64_t n_ctx_train = 0;
  float rms_eps = 1e-5f;
  graph::RopeParams rope;
  int n_expert = 0, n_expert_used = 0;  // mixture-of-experts models
  int64_t n_ff_exp = 0;
};

struct Model {
  HParams hp;
  graph::Graph graph;
};

// Reads hyper-parameters, checks every tensor the architecture uses (presence, shape) and emits the
// graph. Throws zinc::Error naming the file and what is wrong (unsupported architecture, missing key,
// missing tensor, wrong shape).
Model load(const gguf::File& file);

std::vector<std::string> supported_architectures();

// For architecture files: reads the common hyper-parameters under "<arch>.".
HParams read_common_hparams(const gguf::File& f, const std::string& arch);

// Rotary settings under "<arch>.rope.": base, linear or YaRN scaling (clear error for other types).
graph::RopeParams read_rope_params(const gguf::File& f, const std::string& arch, int64_t n_ctx_train);

// For architecture files: declares a weight the graph reads, checking it exists with the given shape
// (ne[0] first, trailing 1s omitted).
graph::TensorId require_weight(graph::Builder& b, const gguf::File& f, const std::string& name,
                               std::vector<int64_t> shape, int layer = -1);
// Same, or -1 when the file has no such tensor.
graph::TensorId optional_weight(graph::Builder& b, const gguf::File& f, const std::string& name,
                                std::vector<int64_t> shape, int layer = -1);

// The end of every decoder: the last token's row (every row when the step asks), the final RMSNorm
// (output_norm.weight), the output projection (output.weight, or the embeddings `tok` when tied) and
// an optional soft-cap. Sets g.logits.
void build_output(graph::Builder& b, graph::Graph& g, const gguf::File& f, const HParams& hp, graph::TensorId x,
                  graph::TensorId tok, float softcap = 0.0f);

// The graph of `g` up to its final norm (build_output's "result_norm"): its output is every requested
// token's hidden state instead of logits (what embeddings pool). Throws zinc::Error for a graph without
// that norm.
graph::Graph embedding_graph(graph::Graph g);

// The standard decoder (standard.cpp) that Llama-like architectures configure.
struct StandardOptions {
  graph::RopeMode rope_mode = graph::RopeMode::Normal;
  bool qk_norm = false;  // per-head RMSNorm of q and k before the rotation (attn_q_norm / attn_k_norm)
  bool moe = false;      // the feed-forward network is a mixture of SwiGLU experts (ffn_*_exps)
  bool moe_norm_topk = true;
};
graph::Graph build_standard(const gguf::File& f, HParams& hp, const std::string& arch, const StandardOptions& opt);

// Architecture builders (one file each).
graph::Graph build_llama(const gguf::File& f, HParams& hp);
graph::Graph build_qwen2(const gguf::File& f, HParams& hp);
graph::Graph build_qwen3(const gguf::File& f, HParams& hp);
graph::Graph build_qwen3moe(const gguf::File& f, HParams& hp);
graph::Graph build_gemma3(const gguf::File& f, HParams& hp);
graph::Graph build_qwen3next(const gguf::File& f, HParams& hp);  // also qwen35, qwen35moe (qwen3next.cpp)
graph::Graph build_qwen35(const gguf::File& f, HParams& hp);
graph::Graph build_qwen35moe(const gguf::File& f, HParams& hp);
graph::Graph build_gemma4(const gguf::File& f, HParams& hp);
graph::Graph build_gpt_oss(const gguf::File& f, HParams& hp);

}  // namespace zinc::model
