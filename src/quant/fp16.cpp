#include "quant/fp16.h"

namespace zinc::quant {

float fp16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  if (exp == 0x1f) return f32_from_bits(sign | 0x7f800000u | (mant << 13));  // inf / NaN
  if (exp != 0) return f32_from_bits(sign | ((exp + 112) << 23) | (mant << 13));
  if (mant == 0) return f32_from_bits(sign);  // ±0
  // Subnormal half: normalise into a binary32 normal.
  int e = -1;
  do {
    ++e;
    mant <<= 1;
  } while ((mant & 0x400) == 0);
  return f32_from_bits(sign | static_cast<uint32_t>(112 - e) << 23 | ((mant & 0x3ff) << 13));
}

uint16_t f32_to_fp16(float f) {
  const uint32_t u = f32_bits(f);
  const auto sign = static_cast<uint16_t>((u >> 16) & 0x8000);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00 | ((abs >> 13) & 0x3ff));  // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00);  // rounds to infinity
  if (abs >= 0x38800000u) {
    // Normal half: drop 13 mantissa bits with round-to-nearest-even.
    const uint32_t r = abs + 0xfffu + ((abs >> 13) & 1);
    return static_cast<uint16_t>(sign | ((r - 0x38000000u) >> 13));
  }
  if (abs < 0x33000001u) return sign;  // below half the smallest subnormal: ±0
  // Subnormal half: shift the full mantissa (with its implicit 1) into place, rounding to even.
  const uint32_t exp = abs >> 23;
  const uint32_t mant = (abs & 0x7fffff) | 0x800000;
  const uint32_t shift = 126 - exp;  // 14..24
  const uint32_t half = 1u << (shift - 1);
  const uint32_t rest = mant & ((1u << shift) - 1);
  uint32_t q = mant >> shift;
  if (rest > half || (rest == half && (q & 1))) ++q;
  return static_cast<uint16_t>(sign | q);
}

}  // namespace zinc::quant
