#version 450
//! variant mat MUL_MV_MAT
//! variant id MUL_MV_ID
// Q8_0 weights times Q8_0-quantized activations (quantize_q8.comp): per block the integer sum of 32
// code products times d_w * d_x, as the CPU backend's dot product computes it, so decoding on the
// GPU chooses the tokens the CPU chooses. One workgroup per (row, token) (rows over x and y, tokens
// over z); each invocation takes whole blocks (34 bytes of weight, 36 of activation), a subgroup and
// shared-memory sum finishes the row.
// MUL_MV_ID (mixture of experts): z runs over (token, slot) pairs; the pair's expert ids[pair] picks
// a matrix expert_stride bytes further on, x is the token's row (shared by its slots) or the pair's
// own (x_per_slot), and the expert's bias row (nrows floats) is added when has_bias.
#extension GL_KHR_shader_subgroup_arithmetic : require
layout(local_size_x = 128) in;
layout(std430, binding = 0) readonly buffer W { uint w[]; };
layout(std430, binding = 1) readonly buffer Q { uint q[]; };
layout(std430, binding = 2) writeonly buffer Y { float y[]; };
#if defined(MUL_MV_ID)
layout(std430, binding = 3) readonly buffer Ids { uint ids[]; };
layout(std430, binding = 4) readonly buffer Bias { float bias[]; };
#endif
layout(push_constant) uniform Params {
  uint nblocks;    // blocks per row
  uint nrows;
  uint row_bytes;
  uint n_used;         // MUL_MV_ID: slots per token
  uint n_expert;       // MUL_MV_ID: ids are clamped below it
  uint expert_stride;  // MUL_MV_ID: bytes between experts' matrices
  uint x_per_slot;     // MUL_MV_ID: 1: x row per pair, 0: per token
  uint has_bias;       // MUL_MV_ID
} p;

shared float partial[128];

int sbyte(uint word, uint k) { return bitfieldExtract(int(word), int(8u * k), 8); }

void main() {
  const uint lid = gl_LocalInvocationID.x;
  const uint row = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x, tok = gl_WorkGroupID.z;
  if (row >= p.nrows) return;  // uniform across the workgroup
#if defined(MUL_MV_ID)
  const uint e = min(ids[tok], p.n_expert - 1u);
  const uint wbase = e * p.expert_stride + row * p.row_bytes;
  const uint xrow = p.x_per_slot != 0u ? tok : tok / p.n_used;
#else
  const uint wbase = row * p.row_bytes;
  const uint xrow = tok;
#endif
  float s = 0.0;
  for (uint b = lid; b < p.nblocks; b += 128u) {
    const uint off = wbase + b * 34u;  // even: the block starts at a word or half-word
    const uint w0 = off >> 2, shift = (off & 2u) * 8u;
    uint words[9];
    for (uint i = 0u; i < 9u; ++i) words[i] = w[w0 + i];
    // Bytes off..off+33 as a half-word of scale and eight words of codes.
    const uint dw = shift == 0u ? words[0] & 0xffffu : words[0] >> 16;
    const uint qa = (xrow * p.nblocks + b) * 9u;
    int sumi = 0;
    for (uint i = 0u; i < 8u; ++i) {
      const uint cw = shift == 0u ? (words[i] >> 16) | (words[i + 1u] << 16) : words[i + 1u];
      const uint xw = q[qa + i];
      for (uint k = 0u; k < 4u; ++k) sumi += sbyte(cw, k) * sbyte(xw, k);
    }
    s += unpackHalf2x16(dw).x * uintBitsToFloat(q[qa + 8u]) * float(sumi);
  }
  s = subgroupAdd(s);
  if (gl_SubgroupInvocationID == 0u) partial[gl_SubgroupID] = s;
  barrier();
  if (lid == 0u) {
    float t = 0.0;
    for (uint i = 0u; i < gl_NumSubgroups; ++i) t += partial[i];
#if defined(MUL_MV_ID)
    if (p.has_bias != 0u) t += bias[e * p.nrows + row];
#endif
    y[tok * p.nrows + row] = t;
  }
}
