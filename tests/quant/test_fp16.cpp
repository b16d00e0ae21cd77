// Float conversions against the CPU's own F16C instructions (an independent implementation of IEEE
// binary16 rounding) and hand-checked bfloat16 and E8M0 values.
#include <gtest/gtest.h>
#include <immintrin.h>

#include <cmath>
#include <random>

#include "core/system_info.h"
#include "quant/fp16.h"

namespace zinc::quant {
namespace {

#if defined(__x86_64__)
__attribute__((target("f16c"))) float hw_h2f(uint16_t h) { return _cvtsh_ss(h); }
__attribute__((target("f16c"))) uint16_t hw_f2h(float f) {
  // The vector form: the scalar macro expands to a compound literal that -Wpedantic rejects.
  return static_cast<uint16_t>(_mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(f), _MM_FROUND_TO_NEAREST_INT), 0));
}
#endif

TEST(Fp16, MatchesHardwareOnEveryHalfAndManyFloats) {
#if defined(__x86_64__)
  if (!cpu_info().f16c) GTEST_SKIP() << "this CPU has no F16C instructions to compare against";
  for (uint32_t h = 0; h < 65536; ++h) {
    const float ours = fp16_to_f32(static_cast<uint16_t>(h));
    const float hw = hw_h2f(static_cast<uint16_t>(h));
    if (std::isnan(hw)) {
      ASSERT_TRUE(std::isnan(ours)) << h;
    } else {
      ASSERT_EQ(f32_bits(ours), f32_bits(hw)) << "half 0x" << std::hex << h;
      ASSERT_EQ(f32_to_fp16(ours), hw_f2h(hw)) << "half 0x" << std::hex << h;  // exact round trip
    }
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 2000000; ++i) {
    const float f = f32_from_bits(static_cast<uint32_t>(rng()));
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_fp16(f), hw_f2h(f)) << "float bits 0x" << std::hex << f32_bits(f);
  }
  // Ties and boundaries: halfway between halves, the largest half, overflow, subnormal edges.
  for (float f : {65504.0f, 65519.99f, 65520.0f, 1e9f, 6.1035156e-05f, 5.9604645e-08f, 2.9802322e-08f,
                  2.9802326e-08f, 1.0009765625f, 1.00048828125f, 1.00146484375f, -0.0f}) {
    EXPECT_EQ(f32_to_fp16(f), hw_f2h(f)) << f;
  }
#else
  GTEST_SKIP() << "no hardware half conversion to compare against on this architecture";
#endif
}

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(f32_from_bits(0x3f808000)), 0x3f80);  // tie, even stays
  EXPECT_EQ(f32_to_bf16(f32_from_bits(0x3f818000)), 0x3f82);  // tie, odd rounds up
  EXPECT_EQ(f32_to_bf16(f32_from_bits(0x3f808001)), 0x3f81);  // above the tie
  EXPECT_EQ(f32_to_bf16(-2.0f), 0xc000);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::nanf("")))));
  EXPECT_EQ(bf16_to_f32(0x4049), 3.140625f);
}

TEST(E8M0, IsHalfOfThePowerOfTwo) {
  EXPECT_EQ(e8m0_to_f32_half(127), 0.5f);
  EXPECT_EQ(e8m0_to_f32_half(128), 1.0f);
  EXPECT_EQ(e8m0_to_f32_half(130), 4.0f);
  EXPECT_EQ(e8m0_to_f32_half(1), std::ldexp(1.0f, -127));
  EXPECT_EQ(e8m0_to_f32_half(0), std::ldexp(1.0f, -128));
  EXPECT_EQ(e8m0_to_f32_half(254), std::ldexp(1.0f, 126));
}

}  // namespace
}  // namespace zinc::quant
