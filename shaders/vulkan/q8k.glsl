// Q8_K activation codes as the CPU backend makes them (src/quant/quantize.cpp, q_q8_k): per block of
// 256 floats d = max|x| / 127, codes round(x / d) to nearest even, clamped to ±127. The kernels that
// write them (quantize_q8k, rms_norm_row, eltwise) share this arithmetic and this layout of a row of
// ncols (rows `stride` words apart, q8k_row_bytes in vk_quant.cpp):
//   words [0, ncols/4)                     codes, 4 per word, little-endian int8
//   words [ncols/4, ncols/4 + ncols/16)    the sum of each 16 codes, int32
//   then ncols/256 words                   d of each block, float
// With Q8K_BLOCK_WRITER defined (after the shader's `q` buffer of words): q8k_write_block, one block
// quantized by a workgroup of 64 invocations (quantize_q8k.comp, attention_reduce.comp); with
// Q8K_BLOCK256_WRITER, q8k_write_block256, one block by a workgroup of 256, a value each (eltwise.comp,
// rms_norm_glu.comp).
#include "div_rn.glsl"

// |v| as bits, NaN as 0 (the CPU's maximum skips NaN): non-negative floats order as their bits.
uint q8k_abs_bits(float v) {
  const uint b = floatBitsToUint(v) & 0x7fffffffu;
  return b > 0x7f800000u ? 0u : b;
}

// d of a block from its max |x| (as bits), and the 1 / d the codes are scaled by.
float q8k_scale(uint amax_bits, out float id) {
  const float d = div_rn(uintBitsToFloat(amax_bits), 127.0);
  id = d != 0.0 ? div_rn(1.0, d) : 0.0;
  return d;
}

int q8k_code(float v, float id) {
  precise const float scaled = v * id;  // rounded before the code is (no fused multiply-add)
  return int(roundEven(clamp(scaled, -127.0, 127.0)));
}

uint q8k_pack(ivec4 c) {
  return (uint(c.x) & 0xffu) | ((uint(c.y) & 0xffu) << 8) | ((uint(c.z) & 0xffu) << 16) | (uint(c.w) << 24);
}

#if defined(Q8K_BLOCK_WRITER)
shared uint q8k_part_max[64];

// Block b of the row at word `base` (ncols per row) from v, elements 4 lid.. of the block, lid the
// invocation's index in its group of 64 (subgroups of at most 64, whole subgroups a group, lid in
// subgroup order): the maximum over the group (subgroups, then shared memory), then the codes, each 16
// codes' sum (4 invocations) and d. In a larger workgroup (at most 64 subgroups) every group calls it
// (all reach its barrier), each with a block of its own or v = 0 and writes false; a second call
// needs a barrier before it (q8k_part_max's readers).
void q8k_write_block(vec4 v, uint lid, uint base, uint ncols, uint b, bool writes) {
  uint m = subgroupMax(max(max(q8k_abs_bits(v.x), q8k_abs_bits(v.y)), max(q8k_abs_bits(v.z), q8k_abs_bits(v.w))));
  if (subgroupElect()) q8k_part_max[gl_SubgroupID] = m;
  barrier();
  const uint per = max(64u / gl_SubgroupSize, 1u), first = gl_SubgroupID / per * per;
  for (uint i = 0u; i < per; ++i) m = max(m, q8k_part_max[first + i]);
  float id;
  const float d = q8k_scale(m, id);
  const ivec4 c = ivec4(q8k_code(v.x, id), q8k_code(v.y, id), q8k_code(v.z, id), q8k_code(v.w, id));
  if (writes) q[base + b * 64u + lid] = q8k_pack(c);
  int s = c.x + c.y + c.z + c.w;  // 16 codes: 4 invocations
  s += subgroupShuffleXor(s, 1u);
  s += subgroupShuffleXor(s, 2u);
  if (writes && (lid & 3u) == 0u) q[base + ncols / 4u + b * 16u + lid / 4u] = uint(s);
  if (writes && lid == 0u) q[base + ncols / 4u + ncols / 16u + b] = floatBitsToUint(d);
}
void q8k_write_block(vec4 v, uint lid, uint base, uint ncols, uint b) { q8k_write_block(v, lid, base, ncols, b, true); }
#endif

#if defined(Q8K_BLOCK256_WRITER)
shared uint q8k_block_max[256];
shared int q8k_block_codes[256];

// The block of element col of the row at word `base` (ncols per row) from v, invocation lid's value of
// a workgroup of 256: the maximum over the workgroup, then the codes, gathered in shared memory to be
// packed four to a word and summed sixteen at a time, and d.
void q8k_write_block256(float v, uint lid, uint base, uint ncols, uint col) {
  const uint m = subgroupMax(q8k_abs_bits(v));
  if (subgroupElect()) q8k_block_max[gl_SubgroupID] = m;
  barrier();
  uint amax = 0u;
  for (uint g = 0u; g < gl_NumSubgroups; ++g) amax = max(amax, q8k_block_max[g]);
  float id;
  const float d = q8k_scale(amax, id);
  q8k_block_codes[lid] = q8k_code(v, id);
  barrier();
  if ((lid & 3u) == 0u) {
    q[base + col / 4u] =
        q8k_pack(ivec4(q8k_block_codes[lid], q8k_block_codes[lid + 1u], q8k_block_codes[lid + 2u], q8k_block_codes[lid + 3u]));
  }
  if ((lid & 15u) == 0u) {
    int sum = 0;
    for (uint k = 0u; k < 16u; ++k) sum += q8k_block_codes[lid + k];
    q[base + ncols / 4u + col / 16u] = uint(sum);
  }
  if (lid == 0u) q[base + ncols / 4u + ncols / 16u + col / 256u] = floatBitsToUint(d);
}
#endif
