// a / b rounded as IEEE division rounds it (Vulkan lets '/' be off by 2.5 ulp, enough to move an
// activation code across a rounding boundary): one correction step from the exact remainder. The
// activation quantizers use it for d = max|x| / 127 and 1 / d, as the CPU backend computes them.
float div_rn(float a, float b) {
  precise float q = a / b;
  precise float r = fma(-q, b, a);
  return fma(r, 1.0 / b, q);
}
