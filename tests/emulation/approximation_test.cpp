// The emulator's .approx instructions (emulation/cuda_emulation.h, "The .approx instructions")
// against the PTX ISA's statement of them, computed here in double: ex2.approx.ftz.f32 within 2
// ulp of the correctly rounded 2^x with its flushes and corner results, rcp.approx.ftz.f32 within
// 1 ulp of the correctly rounded 1/x with its flushes and corner results; each mode on its side
// of the bound (at its edge for high and low, both sides for mixed), and the mode a property of
// the host thread.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <thread>
#include <vector>

#include "float_bits.h"

namespace cpgen::emulation {
// From emulation/cuda_emulation.h, which cannot be included here: it redefines CUDA keywords.
enum class Approximation : int { kCorrectlyRounded = 0, kHigh = 1, kLow = 2, kMixed = 3 };
void set_approximation(Approximation mode);
Approximation approximation();
float ex2_approx_ftz_f32(float x);
float rcp_approx_ftz_f32(float x);
}  // namespace cpgen::emulation

namespace cpgen {
namespace {

using emulation::Approximation;

constexpr Approximation kModes[] = {Approximation::kCorrectlyRounded, Approximation::kHigh, Approximation::kLow,
                                    Approximation::kMixed};

class ModeGuard {
 public:
  explicit ModeGuard(Approximation mode) { emulation::set_approximation(mode); }
  ~ModeGuard() { emulation::set_approximation(Approximation::kCorrectlyRounded); }
};

using testing::bits;
using testing::floats_between;
using testing::from_bits;

// Inputs of ex2 whose results are normal floats: every binade of |x| from 2^-30 to 2^6, both signs.
std::vector<float> ex2_inputs() {
  std::mt19937 rng(11);
  std::vector<float> xs;
  for (int e = -30; e <= 5; ++e)
    for (int i = 0; i < 200; ++i) {
      const float x = std::ldexp(1.0f + std::uniform_real_distribution<float>(0.0f, 1.0f)(rng), e);
      xs.push_back(x);
      xs.push_back(-x);
    }
  for (float x : {-125.9f, -100.25f, -60.5f, 127.5f, 0.5f, -0.5f, 1.0f, -1.0f}) xs.push_back(x);
  return xs;
}

// The correctly rounded 2^x of a float x whose result is normal (double's exp2 is far finer).
float exp2_rounded(float x) { return static_cast<float>(std::exp2(static_cast<double>(x))); }

TEST(EmulationApproximation, Ex2IsCorrectlyRoundedByDefaultAndTwoFloatsAwayAtTheEdges) {
  for (float x : ex2_inputs()) {
    const float want = exp2_rounded(x);
    ASSERT_TRUE(std::isnormal(want)) << x;
    for (Approximation mode : kModes) {
      ModeGuard guard(mode);
      const float got = emulation::ex2_approx_ftz_f32(x);
      const int64_t away = floats_between(want, got);
      switch (mode) {
        case Approximation::kCorrectlyRounded: EXPECT_EQ(away, 0) << x; break;
        case Approximation::kHigh: EXPECT_EQ(away, 2) << x; break;
        case Approximation::kLow: EXPECT_EQ(away, -2) << x; break;
        case Approximation::kMixed:
          EXPECT_TRUE(away == 2 || away == -2) << x << " moved " << away;
          // The same input, the same result.
          EXPECT_EQ(bits(emulation::ex2_approx_ftz_f32(x)), bits(got)) << x;
          break;
      }
    }
  }
}

TEST(EmulationApproximation, MixedTakesBothEdgesEvenly) {
  ModeGuard guard(Approximation::kMixed);
  int ex2_high = 0, rcp_high = 0, count = 0;
  for (float x : ex2_inputs()) {
    ex2_high += emulation::ex2_approx_ftz_f32(x) > exp2_rounded(x);
    rcp_high += std::abs(emulation::rcp_approx_ftz_f32(x)) > std::abs(1.0f / x);
    ++count;
  }
  EXPECT_NEAR(static_cast<double>(ex2_high) / count, 0.5, 0.05) << ex2_high << " of " << count;
  EXPECT_NEAR(static_cast<double>(rcp_high) / count, 0.5, 0.05) << rcp_high << " of " << count;
}

TEST(EmulationApproximation, Ex2CornerResultsAndFlushesHoldInEveryMode) {
  for (Approximation mode : kModes) {
    ModeGuard guard(mode);
    SCOPED_TRACE(static_cast<int>(mode));
    EXPECT_EQ(bits(emulation::ex2_approx_ftz_f32(-INFINITY)), bits(0.0f));
    EXPECT_EQ(emulation::ex2_approx_ftz_f32(INFINITY), INFINITY);
    EXPECT_EQ(emulation::ex2_approx_ftz_f32(0.0f), 1.0f);
    EXPECT_EQ(emulation::ex2_approx_ftz_f32(-0.0f), 1.0f);
    EXPECT_TRUE(std::isnan(emulation::ex2_approx_ftz_f32(NAN)));
    // ftz: a subnormal input reads as zero, so 2^x = 1 exactly.
    EXPECT_EQ(emulation::ex2_approx_ftz_f32(from_bits(0x00000001u)), 1.0f);
    EXPECT_EQ(emulation::ex2_approx_ftz_f32(from_bits(0x80400000u)), 1.0f);
    // A subnormal result is written as +0: 2^-127 and 2^-149.
    EXPECT_EQ(bits(emulation::ex2_approx_ftz_f32(-127.0f)), bits(0.0f));
    EXPECT_EQ(bits(emulation::ex2_approx_ftz_f32(-149.0f)), bits(0.0f));
    EXPECT_EQ(bits(emulation::ex2_approx_ftz_f32(-1000.0f)), bits(0.0f));
    // Overflow stays infinite; the largest finite results never move past the largest float.
    EXPECT_EQ(emulation::ex2_approx_ftz_f32(128.0f), INFINITY);
    EXPECT_TRUE(std::isfinite(emulation::ex2_approx_ftz_f32(127.99999f)));
  }
}

TEST(EmulationApproximation, RcpIsCorrectlyRoundedByDefaultAndOneFloatAwayAtTheEdges) {
  std::mt19937 rng(13);
  for (int e = -120; e <= 120; ++e)
    for (int i = 0; i < 20; ++i) {
      const float magnitude = std::ldexp(1.0f + std::uniform_real_distribution<float>(0.0f, 1.0f)(rng), e);
      for (float x : {magnitude, -magnitude}) {
        const float want = 1.0f / x;  // the correctly rounded reciprocal
        for (Approximation mode : kModes) {
          ModeGuard guard(mode);
          const float got = emulation::rcp_approx_ftz_f32(x);
          // Floats of one sign are ordered as their bits: > 0 is larger in magnitude.
          const int64_t away = floats_between(std::abs(want), std::abs(got));
          ASSERT_EQ(std::signbit(got), std::signbit(want)) << x;
          switch (mode) {
            case Approximation::kCorrectlyRounded: EXPECT_EQ(away, 0) << x; break;
            case Approximation::kHigh: EXPECT_EQ(away, 1) << x; break;
            case Approximation::kLow: EXPECT_EQ(away, -1) << x; break;
            case Approximation::kMixed: EXPECT_TRUE(away == 1 || away == -1) << x << " moved " << away; break;
          }
        }
      }
    }
}

TEST(EmulationApproximation, RcpCornerResultsAndFlushesHoldInEveryMode) {
  for (Approximation mode : kModes) {
    ModeGuard guard(mode);
    SCOPED_TRACE(static_cast<int>(mode));
    EXPECT_EQ(emulation::rcp_approx_ftz_f32(0.0f), INFINITY);
    EXPECT_EQ(emulation::rcp_approx_ftz_f32(-0.0f), -INFINITY);
    EXPECT_EQ(bits(emulation::rcp_approx_ftz_f32(INFINITY)), bits(0.0f));
    EXPECT_EQ(bits(emulation::rcp_approx_ftz_f32(-INFINITY)), bits(-0.0f));
    EXPECT_TRUE(std::isnan(emulation::rcp_approx_ftz_f32(NAN)));
    // ftz: a subnormal input is a zero of its sign; a subnormal result (1 / 2^127) is one too.
    EXPECT_EQ(emulation::rcp_approx_ftz_f32(from_bits(0x00000001u)), INFINITY);
    EXPECT_EQ(emulation::rcp_approx_ftz_f32(from_bits(0x80400000u)), -INFINITY);
    EXPECT_EQ(bits(emulation::rcp_approx_ftz_f32(std::ldexp(1.0f, 127))), bits(0.0f));
    EXPECT_EQ(bits(emulation::rcp_approx_ftz_f32(-std::ldexp(1.5f, 127))), bits(-0.0f));
    EXPECT_EQ(emulation::rcp_approx_ftz_f32(1.0f) == 1.0f, mode == Approximation::kCorrectlyRounded);
  }
}

TEST(EmulationApproximation, TheModeBelongsToTheHostThread) {
  ModeGuard guard(Approximation::kHigh);
  EXPECT_EQ(emulation::approximation(), Approximation::kHigh);
  float other_ex2 = 0, other_rcp = 0;
  Approximation other_mode = Approximation::kHigh;
  std::thread([&] {
    other_mode = emulation::approximation();
    other_ex2 = emulation::ex2_approx_ftz_f32(0.3f);
    other_rcp = emulation::rcp_approx_ftz_f32(0.3f);
  }).join();
  EXPECT_EQ(other_mode, Approximation::kCorrectlyRounded);
  EXPECT_EQ(other_ex2, exp2_rounded(0.3f));
  EXPECT_EQ(other_rcp, 1.0f / 0.3f);
  EXPECT_EQ(floats_between(exp2_rounded(0.3f), emulation::ex2_approx_ftz_f32(0.3f)), 2);
}

}  // namespace
}  // namespace cpgen
