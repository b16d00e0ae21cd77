// Block layouts of the GGUF quantization formats, byte for byte as stored in files. Each struct holds
// one block; rows are arrays of blocks. Scales are fp16 bit patterns (uint16_t) unless noted.
//
// Simple formats (32 elements per block): element j and j+16 share byte j of `qs` (low nibble first).
// K-quants (256-element super-blocks) carry sub-block scales packed as described per struct.
#pragma once

#include <cstdint>

namespace zinc::quant {

inline constexpr int kQK = 32;    // elements per simple block
inline constexpr int kQKK = 256;  // elements per K-quant super-block

struct BlockQ4_0 {
  uint16_t d;           // x = d * (q - 8)
  uint8_t qs[kQK / 2];
};
struct BlockQ4_1 {
  uint16_t d, m;        // x = d * q + m
  uint8_t qs[kQK / 2];
};
struct BlockQ5_0 {
  uint16_t d;           // x = d * (q - 16); bit 4 of element j is bit j of qh
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
struct BlockQ5_1 {
  uint16_t d, m;        // x = d * q + m
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
struct BlockQ8_0 {
  uint16_t d;           // x = d * q
  int8_t qs[kQK];
};
struct BlockQ8_1 {      // activation format for the Q4_1/Q5_1 dot products: s = d * sum(qs)
  uint16_t d, s;
  int8_t qs[kQK];
};
struct BlockQ2_K {      // 16 sub-blocks of 16: x = d*(scales&15)*q - dmin*(scales>>4), q in 0..3
  uint8_t scales[kQKK / 16];
  uint8_t qs[kQKK / 4];
  uint16_t d, dmin;
};
struct BlockQ3_K {      // 16 sub-blocks of 16: x = d*(s-32)*(q-4), q in 0..7 (bit 2 in hmask), s 6-bit
  uint8_t hmask[kQKK / 8];
  uint8_t qs[kQKK / 4];
  uint8_t scales[12];
  uint16_t d;
};
struct BlockQ4_K {      // 8 sub-blocks of 32: x = d*s*q - dmin*m, 6-bit s and m packed in `scales`
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qs[kQKK / 2];
};
struct BlockQ5_K {      // as Q4_K with a fifth bit per element in qh
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qh[kQKK / 8];
  uint8_t qs[kQKK / 2];
};
struct BlockQ6_K {      // 16 sub-blocks of 16: x = d*scales[s]*(q-32), q 6-bit (4 in ql, 2 in qh)
  uint8_t ql[kQKK / 2];
  uint8_t qh[kQKK / 4];
  int8_t scales[kQKK / 16];
  uint16_t d;
};
struct BlockQ8_K {      // activation format for K-quant dot products; d is a float32
  float d;
  int8_t qs[kQKK];
  int16_t bsums[kQKK / 16];  // sums of qs in groups of 16
};
struct BlockIQ4_NL {    // x = d * kIQ4NLValues[q]
  uint16_t d;
  uint8_t qs[kQK / 2];
};
struct BlockIQ4_XS {    // 8 sub-blocks of 32: x = d*(ls-32)*kIQ4NLValues[q], ls 6-bit (4 low + 2 high)
  uint16_t d;
  uint16_t scales_h;
  uint8_t scales_l[kQKK / 64];
  uint8_t qs[kQKK / 2];
};
struct BlockMXFP4 {     // x = e8m0_half(e) * kMXFP4Values[q] (E2M1 values, doubled)
  uint8_t e;
  uint8_t qs[kQK / 2];
};

static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24 && sizeof(BlockQ8_0) == 34 && sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockQ2_K) == 84 && sizeof(BlockQ3_K) == 110 && sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210 && sizeof(BlockQ8_K) == 292);
static_assert(sizeof(BlockIQ4_NL) == 18 && sizeof(BlockIQ4_XS) == 136 && sizeof(BlockMXFP4) == 17);

// Non-linear 4-bit codebooks.
inline constexpr int8_t kIQ4NLValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};
inline constexpr int8_t kMXFP4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// Q4_K / Q5_K: sub-block j's 6-bit scale and min from the 12 packed bytes.
inline void kquant_scale_min(int j, const uint8_t* q, uint8_t* scale, uint8_t* min) {
  if (j < 4) {
    *scale = q[j] & 63;
    *min = q[j + 4] & 63;
  } else {
    *scale = static_cast<uint8_t>((q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4));
    *min = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// Q3_K: the 16 6-bit scales (0..63, meaning s-32) from the 12 packed bytes.
inline void q3k_scales(const uint8_t* p, uint8_t out[16]) {
  for (int j = 0; j < 4; ++j) {
    out[j] = static_cast<uint8_t>((p[j] & 0xf) | (((p[8 + j] >> 0) & 3) << 4));
    out[4 + j] = static_cast<uint8_t>((p[4 + j] & 0xf) | (((p[8 + j] >> 2) & 3) << 4));
    out[8 + j] = static_cast<uint8_t>((p[j] >> 4) | (((p[8 + j] >> 4) & 3) << 4));
    out[12 + j] = static_cast<uint8_t>((p[4 + j] >> 4) | (((p[8 + j] >> 6) & 3) << 4));
  }
}

}  // namespace zinc::quant
