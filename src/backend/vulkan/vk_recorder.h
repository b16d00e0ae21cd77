// Recording a step: the graph's nodes emitted as dispatches into one command buffer for one step
// shape (which sequences, how many tokens each, which want every row's logits), over a context's
// buffers as its Plan lays them out. Barriers are inserted only where a dispatch reads or overwrites a
// range an earlier dispatch since the last barrier wrote (or read). What changes from step to step
// (positions, token ids, rotation angles, block tables) is in the step buffer the host writes before
// each submit, so a recording is replayed for every step of its shape.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "backend/vulkan/vk_context.h"
#include "backend/vulkan/vk_plan.h"
#include "backend/vulkan/vk_weights.h"

namespace zinc::backend::vk {

// A sequence's part of a step: its first row among the step's activations and its token count.
struct Part {
  int32_t seq, n_past;
  uint32_t n;
  bool all;  // every row's logits
  uint32_t row;
  bool keep = false;  // the recurrent states after each token are kept (SeqStep::keep_states)
  // Every replay's rows attend at most this many keys (AttentionArgs::max_keys), or 0: no bound.
  uint32_t max_keys = 0;
};

// The buffers of a context that its recordings bind (the context owns them and outlives its
// recordings).
struct Resources {
  const Buffer *arena = nullptr, *logits = nullptr, *hidden = nullptr, *step_host = nullptr, *step_dev = nullptr;
  const Buffer *attn_scratch = nullptr, *act_q8 = nullptr, *act_q8k = nullptr, *x_f16 = nullptr;
  const Buffer *moe_logits = nullptr, *moe_ids = nullptr, *moe_weights = nullptr;
  const Buffer* head_count = nullptr;  // mul_mv_k_rope's counters, one per head of each rotating product (zero between steps)
  const Buffer* moe_count = nullptr;  // moe_router's counters, one per token of a decode-sized step (zero between steps)
  const Buffer* norm_tail = nullptr;  // mul_mv_k_norm's counters (zero between steps), then its partial sums
  const Buffer* glu_count = nullptr;  // the dense GLUs' zero ids, then their counters (zero between steps)
  const Buffer* delta_count = nullptr;  // delta_net's norm tail counters (zero between steps)
  const Buffer *moe_gate = nullptr, *moe_up = nullptr, *moe_down = nullptr;
  const Buffer* moe_route = nullptr;  // a prefill step's slots grouped by expert (moe_sort)
  const Buffer *argmax = nullptr, *argmax_scratch = nullptr;  // per part: an id (plan.align apart) and its scratch
  std::vector<const Buffer*> k, v;   // per layer (null without attention)
  std::vector<const Buffer*> state;  // per node (null without recurrent state)
  // Per node: opts.kept_states regions of plan.state_seq_bytes per sequence (null: none kept).
  std::vector<const Buffer*> kept;
};

struct Recorded {
  std::unique_ptr<Recording> rec;
  int64_t logit_rows = 0;
  std::vector<int64_t> argmax_rows;  // per part: its last logits row, whose argmax the device takes
  std::vector<int64_t> rows;         // rows each activation holds after the step
  int64_t hidden_rows = 0;           // rows of the graph's `hidden` in the host buffer (Resources::hidden)
};

// Records the step of `parts` (rows as the Plan pads them).
Recorded record_step(Context& ctx, const graph::Graph& g, const ExecOptions& opts, const Plan& plan,
                     const VulkanWeights& weights, const Resources& res, const std::vector<Part>& parts);

// Tensor id's first `rows` rows after a step: in the arena, or the logits buffer.
View activation_view(const graph::Graph& g, const Plan& plan, const Resources& res, graph::TensorId id, int64_t rows);

}  // namespace zinc::backend::vk
