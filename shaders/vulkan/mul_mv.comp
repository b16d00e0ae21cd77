#version 450
//! variants-by-type all
//! variants-by-type all id_ MUL_MV_ID
//! variant nrm_f32 TYPE_F32,MUL_MV_NORM
//! variant nrm_f16 TYPE_F16,MUL_MV_NORM
//! variant nrm_bf16 TYPE_BF16,MUL_MV_NORM
// Matrix-vector products over a GGUF weight for decode (graph Op::MatMul with few tokens, and the MoE
// expert projections): y[t][r] = W[r] . x[t] (+ bias[r]) for every row r of a weight stored in one
// type (a variant per TYPE_*, dequantized by quant.glsl), x and y float32 rows [n_tokens][ncols] and
// [n_tokens][nrows], packed.
//
// A workgroup of WG invocations takes ROWS rows and NTOK tokens: its invocations walk the rows' units
// (4 to 16 elements each, quant.glsl) in turn, decode the unit of each row into registers and
// multiply them by all NTOK tokens' x, each x load serving the ROWS rows, so the weight is read once
// per NTOK tokens and x once per ROWS rows (adjacent invocations read adjacent runs of x). Partial
// sums are added within each subgroup (subgroupAdd, any subgroup size), then across the workgroup's
// subgroups in shared memory. Token groups beyond what the grid covers loop (grid z strides), so one
// dispatch serves any n_tokens.
//
// MUL_MV_ID (mixture of experts, variants id_*): the weight holds n_expert matrices expert_stride
// bytes apart, ids [n_tokens][n_used] picks one per (token, slot) pair, and
// y[t][k][r] = W_ids[t][k][r] . x_(t,k) + bias[ids[t][k]][r], with x_(t,k) = x[t] (shared) or x[t][k]
// (x_per_slot). One pair per workgroup and grid z step (NTOK = 1).
//
// MUL_MV_NORM (variants nrm_f32, nrm_f16, nrm_bf16): x is the residual sum h whose whole-row RMSNorm
// the product reads, the norm left to its readers (mul_mv_k.comp's MUL_MV_NORM, rms_norm_row's
// factored form): each x run is multiplied by the norm's weights plus offset (binding 6, where
// norm_has_w) before its dots, and each token's sums by 1 / sqrt(sum / ncols + norm_eps) from its
// norm_blocks partial sums of h^2 (binding 5) before the bias, as moe_router takes it.
//
// Bindings: 0 W (raw blocks), 1 x (float, read as vec4), 2 y, 3 bias (floats; bound to anything when
// has_bias = 0), 4 ids (uint, MUL_MV_ID). Grid: x*y = ceil(nrows / ROWS) workgroups (split in y past
// the device's limit), z = token groups (or pairs), any count. Preconditions: ncols a multiple of the
// unit (4 for F32, F16 and BF16, the block otherwise), rows at multiples of row_bytes, views at
// offset_alignment, y not overlapping x. Moves the weight once per token group, plus x (from cache)
// and y.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 128;   // invocations per workgroup
layout(constant_id = 1) const uint ROWS = 2;   // rows per workgroup
layout(constant_id = 2) const uint NTOK = 1;   // tokens per workgroup (1..8; 1 with MUL_MV_ID)

#include "quant.glsl"

layout(std430, binding = 1) readonly restrict buffer Xbuf { vec4 x4[]; };
layout(std430, binding = 2) writeonly restrict buffer Ybuf { float y[]; };
layout(std430, binding = 3) readonly restrict buffer Bbuf { float bias[]; };
#if defined(MUL_MV_ID)
layout(std430, binding = 4) readonly restrict buffer Ibuf { uint ids[]; };
#endif
layout(push_constant) uniform Params {
  uint ncols;
  uint nrows;
  uint row_bytes;      // bytes per stored row
  uint n_tokens;
  uint has_bias;       // 0: no bias
  uint n_used;         // MUL_MV_ID: experts per token
  uint n_expert;       // MUL_MV_ID: ids are clamped below it
  uint expert_stride;  // MUL_MV_ID: bytes between experts' matrices
  uint x_per_slot;     // MUL_MV_ID: 1: x[t][k], 0: x[t]
#if defined(MUL_MV_NORM)
  uint norm_blocks;
  float norm_eps;
  float norm_offset;
  uint norm_has_w;
#endif
} p;
#if defined(MUL_MV_NORM)
layout(std430, binding = 5) readonly restrict buffer NPbuf { float npart[]; };
layout(std430, binding = 6) readonly restrict buffer NWbuf { vec4 nw4[]; };

// The token of set `set`'s t-th row.
uint norm_token(uint set, uint t) { return min(set * NTOK + t, p.n_tokens - 1u); }

#include "norm_partials.glsl"
#endif

// One partial sum per (row, token) and subgroup; WG subgroups at most (a subgroup size of 1).
shared float red[ROWS * NTOK * WG];

void main() {
  quant_init();
  const uint tid = gl_LocalInvocationID.x;
  const uint row0 = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * ROWS;
  if (row0 >= p.nrows) return;  // the grid's padding: the whole workgroup leaves
  const uint nunits = p.ncols / UE, xw = p.ncols / 4u;
#if defined(MUL_MV_ID)
  const uint n_sets = p.n_tokens * p.n_used;  // (token, slot) pairs
#else
  const uint n_sets = (p.n_tokens + NTOK - 1u) / NTOK;
#endif
  for (uint set = gl_WorkGroupID.z; set < n_sets; set += gl_NumWorkGroups.z) {
    // Rows and tokens past the end repeat the last one (loads stay in bounds, nothing is stored).
    uint xo[NTOK], rb[ROWS];
#if defined(MUL_MV_ID)
    const uint e = min(ids[set], p.n_expert - 1u);
    xo[0] = (p.x_per_slot != 0u ? set : set / p.n_used) * xw;
    const uint wb = e * p.expert_stride;
#else
    [[unroll]] for (uint t = 0u; t < NTOK; ++t) xo[t] = min(set * NTOK + t, p.n_tokens - 1u) * xw;
    const uint wb = 0u;
#endif
    [[unroll]] for (uint r = 0u; r < ROWS; ++r) rb[r] = wb + min(row0 + r, p.nrows - 1u) * p.row_bytes;
#if defined(MUL_MV_NORM)
    const NormPartials np = np_load(set, tid);  // (norm_partials.glsl)
#endif
    float acc[ROWS * NTOK];
    [[unroll]] for (uint i = 0u; i < ROWS * NTOK; ++i) acc[i] = 0.0;

    for (uint u = tid; u < nunits; u += WG) {
      // The unit of each row into registers, then each x run loaded once for all the rows.
      vec4 q[ROWS][UR];
      float a[ROWS][UR], b[ROWS][UR];
      [[unroll]] for (uint r = 0u; r < ROWS; ++r) {
        unit_load(rb[r], u, q[r], a[r], b[r]);
#if defined(HAS_B)
        // A scale and an offset: dequantized here, so that each token costs one dot per run.
        [[unroll]] for (uint k = 0u; k < UR; ++k) q[r][k] = q[r][k] * a[r][k] + b[r][k];
#endif
      }
      [[unroll]] for (uint k = 0u; k < UR; ++k) {
        const uint col4 = unit_col(u, k) >> 2;
#if defined(MUL_MV_NORM)
        const vec4 wn = p.norm_has_w != 0u ? nw4[col4] + p.norm_offset : vec4(1.0);
#endif
        [[unroll]] for (uint t = 0u; t < NTOK; ++t) {
#if defined(MUL_MV_NORM)
          precise const vec4 xv = x4[xo[t] + col4] * wn;
#else
          const vec4 xv = x4[xo[t] + col4];
#endif
          [[unroll]] for (uint r = 0u; r < ROWS; ++r) {
#if defined(HAS_B)
            acc[r * NTOK + t] += dot(q[r][k], xv);
#else
            acc[r * NTOK + t] += a[r][k] * dot(q[r][k], xv);  // a scale only: once per run
#endif
          }
        }
      }
    }

    [[unroll]] for (uint i = 0u; i < ROWS * NTOK; ++i) {
      const float s = subgroupAdd(acc[i]);
      if (subgroupElect()) red[i * WG + gl_SubgroupID] = s;
    }
#if defined(MUL_MV_NORM)
    np_stage(np, tid);
#endif
    barrier();
#if defined(MUL_MV_NORM)
    float ns[NTOK];
    [[unroll]] for (uint t = 0u; t < NTOK; ++t) ns[t] = np_scale(np, set, t);
#endif
    for (uint i = tid; i < ROWS * NTOK; i += WG) {
      float s = 0.0;
      for (uint g = 0u; g < gl_NumSubgroups; ++g) s += red[i * WG + g];
      const uint row = row0 + i / NTOK;
#if defined(MUL_MV_ID)
      if (row < p.nrows) {
        if (p.has_bias != 0u) s += bias[e * p.nrows + row];
        y[set * p.nrows + row] = s;
      }
#else
      const uint tok = set * NTOK + i % NTOK;
#if defined(MUL_MV_NORM)
      s *= ns[i % NTOK];
#endif
      if (row < p.nrows && tok < p.n_tokens) {
        if (p.has_bias != 0u) s += bias[row];
        y[tok * p.nrows + row] = s;
      }
#endif
    }
    barrier();  // red is reused by the next set
  }
}
