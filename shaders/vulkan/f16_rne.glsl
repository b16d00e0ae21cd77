// Float to IEEE half with round-to-nearest-even, exactly as the CPU backend converts (packHalf2x16's
// rounding is left to the implementation: lavapipe truncates). Used where the GPU must store the same
// halves as the CPU: the F16 KV cache and the scales of quantized blocks.
uint half_rne(float f) {
  const uint x = floatBitsToUint(f);
  const uint sign = (x >> 16) & 0x8000u;
  const uint e = (x >> 23) & 0xffu;
  uint m = x & 0x7fffffu;
  if (e == 0xffu) return sign | 0x7c00u | (m != 0u ? 0x200u : 0u);  // infinity, NaN
  const int ex = int(e) - 112;                                       // the half's biased exponent
  if (ex >= 31) return sign | 0x7c00u;                               // too large: infinity
  if (ex <= 0) {                                                     // a half subnormal, or zero
    if (ex < -10) return sign;
    m |= 0x800000u;
    const uint shift = uint(14 - ex);
    uint h = m >> shift;
    const uint rem = m & ((1u << shift) - 1u), halfway = 1u << (shift - 1u);
    if (rem > halfway || (rem == halfway && (h & 1u) != 0u)) h += 1u;
    return sign | h;
  }
  uint h = (uint(ex) << 10) | (m >> 13);
  const uint rem = m & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u) != 0u)) h += 1u;  // a carry rounds up the exponent
  return sign | h;
}

uint pack_half2_rne(vec2 v) { return half_rne(v.x) | (half_rne(v.y) << 16); }
