#version 450
//! variant plain DELTA_PLAIN
//! variant nglu NORM_GLU
// Gated delta rule (graph Op::DeltaNet, CpuExecutable::delta_net then cpu::gated_delta_rule), token by
// token: per token t and v head h, with beta = sigmoid(b), g = A[h] * softplus(a + dt_bias[h]), k and q
// L2-normalised (x / sqrt(sum x^2 + 1e-6)), q also scaled by 1/sqrt(dk):
//   S = exp(g) S;  delta = beta (v - S^T k);  S += k delta^T;  out = S^T q
// S is h's dk x dv state (row i: key dimension i), the CPU's layout: state[h][i][j], float.
// Every column j of S evolves on its own given k and q, so a workgroup owns one (v head, block of 32
// columns) and keeps that block in registers for all the tokens: invocation (c, r) holds rows
// r, r + 8, r + 16, ... of column c (RPT = ceil(dk / 8) of them). The two dot products over i per token
// (S^T k, S^T q) and the norms of k and q are each a partial sum per invocation and one pass over 8
// partials in shared memory, so a token costs two barriers. A warp (32 lanes = 32 columns of one row)
// reads and writes 128 contiguous bytes of the state; the whole state moves once per call (8 * dk * dv
// bytes per head) plus 4 * (2 dk + 2 dv + 2) bytes per token and head. Decode: dv / 32 * n_head_v
// workgroups (128 for Qwen3.5's 32 heads of 128); prefill walks the tokens inside the workgroup.
// Bindings: 0 q, 1 k [n][n_head_k * dk]; 2 v [n][n_head_v * dv] (each may be a piece of wider rows:
// q[t * qk_row + q_off + ...], k at k_off, v[t * v_row + v_off + ...], so the conv's output is read
// without splitting it first); 3 a, 4 b [n][n_head_v]; 5 A, 6 dt_bias
// {n_head_v} F32; 7 state [n_head_v][dk][dv], updated in place; 8 out [n][n_head_v * dv]; 9 kept: with
// keep_stride > 0, the state after each token t also written at kept[t * keep_stride...] (a speculative
// step's states, to go back to one of them).
// Grid: (ceil(dv / 32), n_head_v). Specialisation constant 0: RPT = ceil(dk / 8); 1-5 the row layout.
// NORM_GLU (variant nglu; one token, dv a multiple of 32 dividing 256, q, k and v pieces of one
// buffer's rows, no kept states; bindings below): the per-head RMSNorm and the SwiGLU after it
// (rms_norm_glu.comp's work, norm_glu.glsl) done by the last of each 256-element block's 8
// workgroups (count[block], reset to 0 by it), reading the block's out back (coherent).
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#define COLS 32
#define RG 8
layout(local_size_x = COLS, local_size_y = RG) in;
layout(constant_id = 0) const uint RPT = 16;
#if defined(NORM_GLU)
// q, k and v pieces of one buffer's rows (binding 0); then a 1, b 2, A 3, dt_bias 4, state 5, out 6,
// the counters 7, the norm's weights 8, z 9, the SwiGLU's output 10 and its codes 11 (at most 12
// buffers a kernel; the norm's own output, read by the SwiGLU alone, is not written).
#define B_K 0
#define B_V 0
#define B_A 1
#else
#define B_K 1
#define B_V 2
#define B_A 3
#endif
layout(std430, binding = 0) readonly buffer Q { float q[]; };
layout(std430, binding = B_K) readonly buffer K { float k[]; };
layout(std430, binding = B_V) readonly buffer V { float v[]; };
layout(std430, binding = B_A) readonly buffer Ga { float a[]; };
layout(std430, binding = B_A + 1) readonly buffer Gb { float b[]; };
layout(std430, binding = B_A + 2) readonly buffer GA { float A[]; };
layout(std430, binding = B_A + 3) readonly buffer Gd { float dt_bias[]; };
layout(std430, binding = B_A + 4) buffer St { float state[]; };
#if defined(NORM_GLU)
layout(std430, binding = 6) coherent buffer O { float o[]; };
#else
layout(std430, binding = 8) writeonly buffer O { float o[]; };
layout(std430, binding = 9) writeonly buffer Kp { float kept[]; };
#endif
layout(push_constant) uniform Params {
  uint n_head_k;
  uint n_head_v;
  uint dk;
  uint dv;
  uint tiled;  // 1: v head h reads q/k head h % n_head_k, else h / (n_head_v / n_head_k)
  uint n_tokens;
  uint keep_stride;  // floats between the kept states of consecutive tokens (0: none kept)
#if defined(NORM_GLU)
  uint has_weight;  // the norm's weights (binding 8; 0: none)
  float eps;
  float offset;     // added to every norm weight
  uint q8k_stride;  // words per quantized row; 0: no codes
#endif
} p;
// Rows of q, k and v as pieces of wider rows: floats between tokens' rows of q and k (0: dense,
// n_head_k * dk) and of v (0: n_head_v * dv), and from a row's start to each piece.
layout(constant_id = 1) const uint QK_ROW = 0;
layout(constant_id = 2) const uint V_ROW = 0;
layout(constant_id = 3) const uint Q_OFF = 0;
layout(constant_id = 4) const uint K_OFF = 0;
layout(constant_id = 5) const uint V_OFF = 0;

shared float part_k[RG][COLS], part_q[RG][COLS];  // per row group: S^T k, S^T q partial sums
shared float norm_k[RG], norm_q[RG];               // per row group: sum of k^2, of q^2

#if defined(NORM_GLU)
layout(std430, binding = 7) coherent buffer Cnt { uint count[]; };
layout(std430, binding = 8) readonly buffer NW { float nw[]; };
layout(std430, binding = 9) readonly buffer Z { float z[]; };
layout(std430, binding = 10) writeonly buffer GO { float go[]; };
layout(std430, binding = 11) writeonly buffer QO { uint qo[]; };
#define Q8K_BLOCK256_WRITER
#define q qo
#include "q8k.glsl"
#undef q
#define NG_X(i) o[i]
#define NG_W(i) nw[i]
#define NG_Z(i) z[i]
#define NG_Y(i, v)
#define NG_O(i, v) go[i] = v
#include "norm_glu.glsl"
shared bool ng_last;
#endif

// log(1 + u) without losing small u (GLSL has no log1p).
float log1p_(float u) {
  const float w = 1.0 + u;
  return w == 1.0 ? u : log(w) * (u / (w - 1.0));
}

void main() {
  const uint c = gl_LocalInvocationID.x, r = gl_LocalInvocationID.y;
  const uint h = gl_WorkGroupID.y, col = gl_WorkGroupID.x * COLS + c;
  const bool live = col < p.dv;
  const uint kh = p.tiled != 0u ? h % p.n_head_k : h / (p.n_head_v / p.n_head_k);
  const uint s_base = h * p.dk * p.dv + col;
  const float q_scale = inversesqrt(float(p.dk));

  float S[RPT];
  for (uint m = 0u; m < RPT; ++m) {
    const uint i = m * RG + r;
    S[m] = live && i < p.dk ? state[s_base + i * p.dv] : 0.0;
  }
  const float A_h = A[h], dt_h = dt_bias[h];
  for (uint t = 0u; t < p.n_tokens; ++t) {
    const uint gate = t * p.n_head_v + h;
    const uint qk_base = QK_ROW != 0u ? t * QK_ROW + kh * p.dk : (t * p.n_head_k + kh) * p.dk;
    const float x = a[gate] + dt_h;
    const float decay = exp(A_h * (x > 20.0 ? x : log1p_(exp(x))));
    const float beta = 1.0 / (1.0 + exp(-b[gate]));
    float kr[RPT];
    float sk = 0.0, nk = 0.0;
    for (uint m = 0u; m < RPT; ++m) {
      const uint i = m * RG + r;
      kr[m] = i < p.dk ? k[K_OFF + qk_base + i] : 0.0;
      S[m] *= decay;
      sk += S[m] * kr[m];
      nk += kr[m] * kr[m];
    }
    part_k[r][c] = sk;
    if (c == 0u) norm_k[r] = nk;
    barrier();
    sk = 0.0;
    nk = 0.0;
    for (uint g = 0u; g < RG; ++g) {
      sk += part_k[g][c];
      nk += norm_k[g];
    }
    const float inv_k = inversesqrt(nk + 1e-6);
    const uint out_at = (t * p.n_head_v + h) * p.dv + col;
    const uint v_at = V_ROW != 0u ? V_OFF + t * V_ROW + h * p.dv + col : out_at;
    const float delta = ((live ? v[v_at] : 0.0) - sk * inv_k) * beta;
    const float dk_ = inv_k * delta;
    float sq = 0.0, nq = 0.0;
    for (uint m = 0u; m < RPT; ++m) {
      const uint i = m * RG + r;
      const float qi = i < p.dk ? q[Q_OFF + qk_base + i] : 0.0;
      S[m] += kr[m] * dk_;
      sq += S[m] * qi;
      nq += qi * qi;
    }
    part_q[r][c] = sq;
    if (c == 0u) norm_q[r] = nq;
    barrier();
    // part_k is free again (all reads of it precede this barrier); part_q is read here and written
    // next only after the next token's first barrier.
    if (r == 0u && live) {
      sq = 0.0;
      nq = 0.0;
      for (uint g = 0u; g < RG; ++g) {
        sq += part_q[g][c];
        nq += norm_q[g];
      }
      o[out_at] = sq * (q_scale * inversesqrt(nq + 1e-6));
    }
#if !defined(NORM_GLU)
    if (p.keep_stride != 0u) {
      for (uint m = 0u; m < RPT; ++m) {
        const uint i = m * RG + r;
        if (live && i < p.dk) kept[t * p.keep_stride + s_base + i * p.dv] = S[m];
      }
    }
#endif
  }
  for (uint m = 0u; m < RPT; ++m) {
    const uint i = m * RG + r;
    if (live && i < p.dk) state[s_base + i * p.dv] = S[m];
  }
#if defined(NORM_GLU)
  // Once the block's 8 workgroups have written their columns: the last of them normalises its heads.
  const uint width = p.n_head_v * p.dv, blk = (h * p.dv + gl_WorkGroupID.x * COLS) / 256u, lid = r * COLS + c;
  memoryBarrierBuffer();
  barrier();
  if (lid == 0u) {
    ng_last = atomicAdd(count[blk], 1u) == 256u / COLS - 1u;
    if (ng_last) count[blk] = 0u;
  }
  barrier();
  if (!ng_last) return;  // uniform: the workgroup's shared flag
  memoryBarrierBuffer();
  norm_glu_block(lid, blk * 256u + lid, p.dv, p.has_weight != 0u, p.eps, p.offset, width, p.q8k_stride);
#endif
}
