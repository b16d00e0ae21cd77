// The static decode graph: a model's forward pass, emitted once by model/<arch>.cpp as an ordered list
// of ops over named tensors. Everything that changes from step to step (token ids, positions, number of
// tokens, KV length) lives in StepParams, so a backend compiles the graph once and replays it.
//
// Shapes follow GGUF: ne[0] is the contiguous dimension. Activations are [width, n_tokens]: one row of
// `width` floats per token of the step, at most `max_tokens` rows. Every tensor name carries its layer
// ("blk.3.attn_out") so any node can be dumped and compared across backends.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "gguf/types.h"

namespace zinc::graph {

using TensorId = int32_t;

enum class TensorKind : uint8_t {
  Weight,   // bound to a GGUF tensor of the same name (read-only)
  Act,      // per-step activation [width, n_tokens]
  Logits,   // the output: [n_vocab, n_tokens] (or the last token only, see Graph::logits_last_only)
};

struct Tensor {
  std::string name;
  TensorKind kind = TensorKind::Act;
  gguf::TensorType type = gguf::TensorType::F32;  // storage type of weights; activations are F32
  std::array<int64_t, 4> ne{1, 1, 1, 1};         // weights: their GGUF shape; activations: {width, 1, 1, 1}
  int layer = -1;
};

enum class RopeMode : uint8_t { Normal, NeoX };  // Normal rotates (x[2i], x[2i+1]); NeoX (x[i], x[i+d/2])

// Rotary position embedding, llama.cpp's formulation: the angle of pair i at position p is
// p * base^(-2i/n_rot) / factor_i (factor_i from an optional per-pair tensor, 1 without), multiplied by
// freq_scale (linear interpolation). YaRN (ext_factor > 0) blends interpolated and original angles over
// the pairs between its correction bounds. cos and sin are multiplied by attn_factor (YaRN's magnitude
// correction, 1 + 0.1 ln(factor), is folded in by whoever reads the model's settings).
struct RopeParams {
  float base = 10000.0f;
  float freq_scale = 1.0f;  // 1 / the scaling factor
  float ext_factor = 0.0f;  // YaRN extrapolation mix: 1 with YaRN, 0 otherwise
  float attn_factor = 1.0f;  // multiplies cos and sin
  float beta_fast = 32.0f, beta_slow = 1.0f;
  int n_ctx_orig = 0;  // YaRN: the context length the model was trained with before extension
  // YaRN: round the correction range outwards to whole pairs (llama.cpp always does; transformers does
  // unless the config says "truncate": false, as GPT-OSS's does).
  bool yarn_truncate = true;
  // (compared field by field: the struct's padding bytes are unspecified, so memcmp can tell equal ones apart)
  bool operator==(const RopeParams&) const = default;
};

enum class Op : uint8_t {
  Embed,       // out[t] = dequant(W row token[t]) * scale                   in: W
  RmsNorm,     // out = x / sqrt(mean(x^2) + eps) * (w + offset)              in: x, w (w optional)
  MatMul,      // out[t] = W · in[t] (+ bias)                                 in: W, x [, bias]
  Add,         // out = a + b                                                 in: a, b
  Mul,         // out = a * b                                                 in: a, b
  Rope,        // rotates the first n_rot dims of every head                 in: x [, factors]
  Attention,   // causal attention of q over this layer's KV cache, after appending k and v; with
               // sinks, each head's softmax denominator also holds exp(sink[h])  in: q, k, v [, sinks]
  SwiGLU,      // out = silu(gate) * up                                       in: gate, up
  GeGLU,       // out = gelu_tanh(gate) * up                                  in: gate, up
  Softcap,     // out = cap * tanh(x / cap)                                   in: x
  SelectLast,  // out = the last token's row only, unless the step asks for all logits  in: x
  MoE,         // mixture of experts with SwiGLU experts: router softmax over n_expert, the top
               // n_expert_used (renormalised when norm_topk), out = sum of w_e * down_e(silu(gate_e x) * up_e x)
               // (MoeParams::routing and glu select the variants below)
               //     in: x, router, gate_exps, up_exps, down_exps, then at the positions the node records:
               //     [router_in] [expert_scale {n_expert}]
               //     [router_b {n_expert}, gate_b {ff, n_expert}, up_b {ff, n_expert}, down_b {d, n_expert}]
  Split,       // n_head groups of group_stride per row; out = each group's [group_offset, +width/n_head)  in: x
  Concat,      // out = the inputs' rows side by side                                  in: a, b, ...
  SigmoidMul,  // out = a * sigmoid(b); b is as wide as a, or one value per token       in: a, b
  SsmConv,     // causal depthwise convolution over time, then SiLU: out[t][c] = silu(sum_j w[c][j] x[t-K+1+j][c])
               // with the K-1 inputs before the step kept as recurrent state          in: x, w {K, width}
  DeltaNet,    // gated delta rule (linear attention with a decaying recurrent state S per v head):
               // beta = sigmoid(b), g = A * softplus(a + dt_bias), q and k L2-normalised, q scaled by
               // 1/sqrt(dk); S = exp(g) S + k (beta (v - S^T k))^T, out = S^T q
               //                                                in: q, k, v, a, b, A, dt_bias
  Scale,       // out = x * w, w a weight of width floats or of one float (broadcast)       in: x, w
  Input,       // out[t] = row t of the step's inputs (StepParams::inputs): what another context computed,
               // such as the target model's hidden states a multi-token-prediction head reads    in: none
};
const char* op_name(Op op);  // "matmul", "delta_net", ...

enum class MoeRouting : uint8_t {
  SoftmaxTopK,  // softmax over all experts, then the top k (optionally renormalised)
  TopKSoftmax,  // the top k router logits, then a softmax over those k only (GPT-OSS)
};

enum class MoeGlu : uint8_t {
  SwiGLU,         // silu(gate) * up
  SwiGLUClamped,  // g = min(gate, limit), u = clamp(up, -limit, limit): g * sigmoid(alpha * g) * (u + 1) (GPT-OSS)
  GeGLU,          // gelu_tanh(gate) * up (Gemma 4)
};

struct Graph;

// Each op's parameters: a node holds those of its own op and no other's.
struct EmbedParams {
  float scale = 1;  // multiplies every embedding row
};
struct NormParams {
  float eps = 0, offset = 0;  // x / sqrt(mean(x^2) + eps) * (w + offset)
  int group = 0;              // normalised separately: groups of this width (per-head norms); 0 = the whole row
};
struct RopeOpParams {
  int n_head = 0, head_dim = 0;  // heads in the row
  int n_rot = 0;                 // the first n_rot dims of each head rotate
  RopeMode mode = RopeMode::Normal;
  RopeParams rope;
};
struct AttentionParams {
  int n_head = 0, n_head_kv = 0, head_dim = 0;
  float scale = 1;         // multiplies q·k
  int sliding_window = 0;  // 0 = full causal
  float softcap = 0;       // scores capped by softcap * tanh(s / softcap); 0 = none
};
struct SoftcapParams {
  float cap = 0;
};
struct MoeParams {
  int n_expert = 0, n_expert_used = 0;
  bool norm_topk = false;  // renormalise the selected experts' weights to sum to 1
  MoeRouting routing = MoeRouting::SoftmaxTopK;
  MoeGlu glu = MoeGlu::SwiGLU;
  float glu_alpha = 0, glu_limit = 0;  // MoeGlu::SwiGLUClamped
  float logit_scale = 1;               // multiplies the router's logits
  // Where the optional inputs sit in `in` (-1: absent). router_in: the router reads this activation
  // instead of x; expert_scale: multiplies each selected expert's final weight; bias: the first of the
  // four biases.
  int8_t router_in = -1, expert_scale = -1, bias = -1;
};
struct SplitParams {
  int n_groups = 0;
  int64_t stride = 0, offset = 0;  // each group's columns [offset, offset + width / n_groups) of stride
};
// n_head_k q/k heads of dk, n_head_v v heads of dv; v head h reads q/k head h / (n_head_v / n_head_k),
// or h % n_head_k when tiled_heads.
struct DeltaNetParams {
  int n_head_k = 0, n_head_v = 0, dk = 0, dv = 0;
  bool tiled_heads = false;
};

struct Node {
  Op op;
  TensorId out = -1;
  std::vector<TensorId> in;
  int layer = -1;  // the layer it belongs to (Attention: which KV cache)
  std::variant<std::monostate, EmbedParams, NormParams, RopeOpParams, AttentionParams, SoftcapParams, MoeParams,
               SplitParams, DeltaNetParams>
      params;
  // Bit k set: input k is a small float weight (a norm's or rotation's factors, a bias, a scale, a
  // gate's constants) that backends read as F32, whatever type it is stored as. Set by the Builder.
  uint32_t small_f32 = 0;
  bool small_f32_input(size_t k) const { return k < 32 && (small_f32 >> k & 1u) != 0; }

  // The parameters of the node's op (std::bad_variant_access for another op's).
  const EmbedParams& embed() const { return std::get<EmbedParams>(params); }
  const NormParams& norm() const { return std::get<NormParams>(params); }
  const RopeOpParams& rope() const { return std::get<RopeOpParams>(params); }
  const AttentionParams& attention() const { return std::get<AttentionParams>(params); }
  const SoftcapParams& softcap() const { return std::get<SoftcapParams>(params); }
  const MoeParams& moe() const { return std::get<MoeParams>(params); }
  const SplitParams& split() const { return std::get<SplitParams>(params); }
  const DeltaNetParams& delta_net() const { return std::get<DeltaNetParams>(params); }
};

// The nodes of `g` and of its multi-token-prediction head (Graph::mtp): every node whose weights a
// backend loads with the graph.
std::vector<const Node*> nodes_with_head(const Graph& g);

// Floats of recurrent state a node keeps between steps (SsmConv, DeltaNet), 0 for the others.
int64_t state_size(const Graph& g, const Node& n);

struct Graph {
  std::vector<Tensor> tensors;
  std::vector<Node> nodes;
  TensorId tokens = -1;  // the step's token ids feed Embed
  TensorId logits = -1;
  int n_layer = 0;
  int64_t kv_width = 0;  // per layer: n_head_kv * head_dim (K and V rows); the widest when layers differ
  std::vector<int64_t> layer_kv_width;  // (n_layer) each layer's K/V row width, 0 where it has no attention
  int64_t n_vocab = 0;
  // A tensor whose rows a context hands out after each step (Executable::hidden()), -1 for none: a
  // model with a multi-token-prediction head sets it to its final-normed hidden state of every token
  // of the step, which that head reads.
  TensorId hidden = -1;
  // The model's multi-token-prediction (MTP / NextN) head, or null: a graph over the same tensors (its
  // weights load with this graph's) whose step takes tokens t+1 and, as inputs (Op::Input), the hidden
  // rows of tokens t (this graph's `hidden`), and whose logits guess tokens t+2. Its own `hidden` is its
  // final-normed row of each logits row, which it reads again for the guess after that.
  std::shared_ptr<const Graph> mtp;

  const Tensor& tensor(TensorId id) const { return tensors[static_cast<size_t>(id)]; }
  // The K/V row width of one layer's cache (Gemma 4's global layers have wider heads than its local ones).
  int64_t kv_width_of(int layer) const {
    const auto l = static_cast<size_t>(layer);
    return layer >= 0 && l < layer_kv_width.size() && layer_kv_width[l] > 0 ? layer_kv_width[l] : kv_width;
  }
  // Human-readable listing, one node per line.
  std::string dump() const;
};

// One sequence's share of a step: the next n_tokens of the step's tokens sit at positions n_past,
// n_past + 1, ... of sequence `seq` (which attends to its own cache rows and keeps its own recurrent
// state).
struct SeqStep {
  int32_t seq = 0;
  int32_t n_past = 0;
  int32_t n_tokens = 0;
  bool all_logits = false;  // a logits row for every one of its tokens, not only its last
  // The recurrent state after each of its tokens is kept (at most ExecOptions::kept_states of them), so
  // the sequence can go back to any of them (Executable::seq_keep).
  bool keep_states = false;
};

// What changes from step to step: the tokens of one or more sequences, sequence after sequence. Every
// weight is read once per step, whatever the number of sequences. The logits come back one row per
// token of a sequence that asked for all of them, else one for its last token, in `seqs` order.
struct StepParams {
  std::vector<int32_t> tokens;
  std::vector<SeqStep> seqs;
  // For a graph with an Op::Input node: one row of its width per token, in the tokens' order.
  std::vector<float> inputs;

  // The usual step: `tokens` of sequence 0 at positions n_past...
  static StepParams one(std::vector<int32_t> tokens, int32_t n_past = 0, bool all_logits = false) {
    StepParams s;
    const auto n = static_cast<int32_t>(tokens.size());
    s.tokens = std::move(tokens);
    s.seqs.push_back({0, n_past, n, all_logits});
    return s;
  }
  // Appends `tokens` of sequence `seq` at positions n_past...
  void add(int32_t seq, int32_t n_past, const std::vector<int32_t>& part, bool all_logits = false,
           bool keep_states = false) {
    tokens.insert(tokens.end(), part.begin(), part.end());
    seqs.push_back({seq, n_past, static_cast<int32_t>(part.size()), all_logits, keep_states});
  }
  int64_t logit_rows() const {
    int64_t n = 0;
    for (const SeqStep& s : seqs) n += s.all_logits ? s.n_tokens : 1;
    return n;
  }
};

// Helpers used by model files to emit graphs with checked shapes.
class Builder {
 public:
  explicit Builder(Graph& g) : g_(g) {}
  TensorId weight(const std::string& name, gguf::TensorType type, std::array<int64_t, 4> ne, int layer = -1);
  TensorId act(const std::string& name, int64_t width, int layer = -1);

  TensorId embed(TensorId w, float scale = 1.0f, const std::string& name = "inp_embd");
  // The step's input rows (Op::Input) of `width` floats.
  TensorId input(int64_t width, const std::string& name);
  TensorId rms_norm(TensorId x, TensorId w, float eps, float offset, const std::string& name, int layer);
  // RMSNorm of each head_dim-wide group of the row (per-head q/k norms); w = -1: no weight.
  TensorId rms_norm_heads(TensorId x, TensorId w, int head_dim, float eps, const std::string& name, int layer);
  TensorId matmul(TensorId w, TensorId x, const std::string& name, int layer, TensorId bias = -1);
  TensorId add(TensorId a, TensorId b, const std::string& name, int layer);
  TensorId mul(TensorId a, TensorId b, const std::string& name, int layer);
  // `factors` (optional): an F32 weight of n_rot/2 per-pair frequency divisors (Llama 3's rope_freqs).
  TensorId rope(TensorId x, int n_head, int head_dim, int n_rot, RopeMode mode, const RopeParams& params,
                const std::string& name, int layer, TensorId factors = -1);
  // `sinks` (optional): an F32 weight of n_head logits, one extra softmax column per head whose value
  // is dropped (GPT-OSS's attention sinks).
  TensorId attention(TensorId q, TensorId k, TensorId v, int n_head, int n_head_kv, int head_dim, float scale,
                     int sliding_window, float softcap, const std::string& name, int layer, TensorId sinks = -1);
  TensorId swiglu(TensorId gate, TensorId up, const std::string& name, int layer);
  TensorId geglu(TensorId gate, TensorId up, const std::string& name, int layer);
  TensorId softcap(TensorId x, float cap, const std::string& name, int layer);
  TensorId select_last(TensorId x, const std::string& name);
  // Columns [offset, offset + width) of each of n_groups groups of `stride` columns, side by side.
  TensorId split(TensorId x, int n_groups, int64_t stride, int64_t offset, int64_t width, const std::string& name, int layer);
  TensorId concat(std::vector<TensorId> parts, const std::string& name, int layer);
  TensorId sigmoid_mul(TensorId a, TensorId b, const std::string& name, int layer);
  // Depthwise causal convolution with a {kernel, width} weight, then SiLU.
  TensorId ssm_conv(TensorId x, TensorId w, const std::string& name, int layer);
  TensorId delta_net(TensorId q, TensorId k, TensorId v, TensorId a, TensorId b, TensorId A, TensorId dt_bias,
                     int n_head_k, int n_head_v, int dk, int dv, bool tiled_heads, const std::string& name, int layer);
  // Experts are 3-D weights {in, out, n_expert}; the router is {width, n_expert}. Passing the same
  // tensor as gate_exps and up_exps means a fused {in, 2 * ff, n_expert} tensor, gate rows first.
  TensorId moe(TensorId x, TensorId router, TensorId gate_exps, TensorId up_exps, TensorId down_exps, int n_expert_used,
               bool norm_topk, const std::string& name, int layer);
  // The variants: routing, expert activation, per-projection biases (all four or none), and Gemma 4's
  // router (its own input, scaled logits, a per-expert factor after the renormalisation).
  struct MoeVariant {
    MoeRouting routing = MoeRouting::SoftmaxTopK;
    bool norm_topk = false;
    MoeGlu glu = MoeGlu::SwiGLU;
    float glu_alpha = 0, glu_limit = 0;
    TensorId router_b = -1, gate_b = -1, up_b = -1, down_b = -1;
    TensorId router_in = -1;     // the router reads this activation instead of the experts' input
    TensorId expert_scale = -1;  // weight {n_expert}: multiplies each selected expert's routing weight
    float logit_scale = 1.0f;    // multiplies the router logits before the softmax
  };
  TensorId moe(TensorId x, TensorId router, TensorId gate_exps, TensorId up_exps, TensorId down_exps, int n_expert_used,
               const MoeVariant& variant, const std::string& name, int layer);
  // x times a weight of x's width, or times a one-element weight (Gemma 4's per-layer output scalar).
  TensorId scale(TensorId x, TensorId w, const std::string& name, int layer);

 private:
  int64_t width(TensorId id) const;
  Node& emit(Op op, TensorId out, std::vector<TensorId> in);
  Graph& g_;
};

}  // namespace zinc::graph
