// Dequantization of hand-built blocks whose values are known from the format definitions: each test
// fills the block's bytes directly and states the expected elements as literals or simple formulas.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/error.h"
#include "quant/blocks.h"
#include "quant/quant.h"

namespace zinc::quant {
namespace {

constexpr uint16_t kHalf0_125 = 0x3000, kHalf0_25 = 0x3400, kHalf0_5 = 0x3800, kHalf1 = 0x3c00,
                   kHalfMinus2 = 0xc000;
const float kIQ4[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
const float kFP4x2[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

template <class Block>
std::vector<float> deq(TensorType t, const Block& b, int n) {
  std::vector<float> y(static_cast<size_t>(n));
  dequantize_row(t, &b, y.data(), n);
  return y;
}

TEST(Dequantize, Q4_0) {
  BlockQ4_0 b{};
  b.d = kHalf0_5;
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const auto y = deq(TensorType::Q4_0, b, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], (j - 8) * 0.5f) << j;
    EXPECT_EQ(y[j + 16], (7 - j) * 0.5f) << j;
  }
  EXPECT_EQ(y[0], -4.0f);
  EXPECT_EQ(y[16], 3.5f);
}

TEST(Dequantize, Q4_1) {
  BlockQ4_1 b{};
  b.d = kHalf1;
  b.m = kHalfMinus2;
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | (3 << 4));
  const auto y = deq(TensorType::Q4_1, b, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], j - 2.0f);
    EXPECT_EQ(y[j + 16], 1.0f);
  }
}

TEST(Dequantize, Q5_0) {
  BlockQ5_0 b{};
  b.d = kHalf1;
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | (j << 4));
  const uint32_t qh = 0xffff0000u;  // the fifth bit is set for elements 16..31 only
  std::memcpy(b.qh, &qh, 4);
  const auto y = deq(TensorType::Q5_0, b, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], j - 16.0f);
    EXPECT_EQ(y[j + 16], static_cast<float>(j));
  }
}

TEST(Dequantize, Q5_1) {
  BlockQ5_1 b{};
  b.d = kHalf0_5;
  b.m = kHalf1;
  for (int j = 0; j < 16; ++j) b.qs[j] = 0x0f;  // low nibble 15, high nibble 0
  const uint32_t qh = 0x0000ffffu;
  std::memcpy(b.qh, &qh, 4);
  const auto y = deq(TensorType::Q5_1, b, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 31 * 0.5f + 1.0f);
    EXPECT_EQ(y[j + 16], 1.0f);
  }
}

TEST(Dequantize, Q8_0) {
  BlockQ8_0 b{};
  b.d = kHalf0_25;
  for (int j = 0; j < 32; ++j) b.qs[j] = static_cast<int8_t>(j - 16);
  const auto y = deq(TensorType::Q8_0, b, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], (j - 16) * 0.25f);
}

TEST(Dequantize, Q2_K) {
  // Every qs byte is 0b11100100, so the 2-bit field at shift 2j holds j. Sub-block s has scale s and
  // min 1; d = 1, dmin = 0.5. Element e = n*128 + j*32 + h*16 + l lies in sub-block 8n + 2j + h.
  BlockQ2_K b{};
  b.d = kHalf1;
  b.dmin = kHalf0_5;
  for (int s = 0; s < 16; ++s) b.scales[s] = static_cast<uint8_t>(s | (1 << 4));
  std::memset(b.qs, 0xe4, sizeof b.qs);
  const auto y = deq(TensorType::Q2_K, b, 256);
  for (int e = 0; e < 256; ++e) {
    const int n = e / 128, j = (e % 128) / 32, h = (e % 32) / 16;
    EXPECT_EQ(y[e], static_cast<float>((8 * n + 2 * j + h) * j) - 0.5f) << e;
  }
  EXPECT_EQ(y[255], 44.5f);
}

TEST(Dequantize, Q3_K) {
  // Stored 6-bit scales u[s] = 24 + s (so s-32 = s - 8), packed: bytes 0-3 = low nibbles of u[0..3]
  // (low) and u[8..11] (high); bytes 4-7 likewise for u[4..7] and u[12..15]; bytes 8-11 = bits 4-5 of
  // u[j], u[4+j], u[8+j], u[12+j] at bit offsets 0, 2, 4, 6.
  BlockQ3_K b{};
  b.d = kHalf1;
  uint8_t u[16];
  for (int s = 0; s < 16; ++s) u[s] = static_cast<uint8_t>(24 + s);
  for (int j = 0; j < 4; ++j) {
    b.scales[j] = static_cast<uint8_t>((u[j] & 15) | ((u[8 + j] & 15) << 4));
    b.scales[4 + j] = static_cast<uint8_t>((u[4 + j] & 15) | ((u[12 + j] & 15) << 4));
    b.scales[8 + j] = static_cast<uint8_t>((u[j] >> 4) | ((u[4 + j] >> 4) << 2) | ((u[8 + j] >> 4) << 4) |
                                           ((u[12 + j] >> 4) << 6));
  }
  std::memset(b.qs, 0xe4, sizeof b.qs);     // low two bits = j at shift 2j
  std::memset(b.hmask, 0x0f, sizeof b.hmask);  // high bit set for n = 0 (bits 0-3), clear for n = 1
  const auto y = deq(TensorType::Q3_K, b, 256);
  for (int e = 0; e < 256; ++e) {
    const int n = e / 128, j = (e % 128) / 32, h = (e % 32) / 16;
    const int s = 8 * n + 2 * j + h;
    const int q = n == 0 ? j : j - 4;
    EXPECT_EQ(y[e], static_cast<float>((s - 8) * q)) << e;
  }
}

// Q4_K/Q5_K scale packing: for j < 4, byte j = sc[j] | (sc[j+4] >> 4) << 6, byte j+4 = m[j] | (m[j+4] >> 4)
// << 6, byte j+8 = (sc[j+4] & 15) | (m[j+4] & 15) << 4.
void pack_scales(const int* sc, const int* m, uint8_t* p) {
  for (int j = 0; j < 4; ++j) {
    p[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
    p[j + 4] = static_cast<uint8_t>(m[j] | ((m[j + 4] >> 4) << 6));
    p[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
  }
}

TEST(Dequantize, Q4_K) {
  BlockQ4_K b{};
  b.d = kHalf1;
  b.dmin = kHalf0_5;
  int sc[8], m[8];
  for (int s = 0; s < 8; ++s) {
    sc[s] = 8 * s + 3;   // 3..59: the upper sub-blocks need the 6-bit high parts
    m[s] = 63 - 8 * s;   // 63..7
  }
  pack_scales(sc, m, b.scales);
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) b.qs[c * 32 + l] = static_cast<uint8_t>((l % 16) | ((15 - l % 16) << 4));
  const auto y = deq(TensorType::Q4_K, b, 256);
  for (int e = 0; e < 256; ++e) {
    const int c = e / 64, h = (e % 64) / 32, l = e % 32;
    const int s = 2 * c + h;
    const int q = h == 0 ? l % 16 : 15 - l % 16;
    EXPECT_EQ(y[e], static_cast<float>(sc[s] * q) - 0.5f * static_cast<float>(m[s])) << e;
  }
}

TEST(Dequantize, Q5_K) {
  BlockQ5_K b{};
  b.d = kHalf0_5;
  b.dmin = kHalf1;
  int sc[8], m[8];
  for (int s = 0; s < 8; ++s) {
    sc[s] = 63 - 7 * s;
    m[s] = 5 * s + 20;
  }
  pack_scales(sc, m, b.scales);
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) b.qs[c * 32 + l] = static_cast<uint8_t>(l % 16 | ((l % 16) << 4));
  // Fifth bit: set for every element of sub-block 2c+h when (c + h) is odd; qh byte l bit 2c+h.
  for (int l = 0; l < 32; ++l) b.qh[l] = 0b10011001;  // bits 0,3,4,7: (c,h) = (0,0),(1,1),(2,0),(3,1)
  const auto y = deq(TensorType::Q5_K, b, 256);
  for (int e = 0; e < 256; ++e) {
    const int c = e / 64, h = (e % 64) / 32, l = e % 32;
    const int s = 2 * c + h;
    const int q = l % 16 + (((0b10011001 >> s) & 1) ? 16 : 0);
    EXPECT_EQ(y[e], 0.5f * static_cast<float>(sc[s]) * q - static_cast<float>(m[s])) << e;
  }
}

TEST(Dequantize, Q6_K) {
  // Element e = n*128 + k*32 + l holds 6-bit code v(e) = (e * 7) % 64, stored as: low 4 bits in ql byte
  // n*64 + (k%2)*32 + l (low nibble for k < 2, high nibble for k >= 2), high 2 bits in qh byte n*32 + l at
  // bit 2k. Sub-block n*8 + 2k + l/16 has scale (sub - 8); d = 0.5; value = d * scale * (v - 32).
  BlockQ6_K b{};
  b.d = kHalf0_5;
  for (int s = 0; s < 16; ++s) b.scales[s] = static_cast<int8_t>(s - 8);
  auto v = [](int e) { return (e * 7) % 64; };
  for (int n = 0; n < 2; ++n)
    for (int k = 0; k < 4; ++k)
      for (int l = 0; l < 32; ++l) {
        const int code = v(n * 128 + k * 32 + l);
        b.ql[n * 64 + (k % 2) * 32 + l] |= static_cast<uint8_t>((code & 15) << (k >= 2 ? 4 : 0));
        b.qh[n * 32 + l] |= static_cast<uint8_t>((code >> 4) << (2 * k));
      }
  const auto y = deq(TensorType::Q6_K, b, 256);
  for (int e = 0; e < 256; ++e) {
    const int n = e / 128, k = (e % 128) / 32, l = e % 32;
    const int s = n * 8 + 2 * k + l / 16;
    EXPECT_EQ(y[e], 0.5f * static_cast<float>(s - 8) * static_cast<float>(v(e) - 32)) << e;
  }
}

TEST(Dequantize, Q8_K) {
  BlockQ8_K b{};
  b.d = 0.125f;
  for (int j = 0; j < 256; ++j) b.qs[j] = static_cast<int8_t>(j - 128);
  const auto y = deq(TensorType::Q8_K, b, 256);
  for (int j = 0; j < 256; ++j) EXPECT_EQ(y[j], (j - 128) * 0.125f);
}

TEST(Dequantize, IQ4_NL) {
  BlockIQ4_NL b{};
  b.d = kHalf0_5;
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const auto y = deq(TensorType::IQ4_NL, b, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.5f * kIQ4[j]);
    EXPECT_EQ(y[j + 16], 0.5f * kIQ4[15 - j]);
  }
  EXPECT_EQ(y[0], -63.5f);
}

TEST(Dequantize, IQ4_XS) {
  // Sub-block s has 6-bit scale ls = 28 + s (ls - 32 = s - 4): low nibble in scales_l[s/2] (low nibble
  // for even s), high 2 bits in scales_h at bit 2s.
  BlockIQ4_XS b{};
  b.d = kHalf0_125;
  for (int s = 0; s < 8; ++s) {
    const int ls = 28 + s;
    b.scales_l[s / 2] |= static_cast<uint8_t>((ls & 15) << (4 * (s % 2)));
    b.scales_h = static_cast<uint16_t>(b.scales_h | ((ls >> 4) << (2 * s)));
    for (int j = 0; j < 16; ++j) b.qs[16 * s + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  }
  const auto y = deq(TensorType::IQ4_XS, b, 256);
  for (int s = 0; s < 8; ++s)
    for (int j = 0; j < 16; ++j) {
      EXPECT_EQ(y[32 * s + j], 0.125f * static_cast<float>(s - 4) * kIQ4[j]) << s << "," << j;
      EXPECT_EQ(y[32 * s + j + 16], 0.125f * static_cast<float>(s - 4) * kIQ4[15 - j]) << s << "," << j;
    }
}

TEST(Dequantize, MXFP4) {
  BlockMXFP4 b{};
  b.e = 129;  // 2^(129-127) / 2 = 2
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const auto y = deq(TensorType::MXFP4, b, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 2.0f * kFP4x2[j]);
    EXPECT_EQ(y[j + 16], 2.0f * kFP4x2[15 - j]);
  }
  EXPECT_EQ(y[7], 24.0f);  // E2M1 6.0 at scale 2^2
}

TEST(Dequantize, FloatFormats) {
  const uint16_t f16[4] = {0x3c00, 0xc000, 0x7bff, 0x0001};
  float y[4];
  dequantize_row(TensorType::F16, f16, y, 4);
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], -2.0f);
  EXPECT_EQ(y[2], 65504.0f);
  EXPECT_EQ(y[3], 5.9604644775390625e-08f);
  const uint16_t bf[2] = {0x3f80, 0x4049};
  dequantize_row(TensorType::BF16, bf, y, 2);
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], 3.140625f);
}

TEST(Dequantize, BadArgumentsAreErrors) {
  BlockQ4_0 b{};
  float y[64];
  EXPECT_THROW(dequantize_row(TensorType::Q4_0, &b, y, 31), Error);
  EXPECT_THROW(dequantize_row(TensorType::IQ2_XXS, &b, y, 256), Error);
  EXPECT_THROW(row_size(TensorType::Q4_K, 100), Error);
  EXPECT_EQ(row_size(TensorType::Q4_K, 512), 288u);
  EXPECT_EQ(row_size(TensorType::Q8_0, 64), 68u);
}

}  // namespace
}  // namespace zinc::quant
