#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
//! variant partial PASS_PARTIAL
//! variant final PASS_FINAL
// Greedy sampling on the device: the index of the largest of n floats, as the CPU's greedy sampler
// picks it (sample::Candidates::keep_best): the first of equal maxima, NaN never, +inf as the largest.
// Two passes:
//   partial: workgroup w reduces x[w * 2048, +2048) (8 coalesced loads per invocation) to a
//            (key, index) pair in scratch[2w], scratch[2w + 1] (keys: order_key, workgroup_select.glsl);
//   final:   one workgroup reduces the n_partial pairs and writes the index to out[0], or 0xffffffff
//            when no value is above -inf (every one -inf or NaN: the sampler has nothing to draw).
// Bindings: 0 x (partial) or scratch (final), 1 scratch (partial) or out (final). Reads 4 n bytes.
#define WG_SIZE 256
#define PER_GROUP 2048u
layout(local_size_x = WG_SIZE) in;
#if defined(PASS_PARTIAL)
layout(std430, binding = 0) readonly buffer X { float x[]; };
#else
layout(std430, binding = 0) readonly buffer P { uint part[]; };
#endif
layout(std430, binding = 1) writeonly buffer O { uint o[]; };
layout(push_constant) uniform Params {
  uint n;  // partial: floats; final: pairs
} p;

#include "workgroup_select.glsl"

void main() {
  const uint lid = gl_LocalInvocationID.x;
  uint key = 0u, idx = 0xffffffffu;
#if defined(PASS_PARTIAL)
  const uint base = gl_WorkGroupID.x * PER_GROUP;
  for (uint m = 0u; m < PER_GROUP / WG_SIZE; ++m) {
    const uint e = base + m * WG_SIZE + lid;
    if (e < p.n) {
      const uint ke = order_key(x[e]);
      if (ke > key) {  // ascending e: ties keep the first
        key = ke;
        idx = e;
      }
    }
  }
#else
  for (uint j = lid; j < p.n; j += WG_SIZE) {
    const uint ke = part[2u * j], ie = part[2u * j + 1u];
    if (ke > key || (ke == key && ie < idx)) {
      key = ke;
      idx = ie;
    }
  }
#endif
  const uvec2 best = wg_best(key, idx);
  if (lid != 0u) return;
#if defined(PASS_PARTIAL)
  o[2u * gl_WorkGroupID.x] = best.x;
  o[2u * gl_WorkGroupID.x + 1u] = best.y;
#else
  o[0] = best.x > order_key(uintBitsToFloat(0xff800000u)) ? best.y : 0xffffffffu;  // above -inf
#endif
}
