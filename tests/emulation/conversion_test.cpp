// The emulator's conversions (PTX cvt.rn.bf16.f32 / cvt.rn.f16.f32 and back) against the host
// conversions the tests and the backends upload with (runtime/core/half_convert.h), which were
// written separately: every 16-bit pattern widens to the same float, and floats of every binade,
// ties and overflow edges included, round to the same bits; NaN is the canonical 0x7fff.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>

#include "runtime/core/half_convert.h"

namespace cpgen::emulation {
// From emulation/cuda_emulation.h, which cannot be included here: it redefines CUDA keywords.
uint16_t float_to_16(float value, bool bf16);
float float_from_16(uint16_t bits, bool bf16);
}  // namespace cpgen::emulation

namespace cpgen {
namespace {

float from_bits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

bool is_nan16(uint16_t bits, bool bf16) {
  return bf16 ? (bits & 0x7fffu) > 0x7f80u : (bits & 0x7fffu) > 0x7c00u;
}

TEST(EmulationConversion, EveryPatternWidensLikeTheHost) {
  for (uint32_t b = 0; b <= 0xffffu; ++b) {
    const auto bits = static_cast<uint16_t>(b);
    for (bool bf16 : {true, false}) {
      const float emulated = emulation::float_from_16(bits, bf16);
      const float host = bf16 ? bf16_to_float(bits) : fp16_to_float(bits);
      if (is_nan16(bits, bf16)) {
        ASSERT_TRUE(std::isnan(emulated)) << std::hex << b;
        continue;
      }
      ASSERT_EQ(std::memcmp(&emulated, &host, 4), 0) << (bf16 ? "bf16 " : "fp16 ") << std::hex << b;
    }
  }
}

TEST(EmulationConversion, RoundsToNearestEvenLikeTheHost) {
  std::mt19937 rng(12);
  // Random bit patterns cover every binade (fp16 subnormals and overflow included); the
  // patterns below are the ties and edges where a rounding bug shows.
  std::vector<uint32_t> patterns;
  for (int i = 0; i < 2000000; ++i) patterns.push_back(rng());
  for (uint32_t edge : {0x3f808000u, 0x3f818000u, 0x477fe000u, 0x477ff000u, 0x477fefffu, 0x7f7fffffu, 0x7f7f8000u,
                        0x33000000u, 0x33000001u, 0x32ffffffu, 0x387fe000u, 0x387ff000u, 0x38800000u, 0x00000001u,
                        0x7f800000u, 0x00000000u})
    for (uint32_t sign : {0u, 0x80000000u}) patterns.push_back(edge | sign);
  for (uint32_t bits : patterns) {
    const float value = from_bits(bits);
    if (std::isnan(value)) continue;
    ASSERT_EQ(emulation::float_to_16(value, true), float_to_bf16(value)) << std::hex << bits;
    ASSERT_EQ(emulation::float_to_16(value, false), float_to_fp16(value)) << std::hex << bits;
  }
}

TEST(EmulationConversion, NanBecomesTheCanonicalNan) {
  for (uint32_t bits : {0x7fc00000u, 0xffc00001u, 0x7f800001u}) {
    EXPECT_EQ(emulation::float_to_16(from_bits(bits), true), 0x7fffu);
    EXPECT_EQ(emulation::float_to_16(from_bits(bits), false), 0x7fffu);
  }
}

}  // namespace
}  // namespace cpgen
