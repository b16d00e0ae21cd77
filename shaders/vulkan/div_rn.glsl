// a / b rounded as IEEE division rounds it, for a >= 0 and b > 0 (Vulkan lets '/' be off by 2.5 ulp,
// enough to move an activation code across a rounding boundary). The activation quantizers use it for
// d = max|x| / 127 and 1 / d, as the CPU backend computes them.
//
// Only multiplications, additions and subtractions, which Vulkan rounds correctly (fma may be split
// into two roundings): remainders a - c*b are computed exactly from Dekker's product (12-bit halves
// multiply without rounding, and for c near a / b each subtraction is exact), one correction step from
// the remainder brings the quotient within an ulp, and of that float and its neighbours the correctly
// rounded quotient has the smallest remainder (a quotient of floats is never halfway between two).
void dekker_split(float x, out float hi, out float lo) {
  precise const float c = 4097.0 * x;
  precise const float h = c - (c - x);
  precise const float l = x - h;
  hi = h;
  lo = l;
}

float div_remainder(float a, float c, float bh, float bl) {
  float ch, cl;
  dekker_split(c, ch, cl);
  precise const float r = (((a - ch * bh) - ch * bl) - cl * bh) - cl * bl;
  return r;
}

float div_rn(float a, float b) {
  float bh, bl;
  dekker_split(b, bh, bl);
  precise const float q0 = a / b;
  precise const float q = q0 + div_remainder(a, q0, bh, bl) * (1.0 / b);
  const uint bits = floatBitsToUint(q);
  const float dn = uintBitsToFloat(bits - 1u), up = uintBitsToFloat(bits + 1u);  // a = 0: q = 0, dn is NaN
  const float r = abs(div_remainder(a, q, bh, bl)), rd = abs(div_remainder(a, dn, bh, bl)),
              ru = abs(div_remainder(a, up, bh, bl));
  return rd < r ? dn : (ru < r ? up : q);
}
