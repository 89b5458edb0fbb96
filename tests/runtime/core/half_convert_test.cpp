// Host bf16/fp16 conversions: exact round trips, round-to-nearest-even ties, overflow, subnormals.
#include "runtime/core/half_convert.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace cpgen {
namespace {

TEST(HalfConvert, Bf16RoundsToNearestEven) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bf16(-2.0f), 0xc000);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1.0).
  EXPECT_EQ(float_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6: goes up.
  EXPECT_EQ(float_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(bf16_to_float(0x3f82), 1.015625f);
}

TEST(HalfConvert, Fp16ExactValuesTiesOverflowAndSubnormals) {
  for (float v : {0.0f, 1.0f, -1.5f, 0.333251953125f, 65504.0f, -0.0009765625f}) {
    EXPECT_EQ(fp16_to_float(float_to_fp16(v)), v) << v;
  }
  EXPECT_EQ(float_to_fp16(1.0f), 0x3c00);
  EXPECT_EQ(float_to_fp16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);      // tie to even
  EXPECT_EQ(float_to_fp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // tie to even, up
  EXPECT_EQ(float_to_fp16(70000.0f), 0x7c00);                          // +inf
  EXPECT_EQ(float_to_fp16(65519.0f), 0x7bff);                          // below the rounding edge
  EXPECT_EQ(float_to_fp16(std::ldexp(1.0f, -24)), 0x0001);             // smallest subnormal
  EXPECT_EQ(fp16_to_float(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(fp16_to_float(0x03ff), std::ldexp(1023.0f, -24));
  EXPECT_TRUE(std::isinf(fp16_to_float(0x7c00)));
  EXPECT_TRUE(std::isnan(fp16_to_float(0xffff)));
  EXPECT_TRUE(std::isnan(bf16_to_float(0xffff)));  // the poison value of the GPU tests
}

TEST(HalfConvert, EveryFp16RoundTrips) {
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const auto h = static_cast<uint16_t>(bits);
    const float f = fp16_to_float(h);
    if (std::isnan(f)) continue;
    ASSERT_EQ(float_to_fp16(f), h) << std::hex << bits;
  }
}

}  // namespace
}  // namespace cpgen
