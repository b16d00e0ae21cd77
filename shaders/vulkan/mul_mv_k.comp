#version 450
//! variants-by-type kdot
//! variants-by-type kdot id_ MUL_MV_ID
//! variants-by-type kdot idc_ MUL_MV_ID,MUL_MV_COMBINE
//! variants-by-type kdot idg_ MUL_MV_ID,MUL_MV_GLU
//! variants-by-type kdot rope_ MUL_MV_ROPE
//! variants-by-type kdot vst_ MUL_MV_VSTORE
//! variants-by-type kdot nrm_ MUL_MV_NORM
//! variants-by-type kdot idcn_ MUL_MV_ID,MUL_MV_COMBINE,MUL_MV_NORM
//! variants-by-type kdot cnv_ MUL_MV_CONV
//! variants-by-type kdot gnrm_ MUL_MV_NORM,MUL_MV_GTAIL
//! variants-by-type kdot idcg_ MUL_MV_ID,MUL_MV_COMBINE,MUL_MV_NORM,MUL_MV_GTAIL
//! variants-by-type kdot art_ MUL_MV_ROWNORM
//! variants-by-type kdot artr_ MUL_MV_ROWNORM,MUL_MV_ROUTE
// K-quant weights times Q8_K activations (quantize_q8k.comp), as the CPU backend's dot products compute
// them (src/quant/dot_ref.cpp): per 256-element block the integer sums of code products (packed 4x8
// integer dot products) and of scales times them, then the CPU's float expression of the block, here
// applied to each invocation's exact integer part of the sums (so a block's value is the sum of eight
// such terms, each within a few roundings of its part, where the CPU rounds the whole block once).
// The decode path for the weights most models are stored in (Q4_K_M: Q4_K and Q6_K).
//
// Eight invocations share a block: each takes 16 bytes of its codes (32 elements, one 16-byte load
// for Q4_K / Q5_K, adjacent invocations reading adjacent bytes), multiplies them with the matching
// 32 activation codes of each of NTOK tokens, and adds its part's float value to its own sum per
// (row, token): nothing is exchanged between invocations until the end, so a weight block is
// unpacked once for all NTOK tokens and each token costs only its products. A workgroup of WG
// invocations takes WG / 8 blocks of each of ROWS rows at a time (the activation loads serve all
// ROWS rows), walks the row in steps of WG / 8 blocks, and adds its invocations' sums in a subgroup
// and shared-memory sum. Token groups beyond the grid loop (grid z strides).
//
// MUL_MV_ID (mixture of experts, variants id_*): z runs over (token, slot) pairs (NTOK = 1); the pair's
// expert ids[pair] (clamped below n_expert) picks the matrix expert_stride bytes on, its activation row
// is xq[pair] (x_per_slot) or xq[pair / n_used], y[pair][r], plus the expert's bias row when has_bias.
// MUL_MV_COMBINE (variants idc_*, the down product with the combine folded in): z runs over tokens,
// the GROUPS = n_used groups of a workgroup take one slot each (x per slot) over the same ROWS rows,
// and y[token][r] = sum over slots in slot order of weights[token][slot] * (product + bias), as
// moe_combine.comp adds them.
//
// MUL_MV_GLU (variants idg_*, the gate and up products with the SwiGLU and the down product's codes
// folded in; x shared by a token's slots, no bias): each workgroup takes the same ROWS rows of each
// group of the gate matrix (binding 0) and the up matrix (binding 6, the same layout), writes
// y[pair][r] = silu(gate) * up as eltwise.comp's OP_SWIGLU computes it (coherent: read back), and
// counts itself in count[pair][r / 256] (binding 8); the last of a 256-row block's workgroups resets
// that count to 0 and writes the block's Q8_K codes into xq_out (binding 7, rows out_stride words
// apart) as quantize_q8k.comp makes them. Needs nrows a multiple of 256 and 256 a multiple of
// ROWS * GROUPS (no workgroup straddles two blocks).
//
// MUL_MV_ROPE (variants rope_*, decode's q or k product of one token, NTOK = 1): rope_heads.comp's
// work on each head done by the last of the head's workgroups (count[count_base + head], binding 7,
// reset to 0 by it), in place in y (coherent: read back): the per-head RMSNorm (flags & 2; weights,
// binding 4, where flags & 4), the rotation by the host's cos/sin table (binding 3; NeoX pairs where
// flags & 1) and, where flags & 8, the rotated head's append to the K cache (binding 6: halves rounded
// to nearest even, or floats where flags & 16; at cache_row(n_past), the step header at binding 8).
// The norm's sum and every value are rope_heads's (its 64 invocations' order), so the bits are the
// same. Needs head_dim at most 128 and a multiple of ROWS * GROUPS (no workgroup straddles two
// heads), WG >= 64 and subgroups of at most 64 (mul_mv_k_tail_fits).
// MUL_MV_VSTORE (variants vst_*, decode's v product of one token): each workgroup also appends its
// rows to the V cache (binding 6, as above; pairs of rows into halves: ROWS * GROUPS even).
//
// MUL_MV_CONV (variants cnv_, decode's product of one token whose one reader is a short causal
// convolution, graph Op::SsmConv): each row's invocation also does ssm_conv.comp's work on its channel,
// in its order of sums: y[r] = silu(sum_k cw[r][k] * (state, product)[k]), then the state (binding 4,
// [taps - 1][nrows]) shifted by one row with the product last; cw (binding 3) is [nrows][taps] floats.
// y is the convolution's output; the product itself is written nowhere.
//
// MUL_MV_NORM (variants nrm_ and idcn_, decode's product of one token or the experts' combined down
// product, followed by a residual add and a whole-row RMSNorm): y[t][r] = product + res[t][r] (binding
// 10; may be y itself), the residual sum h; then each workgroup counts itself in count[t][r / 256]
// (binding 8) and the last of a 256-row block's workgroups resets that count, writes the block's Q8_K
// codes of h * (w + offset) (the norm's weights w, binding 11, where norm_has_w) into xq_out (binding
// 7, q8k.glsl's block writer) and the block's sum of h^2 into npart_out[t][r / 256] (binding 9). The
// norm's own scale 1 / sqrt(mean(h^2) + eps) is a factor of the whole row, so its codes are those of
// the unscaled row (up to rounding) and the products that read them multiply their sums by it:
// norm_blocks > 0 (any other variant) reads those partial sums (binding 9, norm_blocks floats a token;
// the experts' gate and up: their pair's token) and scales each row's sum by 1 / sqrt(sum / ncols +
// norm_eps) before anything else uses it (the bias, the SwiGLU, the rotation's norm, the cache
// append). One dispatch and the barrier before it fewer than the product, then the add and norm's
// rms_norm_row. (Steps of more tokens get the same codes and sums from rms_norm_row's `factored`
// form, so each row's arithmetic is the one-token step's.) Needs nrows a multiple of 256, 256
// a multiple of a workgroup's rows and WG >= 64 (mul_mv_k_norm_fits).
// MUL_MV_GTAIL (variants gnrm_ and idcg_, with MUL_MV_NORM: a shared expert's down product and the
// experts' combined down product, two dispatches side by side, and the gated add, the residual add
// and the norm after them): each writes its own part to y without the residual, and the two count
// themselves in the same counters, tail_count arrivals a 256-row block in all; the last of a block,
// of either dispatch, reads both parts (the other's at binding 12), the shared part's gate (binding
// 13, one value a token) and the residual, and makes h = res + (c + a * sigmoid(g)) (c the experts'
// part, a the shared one; own_shared: y holds a) as rms_norm_row's gated add does, writes it to
// binding 14 and goes on as MUL_MV_NORM's tail does with h.
//
// MUL_MV_ROWNORM (variants art_, decode's product of one token, its bias added, followed by a residual
// add and a whole-row RMSNorm whose width is no multiple of 256): the last workgroup to finish does
// rms_norm_row's add and norm on the token's row (row_norm_tail.glsl): the residual (binding 3), the
// sum (5), the norm's output (6), its codes for the 32-element formats (7), the counter (8), the
// norm's weights (10). Needs shaderFloat64 (mul_mv_k_row_norm_fits). Tokens over z (NTOK = 1), a
// counter each.
// MUL_MV_ROUTE (variants artr_, with MUL_MV_ROWNORM): mul_mv_q8.comp's MUL_MV_ROUTE for this product,
// the experts' workgroups reading x's Q8_K codes (each word's four codes times its block's d): the fold
// (binding 11), logits (12), the router's bias (13), ids (14), weights (15). WG <= 256, n_expert <= WG.
//
// Bindings: 0 W (raw blocks; rows row_bytes apart, 16-byte aligned for Q4_K / Q5_K, 2-byte for Q6_K),
// 1 xq (quantized rows xstride words apart, q8k.glsl's layout), 2 y [n_tokens][nrows]; MUL_MV_ID: 3 ids,
// 4 bias [n_expert][nrows] floats; MUL_MV_COMBINE: 5 weights [n_tokens][n_used]; MUL_MV_GLU: 6 U,
// 7 xq_out, 8 count (bindings 4 and 5 unread). Grid: x*y =
// ceil(nrows / (ROWS * row groups)) workgroups, z = token groups (pairs; MUL_MV_COMBINE: tokens).
// Needs subgroups of at least 8 invocations and shaderIntegerDotProduct.
#extension GL_EXT_control_flow_attributes : enable
#extension GL_EXT_spirv_intrinsics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_GOOGLE_include_directive : require
#if defined(MUL_MV_GLU) || defined(MUL_MV_NORM) || defined(MUL_MV_ROWNORM)
#extension GL_KHR_shader_subgroup_shuffle : require
#endif
#if defined(MUL_MV_ROWNORM)
#extension GL_ARB_gpu_shader_fp64 : require
#endif

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 128;  // invocations per workgroup, a multiple of 8
layout(constant_id = 1) const uint ROWS = 4;  // rows per workgroup
layout(constant_id = 2) const uint NTOK = 1;  // tokens per workgroup
layout(constant_id = 3) const uint GROUPS = 1;  // row groups per workgroup (a divisor of WG / 8)

layout(std430, binding = 0) readonly restrict buffer Wbuf { uint w[]; };
layout(std430, binding = 0) readonly restrict buffer Wbuf4 { uvec4 w4[]; };
layout(std430, binding = 1) readonly restrict buffer Qbuf { uint q[]; };
layout(std430, binding = 1) readonly restrict buffer Qbuf4 { uvec4 q4[]; };
#if defined(MUL_MV_GLU)
layout(std430, binding = 2) coherent restrict buffer Ybuf { float y[]; };
layout(std430, binding = 6) readonly restrict buffer Ubuf { uint u[]; };
layout(std430, binding = 6) readonly restrict buffer Ubuf4 { uvec4 u4[]; };
layout(std430, binding = 7) writeonly restrict buffer Obuf { uint qo[]; };
layout(std430, binding = 8) coherent restrict buffer Cbuf { uint count[]; };
const uint HALVES = 2u;  // gate rows, then the same rows of up
#define WV(i) (up ? u[i] : w[i])
#define WV4(i) (up ? u4[i] : w4[i])
#elif defined(MUL_MV_ROPE)
layout(std430, binding = 2) coherent restrict buffer Ybuf { float y[]; };
layout(std430, binding = 3) readonly restrict buffer CSbuf { float cs[]; };  // [n_rot]: cos, sin per pair
layout(std430, binding = 4) readonly restrict buffer NWbuf { float nw[]; };  // head_dim norm weights
layout(std430, binding = 7) coherent restrict buffer Cbuf { uint count[]; };
const uint HALVES = 1u;
#define WV(i) w[i]
#define WV4(i) w4[i]
#elif defined(MUL_MV_NORM)
layout(std430, binding = 2) coherent buffer Ybuf { float y[]; };  // (res may be y: no restrict)
layout(std430, binding = 7) writeonly restrict buffer Obuf { uint qo[]; };
layout(std430, binding = 8) coherent restrict buffer Cbuf { uint count[]; };
layout(std430, binding = 9) writeonly restrict buffer NPObuf { float npart_out[]; };
layout(std430, binding = 10) readonly buffer Resbuf { float res[]; };
layout(std430, binding = 11) readonly restrict buffer NWbuf { float nw[]; };
#if defined(MUL_MV_GTAIL)
layout(std430, binding = 12) coherent readonly restrict buffer PTbuf { float partner[]; };  // the other dispatch's part
layout(std430, binding = 13) readonly restrict buffer GTbuf { float gate[]; };  // the shared part's gate, one a token
layout(std430, binding = 14) writeonly restrict buffer HSbuf { float hsum[]; };  // the residual sum h
#endif
const uint HALVES = 1u;
#define WV(i) w[i]
#define WV4(i) w4[i]
#elif defined(MUL_MV_ROWNORM)
layout(std430, binding = 2) coherent restrict buffer Ybuf { float y[]; };
layout(std430, binding = 2) coherent restrict buffer Ybuf4 { vec4 ra4[]; };
layout(std430, binding = 3) readonly restrict buffer RBbuf { vec4 rb4[]; };
layout(std430, binding = 5) restrict buffer RSbuf { vec4 rs4[]; };
layout(std430, binding = 6) writeonly restrict buffer RYbuf { vec4 ry4[]; };
layout(std430, binding = 7) writeonly restrict buffer RQbuf { uint rq[]; };
layout(std430, binding = 8) coherent restrict buffer RCbuf { uint rcount[]; };
layout(std430, binding = 10) readonly restrict buffer RWbuf { vec4 rw4[]; };
#if defined(MUL_MV_ROUTE)
layout(std430, binding = 11) readonly restrict buffer MRbuf { vec4 mr4[]; };
layout(std430, binding = 11) readonly restrict buffer MR1buf { float mr[]; };
layout(std430, binding = 12) coherent buffer Lbuf { float logits[]; };
layout(std430, binding = 13) readonly buffer RBiasbuf { float router_b[]; };
layout(std430, binding = 13) readonly buffer ESbuf { float expert_scale[]; };  // (flags & 8 never set)
layout(std430, binding = 14) buffer Idbuf { uint ids[]; };
layout(std430, binding = 15) writeonly buffer RWtbuf { float weights[]; };
#endif
const uint HALVES = 1u;
#define WV(i) w[i]
#define WV4(i) w4[i]
#else
layout(std430, binding = 2) writeonly restrict buffer Ybuf { float y[]; };
const uint HALVES = 1u;
#define WV(i) w[i]
#define WV4(i) w4[i]
#endif
#if !defined(MUL_MV_NORM)
layout(std430, binding = 9) readonly restrict buffer NPbuf { float npart[]; };  // norm_blocks > 0: the norm's partial sums
#endif
const uint RR = ROWS * HALVES;  // rows a group decodes a step
#if defined(MUL_MV_ROPE) || defined(MUL_MV_VSTORE)
layout(std430, binding = 6) writeonly restrict buffer KCbuf { uint kc[]; };  // the cache: halves in pairs, or floats' bits
layout(std430, binding = 8) readonly restrict buffer Step { uint step[]; };  // word 0: n_past; the block table
#include "f16_rne.glsl"
#include "kv_rows.glsl"
#include "rope_pair.glsl"
#endif
#if defined(MUL_MV_CONV)
layout(std430, binding = 3) readonly restrict buffer CWbuf { float cw[]; };
layout(std430, binding = 4) restrict buffer CSTbuf { float cstate[]; };
#endif
#if defined(MUL_MV_ID)
layout(std430, binding = 3) readonly restrict buffer Ibuf { uint ids[]; };
layout(std430, binding = 4) readonly restrict buffer Bbuf { float bias[]; };
#elif !defined(MUL_MV_ROPE) && !defined(MUL_MV_VSTORE) && !defined(MUL_MV_CONV) && !defined(MUL_MV_NORM)
#define PLAIN_BIAS
layout(std430, binding = 4) readonly restrict buffer Bbuf { float bias[]; };  // has_bias: bias[row], added last
#endif
#if defined(MUL_MV_COMBINE)
layout(std430, binding = 5) readonly restrict buffer Wtbuf { float slot_w[]; };
const uint ROW_GROUPS = 1u;  // every group the same rows
shared float weighted[GROUPS * ROWS];
#else
const uint ROW_GROUPS = GROUPS;
#endif
layout(push_constant) uniform Params {
  uint ncols;      // a multiple of 256
  uint nrows;
  uint row_bytes;  // bytes per stored row
  uint n_tokens;
  uint xstride;    // words per quantized activation row, a multiple of 4
  uint n_used;         // MUL_MV_ID: experts per token
  uint n_expert;       // MUL_MV_ID: ids are clamped below it
  uint expert_stride;  // MUL_MV_ID: bytes between experts' matrices
  uint x_per_slot;     // MUL_MV_ID: 1: xq[pair], 0: xq[pair / n_used]
  uint has_bias;       // MUL_MV_ID, and the plain product (bias[row])
  uint out_stride;     // MUL_MV_GLU, MUL_MV_NORM: words per row of xq_out
  uint norm_blocks;    // the norm's partial sums to scale by (0: none)
  float norm_eps;
  float norm_offset;   // MUL_MV_NORM: added to each norm weight
  uint norm_has_w;     // MUL_MV_NORM: 0: the norm has no weights (nw unread)
#if defined(MUL_MV_ROPE) || defined(MUL_MV_VSTORE)
  uint head_dim;    // MUL_MV_ROPE
  uint n_rot;       // MUL_MV_ROPE
  uint flags;       // 1 NeoX, 2 norm, 4 norm weights, 8 append to the cache, 16 a float cache
  uint count_base;  // MUL_MV_ROPE: the first head's counter
  float eps;        // MUL_MV_ROPE
  float offset;     // MUL_MV_ROPE
#elif defined(MUL_MV_CONV)
  uint taps;        // the convolution's width in time (its state holds taps - 1 rows)
#elif defined(MUL_MV_ROWNORM)
  uint q8_format;   // the codes' format: 0 ACT_Q8_0, 1 ACT_Q8_1 (out_stride words a row; 0: none)
  uint arrivals;    // the dispatch's workgroups a token
#if defined(MUL_MV_ROUTE)
  uint o_groups;    // the product's workgroups (the experts' follow)
  uint flags;       // moe_route.comp's
  float logit_scale;
#endif
#elif defined(MUL_MV_GTAIL)
  uint tail_count;  // both dispatches' workgroups a 256-row block
  uint own_shared;  // 1: y is the shared (gated) part, 0: the experts'
#endif
} p;

// OpSDot on 4 x int8 packed in 32 bits (SPV_KHR_integer_dot_product).
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4450)
int sdot_4x8(uint a, uint b, spirv_literal int packed_format);
int dot4(uvec4 a, uvec4 b) {
  return sdot_4x8(a.x, b.x, 0) + sdot_4x8(a.y, b.y, 0) + sdot_4x8(a.z, b.z, 0) + sdot_4x8(a.w, b.w, 0);
}

#if defined(TYPE_Q4_K)
#define BLOCK_BYTES 144u
#elif defined(TYPE_Q5_K)
#define BLOCK_BYTES 176u
#else
#define BLOCK_BYTES 210u
// 16 bytes at an even byte offset: five words, funnel-shifted (only the word holding the last byte
// is read past them).
uvec4 load16(uint off, bool up) {
  const uint i = off >> 2, s = (off & 3u) << 3;
  const uint a0 = WV(i), a1 = WV(i + 1u), a2 = WV(i + 2u), a3 = WV(i + 3u), a4 = WV(i + 4u);
  return uvec4((a0 >> s) | ((a1 << 1) << (31u - s)), (a1 >> s) | ((a2 << 1) << (31u - s)),
               (a2 >> s) | ((a3 << 1) << (31u - s)), (a3 >> s) | ((a4 << 1) << (31u - s)));
}
int sbyte(uint off, bool up) { return bitfieldExtract(int(WV(off >> 2)), int((off & 3u) << 3), 8); }
#endif

// Invocation j's share of block b of the row at rb times quantized row xr (word offset): the
// integer sums the block's float value is made of (Q4_K / Q5_K: scaled code products and mins
// times code sums; Q6_K: scaled products), and the weight's scales.
struct Share {
  ivec2 s;  // Q4_K / Q5_K: (sum_scaled, sum_mins); Q6_K: (sum, 0)
  vec2 d;   // Q4_K / Q5_K: (d, dmin); Q6_K: (d, 0)
};

// Codes and scales of invocation j's 32 elements of the block at byte o: lo and hi hold 16 codes
// each (one byte per code), at the activation word offsets xlo / xhi of the block's first
// element; sc and mn the scales (and mins) of lo and hi.
struct Codes {
  uvec4 lo, hi;
  ivec2 sc, mn;
  vec2 d;
  uint xlo, xhi;  // word offsets of lo's and hi's first element within the block
  uint glo, ghi;  // their 16-element groups within the block
};

// up: from the up matrix (MUL_MV_GLU), else W.
Codes decode(uint o, uint j, bool up) {
  Codes c;
#if defined(TYPE_Q4_K) || defined(TYPE_Q5_K)
  // Invocation j reads qs bytes 16j..16j+15: chunk ch = j / 2 holds elements ch*64 + l (low nibbles,
  // sub-block 2ch) and ch*64 + 32 + l (high, sub-block 2ch + 1) for l in l0..l0+15, l0 = 16 (j & 1).
  const uint ch = j >> 1, h = j & 1u;
  const uvec4 hdr = WV4(o >> 4);  // d | dmin << 16, scale bytes 0..11
#if defined(TYPE_Q4_K)
  const uvec4 qs = WV4((o >> 4) + 1u + j);
  c.lo = qs & 0x0f0f0f0fu;
  c.hi = (qs >> 4) & 0x0f0f0f0fu;
#else
  const uvec4 qh = WV4((o >> 4) + 1u + h), qs = WV4((o >> 4) + 3u + j);  // qh bytes l0.., bit 2ch + half
  c.lo = (qs & 0x0f0f0f0fu) | (((qh >> (2u * ch)) & 0x01010101u) << 4);
  c.hi = ((qs >> 4) & 0x0f0f0f0fu) | (((qh >> (2u * ch + 1u)) & 0x01010101u) << 4);
#endif
  // Scales and mins of sub-blocks 2ch and 2ch + 1 (kquant_scale_min in src/quant/blocks.h) as the
  // two low bytes of sp and mp, as quant.glsl unpacks them.
  const uint sh = 16u * (ch & 1u);
  const uint lo_s = (hdr.y >> sh) & 0x3f3fu, lo_m = (hdr.z >> sh) & 0x3f3fu;
  const uint hi_s = ((hdr.w >> sh) & 0x0f0fu) | ((hdr.y >> (sh + 2u)) & 0x3030u);
  const uint hi_m = ((hdr.w >> (sh + 4u)) & 0x0f0fu) | ((hdr.z >> (sh + 2u)) & 0x3030u);
  const uint sp = ch < 2u ? lo_s : hi_s, mp = ch < 2u ? lo_m : hi_m;
  c.sc = ivec2(sp & 0xffu, sp >> 8);
  c.mn = ivec2(mp & 0xffu, mp >> 8);
  c.d = unpackHalf2x16(hdr.x);
  c.xlo = ch * 16u + h * 4u;
  c.xhi = c.xlo + 8u;
  c.glo = ch * 4u + h;
  c.ghi = c.glo + 2u;
#else
  // Q6_K, 210 bytes: ql[128], qh[64], int8 scales[16], fp16 d. Element n*128 + k*32 + l: ql byte
  // n*64 + (k&1)*32 + l, nibble k >> 1; qh byte n*32 + l, bits 2k. Invocation j takes n = j / 4,
  // hf = (j / 2) & 1, l0 = 16 (j & 1): ql bytes n*64 + hf*32 + l0.. hold runs k = hf (low
  // nibbles) and k = hf + 2 (high), each one 16-element group.
  const uint n = j >> 2, hf = (j >> 1) & 1u, h = j & 1u;
  const uvec4 ql = load16(o + n * 64u + hf * 32u + h * 16u, up), qh = load16(o + 128u + n * 32u + h * 16u, up);
  c.lo = (ql & 0x0f0f0f0fu) | (((qh >> (2u * hf)) & 0x03030303u) << 4);
  c.hi = ((ql >> 4) & 0x0f0f0f0fu) | (((qh >> (2u * hf + 4u)) & 0x03030303u) << 4);
  c.glo = n * 8u + 2u * hf + h;
  c.ghi = c.glo + 4u;
  c.sc = ivec2(sbyte(o + 192u + c.glo, up), sbyte(o + 192u + c.ghi, up));
  c.mn = ivec2(32);  // codes are stored plus 32
  c.d = vec2(unpackHalf2x16((WV((o + 208u) >> 2) >> (((o + 208u) & 2u) << 3)) & 0xffffu).x, 0.0);
  c.xlo = c.glo * 4u;
  c.xhi = c.ghi * 4u;
#endif
  return c;
}

// Invocation j's part of the block's integer sums for one token (xb: word offset of the block's
// codes, gb: of its group sums).
ivec2 part_sums(Codes c, uint xb, uint gb) {
  const int plo = dot4(c.lo, q4[(xb + c.xlo) >> 2]), phi = dot4(c.hi, q4[(xb + c.xhi) >> 2]);
  const int slo = int(q[gb + c.glo]), shi = int(q[gb + c.ghi]);
#if defined(TYPE_Q4_K) || defined(TYPE_Q5_K)
  // Σ d·sc·q·x − dmin·m·x: the mins meet the activation's group sums.
  return ivec2(c.sc.x * plo + c.sc.y * phi, c.mn.x * slo + c.mn.y * shi);
#else
  // Σ sc·(q − 32)·x = Σ sc·(q·x) − 32·sc·Σx.
  return ivec2(c.sc.x * (plo - c.mn.x * slo) + c.sc.y * (phi - c.mn.y * shi), 0);
#endif
}

// The CPU's float expression of a block from its integer sums (no fused multiply-add), on a part.
float block_value(ivec2 v, vec2 d, float dx) {
#if defined(TYPE_Q4_K) || defined(TYPE_Q5_K)
  precise const float a = d.x * float(v.x), b = d.y * float(v.y);
  precise const float r = dx * (a - b);
#else
  precise const float r = dx * d.x * float(v.x);
#endif
  return r;
}

shared float red[GROUPS * RR * NTOK * (WG / 8u)];  // one partial sum per (group, row, token) and subgroup

#if defined(MUL_MV_GLU)
// The down product's codes (q8k.glsl's block writer, into xq_out).
#define Q8K_BLOCK_WRITER
#define q qo
#include "q8k.glsl"
#undef q
shared bool glu_last;
#endif

#if defined(MUL_MV_NORM)
// The Q8_K codes of the norm's weighted row (q8k.glsl's block writer, into xq_out).
#define Q8K_BLOCK_WRITER
#define q qo
#include "q8k.glsl"
#undef q
shared bool norm_last;
shared float norm_ss[64];

// Once every workgroup of the 256-row block holding row wg_row0 has written its rows of h: by the last
// of them, the block's codes of h * (w + offset) and its sum of h^2 (the first 64 invocations hold 4
// values each).
void norm_tail(uint set, uint wg_row0, uint tid) {
  memoryBarrierBuffer();
  barrier();
#if defined(MUL_MV_GTAIL)
  const uint per_block = p.tail_count;
#else
  const uint per_block = 256u / (ROWS * ROW_GROUPS);
#endif
  const uint nblk = p.nrows / 256u, blk = wg_row0 / 256u;
  if (tid == 0u) {
    const uint at = set * nblk + blk;
    norm_last = atomicAdd(count[at], 1u) == per_block - 1u;
    if (norm_last) count[at] = 0u;
  }
  barrier();
  if (!norm_last) return;  // uniform: the workgroup's shared flag
  memoryBarrierBuffer();
  const uint lid = tid % 64u, c = blk * 256u + 4u * lid, e = set * p.nrows + c;
  const bool mine = tid < 64u;
  vec4 h = vec4(0.0), wv = vec4(1.0);
  if (mine) {
#if defined(MUL_MV_GTAIL)
    const vec4 own = vec4(y[e], y[e + 1u], y[e + 2u], y[e + 3u]);
    const vec4 other = vec4(partner[e], partner[e + 1u], partner[e + 2u], partner[e + 3u]);
    const vec4 a = p.own_shared != 0u ? own : other, cx = p.own_shared != 0u ? other : own;
    precise const vec4 gated = a / (1.0 + exp(-vec4(gate[set])));  // rms_norm_row's gated add, in its order
    precise const vec4 t = cx + gated;
    precise const vec4 hs = vec4(res[e], res[e + 1u], res[e + 2u], res[e + 3u]) + t;
    h = hs;
    hsum[e] = h.x;
    hsum[e + 1u] = h.y;
    hsum[e + 2u] = h.z;
    hsum[e + 3u] = h.w;
#else
    h = vec4(y[e], y[e + 1u], y[e + 2u], y[e + 3u]);
#endif
    if (p.norm_has_w != 0u) wv = vec4(nw[c], nw[c + 1u], nw[c + 2u], nw[c + 3u]) + p.norm_offset;
  }
  precise const vec4 v = h * wv;
  q8k_write_block(v, lid, set * p.out_stride, p.nrows, blk, mine);
  precise const float sq = h.x * h.x + h.y * h.y + h.z * h.z + h.w * h.w;
  const float ss = subgroupAdd(sq);
  if (subgroupElect()) norm_ss[gl_SubgroupID] = ss;
  barrier();
  if (tid == 0u) {
    float t = 0.0;
    for (uint i = 0u; i < gl_NumSubgroups; ++i) t += norm_ss[i];
    npart_out[set * nblk + blk] = t;
  }
}
#else
// The token whose norm product set `set`'s token t reads (the experts' slots: their pair's token).
uint norm_token(uint set, uint t) {
#if defined(MUL_MV_ID)
  return set / p.n_used;  // (x shared by a token's slots where a norm is left to them)
#else
  return min(set * NTOK + t, p.n_tokens - 1u);
#endif
}

#include "norm_partials.glsl"
#endif


#if defined(MUL_MV_ROPE) || defined(MUL_MV_VSTORE)
#define TAIL_ROWS (ROWS * ROW_GROUPS)
#include "mv_tails.glsl"
#endif
#if defined(MUL_MV_ROWNORM)
#include "f16_rne.glsl"
#include "div_rn.glsl"
#include "row_norm_tail.glsl"
#endif
#if defined(MUL_MV_ROUTE)
#define WG_SIZE WG
#define MAX_EXPERT 256
#define MAX_USED 16
float route_scale(uint t) { return 1.0; }  // (flags & 32 is moe_route.comp's)
#include "moe_route.glsl"

// Expert e's z for token tok (its workgroup): M[e] . x from x's Q8_K codes, R_w[e] . r, c[e].
void expert_logit(uint e, uint tok, uint tid) {
  const uint d_in4 = p.ncols / 4u, d4 = p.nrows / 4u, row4 = e * (d_in4 + d4), xr = tok * p.xstride;
  const uint d0 = d_in4 + p.ncols / 16u;
  float acc = 0.0;
  for (uint c = tid; c < d_in4; c += WG) {  // a word of four codes an invocation
    const int wv = int(q[xr + c]);
    const float dx = uintBitsToFloat(q[xr + d0 + c / 64u]);
    acc += dot(mr4[row4 + c], vec4((wv << 24) >> 24, (wv << 16) >> 24, (wv << 8) >> 24, wv >> 24)) * dx;
  }
  for (uint i = tid; i < d4; i += WG) acc += dot(mr4[row4 + d_in4 + i], rb4[tok * d4 + i]);
  const float sg = subgroupAdd(acc);
  if (subgroupElect()) red[gl_SubgroupID] = sg;
  barrier();
  if (tid == 0u) {
    float z = 0.0;
    for (uint i = 0u; i < gl_NumSubgroups; ++i) z += red[i];
    logits[tok * p.n_expert + e] = z + mr[p.n_expert * (d_in4 + d4) * 4u + e];
  }
}

// After row_norm_tail, in its last workgroup: the logits scaled by the norm's scale, then routed.
void route_after_norm(uint tok, uint tid) {
  if (!rn_last) return;  // uniform
  if (tid < p.n_expert) logits[tok * p.n_expert + tid] *= rn_scale;  // (route_token reads its own)
  route_token(tok);
}
#endif

#if defined(MUL_MV_ID)
// The subgroups group g's partial sums are in: its own (groups of whole subgroups, `own`), else all.
uvec2 group_subgroups(uint g, bool own, uint gsize) {
  return own ? uvec2(g * gsize / gl_SubgroupSize, (g + 1u) * gsize / gl_SubgroupSize) : uvec2(0u, gl_NumSubgroups);
}
#endif

void main() {
  const uint tid = gl_LocalInvocationID.x, j = tid & 7u, slots = WG / 8u / GROUPS;
  const uint wg = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x, wg_row0 = wg * ROWS * ROW_GROUPS;
#if defined(MUL_MV_ROUTE)
  if (wg >= p.o_groups) {  // uniform: an expert's workgroup
    if (wg - p.o_groups >= p.n_expert) return;
    for (uint tok = gl_WorkGroupID.z; tok < p.n_tokens; tok += gl_NumWorkGroups.z) {
      expert_logit(wg - p.o_groups, tok, tid);
      row_norm_tail(tok, tid, WG);
      route_after_norm(tok, tid);
      barrier();
    }
    return;
  }
#endif
  if (wg_row0 >= p.nrows) return;  // the grid's padding: the whole workgroup leaves
  // Short rows (fewer blocks than the workgroup takes a step): the slots split into GROUPS groups of
  // `slots`, each its own ROWS rows.
  const uint grp = (tid >> 3) / slots, row0 = wg_row0 + (ROW_GROUPS > 1u ? grp * ROWS : 0u);
  const uint nb = p.ncols / 256u, sums0 = p.ncols / 4u, d0 = sums0 + p.ncols / 16u;
#if defined(MUL_MV_COMBINE)
  const uint n_sets = p.n_tokens;
#elif defined(MUL_MV_ID)
  const uint n_sets = p.n_tokens * p.n_used;  // (token, slot) pairs
#else
  const uint n_sets = (p.n_tokens + NTOK - 1u) / NTOK;
#endif
  for (uint set = gl_WorkGroupID.z; set < n_sets; set += gl_NumWorkGroups.z) {
    uint xr[NTOK], rb[RR];
#if defined(MUL_MV_COMBINE)
    const uint pair = set * p.n_used + grp;
    const uint e = min(ids[pair], p.n_expert - 1u);
    xr[0] = pair * p.xstride;
    const uint wb = e * p.expert_stride;
#elif defined(MUL_MV_ID)
    const uint e = min(ids[set], p.n_expert - 1u);
    xr[0] = (p.x_per_slot != 0u ? set : set / p.n_used) * p.xstride;
    const uint wb = e * p.expert_stride;
#else
    [[unroll]] for (uint t = 0u; t < NTOK; ++t) xr[t] = min(set * NTOK + t, p.n_tokens - 1u) * p.xstride;
    const uint wb = 0u;
#endif
    [[unroll]] for (uint r = 0u; r < RR; ++r) rb[r] = wb + min(row0 + r % ROWS, p.nrows - 1u) * p.row_bytes;
#if !defined(MUL_MV_NORM)
    const NormPartials np = np_load(set, tid);  // a norm left to this product (norm_partials.glsl)
#endif
    float acc[RR * NTOK];
    [[unroll]] for (uint i = 0u; i < RR * NTOK; ++i) acc[i] = 0.0;
    for (uint b = (tid >> 3) % slots; b < nb; b += slots) {
      Codes c[RR];
      [[unroll]] for (uint r = 0u; r < RR; ++r) c[r] = decode(rb[r] + b * BLOCK_BYTES, j, r >= ROWS);
      [[unroll]] for (uint t = 0u; t < NTOK; ++t) {
        const float dx = uintBitsToFloat(q[xr[t] + d0 + b]);
        [[unroll]] for (uint r = 0u; r < RR; ++r) {
          const ivec2 v = part_sums(c[r], xr[t] + b * 64u, xr[t] + sums0 + b * 16u);
          acc[r * NTOK + t] += block_value(v, c[r].d, dx);
        }
      }
    }
    const uint nsub = WG / 8u;
#if defined(MUL_MV_ID)
    // Experts' products (their rows short, several groups a workgroup): where each subgroup lies in one
    // group (groups of whole subgroups), it adds its own sums and the group's subgroups are summed;
    // else, as the dense products do, a subgroup may hold several groups and each group's sums are
    // added with the others' as zeros, over every subgroup (the same floats: zeros change no sum).
    // (The dense products keep the one form: on an H200 the choice cost qwen3-8b's decode 3%.)
    const uint gsize = slots * 8u;
    const bool own = GROUPS > 1u && gsize % gl_SubgroupSize == 0u;
    if (own) {
      [[unroll]] for (uint i = 0u; i < RR * NTOK; ++i) {
        const float s = subgroupAdd(acc[i]);
        if (subgroupElect()) red[(grp * RR * NTOK + i) * nsub + gl_SubgroupID] = s;
      }
    } else
#endif
    {
      [[unroll]] for (uint g = 0u; g < GROUPS; ++g) {
        [[unroll]] for (uint i = 0u; i < RR * NTOK; ++i) {
          const float s = subgroupAdd(grp == g ? acc[i] : 0.0);
          if (subgroupElect()) red[(g * RR * NTOK + i) * nsub + gl_SubgroupID] = s;
        }
      }
    }
#if !defined(MUL_MV_NORM)
    np_stage(np, tid);
#endif
    barrier();
#if !defined(MUL_MV_NORM)
    float ns[NTOK];  // each token's norm scale
    [[unroll]] for (uint t = 0u; t < NTOK; ++t) ns[t] = np_scale(np, set, t);
#endif
#if defined(MUL_MV_COMBINE)
    // Each (slot, row)'s product, weighted, by its own invocation; then each row's slots in order.
    for (uint i = tid; i < GROUPS * ROWS; i += WG) {
      float s = 0.0;
      const uvec2 subs = group_subgroups(i / ROWS, own, gsize);
      for (uint sg = subs.x; sg < subs.y; ++sg) s += red[i * nsub + sg];
      const uint pair = set * p.n_used + i / ROWS, row = min(wg_row0 + i % ROWS, p.nrows - 1u);
      if (p.has_bias != 0u) s += bias[min(ids[pair], p.n_expert - 1u) * p.nrows + row];
      weighted[i] = slot_w[pair] * s;
    }
    barrier();
    for (uint i = tid; i < ROWS; i += WG) {
      const uint row = wg_row0 + i;
      if (row >= p.nrows) continue;
      float total = 0.0;
      for (uint g = 0u; g < GROUPS; ++g) total += weighted[g * ROWS + i];
#if defined(MUL_MV_NORM) && !defined(MUL_MV_GTAIL)
      total += res[set * p.nrows + row];
#endif
      y[set * p.nrows + row] = total;
    }
#if defined(MUL_MV_NORM)
    norm_tail(set, wg_row0, tid);
#endif
#elif defined(MUL_MV_GLU)
    // Each (group, row)'s gate and up sums, the activation; then the count of the rows' block.
    for (uint i = tid; i < GROUPS * ROWS; i += WG) {
      const uint g = i / ROWS, r = i % ROWS;
      const uvec2 subs = group_subgroups(g, own, gsize);
      float gs = 0.0, us = 0.0;
      for (uint sg = subs.x; sg < subs.y; ++sg) {
        gs += red[(g * RR + r) * nsub + sg];
        us += red[(g * RR + ROWS + r) * nsub + sg];
      }
      gs *= ns[0];
      us *= ns[0];
      y[set * p.nrows + wg_row0 + i] = gs / (1.0 + exp(-gs)) * us;
    }
    memoryBarrierBuffer();
    barrier();
    const uint blk = wg_row0 / 256u, per_block = 256u / (GROUPS * ROWS);
    if (tid == 0u) {
      const uint at = set * (p.nrows / 256u) + blk;
      glu_last = atomicAdd(count[at], 1u) == per_block - 1u;
      if (glu_last) count[at] = 0u;
    }
    barrier();
    if (glu_last) {  // uniform: the workgroup's shared flag
      memoryBarrierBuffer();
      const uint lid = tid % 64u;
      const vec4 v = vec4(y[set * p.nrows + blk * 256u + 4u * lid], y[set * p.nrows + blk * 256u + 4u * lid + 1u],
                          y[set * p.nrows + blk * 256u + 4u * lid + 2u], y[set * p.nrows + blk * 256u + 4u * lid + 3u]);
      q8k_write_block(v, lid, set * p.out_stride, p.nrows, blk, tid < 64u);
    }
#else
    for (uint i = tid; i < GROUPS * ROWS * NTOK; i += WG) {
      float s = 0.0;
#if defined(MUL_MV_ID)
      const uvec2 subs = group_subgroups(i / (ROWS * NTOK), own, gsize);
      for (uint g = subs.x; g < subs.y; ++g) s += red[i * nsub + g];
#else
      for (uint g = 0u; g < gl_NumSubgroups; ++g) s += red[i * nsub + g];
#endif
      const uint row = wg_row0 + i / NTOK;
#if defined(MUL_MV_NORM)
      const uint tok = set * NTOK + i % NTOK;
#if defined(MUL_MV_GTAIL)
      if (row < p.nrows && tok < p.n_tokens) y[tok * p.nrows + row] = s;
#else
      if (row < p.nrows && tok < p.n_tokens) y[tok * p.nrows + row] = s + res[tok * p.nrows + row];
#endif
#else
      s *= ns[i % NTOK];
#if defined(MUL_MV_ID)
      if (row < p.nrows) y[set * p.nrows + row] = s + (p.has_bias != 0u ? bias[e * p.nrows + row] : 0.0);
#else
      const uint tok = set * NTOK + i % NTOK;
#if defined(MUL_MV_CONV)
      if (row < p.nrows && tok == 0u) {  // (one token)
        const uint taps = p.taps, wr = row * taps;
        precise float c = 0.0;
        for (uint k = 0u; k + 1u < taps; ++k) c += cw[wr + k] * cstate[k * p.nrows + row];
        c += cw[wr + taps - 1u] * s;
        for (uint k = 0u; k + 2u < taps; ++k) cstate[k * p.nrows + row] = cstate[(k + 1u) * p.nrows + row];
        if (taps > 1u) cstate[(taps - 2u) * p.nrows + row] = s;
        y[row] = c / (1.0 + exp(-c));
      }
#elif defined(PLAIN_BIAS)
      // (the graph's Add after the product: one float add)
      if (row < p.nrows && tok < p.n_tokens) y[tok * p.nrows + row] = s + (p.has_bias != 0u ? bias[row] : 0.0);
#else
      if (row < p.nrows && tok < p.n_tokens) y[tok * p.nrows + row] = s;
#endif
#endif
#endif
#if defined(MUL_MV_VSTORE)
      vrow[i] = s;
#endif
    }
#if defined(MUL_MV_ROPE)
    rope_tail(wg_row0, tid);
#elif defined(MUL_MV_NORM)
    norm_tail(set, wg_row0, tid);
#elif defined(MUL_MV_VSTORE)
    append_rows(wg_row0, tid, WG);
#elif defined(MUL_MV_ROWNORM)
    row_norm_tail(set, tid, WG);  // (NTOK = 1: set is the token)
#if defined(MUL_MV_ROUTE)
    route_after_norm(set, tid);
#endif
#endif
#endif
    barrier();
  }
}
