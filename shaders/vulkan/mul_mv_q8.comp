#version 450
//! variants-by-type q8 mat_ MUL_MV_MAT
//! variants-by-type q8 id_ MUL_MV_ID
//! variants-by-type q8 dmat_ MUL_MV_MAT,INT_DOT
//! variants-by-type q8 did_ MUL_MV_ID,INT_DOT
//! variants-by-type q8 didc_ MUL_MV_ID,MUL_MV_COMBINE,INT_DOT
//! variants-by-type q8 didg_ MUL_MV_ID,MUL_MV_GLU,INT_DOT
//! variants-by-type q8 didcr_ MUL_MV_ID,MUL_MV_COMBINE,INT_DOT,MUL_MV_ROWNORM
//! variants-by-type q8 drope_ MUL_MV_MAT,INT_DOT,MUL_MV_ROPE
//! variants-by-type q8 dvst_ MUL_MV_MAT,INT_DOT,MUL_MV_VSTORE
//! variants-by-type q8 drn_ MUL_MV_MAT,INT_DOT,MUL_MV_ROWNORM
//! variants-by-type q8 drnr_ MUL_MV_MAT,INT_DOT,MUL_MV_ROWNORM,MUL_MV_ROUTE
// Weights of the 32-element formats times activations quantized as the CPU quantizes them
// (quantize_q8.comp; quant/dot.h pairs Q4_0, Q5_0, Q8_0, IQ4_NL and MXFP4 with Q8_0 activations, Q4_1
// and Q5_1 with Q8_1): per block the integer sum of 32 code products, then the float expression the
// CPU's reference dot product (quant/dot_ref.cpp) computes from it, operation for operation (precise:
// no fused multiply-add), so each block's value is the CPU's bit for bit and only the order blocks are
// added in differs. That keeps greedy decoding on the GPU on the CPU's tokens.
// A workgroup of 128 per ROWS rows and a token (rows over x and y, tokens over z), 128 / ROWS
// invocations per row; each invocation takes whole blocks, a subgroup and shared-memory sum finishes
// the row (each row's sums added per subgroup with the other rows' as zeros: any subgroup size).
// MUL_MV_ID (mixture of experts): z runs over (token, slot) pairs; the pair's expert ids[pair] picks
// a matrix expert_stride bytes further on, x is the token's row (shared by its slots) or the pair's
// own (x_per_slot), and the expert's bias row (nrows floats) is added when has_bias (without
// MUL_MV_ID: bias[row], the product's own bias, added after its sum as the graph's Add would).
// INT_DOT (variants dmat_*, did_*; devices with shaderIntegerDotProduct): each word's four code
// products summed by one packed 4 x 8 dot product, the weight's codes first made signed bytes (the
// nibble formats' offset subtracted per byte, the codebooks' values packed): the same integer sums.
// MUL_MV_COMBINE (variants didc_*, the down product with the combine folded in): each workgroup also
// counts itself in count[token][row group] (binding 6, coherent); the last of a token's n_used pairs
// over the same rows resets the count to 0 and writes out[token][r] (binding 7) = the sum over slots
// in slot order of weights[token][slot] (binding 5) * y[pair][r], y read back (coherent), each
// product rounded before it is added, as mul_mv_k's MUL_MV_COMBINE adds them.
// MUL_MV_ROWNORM (variants didcr_*, with MUL_MV_COMBINE, a token at a time: the combined rows followed
// by a residual add and a whole-row RMSNorm): the last of the token's combining workgroups to finish
// does rms_norm_row's add and norm on out's row (row_norm_tail.glsl): the residual (binding 8), the
// sum (9), the norm's output (10), its codes (11), the counter (12), the norm's weights (13). Variants
// drn_* (a plain product, its bias added): the same on y's row (binding 2, coherent) by the last of
// the token's workgroups.
// MUL_MV_ROUTE (variants drnr_*, with drn_'s tail: a mixture's router reading the norm, routed in the
// same dispatch): n_expert more workgroups after the product's o_groups, one an expert, each making
// z[e] = M[e] . a + R_w[e] . r + c[e] (binding 3: per expert M's d_in floats then R_w's nrows, then c;
// a the product's activation codes, r the residual) into logits (binding 5, coherent), and counted
// with the product's workgroups (arrivals: both). The last to finish, after the norm, scales each
// logit by the norm's scale s (R y = s z: y = s (w + offset) h, h = W a + bias + r, R_w = R diag(w +
// offset), M = R_w W, c = R_w bias) and routes as moe_route.comp does (moe_route.glsl; flags, the
// router's bias at binding 6, ids 7, weights 14; no expert scale). n_expert <= 128.
// MUL_MV_GLU (variants didg_*, a mixture's gate and up products with their GLU and the down product's
// codes folded in; x per token): each workgroup takes the same ROWS rows of the gate matrix (binding 0,
// bias binding 4 where has_bias & 1) and the up matrix (binding 5, the same layout; bias binding 8
// where has_bias & 2), writes y[pair][r] = the GLU of the two sums (eltwise.comp's OP_SWIGLU, or
// OP_SWIGLU_CLAMPED with alpha and limit where clamped) and counts itself in count[pair][r / 32]
// (binding 6, coherent); the last of a block's 32 / ROWS workgroups resets the count and writes the
// block's codes into q_out (binding 7; rows out_words apart, format out_format) as quantize_q8.comp
// makes them from y (coherent: read back). nrows a multiple of 32.
// MUL_MV_ROPE (variants drope_*, decode's q or k product of one token) and MUL_MV_VSTORE (dvst_*, v's):
// mul_mv_k.comp's tails of the same names (mv_tails.glsl), after the bias: the last workgroup of each
// head rotates it in place (the per-head norm too where flags & 2) and, where flags & 8, appends it to
// the K cache; a v product's workgroups append their rows to the V cache. Bindings 3 cs, 5 norm
// weights, 6 the cache, 7 the heads' counters, 8 the step header. Needs head_dim at most 128 and a
// multiple of ROWS, subgroups of at most 64 (mul_mv_q8_tail_fits).
// Bindings: 0 W, 1 codes, 2 y, 3 ids (MUL_MV_ID), 4 bias (bound to anything when has_bias = 0).
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_GOOGLE_include_directive : require
#if defined(INT_DOT)
#extension GL_EXT_spirv_intrinsics : require
#endif
#if defined(MUL_MV_ROWNORM)
#extension GL_ARB_gpu_shader_fp64 : require
#endif
#if defined(MUL_MV_ROUTE)
#extension GL_EXT_control_flow_attributes : enable
#endif
layout(local_size_x = 128) in;
layout(constant_id = 0) const uint ROWS = 1;  // rows per workgroup: 1, 2, 4 or 8
layout(std430, binding = 0) readonly buffer W { uint w[]; };
layout(std430, binding = 1) readonly buffer Q { uint q[]; };
#if defined(MUL_MV_COMBINE)
layout(std430, binding = 2) coherent buffer Y { float y[]; };
layout(std430, binding = 5) readonly buffer Wt { float slot_w[]; };
layout(std430, binding = 6) coherent buffer C { uint count[]; };
#if defined(MUL_MV_ROWNORM)
layout(std430, binding = 7) coherent buffer O { float o[]; };
layout(std430, binding = 7) coherent buffer O4 { vec4 ra4[]; };
#else
layout(std430, binding = 7) writeonly buffer O { float o[]; };
#endif
shared bool last_one;
#elif defined(MUL_MV_GLU)
layout(std430, binding = 2) coherent buffer Y { float y[]; };
layout(std430, binding = 5) readonly buffer U { uint wu[]; };
layout(std430, binding = 6) coherent buffer C { uint count[]; };
layout(std430, binding = 7) writeonly buffer QO { uint q_out[]; };
layout(std430, binding = 8) readonly buffer UBias { float ubias[]; };
shared bool last_one;
#define Q8_ACT_WRITER
#define q q_out
#include "f16_rne.glsl"
#include "div_rn.glsl"
#include "q8_act.glsl"
#undef q
#elif defined(MUL_MV_ROPE) || defined(MUL_MV_VSTORE)
layout(std430, binding = 2) coherent buffer Y { float y[]; };
layout(std430, binding = 3) readonly buffer CS { float cs[]; };  // [n_rot]: cos, sin per pair
layout(std430, binding = 5) readonly buffer NW { float nw[]; };  // head_dim norm weights
layout(std430, binding = 6) writeonly buffer KC { uint kc[]; };  // the cache: halves in pairs, or floats' bits
layout(std430, binding = 7) coherent buffer C { uint count[]; };
layout(std430, binding = 8) readonly buffer Step { uint step[]; };  // word 0: n_past; the block table
#elif defined(MUL_MV_ROWNORM)
layout(std430, binding = 2) coherent buffer Y { float y[]; };
layout(std430, binding = 2) coherent buffer Y4 { vec4 ra4[]; };
#else
layout(std430, binding = 2) writeonly buffer Y { float y[]; };
#endif
#if defined(MUL_MV_ROUTE)
layout(std430, binding = 3) readonly buffer MR { vec4 mr4[]; };
layout(std430, binding = 3) readonly buffer MR1 { float mr[]; };
layout(std430, binding = 5) coherent buffer L { float logits[]; };
layout(std430, binding = 6) readonly buffer RBias { float router_b[]; };
layout(std430, binding = 6) readonly buffer ES { float expert_scale[]; };  // (flags & 8 never set)
layout(std430, binding = 7) buffer I { uint ids[]; };
layout(std430, binding = 14) writeonly buffer RWt { float weights[]; };
#endif
#if defined(MUL_MV_ROWNORM)
layout(std430, binding = 8) readonly buffer RB { vec4 rb4[]; };
layout(std430, binding = 9) buffer RS { vec4 rs4[]; };
layout(std430, binding = 10) writeonly buffer RY { vec4 ry4[]; };
layout(std430, binding = 11) writeonly buffer RQ { uint rq[]; };
layout(std430, binding = 12) coherent buffer RC { uint rcount[]; };
layout(std430, binding = 13) readonly buffer RW { vec4 rw4[]; };
#endif
#if defined(MUL_MV_ID)
layout(std430, binding = 3) readonly buffer Ids { uint ids[]; };
#endif
layout(std430, binding = 4) readonly buffer Bias { float bias[]; };
layout(push_constant) uniform Params {
  uint nblocks;    // blocks per row
  uint nrows;
  uint row_bytes;
  uint n_used;         // MUL_MV_ID: slots per token
  uint n_expert;       // MUL_MV_ID: ids are clamped below it
  uint expert_stride;  // MUL_MV_ID: bytes between experts' matrices
  uint x_per_slot;     // MUL_MV_ID: 1: x row per pair, 0: per token
  uint has_bias;       // bias[row] (MUL_MV_ID: the expert's bias row) is added (MUL_MV_GLU: 1 gate's, 2 up's)
#if defined(MUL_MV_GLU)
  uint clamped;        // 1: OP_SWIGLU_CLAMPED
  float alpha, limit;  // its parameters
  uint out_words;      // words per row of q_out
  uint out_format;     // 0: Q8_0 codes, 1: Q8_1
#elif defined(MUL_MV_ROWNORM)
  float norm_eps, norm_offset;
  uint norm_has_w;  // 0: the norm has no weights (binding 13 unread)
  uint out_stride;  // words per row of the norm's codes (0: none)
  uint q8_format;   // their format: 0 ACT_Q8_0, 1 ACT_Q8_1
  uint arrivals;    // the token's combining workgroups (drn_: its workgroups): its groups of rows
#if defined(MUL_MV_ROUTE)
  uint o_groups;    // the product's workgroups (the experts' follow)
  uint flags;       // moe_route.comp's
  float logit_scale;
#endif
#elif defined(MUL_MV_ROPE) || defined(MUL_MV_VSTORE)
  uint head_dim;    // MUL_MV_ROPE
  uint n_rot;       // MUL_MV_ROPE
  uint flags;       // 1 NeoX, 2 norm, 4 norm weights, 8 append to the cache, 16 a float cache
  uint count_base;  // MUL_MV_ROPE: the first head's counter
  float eps;        // MUL_MV_ROPE
  float offset;     // MUL_MV_ROPE
#endif
} p;

#if defined(MUL_MV_ROPE) || defined(MUL_MV_VSTORE)
#include "f16_rne.glsl"
#include "kv_rows.glsl"
#include "rope_pair.glsl"
#define TAIL_ROWS ROWS
#include "mv_tails.glsl"
#endif
#if defined(MUL_MV_ROWNORM)
#include "f16_rne.glsl"
#include "div_rn.glsl"
#include "row_norm_tail.glsl"
#endif
#if defined(MUL_MV_ROUTE)
#define WG_SIZE 128
#define MAX_EXPERT 128
#define MAX_USED 16
float route_scale(uint t) { return 1.0; }  // (flags & 32 is moe_route.comp's)
#include "moe_route.glsl"
#endif

// BLOCK_BYTES per block (quant/blocks.h); NW words hold a block wherever it starts (blocks of an even
// size start at even bytes, MXFP4's 17 at any); nibble formats subtract OFFSET from their codes.
#if defined(TYPE_Q4_0) || defined(TYPE_IQ4_NL)
#define BLOCK_BYTES 18u
#define NW 5
#define OFFSET 8
#elif defined(TYPE_Q4_1)
#define BLOCK_BYTES 20u
#define NW 5
#define OFFSET 0
#define ACT_Q8_1
#elif defined(TYPE_Q5_0)
#define BLOCK_BYTES 22u
#define NW 6
#define OFFSET 16
#elif defined(TYPE_Q5_1)
#define BLOCK_BYTES 24u
#define NW 6
#define OFFSET 0
#define ACT_Q8_1
#elif defined(TYPE_Q8_0)
#define BLOCK_BYTES 34u
#define NW 9
#elif defined(TYPE_MXFP4)
#define BLOCK_BYTES 17u
#define NW 5
#else
#error "define one TYPE_*"
#endif

#if defined(TYPE_IQ4_NL) || defined(TYPE_MXFP4)
#define HAS_CODEBOOK
// The codes of the 16 nibbles (kIQ4NLValues; kMXFP4Values, E2M1 doubled): integers, as the CPU sums
// them. In shared memory: a private array indexed by a variable would go to local memory.
shared int codebook[16];
#endif

shared float partial[ROWS * 128];  // per (row, subgroup): sized for subgroups of one invocation
#if defined(MUL_MV_GLU)
shared float partial_u[ROWS * 128];  // the up rows'

// eltwise.comp's OP_SWIGLU or OP_SWIGLU_CLAMPED of gate x and up y.
float glu(float x, float y) {
  if (p.clamped != 0u) {
    const float g = min(x, p.limit), u = clamp(y, -p.limit, p.limit);
    return g / (1.0 + exp(-p.alpha * g)) * (u + 1.0);
  }
  return x / (1.0 + exp(-x)) * y;
}
#endif

// The 32 bits at byte o of a block whose words blk[i] are its bytes 4i..4i+3 (o + 3 < BLOCK_BYTES, or
// the bits past the block are only masked out; blk[NW] is a zero, so both sides of the select stay in
// the array). o is a constant wherever it is called, so blk stays in registers.
uint b32(uint blk[NW + 1], uint o) {
  const uint i = o >> 2, s = (o & 3u) * 8u;
  return s == 0u ? blk[i] : (blk[i] >> s) | (blk[i + 1u] << (32u - s));
}

int sbyte(uint word, uint k) { return bitfieldExtract(int(word), int(8u * k), 8); }
int ubyte(uint word, uint k) { return int(bitfieldExtract(word, int(8u * k), 8)); }

// Word i (elements 4i..4i+3) of the nibble formats' codes from their 16 bytes qs: element j < 16 is
// the low nibble of byte j, element j >= 16 the high nibble of byte j - 16.
uint nibbles(uint qs[4], uint i) { return i < 4u ? qs[i] & 0x0f0f0f0fu : (qs[i - 4u] >> 4) & 0x0f0f0f0fu; }

#if defined(TYPE_Q5_0) || defined(TYPE_Q5_1)
// Bit 4 of elements 4i..4i+3 (bits 4i.. of qh), placed at bit 4 of each byte.
uint high_bits(uint qh, uint i) {
  const uint h = (qh >> (4u * i)) & 0xfu;
  return ((h & 1u) | ((h & 2u) << 7) | ((h & 4u) << 14) | ((h & 8u) << 21)) << 4;
}
#endif

float f16(uint h) { return unpackHalf2x16(h).x; }

#if defined(INT_DOT)
// OpSDot on 4 x int8 packed in 32 bits (SPV_KHR_integer_dot_product).
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4450)
int sdot_4x8(uint a, uint b, spirv_literal int packed_format);

// Four codes of 0..2 OFFSET - 1 (bytes of c) less OFFSET, as signed bytes: flipping the offset's bit
// gives code - OFFSET modulo 2 OFFSET, and where that bit is then set (code < OFFSET) the bits above it
// make the byte negative. No byte carries into the next.
uint signed_codes(uint c) {
#if defined(OFFSET)
#if OFFSET != 0
  const uint bit = uint(OFFSET) * 0x01010101u, v = c ^ bit;
  return v | (v & bit) * (256u / uint(OFFSET) - 2u);
#else
  return c;
#endif
#else
  return c;
#endif
}
#endif

// Block b's value against activation row xrow (blk: its words, funnel-shifted as in main).
float block_value(uint blk[NW + 1], uint xrow, uint b) {
  // Activation block (quantize_q8.comp): Q8_0: 8 words of codes, then d as a float; Q8_1: the CPU's
  // BlockQ8_1 bytes (halves d and s, then 8 words of codes).
  const uint qa = (xrow * p.nblocks + b) * 9u;
#if defined(ACT_Q8_1)
  const uint xcodes = qa + 1u;
#else
  const uint xcodes = qa;
#endif
  // The weight's codes as 8 words of bytes (element 4i + k in byte k of word i): signed (Q8_0),
  // nibbles (plus bit 4 for Q5) or codebook indices.
  uint cw[8];
#if defined(TYPE_Q8_0)
  for (uint i = 0u; i < 8u; ++i) cw[i] = b32(blk, 2u + 4u * i);
#else
#if defined(TYPE_Q4_0) || defined(TYPE_IQ4_NL)
  const uint qs[4] = uint[4](b32(blk, 2u), b32(blk, 6u), b32(blk, 10u), b32(blk, 14u));
#elif defined(TYPE_Q4_1)
  const uint qs[4] = uint[4](b32(blk, 4u), b32(blk, 8u), b32(blk, 12u), b32(blk, 16u));
#elif defined(TYPE_Q5_0)
  const uint qh = b32(blk, 2u);
  const uint qs[4] = uint[4](b32(blk, 6u), b32(blk, 10u), b32(blk, 14u), b32(blk, 18u));
#elif defined(TYPE_Q5_1)
  const uint qh = b32(blk, 4u);
  const uint qs[4] = uint[4](b32(blk, 8u), b32(blk, 12u), b32(blk, 16u), b32(blk, 20u));
#elif defined(TYPE_MXFP4)
  const uint qs[4] = uint[4](b32(blk, 1u), b32(blk, 5u), b32(blk, 9u), b32(blk, 13u));
#endif
  for (uint i = 0u; i < 8u; ++i) {
    cw[i] = nibbles(qs, i);
#if defined(TYPE_Q5_0) || defined(TYPE_Q5_1)
    cw[i] |= high_bits(qh, i);
#endif
  }
#endif
  int sumi = 0;
#if defined(INT_DOT)
  for (uint i = 0u; i < 8u; ++i) {
#if defined(HAS_CODEBOOK)
    const uint c = cw[i];
    const uint sc = (uint(codebook[c & 0xffu]) & 0xffu) | ((uint(codebook[(c >> 8) & 0xffu]) & 0xffu) << 8) |
                    ((uint(codebook[(c >> 16) & 0xffu]) & 0xffu) << 16) | (uint(codebook[c >> 24]) << 24);
#else
    const uint sc = signed_codes(cw[i]);
#endif
    sumi += sdot_4x8(sc, q[xcodes + i], 0);
  }
#else
  for (uint i = 0u; i < 8u; ++i) {
    const uint xw = q[xcodes + i];
    for (uint k = 0u; k < 4u; ++k) {
#if defined(TYPE_Q8_0)
      sumi += sbyte(cw[i], k) * sbyte(xw, k);
#elif defined(HAS_CODEBOOK)
      sumi += codebook[ubyte(cw[i], k)] * sbyte(xw, k);
#else
      sumi += (ubyte(cw[i], k) - OFFSET) * sbyte(xw, k);
#endif
    }
  }
#endif
  // The block's value as dot_ref computes it (left to right, each product rounded).
  const uint head = b32(blk, 0u);
#if defined(ACT_Q8_1)
  // d_w * d_x * sumi + m_w * s_x (Q8_1's s = d_x * the sum of its codes).
  const uint xds = q[qa];
  precise const float v = f16(head & 0xffffu) * f16(xds & 0xffffu) * float(sumi) + f16(head >> 16) * f16(xds >> 16);
#else
#if defined(TYPE_MXFP4)
  // The E8M0 exponent e as 2^(e-127) / 2 (the codebook is doubled): quant/fp16.h's e8m0_to_f32_half.
  const uint ex = head & 0xffu;
  const float dw = uintBitsToFloat(ex < 2u ? 0x00200000u << ex : (ex - 1u) << 23);
#else
  const float dw = f16(head & 0xffffu);
#endif
  precise const float v = dw * uintBitsToFloat(q[qa + 8u]) * float(sumi);
#endif
  return v;
}

#if defined(MUL_MV_ROUTE)
// Expert e's z for token tok (its workgroup), then its arrival at the norm's tail.
void expert_logit(uint e, uint tok, uint lid) {
  const uint d_in4 = p.nblocks * 8u, d4 = p.nrows / 4u, row4 = e * (d_in4 + d4);
  float acc = 0.0;
  for (uint b = lid; b < p.nblocks; b += 128u) {  // M[e] . a, a block of 32 an invocation
    const uint qa = (tok * p.nblocks + b) * 9u;
#if defined(ACT_Q8_1)
    const uint xc = qa + 1u;
    const float dx = f16(q[qa] & 0xffffu);
#else
    const uint xc = qa;
    const float dx = uintBitsToFloat(q[qa + 8u]);
#endif
    float sb = 0.0;
    for (uint i = 0u; i < 8u; ++i) {
      const uint xw = q[xc + i];
      sb += dot(mr4[row4 + b * 8u + i], vec4(sbyte(xw, 0u), sbyte(xw, 1u), sbyte(xw, 2u), sbyte(xw, 3u)));
    }
    acc += dx * sb;
  }
  for (uint i = lid; i < d4; i += 128u) acc += dot(mr4[row4 + d_in4 + i], rb4[tok * d4 + i]);  // R_w[e] . r
  const float sg = subgroupAdd(acc);
  if (gl_SubgroupInvocationID == 0u) partial[gl_SubgroupID] = sg;
  barrier();
  if (lid == 0u) {
    float z = 0.0;
    for (uint i = 0u; i < gl_NumSubgroups; ++i) z += partial[i];
    logits[tok * p.n_expert + e] = z + mr[p.n_expert * (d_in4 + d4) * 4u + e];
  }
}

// After row_norm_tail, in its last workgroup: the logits scaled by the norm's scale, then routed.
void route_after_norm(uint tok, uint lid) {
  if (!rn_last) return;  // uniform
  if (lid < p.n_expert) logits[tok * p.n_expert + lid] *= rn_scale;  // (route_token reads its own)
  route_token(tok);
}
#endif

void main() {
  const uint lid = gl_LocalInvocationID.x;
#if defined(TYPE_IQ4_NL)
  const int kValues[16] = int[16](-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113);
#elif defined(TYPE_MXFP4)
  const int kValues[16] = int[16](0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
#endif
#if defined(HAS_CODEBOOK)
  if (lid < 16u) codebook[lid] = kValues[lid];
  barrier();
#endif
  const uint per_row = 128u / ROWS, grp = lid / per_row;
  const uint wg = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x, row0 = wg * ROWS, tok = gl_WorkGroupID.z;
#if defined(MUL_MV_ROUTE)
  if (wg >= p.o_groups) {  // uniform: an expert's workgroup
    if (wg - p.o_groups >= p.n_expert) return;
    expert_logit(wg - p.o_groups, tok, lid);
    row_norm_tail(tok, lid, 128u);
    route_after_norm(tok, lid);
    return;
  }
#endif
  if (row0 >= p.nrows) return;  // uniform across the workgroup
  const uint row = min(row0 + grp, p.nrows - 1u);  // rows past the end repeat the last (not stored)
#if defined(MUL_MV_ID)
  const uint e = min(ids[tok], p.n_expert - 1u);
  const uint wbase = e * p.expert_stride + row * p.row_bytes;
  const uint xrow = p.x_per_slot != 0u ? tok : tok / p.n_used;
#else
  const uint wbase = row * p.row_bytes;
  const uint xrow = tok;
#endif
  float s = 0.0;
#if defined(MUL_MV_GLU)
  float su = 0.0;  // the up row's
#endif
  for (uint b = lid % per_row; b < p.nblocks; b += per_row) {
    const uint off = wbase + b * BLOCK_BYTES;
    // The NW words holding the block (none past the word of its last byte), funnel-shifted so that
    // blk[i] is its bytes 4i..4i+3; raw[NW] and blk[NW] are zeros for the shifts.
    const uint w0 = off >> 2, sh = (off & 3u) * 8u;
    uint raw[NW + 1];
    for (uint i = 0u; i < uint(NW); ++i) raw[i] = w[w0 + i];
    raw[NW] = 0u;
#if defined(MUL_MV_GLU)
    uint rawu[NW + 1];
    for (uint i = 0u; i < uint(NW); ++i) rawu[i] = wu[w0 + i];
    rawu[NW] = 0u;
#endif
    uint blk[NW + 1];
    for (uint i = 0u; i < uint(NW); ++i) blk[i] = (raw[i] >> sh) | ((raw[i + 1u] << 1) << (31u - sh));
    blk[NW] = 0u;
    s += block_value(blk, xrow, b);
#if defined(MUL_MV_GLU)
    for (uint i = 0u; i < uint(NW); ++i) blk[i] = (rawu[i] >> sh) | ((rawu[i + 1u] << 1) << (31u - sh));
    su += block_value(blk, xrow, b);
#endif
  }
  for (uint g = 0u; g < ROWS; ++g) {
    const float sg = subgroupAdd(grp == g ? s : 0.0);
    if (gl_SubgroupInvocationID == 0u) partial[g * 128u + gl_SubgroupID] = sg;
#if defined(MUL_MV_GLU)
    const float su_g = subgroupAdd(grp == g ? su : 0.0);
    if (gl_SubgroupInvocationID == 0u) partial_u[g * 128u + gl_SubgroupID] = su_g;
#endif
  }
  barrier();
#if defined(MUL_MV_GLU)
  if (lid < ROWS) {  // (nrows a multiple of 32: every row of the workgroup is one)
    const uint row = row0 + lid;
    float t = 0.0, tu = 0.0;
    for (uint i = 0u; i < gl_NumSubgroups; ++i) t += partial[lid * 128u + i];
    for (uint i = 0u; i < gl_NumSubgroups; ++i) tu += partial_u[lid * 128u + i];
    if ((p.has_bias & 1u) != 0u) t += bias[e * p.nrows + row];
    if ((p.has_bias & 2u) != 0u) tu += ubias[e * p.nrows + row];
    y[tok * p.nrows + row] = glu(t, tu);
  }
  // The last of a 32-row block's workgroups writes its codes (the others' rows visible once counted).
  memoryBarrierBuffer();
  barrier();
  const uint blocks = p.nrows / 32u, blk = row0 / 32u;
  if (lid == 0u) {
    const uint at = tok * blocks + blk;
    last_one = atomicAdd(count[at], 1u) == 32u / ROWS - 1u;
    if (last_one) count[at] = 0u;
  }
  barrier();
  if (!last_one) return;
  memoryBarrierBuffer();
  barrier();  // (lavapipe read stale rows without it)
  if (gl_SubgroupID == 0u) {  // lanes 0..7: four values each; the others shuffle among themselves
    const uint lane = gl_SubgroupInvocationID, j = lane % 8u, at = tok * p.nrows + blk * 32u + 4u * j;
    const vec4 v = lane < 8u ? vec4(y[at], y[at + 1u], y[at + 2u], y[at + 3u]) : vec4(0.0);
    q8_act_write(v, j, tok * p.out_words + blk * 9u, p.out_format, lane < 8u);
  }
#else
  if (lid < ROWS && row0 + lid < p.nrows) {
    const uint row = row0 + lid;
    float t = 0.0;
    for (uint i = 0u; i < gl_NumSubgroups; ++i) t += partial[lid * 128u + i];
#if defined(MUL_MV_ID)
    if (p.has_bias != 0u) t += bias[e * p.nrows + row];
#else
    if (p.has_bias != 0u) t += bias[row];
#endif
    y[tok * p.nrows + row] = t;
#if defined(MUL_MV_VSTORE)
    vrow[lid] = t;
#endif
  }
#if defined(MUL_MV_ROPE)
  rope_tail(row0, lid);
#elif defined(MUL_MV_VSTORE)
  append_rows(row0, lid, 128u);
#elif defined(MUL_MV_ROWNORM) && !defined(MUL_MV_COMBINE)
  row_norm_tail(tok, lid, 128u);
#if defined(MUL_MV_ROUTE)
  route_after_norm(tok, lid);
#endif
#endif
#endif
#if defined(MUL_MV_COMBINE)
  // The token's last pair over these rows adds the slots (the others' rows visible once counted).
  const uint token = tok / p.n_used, group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
  const uint groups = (p.nrows + ROWS - 1u) / ROWS;
  memoryBarrierBuffer();
  barrier();
  if (lid == 0u) {
    const uint at = token * groups + group;
    last_one = atomicAdd(count[at], 1u) == p.n_used - 1u;
    if (last_one) count[at] = 0u;
  }
  barrier();
  if (!last_one) return;
  memoryBarrierBuffer();
  barrier();  // (lavapipe read stale rows without it)
  if (lid < ROWS && row0 + lid < p.nrows) {
    const uint row = row0 + lid;
    float total = 0.0;
    for (uint k = 0u; k < p.n_used; ++k) {
      const uint pair = token * p.n_used + k;
      precise const float v = slot_w[pair] * y[pair * p.nrows + row];
      total += v;
    }
    o[token * p.nrows + row] = total;
  }
#if defined(MUL_MV_ROWNORM)
  row_norm_tail(token, lid, 128u);
#endif
#endif
}
