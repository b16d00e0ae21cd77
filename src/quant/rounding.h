// Rounding of 8-bit codes in the Q8_0 / Q8_1 / Q8_K quantizers, which quantize every activation row of
// every CPU matrix product. Written so that compilers vectorize the loops (a libm call per element
// cannot be), with exactly the results of the libm functions they replace for codes in [-127, 127].
// They rely on IEEE float arithmetic (no -ffast-math, no reassociation); GCC vectorizes the float
// clamps only with -fno-trapping-math, which changes no results.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace zinc::quant {

// std::lrintf(v) in the default rounding mode (nearest, ties to even), clamped to [-127, 127]. Adding
// and subtracting 1.5·2^23 leaves the rounding to the float adder. NaN gives -127, as lrintf's
// out-of-range result does after clamping.
inline float code_round_even(float v) {
  v = std::min(127.0f, std::max(-127.0f, v));
  return (v + 12582912.0f) - 12582912.0f;
}

// std::roundf(v) (nearest, ties away from zero) for |v| ≤ 127.5, clamped to [-127, 127]; v - trunc(v)
// is exact there.
inline float code_round_away(float v) {
  v = std::min(127.0f, std::max(-127.0f, v));
  const float t = static_cast<float>(static_cast<int>(v));
  const float f = v - t;
  return t + (f >= 0.5f ? 1.0f : 0.0f) - (f <= -0.5f ? 1.0f : 0.0f);
}

// max |x[j]| over j < n, NaN skipped (as std::max(amax, |x|) from 0 skips it). Non-negative floats order
// like their bit patterns as integers, and an integer maximum vectorizes without fast-math flags.
inline float abs_max(const float* x, int n) {
  int32_t m = 0;
  for (int j = 0; j < n; ++j) {
    int32_t b;
    std::memcpy(&b, &x[j], sizeof b);
    b &= 0x7fffffff;
    b = b > 0x7f800000 ? 0 : b;  // NaN
    m = m < b ? b : m;
  }
  float f;
  std::memcpy(&f, &m, sizeof f);
  return f;
}

}  // namespace zinc::quant
