#version 450
//! variants-by-type q8 mat_ MUL_MV_MAT
//! variants-by-type q8 id_ MUL_MV_ID
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
// Bindings: 0 W, 1 codes, 2 y, 3 ids (MUL_MV_ID), 4 bias (bound to anything when has_bias = 0).
#extension GL_KHR_shader_subgroup_arithmetic : require
layout(local_size_x = 128) in;
layout(constant_id = 0) const uint ROWS = 1;  // rows per workgroup: 1, 2, 4 or 8
layout(std430, binding = 0) readonly buffer W { uint w[]; };
layout(std430, binding = 1) readonly buffer Q { uint q[]; };
layout(std430, binding = 2) writeonly buffer Y { float y[]; };
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
  uint has_bias;       // bias[row] (MUL_MV_ID: the expert's bias row) is added
} p;

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
  const uint row0 = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * ROWS, tok = gl_WorkGroupID.z;
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
  for (uint b = lid % per_row; b < p.nblocks; b += per_row) {
    const uint off = wbase + b * BLOCK_BYTES;
    // The NW words holding the block (none past the word of its last byte), funnel-shifted so that
    // blk[i] is its bytes 4i..4i+3; raw[NW] and blk[NW] are zeros for the shifts.
    const uint w0 = off >> 2, sh = (off & 3u) * 8u;
    uint raw[NW + 1];
    for (uint i = 0u; i < uint(NW); ++i) raw[i] = w[w0 + i];
    raw[NW] = 0u;
    uint blk[NW + 1];
    for (uint i = 0u; i < uint(NW); ++i) blk[i] = (raw[i] >> sh) | ((raw[i + 1u] << 1) << (31u - sh));
    blk[NW] = 0u;
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
    s += v;
  }
  for (uint g = 0u; g < ROWS; ++g) {
    const float sg = subgroupAdd(grp == g ? s : 0.0);
    if (gl_SubgroupInvocationID == 0u) partial[g * 128u + gl_SubgroupID] = sg;
  }
  barrier();
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
  }
}
