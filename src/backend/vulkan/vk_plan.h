// A Vulkan context's plan: everything decided once from the graph, the options and the device before
// any memory is allocated or any command recorded. Which dispatches fuse across graph nodes, where each
// activation lives in the arena (plan_arena, as every backend plans it), the step buffer's layout (per
// part a header and block table, the token ids, one rotation table per distinct rotation), the sizes of
// the scratch buffers, and the per-sequence regions of recurrent state. A value: the executable
// allocates from it and the recorder reads it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "backend/vulkan/vk_attention.h"
#include "backend/vulkan/vk_context.h"

namespace zinc::backend::vk {

// Experts: steps up to this many tokens take the CPU's arithmetic (mat-vec products per token and
// slot); longer ones group the slots by expert for the matrix product (mul_mm_q_id).
inline constexpr uint32_t kMvMaxTokens = 8;
// Products of steps up to this many rows multiply by the weights directly (the kernels take up to 8 rows
// per pass over a weight, so 32 rows read it 4 times); longer steps take the matrix product on the
// stored weights (mul_mm_q).
inline constexpr uint32_t kDirectMaxTokens = 32;
inline constexpr int32_t kKvBlockRows = 32;        // positions per cache block (kv_rows.glsl's KV_BLOCK)

// A distinct rotation: its (cos, sin) table for the step's rows sits at `offset` of the step buffer.
struct RopeTable {
  int n_rot;
  graph::RopeParams params;
  graph::TensorId factors;
  size_t offset;
};

struct Plan {
  KvCacheType kv_type = KvCacheType::F16;
  size_t align = 256;      // the device's storage offset alignment
  uint32_t row_pad = 1;    // parts of a step start at multiples of this row
  uint32_t max_rows = 1;   // a step's rows at most: max_tokens and the padding between parts

  // Decode's dispatches fused across graph nodes (not with keep_activations: every tensor is then
  // written where zinc validate reads it). Per node: the norm a rotation does (-1: none), the attention
  // whose k and v a rotation appends to the cache (-1: none), whether the node is done by another's
  // dispatch, whether an attention's cache append is done by its k rotation.
  std::vector<int> rope_norm, rope_store;
  std::vector<bool> skip, kv_stored;
  // Decode's rotations (and their per-head norms) done by the q or k product before them, in the
  // product's last workgroup of each head, in place (mul_mv_k_rope, mul_mv_q8_rope; the product's
  // output and the rotation's share memory), and the v product appending its row where such a k
  // product appends k (mul_mv_k_vstore, mul_mv_q8_vstore).
  // Per node: the rotation a MatMul does (-1: none), the attention whose v a MatMul appends (-1:
  // none), a rotating MatMul's first head counter; the counters' bytes. Steps of one token and one
  // sequence only; the others run the rotation's own dispatch.
  std::vector<int> mm_rope, mm_vstore;
  std::vector<uint32_t> mm_count_base;
  size_t head_count_bytes = 0;
  // Decode's residual add and whole-row norm after a K-quant or 32-element product, done by the
  // product's last workgroup (mul_mv_k_row_norm, mul_mv_q8_row_norm; widths mm_norm does not take):
  // per node, the norm a MatMul does (-1: none); its counters' place among the head counters (one a
  // token, kMvMaxTokens, shared by every such product).
  std::vector<int> mm_row_norm;
  uint32_t row_norm_counter = 0;
  // Decode's residual add and the whole-row norm of its sum done by the K-quant product before them
  // (mul_mv_k_norm; a mixture's combined down product, mul_mv_k_id_combine_norm), where every reader of
  // the norm takes its scale (NormScale: K-quant products, an F32 router with K-quant experts). Per
  // node: the norm a MatMul or MoE does (-1: none); where in act_q8k the norm's codes go (past the
  // product's own input codes); the counters' and then the partial sums' bytes (norm_tail). Steps of
  // one token and one sequence only; the norm's own dispatch takes the same factored form in the other
  // decode-sized steps (rms_norm_row's partials), so every row's arithmetic is the one-token step's.
  // ZINC_VULKAN_NORM_TAIL=0 leaves every norm its own dispatch in its usual form (1, the default:
  // bench/README, "The norm's partial sums loaded ahead").
  std::vector<int> mm_norm;
  // A gate whose output is added to a row, that sum to the residual, and the sum normalised next (a
  // shared expert's gated output added to the experts' output, then the residual add and the next
  // layer's norm): per SigmoidMul node, whether rms_norm_row's gated add does all four in one dispatch
  // (the three nodes after it skipped; the gate's output and the first sum, whose only reader is the
  // next node, never written). Their inputs live until the norm. ZINC_VULKAN_GATE_NORM=0: none.
  std::vector<bool> gate_norm;
  // A mixture whose next nodes read only its input (a shared expert's gate and up products, its
  // activation, its down product): per MoE node, how many of the nodes right after it the recorder
  // may record between the experts' gate and up products and their down product, so they run beside
  // those instead of after the whole mixture (0: none); of them, those reading nothing but the
  // mixture's input first. What the mixture and they read or write lives until the last of them.
  // ZINC_VULKAN_SHARED_EARLY=0: none.
  std::vector<int> moe_early;
  // Two K-quant products of the same rows followed by the SwiGLU of theirs (a dense FFN's or a shared
  // expert's gate and up): per node of the first product, whether decode-sized steps do all three and
  // the down product's codes in one dispatch (mul_mv_k_id_glu as one expert, ids all 0; the next two
  // nodes skipped). Its counters and the zero ids (glu_count_bytes) and its codes' place in act_q8k
  // (glu_codes_offset). ZINC_VULKAN_DENSE_GLU: 1 (the default) GLUs of at most 4,096 rows, 2 every
  // width, 0 none.
  std::vector<bool> dense_glu;
  // A short causal convolution (graph Op::SsmConv: a recurrent layer's, over its q, k and v) whose
  // input is a K-quant product's and that product's only reader: per node of the product, the
  // convolution's node a one-token step of one sequence does in the product's dispatch (mul_mv_k_conv,
  // writing the convolution's output; the convolution's node then records nothing), else -1. Every
  // tensor the nodes between them read or write lives until the convolution, so its output, written
  // that early, takes none of their memory. ZINC_VULKAN_CONV_TAIL=0: none.
  std::vector<int> mm_conv;
  // A DeltaNet followed by the per-head norm of its output and the SwiGLU reading that norm (the gated
  // DeltaNet's output gate): per DeltaNet node, whether a one-token step of one sequence does both in
  // the DeltaNet's dispatch (delta_net's NormGlu tail; the two nodes after it then record nothing), and
  // its counters' bytes (one per 256 values of the widest such output). ZINC_VULKAN_DELTA_NORM=0: none
  // (1, the default: on an H100 qwen3.6-35b-a3b tg64 281.0, 282.1 -> 285.6, 286.8 tok/s).
  std::vector<bool> delta_norm_glu;
  // A shared expert's gated output added to the experts', the residual add and the norm (a gate_norm)
  // done by the two down products' last workgroups in one-token steps of one sequence: the shared
  // expert's (mul_mv_k_norm) and the experts' combined one (mul_mv_k_id_combine_norm), side by side
  // with a GatedTail, the shared gate's product recorded before them (plan_moe_early's nodes that
  // read only the mixture's input go first), the norm left to its readers as mm_norm leaves it (the
  // other decode-sized steps take rms_norm_row's factored form). Per node: for the SigmoidMul its
  // mixture, for the mixture and the shared down product the SigmoidMul (-1: none). What the nodes
  // from the mixture to the norm read or write lives until the norm. ZINC_VULKAN_GATE_TAIL=0: none.
  std::vector<int> gated_tail;
  size_t delta_count_bytes = 0;
  size_t glu_count_bytes = 0, glu_codes_offset = 0;
  size_t norm_codes_offset = 0;
  uint32_t norm_blocks = 0;  // the widest such norm's 256-value blocks
  size_t norm_tail_bytes = 0;
  // A DeltaNet whose q, k and v are contiguous pieces of one tensor's rows (three splits of the conv's
  // output, whose only reader it is) reads them there: the splits are skipped. Per node: that tensor
  // (-1: none) and the pieces' offsets in its rows.
  struct DeltaQkv {
    graph::TensorId src = -1;
    uint32_t off[3] = {0, 0, 0};
  };
  std::vector<DeltaQkv> delta_qkv;

  std::vector<size_t> act_offset;  // per activation: its offset in the arena (the logits have their own buffer)
  size_t arena_bytes = 0;
  size_t logits_bytes = 0;
  size_t hidden_bytes = 0;  // the graph's `hidden` rows, copied to a host buffer of their own (0: none)

  // The step buffer: per part a header {n_past, n_tokens, 0, 0} and its sequence's block table
  // (header_stride apart), the step's token ids at tokens_offset, its input rows (Op::Input, rows as
  // the activations' are padded) at inputs_offset, then the rotation tables.
  int32_t blocks_per_seq = 0;
  size_t header_stride = 16;
  size_t tokens_offset = 0;
  size_t inputs_offset = 0;
  uint32_t input_width = 0;
  std::vector<RopeTable> ropes;
  size_t step_bytes = 0;

  // Scratch.
  size_t attn_slot_bytes = 0;    // a one-token part's region of the attention scratch (several sequences)
  size_t attn_scratch_bytes = 0; // the slots, then a whole step's
  size_t act_q8_bytes = 0, act_q8k_bytes = 0;
  size_t moe_logits_bytes = 0, moe_ids_bytes = 0, moe_slot_bytes = 0;
  size_t moe_count_bytes = 0;    // moe_router's and mul_mv_k_id_glu's counters, for decode-sized steps
  size_t moe_route_bytes = 0;    // moe_sort's output, when steps past kMvMaxTokens group the experts' slots
  size_t x_f16_bytes = 0;        // the matrix products' x in f16 (tensor-core kernel only)
  size_t argmax_scratch_bytes = 0;  // per part
  std::vector<bool> q8k_input;   // per tensor: read by a K-quant product (mul_mv_k) in decode
  // Per tensor: the activation format (q8_act_format) its readers among the 32-element formats'
  // products (mul_mv_q8) take in decode, -1 none or more than one.
  std::vector<int8_t> q8_input;

  // Recurrent state: per node, the bytes of one sequence's region (aligned; 0 without state).
  std::vector<size_t> state_seq_bytes;

  // The rotation table node n reads (an index into ropes).
  int rope_index(const graph::Node& n) const;
};

// Whether node i is a SigmoidMul whose output the next node adds to another row of its width, the sum
// not normalised next: the recorder does both in one dispatch (sigmoid_mul_add), and the plan keeps
// the gate's inputs alive until the add.
bool gate_then_add(const graph::Graph& g, size_t i);

// Throws zinc::Error when the options cannot work with the graph (a KV type the heads do not fit).
Plan make_plan(const Context& ctx, const graph::Graph& g, const ExecOptions& opts, const std::vector<size_t>& state_floats);

}  // namespace zinc::backend::vk
