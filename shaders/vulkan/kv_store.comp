#version 450
//! variant f32 TYPE_F32
//! variant f16 TYPE_F16
//! variant q8_0 TYPE_Q8_0
// KV-cache append (the store half of graph Op::Attention; CpuExecutable::store_kv): the step's k and v
// rows, float [n_tokens][kv_width], become cache rows n_past + t of one layer's K and V caches, stored
// in the cache type (one variant per TYPE_* define) with the bytes GGUF gives that type, so a cache
// row is what quant::quantize_row writes. n_past and the sequence's block table are read on the
// device (the part's header in the step buffer; position i is cache row cache_row(i), kv_rows.glsl),
// so a recorded step appends wherever the sequence has reached.
//   TYPE_F32   one invocation per element;           8 bytes read, 8 written per element (k and v)
//   TYPE_F16   one invocation per pair of elements;  halves packed two per uint, low half first
//   TYPE_Q8_0  one invocation per 32-element block:  d = max|x| / 127 (fp16), q = round(x / d) away
//              from zero, as quant::q_q8_0. Blocks are 34 bytes, so a block starts at an even byte but
//              not always at a whole uint: the 16 bits it shares with its neighbour are written with
//              atomicAnd/atomicOr, everything else with plain stores (kv_width % 32 == 0).
// Grid: x * y workgroups of 256 over the invocations (y > 1 only past the device's group limit).
#extension GL_GOOGLE_include_directive : require
#include "f16_rne.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer K { float k[]; };
layout(std430, binding = 1) readonly buffer V { float v[]; };
#if defined(TYPE_F32)
layout(std430, binding = 2) writeonly buffer KC { float kc[]; };
layout(std430, binding = 3) writeonly buffer VC { float vc[]; };
#else
layout(std430, binding = 2) buffer KC { uint kc[]; };
layout(std430, binding = 3) buffer VC { uint vc[]; };
#endif
layout(std430, binding = 4) readonly buffer Step { uint step[]; };  // word 0: n_past; the block table
#include "kv_rows.glsl"
layout(push_constant) uniform Params {
  uint kv_width;   // elements per row
  uint n;          // invocations: n_tokens * kv_width / (1, 2 or 32)
  uint row_bytes;  // TYPE_Q8_0: bytes per cache row (kv_width / 32 * 34)
} p;

#if defined(TYPE_Q8_0)
// One 32-element block of x (k or v) at element e as 17 half-words: d, then the codes in byte pairs.
void quantize_block(bool is_k, uint e, out uint hw[17]) {
  float amax = 0.0;
  for (uint j = 0u; j < 32u; ++j) amax = max(amax, abs(is_k ? k[e + j] : v[e + j]));
  const float d = amax / 127.0;
  const float id = d != 0.0 ? 1.0 / d : 0.0;
  hw[0] = half_rne(d);
  for (uint j = 0u; j < 16u; ++j) {
    uint pair = 0u;
    for (uint b = 0u; b < 2u; ++b) {
      const float x = clamp((is_k ? k[e + 2u * j + b] : v[e + 2u * j + b]) * id, -127.0, 127.0);
      const float t = trunc(x), f = x - t;
      const int q = int(t) + (f >= 0.5 ? 1 : 0) - (f <= -0.5 ? 1 : 0);
      pair |= (uint(q) & 0xffu) << (8u * b);
    }
    hw[1u + j] = pair;
  }
}

// Writes 17 half-words at byte offset `off` (even) of the K (is_k) or V cache.
void store_block(bool is_k, uint off, uint hw[17]) {
  uint w = off >> 2;
  if ((off & 2u) == 0u) {
    for (uint i = 0u; i < 8u; ++i, ++w) {
      const uint x = hw[2u * i] | (hw[2u * i + 1u] << 16);
      if (is_k) kc[w] = x; else vc[w] = x;
    }
    // The low half of the last uint; its high half is the next block's.
    if (is_k) {
      atomicAnd(kc[w], 0xffff0000u);
      atomicOr(kc[w], hw[16]);
    } else {
      atomicAnd(vc[w], 0xffff0000u);
      atomicOr(vc[w], hw[16]);
    }
  } else {
    // The high half of the first uint; its low half is the previous block's.
    if (is_k) {
      atomicAnd(kc[w], 0x0000ffffu);
      atomicOr(kc[w], hw[0] << 16);
    } else {
      atomicAnd(vc[w], 0x0000ffffu);
      atomicOr(vc[w], hw[0] << 16);
    }
    ++w;
    for (uint i = 0u; i < 8u; ++i, ++w) {
      const uint x = hw[2u * i + 1u] | (hw[2u * i + 2u] << 16);
      if (is_k) kc[w] = x; else vc[w] = x;
    }
  }
}
#endif

void main() {
  const uint i = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * 256u + gl_LocalInvocationID.x;
  if (i >= p.n) return;
#if defined(TYPE_F32)
  const uint at = cache_row(step[0] + i / p.kv_width) * p.kv_width + i % p.kv_width;
  kc[at] = k[i];
  vc[at] = v[i];
#elif defined(TYPE_F16)
  const uint half_row = p.kv_width / 2u;
  const uint at = cache_row(step[0] + i / half_row) * half_row + i % half_row;
  kc[at] = pack_half2_rne(vec2(k[2u * i], k[2u * i + 1u]));
  vc[at] = pack_half2_rne(vec2(v[2u * i], v[2u * i + 1u]));
#elif defined(TYPE_Q8_0)
  const uint blocks = p.kv_width / 32u;
  const uint row = cache_row(step[0] + i / blocks), b = i % blocks;
  const uint off = row * p.row_bytes + b * 34u;
  uint hw[17];
  quantize_block(true, 32u * i, hw);
  store_block(true, off, hw);
  quantize_block(false, 32u * i, hw);
  store_block(false, off, hw);
#else
#error "define one TYPE_*"
#endif
}
