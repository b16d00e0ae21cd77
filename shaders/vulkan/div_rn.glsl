// a / b rounded as IEEE division rounds it (to nearest, ties to even). Vulkan lets '/' be off by 2.5
// ulp, enough to move an activation code across a rounding boundary, and lets fma be a multiply and an
// add rounded apart (lavapipe's is), which defeats a correction step from the remainder; so the
// quotient of finite non-zero operands comes from an integer long division of their significands.
// The activation quantizers use it for d = max|x| / 127 and 1 / d, as the CPU backend computes them.
// Zeros, infinities and NaN are left to '/', which gets them exactly.

// The significand of finite non-zero x as 1.23 fixed point (subnormals normalised) and its unbiased
// exponent.
uint div_rn_significand(uint x, out int e) {
  const uint biased = (x >> 23) & 0xffu;
  uint m = x & 0x7fffffu;
  if (biased != 0u) {
    e = int(biased) - 127;
    return m | 0x800000u;
  }
  const int lead = 23 - findMSB(m);
  e = -126 - lead;
  return m << lead;
}

float div_rn(float a, float b) {
  const uint ua = floatBitsToUint(a), ub = floatBitsToUint(b);
  if ((ua & 0x7fffffffu) == 0u || (ub & 0x7fffffffu) == 0u || (ua & 0x7f800000u) == 0x7f800000u ||
      (ub & 0x7f800000u) == 0x7f800000u) {
    return a / b;
  }
  const uint sign = (ua ^ ub) & 0x80000000u;
  int ea, eb;
  uint ma = div_rn_significand(ua, ea);
  const uint mb = div_rn_significand(ub, eb);
  int e = ea - eb;  // the quotient's unbiased exponent once ma / mb is in [1, 2)
  if (ma < mb) {
    ma <<= 1;
    --e;
  }
  // 24 bits of ma / mb (1.23 fixed point); the remainder r < 2 mb < 2^25 keeps the rest: r / (2 mb)
  // of an ulp.
  uint q = 0u, r = ma;
  for (int i = 0; i < 24; ++i) {
    q <<= 1;
    if (r >= mb) {
      r -= mb;
      q |= 1u;
    }
    r <<= 1;
  }
  if (e > 127) return uintBitsToFloat(sign | 0x7f800000u);  // overflow
  uint shift = 0u;  // bits below the smallest subnormal's, for results under 2^-126
  if (e < -126) {
    if (e < -150) return uintBitsToFloat(sign);  // under half the smallest subnormal
    shift = uint(-126 - e);
  }
  // Round q >> shift: the bits shifted out and the remainder decide it.
  const uint kept = q >> shift;
  bool up;
  if (shift == 0u) {
    up = r > mb || (r == mb && (kept & 1u) != 0u);  // r / (2 mb) of an ulp against one half
  } else {
    const uint lost = q & ((1u << shift) - 1u), mid = 1u << (shift - 1u);
    up = lost > mid || (lost == mid && (r != 0u || (kept & 1u) != 0u));
  }
  // Normal: exponent field e + 127 above the 23 fraction bits; subnormal: kept is the field itself. A
  // carry out of the fraction raises the exponent (or reaches infinity), as it should.
  const uint bits = shift == 0u ? (uint(e + 127) << 23) + (kept & 0x7fffffu) : kept;
  return uintBitsToFloat(sign | (bits + (up ? 1u : 0u)));
}
