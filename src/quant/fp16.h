// Scalar conversions between float and the small float formats GGUF stores: IEEE half (F16), bfloat16
// (BF16, round-to-nearest-even like the reference converter) and E8M0 (MXFP4's power-of-two scale).
// All conversions are exact bit-level definitions, so every backend can be compared against them.
#pragma once

#include <cstdint>
#include <cstring>

namespace zinc::quant {

inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float f32_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// IEEE 754 binary16 → binary32 (exact, including subnormals, infinities and NaN payloads).
float fp16_to_f32(uint16_t h);
// binary32 → binary16, round to nearest even; overflow gives infinity, NaN stays NaN.
uint16_t f32_to_fp16(float f);

inline float bf16_to_f32(uint16_t h) { return f32_from_bits(static_cast<uint32_t>(h) << 16); }
// Round to nearest even; NaN stays a (quiet) NaN.
inline uint16_t f32_to_bf16(float f) {
  const uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

// E8M0 scale as MXFP4 uses it: 2^(e-127) / 2, because its element codebook stores doubled values.
inline float e8m0_to_f32_half(uint8_t e) {
  const uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
  return f32_from_bits(bits);
}

}  // namespace zinc::quant
