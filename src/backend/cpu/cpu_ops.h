// CPU implementations of the graph ops over float rows. Each function handles n_tokens rows; the
// matrix products live in quant/matmul.h. These are the reference semantics for every other backend.
#pragma once

#include <cstdint>
#include <vector>

#include "core/thread_pool.h"
#include "graph/graph.h"

namespace zinc::backend::cpu {

// out[t] = x[t] / sqrt(mean(x[t]^2) + eps) * (w + offset), normalising groups of `group` elements
// (group = width for a whole-row norm, head_dim for per-head norms); w has `group` elements and
// may be null.
void rms_norm(const float* x, const float* w, float* out, int64_t width, int64_t group, int64_t n_tokens,
              float eps, float offset);

// The rotation of position `pos`: (cos, sin) of each of the n_rot / 2 pairs, times attn_factor. Other
// backends take this table from the host so every backend rotates by the same angles.
void rope_cos_sin(int n_rot, const graph::RopeParams& p, const float* factors, int32_t pos, float* cs);

// Rotary embedding of the first n_rot dims of each head; token t sits at position pos0 + t.
void rope(const float* x, float* out, int64_t n_tokens, int n_head, int head_dim, int n_rot, graph::RopeMode mode,
          const graph::RopeParams& params, const float* factors, int32_t pos0);

void swiglu(const float* gate, const float* up, float* out, int64_t n);
void geglu(const float* gate, const float* up, float* out, int64_t n);
// GPT-OSS's expert activation: g = min(gate, limit), u = clamp(up, -limit, limit),
// out = g * sigmoid(alpha * g) * (u + 1). `out` may alias `gate` or `up`.
void swiglu_clamped(const float* gate, const float* up, float* out, int64_t n, float alpha, float limit);
void softcap(const float* x, float* out, int64_t n, float cap);

// Depthwise causal convolution over time then SiLU (Op::SsmConv). w: `width` rows of `kernel` taps,
// oldest first; state: the kernel - 1 rows of inputs before this step, oldest first, replaced by the
// last kernel - 1 rows of (state, x). With a pool, a prompt's tokens are split among its threads (the
// same values).
void ssm_conv(const float* x, const float* w, float* state, float* out, int64_t width, int kernel, int64_t n_tokens,
              ThreadPool* pool = nullptr);

// Causal attention of nq query rows (q[r], hd floats each, already rotated) over a sequence's keys and
// values. Keys are indexed from a position aligned to kAttendTile: key j is lane j % kAttendTile of
// tile kt[j / kAttendTile], which holds element c of its keys at c·kAttendTile (c over a cache row's
// width; the head's elements start at kv_offset). Value j is v[j − v_first] + kv_offset. Keys and values
// are floats, or fp16 bit patterns when f16 is set. Row r sees keys [lo[r], hi[r]] (other lanes of a
// tile may hold anything finite) and writes softmax(scale · q·k, capped by softcap·tanh(s/softcap)
// when softcap > 0, with an extra logit sink[r] whose value row is zero when sink is set) · V to
// out[r]. The rows of one call share each key tile (a block of tokens × the query heads of one KV
// head); a row's result does not depend on the other rows, nor on whether keys and values came as
// fp16 or as the floats they convert to.
inline constexpr int kAttendTile = 16;
struct AttendRows {
  const float* const* q = nullptr;
  int nq = 0;
  const int64_t* lo = nullptr;
  const int64_t* hi = nullptr;
  const void* const* kt = nullptr;
  const void* const* v = nullptr;
  bool f16 = false;
  int64_t v_first = 0;
  int64_t kv_offset = 0;
  int hd = 0;
  float scale = 1, softcap = 0;
  const float* sink = nullptr;
  float* const* out = nullptr;
};
void attend_rows(const AttendRows& a, std::vector<float>& scratch);
// One tile of keys: lane l from rows[l] (`width` floats); null rows give zeros.
void transpose_keys(const float* const* rows, int64_t width, float* tile);
// n fp16 bit patterns → floats (exact).
void halves_to_floats(const uint16_t* h, float* out, int64_t n);

struct DeltaNetShape {
  int n_head_k = 0, n_head_v = 0, dk = 0, dv = 0;
  bool tiled = false;  // v head h reads q/k head h % n_head_k (else h / (n_head_v / n_head_k))
};

// The gated delta rule over n_tokens rows (Op::DeltaNet after its gates): q, k [n][n_head_k * dk] as
// projected (L2-normalised here, q also scaled by 1/sqrt(dk)), v [n][n_head_v * dv], g (log decay) and
// beta [n][n_head_v]. state: n_head_v matrices of dk x dv, carried across calls. chunk = 0 runs the
// recurrence token by token; chunk > 0 processes blocks of that many tokens in the parallel form
// (within a block, matrix products; between blocks, the state), the same function up to rounding.
void gated_delta_rule(const float* q, const float* k, const float* v, const float* g, const float* beta, float* state,
                      float* out, int64_t n_tokens, const DeltaNetShape& shape, int chunk, ThreadPool& pool);

}  // namespace zinc::backend::cpu
