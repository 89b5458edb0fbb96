// CPU checks of the online-softmax state (templates/softmax.cuh): empty states never produce
// NaN, the running max lags within kMaxLag, and chunked online updates merged as a ring step
// continues a state agree with a float64 softmax.
#include "cpgen/softmax.cuh"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace cpgen::device {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// One row's state (m, l, o) for a single-column v, built the way the kernel does it.
struct RowState {
  float m = kNegInf, l = 0.0f, o = 0.0f;
};

RowState online(const std::vector<float>& scaled_scores, const std::vector<float>& v) {
  RowState s;
  // Two "tiles" of the row, to exercise the rescale between tiles.
  const size_t half = scaled_scores.size() / 2;
  for (auto [lo, hi] : {std::pair<size_t, size_t>{0, half}, {half, scaled_scores.size()}}) {
    float tile_max = kNegInf;
    for (size_t j = lo; j < hi; ++j) tile_max = std::max(tile_max, scaled_scores[j]);
    OnlineStep st = online_step(s.m, tile_max);
    float sum = 0, acc = 0;
    for (size_t j = lo; j < hi; ++j) {
      const float p = std::exp2(scaled_scores[j] - st.offset);
      sum += p;
      acc += p * v[j];
    }
    s = {st.m, s.l * st.rescale + sum, s.o * st.rescale + acc};
  }
  return s;
}

// Two states of one row merged the way a kernel merges a ring step into the running state: the
// step's tile maxima continue from a's state, so b's state enters as one more online step whose
// tile max is b.m (its l and o are relative to b.m: a tile whose exponentials sum to b.l and whose
// weighted values sum to b.o once scaled from b.m to the step's offset).
RowState merge(RowState a, RowState b) {
  const OnlineStep st = online_step(a.m, b.m);
  const float scale_b = b.m == kNegInf ? 0.0f : exp2_approx(b.m - st.offset);
  return {st.m, a.l * st.rescale + b.l * scale_b, a.o * st.rescale + b.o * scale_b};
}

// exp2_approx is ex2.approx.ftz.f32 as the PTX ISA defines it: a subnormal input reads as zero,
// a subnormal result is written as +0, and elsewhere the relative error is at most 2^-22. The
// host and emulator branch must say the same, or the emulated kernels would test another function.
TEST(Softmax, Exp2ApproxFollowsTheFlushToZeroSemanticsOfEx2) {
  const float denorm = std::numeric_limits<float>::denorm_min();
  EXPECT_EQ(exp2_approx(kNegInf), 0.0f);
  EXPECT_FALSE(std::signbit(exp2_approx(kNegInf)));
  EXPECT_EQ(exp2_approx(-126.0f), std::ldexp(1.0f, -126));  // the smallest normal result stays
  EXPECT_EQ(exp2_approx(-126.5f), 0.0f);                     // a subnormal result is flushed
  EXPECT_FALSE(std::signbit(exp2_approx(-126.5f)));
  EXPECT_EQ(exp2_approx(-149.0f), 0.0f);
  EXPECT_EQ(exp2_approx(denorm), 1.0f);  // a subnormal input is zero
  EXPECT_EQ(exp2_approx(-denorm), 1.0f);
  EXPECT_EQ(exp2_approx(10.0f), 1024.0f);
  EXPECT_TRUE(std::isinf(exp2_approx(128.0f)));
  EXPECT_TRUE(std::isnan(exp2_approx(std::numeric_limits<float>::quiet_NaN())));
  for (float x = -125.9f; x < 127.9f; x += 0.37f) {
    const double want = std::exp2(static_cast<double>(x));
    EXPECT_LE(std::abs(exp2_approx(x) - want) / want, std::ldexp(1.0, -22)) << x;
  }
}

// The softcap backward's tanh and slope against double: the slope sech(x)^2 to a few ulps
// relative where it is a normal float (|x| up to 43; ex2's argument -2 x log2(e) carries a
// rounding whose absolute size grows with |x|, hence the bound's |x| term), tanh to a few 1e-7
// absolute; exactly (0, 1) at 0, odd and even in x, (+-1, 0) once exp(-2|x|) underflows. 1 - t^2
// from a float tanh loses all of the slope as t nears 1 (at x = 10 the float tanh is 1 and that
// slope 0, where sech^2 is 8.2e-9).
TEST(Softmax, SoftcapTanhAndSlopeAreAccurateEverywhere) {
  EXPECT_EQ(tanh_and_slope(0.0f).tanh, 0.0f);
  EXPECT_EQ(tanh_and_slope(0.0f).slope, 1.0f);
  for (float x = 1.0f / 1024; x < 43.0f; x *= 1.0137f) {
    const double cosh = std::cosh(static_cast<double>(x));
    const TanhSlope got = tanh_and_slope(x);
    EXPECT_NEAR(got.slope * cosh * cosh, 1.0, 4e-7 + 1.5e-7 * x) << x;
    EXPECT_NEAR(got.tanh, std::tanh(static_cast<double>(x)), 3e-7) << x;
    EXPECT_EQ(tanh_and_slope(-x).slope, got.slope) << x;
    EXPECT_EQ(tanh_and_slope(-x).tanh, -got.tanh) << x;
  }
  EXPECT_EQ(tanh_and_slope(100.0f).slope, 0.0f);
  EXPECT_EQ(tanh_and_slope(100.0f).tanh, 1.0f);
  EXPECT_EQ(tanh_and_slope(-std::numeric_limits<float>::infinity()).tanh, -1.0f);
  EXPECT_EQ(tanh_and_slope(-std::numeric_limits<float>::infinity()).slope, 0.0f);
  const float t = std::tanh(10.0f);
  EXPECT_EQ(1.0f - t * t, 0.0f);
  EXPECT_NEAR(tanh_and_slope(10.0f).slope, 8.245e-9, 1e-12);
}

TEST(Softmax, EmptyMergedWithEmptyStaysEmptyWithoutNaN) {
  RowState empty = merge(RowState{}, RowState{});
  EXPECT_EQ(empty.m, kNegInf);
  EXPECT_EQ(empty.l, 0.0f);
  EXPECT_EQ(empty.o, 0.0f);
  EXPECT_EQ(output_scale(empty.l) * empty.o, 0.0f);
  EXPECT_EQ(lse_natural(empty.m, empty.l), kNegInf);
}

TEST(Softmax, OnlineStepOverAFullyMaskedTileIsNotNaN) {
  OnlineStep st = online_step(kNegInf, kNegInf);
  EXPECT_EQ(st.offset, 0.0f);
  EXPECT_EQ(st.rescale, 0.0f);
  EXPECT_EQ(std::exp2(kNegInf - st.offset), 0.0f);
  // A masked tile after real keys keeps the state.
  st = online_step(3.0f, kNegInf);
  EXPECT_EQ(st.m, 3.0f);
  EXPECT_EQ(st.rescale, 1.0f);
}

// m lags the true max by at most kMaxLag: a tile whose max stays within it leaves m alone with a
// rescale of exactly 1 (the kernels skip the O rescale on that), one that exceeds it moves m to
// the tile's max, and every exponential the lag allows is at most 2^kMaxLag.
TEST(Softmax, OnlineStepKeepsItsMaxWithinTheLagAndMovesPastIt) {
  OnlineStep st = online_step(kNegInf, -5.0f);  // an empty row takes the first finite max
  EXPECT_EQ(st.m, -5.0f);
  EXPECT_EQ(st.offset, -5.0f);
  EXPECT_EQ(st.rescale, 0.0f);
  for (float rise : {0.0f, 0.5f, 3.0f, kMaxLag}) {
    st = online_step(2.0f, 2.0f + rise);
    EXPECT_EQ(st.m, 2.0f) << rise;
    EXPECT_EQ(st.offset, 2.0f) << rise;
    EXPECT_EQ(st.rescale, 1.0f) << rise;
    EXPECT_LE(exp2_approx(2.0f + rise - st.offset), std::exp2(kMaxLag)) << rise;
  }
  st = online_step(2.0f, 2.0f + kMaxLag + 0.25f);
  EXPECT_EQ(st.m, 2.0f + kMaxLag + 0.25f);
  EXPECT_FLOAT_EQ(st.rescale, std::exp2(-(kMaxLag + 0.25f)));
  st = online_step(2.0f, -40.0f);  // a lower tile never moves m down
  EXPECT_EQ(st.m, 2.0f);
  EXPECT_EQ(st.rescale, 1.0f);
}

// Scores that climb slowly along the row (each tile a little above the last, the lag absorbing
// every step) and ones that jump past the lag at once still give the float64 softmax.
TEST(Softmax, ClimbingAndJumpingScoresMatchTheFloat64Softmax) {
  for (float slope : {0.05f, 0.5f, 3.0f, 40.0f}) {
    std::vector<float> s(64), v(64);
    for (int j = 0; j < 64; ++j) {
      s[j] = slope * j + (j % 3 == 0 ? 1.0f : -1.0f);
      v[j] = std::sin(0.7f * j);
    }
    double mx = -1e300, den = 0, num = 0;
    for (float x : s) mx = std::max(mx, double(x));
    for (int j = 0; j < 64; ++j) {
      const double p = std::exp2(double(s[j]) - mx);
      den += p;
      num += p * v[j];
    }
    RowState st;
    int rescales = 0;
    for (int lo = 0; lo < 64; lo += 8) {  // eight tiles of eight keys, as a kernel steps them
      float tile_max = kNegInf;
      for (int j = lo; j < lo + 8; ++j) tile_max = std::max(tile_max, s[j]);
      const OnlineStep step = online_step(st.m, tile_max);
      rescales += lo > 0 && step.rescale != 1.0f;
      float sum = 0, acc = 0;
      for (int j = lo; j < lo + 8; ++j) {
        const float p = exp2_approx(s[j] - step.offset);
        EXPECT_LE(p, std::exp2(kMaxLag));
        sum += p;
        acc += p * v[j];
      }
      st = {step.m, st.l * step.rescale + sum, st.o * step.rescale + acc};
    }
    // m starts at the first tile's max and moves only when a tile passes it by more than the
    // lag: no rescale at all exactly when the row's max stays within the lag of that first max
    // (slope 0.05 here; the others climb past it).
    const float first_max = *std::max_element(s.begin(), s.begin() + 8);
    EXPECT_EQ(rescales > 0, mx > first_max + kMaxLag) << slope;
    if (slope == 0.05f) EXPECT_EQ(rescales, 0);
    EXPECT_NEAR(st.o * output_scale(st.l), num / den, 1e-5) << slope;
    EXPECT_NEAR(lse_natural(st.m, st.l), (mx + std::log2(den)) * std::log(2.0), 1e-4) << slope;
    EXPECT_LE(st.m, mx) << slope;
    EXPECT_GE(st.m, mx - kMaxLag) << slope;
  }
}

TEST(Softmax, MergeWithEmptySideIsIdentity) {
  RowState a{2.5f, 3.0f, 1.25f};
  for (RowState r : {merge(a, RowState{}), merge(RowState{}, a)}) {
    EXPECT_EQ(r.m, a.m);
    EXPECT_FLOAT_EQ(r.l, a.l);
    EXPECT_FLOAT_EQ(r.o, a.o);
  }
}

TEST(Softmax, ChunkedStatesMergeToTheFloat64Softmax) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 8 + trial % 57;
    std::vector<float> s(n), v(n);
    for (int j = 0; j < n; ++j) {
      s[j] = normal(rng) + (trial % 5 == 0 ? 60.0f : 0.0f);  // some rows with large logits
      v[j] = normal(rng);
    }
    // float64 reference: out = sum softmax_j v_j, lse = log sum e^{s_j ln 2}
    double mx = -1e300, den = 0, num = 0;
    for (float x : s) mx = std::max(mx, double(x));
    for (int j = 0; j < n; ++j) {
      const double p = std::exp2(double(s[j]) - mx);
      den += p;
      num += p * v[j];
    }
    const double out_ref = num / den, lse_ref = (mx + std::log2(den)) * std::log(2.0);
    // Split the keys over "ring steps" of uneven sizes, some empty.
    const int cut1 = trial % n, cut2 = std::min(n, cut1 + trial % 7);
    auto part = [&](int lo, int hi) {
      return online({s.begin() + lo, s.begin() + hi}, {v.begin() + lo, v.begin() + hi});
    };
    RowState total = merge(merge(part(0, cut1), part(cut1, cut2)), part(cut2, n));
    EXPECT_NEAR(total.o * output_scale(total.l), out_ref, 1e-4 * (1 + std::abs(out_ref))) << trial;
    EXPECT_NEAR(lse_natural(total.m, total.l), lse_ref, 1e-4 * (1 + std::abs(lse_ref))) << trial;
  }
}

}  // namespace
}  // namespace cpgen::device
