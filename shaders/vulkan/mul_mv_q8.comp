#version 450
// Q8_0 weights times Q8_0-quantized activations (quantize_q8.comp): per block the integer sum of 32
// code products times d_w * d_x, as the CPU backend's dot product computes it, so decoding on the
// GPU chooses the tokens the CPU chooses. One workgroup per (row, token) (rows over x and y, tokens
// over z); each invocation takes whole
// blocks (34 bytes of weight, 36 of activation), a subgroup and shared-memory sum finishes the row.
#extension GL_KHR_shader_subgroup_arithmetic : require
layout(local_size_x = 128) in;
layout(std430, binding = 0) readonly buffer W { uint w[]; };
layout(std430, binding = 1) readonly buffer Q { uint q[]; };
layout(std430, binding = 2) writeonly buffer Y { float y[]; };
layout(push_constant) uniform Params {
  uint nblocks;    // blocks per row
  uint nrows;
  uint row_bytes;
} p;

shared float partial[128];

int sbyte(uint word, uint k) { return bitfieldExtract(int(word), int(8u * k), 8); }

void main() {
  const uint lid = gl_LocalInvocationID.x;
  const uint row = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x, tok = gl_WorkGroupID.z;
  if (row >= p.nrows) return;  // uniform across the workgroup
  float s = 0.0;
  for (uint b = lid; b < p.nblocks; b += 128u) {
    const uint off = row * p.row_bytes + b * 34u;  // even: the block starts at a word or half-word
    const uint w0 = off >> 2, shift = (off & 2u) * 8u;
    uint words[9];
    for (uint i = 0u; i < 9u; ++i) words[i] = w[w0 + i];
    // Bytes off..off+33 as a half-word of scale and eight words of codes.
    const uint dw = shift == 0u ? words[0] & 0xffffu : words[0] >> 16;
    const uint qa = (tok * p.nblocks + b) * 9u;
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
    y[tok * p.nrows + row] = t;
  }
}
