// The 32-element formats' activation codes (quantize_q8.comp's Q8_0 / Q8_1 activations, as the CPU
// backend makes them before its integer dot products).

// The CPU's 8-bit code of an activation already divided by its block's scale: clamped to ±127,
// halves rounded away from zero. Callers round the product v = x * (1 / d) before it (precise: no
// fused multiply-add).
int q8_code(float v) {
  v = clamp(v, -127.0, 127.0);
  precise const float t = trunc(v), f = v - t;
  return int(t + (f >= 0.5 ? 1.0 : 0.0) - (f <= -0.5 ? 1.0 : 0.0));
}

// Four activations' codes packed in a word, little-endian (id = 1 / d of their block), their sum
// added to `sum`.
uint q8_pack4(vec4 v, float id, inout int sum) {
  uint packed = 0u;
  for (uint k = 0u; k < 4u; ++k) {
    precise const float scaled = v[k] * id;  // rounded before q8_code (no fused multiply-add)
    const int code = q8_code(scaled);
    sum += code;
    packed |= (uint(code) & 0xffu) << (8u * k);
  }
  return packed;
}

#if defined(Q8_ACT_WRITER)
// A block of 32 from the eight consecutive invocations that hold it (their first at a multiple of 8
// in its subgroup; subgroups of 8 or more), four elements v each in order, j = 0..7 the invocation's
// place: the block's max and code sum by shuffles, then each writes its word of codes at q[at + ...]
// (at: the block's first word of 9) where `store`, and invocation 0 the scale: format 0 (ACT_Q8_0)
// eight words of codes and the float value of the fp16 d; 1 (ACT_Q8_1) the halves d and d * sum,
// then the codes. The includer declares uint q[] and includes f16_rne.glsl and div_rn.glsl, and every
// invocation of the subgroup calls this together.
void q8_act_write(vec4 v, uint j, uint at, uint format, bool store) {
  float amax = max(max(abs(v.x), abs(v.y)), max(abs(v.z), abs(v.w)));
  for (uint off = 1u; off < 8u; off <<= 1) amax = max(amax, subgroupShuffleXor(amax, off));
  const float d = div_rn(amax, 127.0);
  const float id = d != 0.0 ? div_rn(1.0, d) : 0.0;
  int sum = 0;
  const uint packed = q8_pack4(v, id, sum);
  for (uint off = 1u; off < 8u; off <<= 1) sum += subgroupShuffleXor(sum, off);
  if (!store) return;
  if (format != 0u) {
    q[at + 1u + j] = packed;
    precise const float ds = d * float(sum);
    if (j == 0u) q[at] = half_rne(d) | (half_rne(ds) << 16);
  } else {
    q[at + j] = packed;
    if (j == 0u) q[at + 8u] = floatBitsToUint(unpackHalf2x16(half_rne(d)).x);
  }
}
#endif
