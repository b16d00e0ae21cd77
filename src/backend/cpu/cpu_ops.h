// CPU implementations of the graph ops over float rows. Each function handles n_tokens rows; the
// matrix products live in quant/matmul.h. These are the reference semantics for every other backend.
#pragma once

#include <cstdint>

#include "core/thread_pool.h"
#include "graph/graph.h"

namespace zinc::backend::cpu {

// out[t] = x[t] / sqrt(mean(x[t]^2) + eps) * (w + offset), normalising groups of `group` elements
// (group = width for a whole-row norm, head_dim for per-head norms); w has `group` elements and
// may be null.
void rms_norm(const float* x, const float* w, float* out, int64_t width, int64_t group, int64_t n_tokens,
              float eps, float offset);

// Rotary embedding of the first n_rot dims of each head; token t sits at position pos0 + t.
void rope(const float* x, float* out, int64_t n_tokens, int n_head, int head_dim, int n_rot, graph::RopeMode mode,
          const graph::RopeParams& params, const float* factors, int32_t pos0);

void swiglu(const float* gate, const float* up, float* out, int64_t n);
void geglu(const float* gate, const float* up, float* out, int64_t n);
// GPT-OSS's expert activation: g = min(gate, limit), u = clamp(up, -limit, limit),
// out = g * sigmoid(alpha * g) * (u + 1). `out` may alias `gate` or `up`.
void swiglu_clamped(const float* gate, const float* up, float* out, int64_t n, float alpha, float limit);
void softcap(const float* x, float* out, int64_t n, float cap);

}  // namespace zinc::backend::cpu
