// Checks shared by the GPU ring tests: a GPU result against float64 expectations, with the
// dtype-tied tolerances of docs/formats.md, every element written (outputs are poisoned
// with NaN before the run), and failures that name the element, the values and the kernel.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "cpgen/problem.h"
#include "runtime/core/half_convert.h"
#include "runtime/ring/vectors.h"

namespace cpgen::testing {

// Relative Frobenius error bound for bf16/fp16 kernels, and the absolute bound on the LSE.
inline constexpr double kHalfOutTolerance = 2e-2;
inline constexpr double kLseTolerance = 2e-2;

inline void expect_close_to(const std::vector<float>& out, const std::vector<float>& lse,
                            const std::vector<double>& want_out, const std::vector<double>& want_lse,
                            int64_t head_dim, const std::string& what) {
  ASSERT_EQ(out.size(), want_out.size()) << what;
  ASSERT_EQ(lse.size(), want_lse.size()) << what;
  for (size_t i = 0; i < out.size(); ++i)
    ASSERT_TRUE(std::isfinite(out[i])) << what << ": out[" << i << "] (row " << i / head_dim
                                       << ", col " << i % head_dim << ") = " << out[i]
                                       << ", expected " << want_out[i] << " (never written?)";
  double worst_lse = 0;
  size_t worst_row = 0;
  for (size_t i = 0; i < lse.size(); ++i) {
    ASSERT_FALSE(std::isnan(lse[i])) << what << ": lse[" << i << "] is NaN (never written?)";
    const double err = std::isinf(want_lse[i]) && lse[i] == want_lse[i] ? 0 : std::abs(lse[i] - want_lse[i]);
    if (!(err <= worst_lse)) {
      worst_lse = err;
      worst_row = i;
    }
  }
  EXPECT_LE(worst_lse, kLseTolerance) << what << ": lse row " << worst_row << " = " << lse[worst_row]
                                      << ", expected " << want_lse[worst_row];
  const double rel = relative_error(out, want_out);
  EXPECT_LE(rel, kHalfOutTolerance) << what << ": relative Frobenius error of out";
}

// dq, dk, dv against float64 gradients: every element written (poisoned to NaN before the run)
// and the relative Frobenius error of each below issue 10's 2e-2 for bf16/fp16.
inline constexpr double kHalfGradTolerance = 2e-2;

inline void expect_grads_close(const std::vector<float>& dq, const std::vector<float>& dk,
                               const std::vector<float>& dv, const std::vector<double>& want_dq,
                               const std::vector<double>& want_dk, const std::vector<double>& want_dv,
                               const std::string& what) {
  const struct {
    const char* name;
    const std::vector<float>& got;
    const std::vector<double>& want;
  } grads[] = {{"dq", dq, want_dq}, {"dk", dk, want_dk}, {"dv", dv, want_dv}};
  for (const auto& g : grads) {
    ASSERT_EQ(g.got.size(), g.want.size()) << what << ": " << g.name;
    for (size_t i = 0; i < g.got.size(); ++i)
      ASSERT_TRUE(std::isfinite(g.got[i])) << what << ": " << g.name << "[" << i << "] = " << g.got[i]
                                           << ", expected " << g.want[i] << " (never written?)";
    EXPECT_LE(relative_error(g.got, g.want), kHalfGradTolerance) << what << ": relative error of " << g.name;
  }
}

// Values exactly representable in bf16 (and so in fp16 for this range), in [-2, 2).
inline std::vector<float> random_bf16_exact(size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  std::vector<float> values(count);
  for (float& v : values) v = bf16_to_float(float_to_bf16(dist(rng)));
  return values;
}

inline std::vector<double> to_double(const std::vector<float>& values) {
  return std::vector<double>(values.begin(), values.end());
}

}  // namespace cpgen::testing
