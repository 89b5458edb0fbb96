// The error a 16-bit kernel is held to against float64, tied to its dtype: the relative
// (Frobenius) error of out and of the gradients, and lse's largest absolute error.
//
// A multiple of the dtype's spacing at 1 (ulp_at_one: 2^-7 bf16, 2^-10 fp16). The kernels round
// the inputs, P and dS to the dtype, each by at most half of it relative, and sum in fp32. On
// every case of the emulated tests (forward and backward, both kernel families, the project's
// and ../shared's vectors) the largest error seen was 0.77 of it (a backward step's dK; the
// ring's worst, bf16 causal head dim 128 with large logits, 0.76), so 2 keeps a margin of 2.6
// while a dropped or repeated tile, a wrong mask or a misplaced row is off by far more.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "cpgen/types.h"
#include "runtime/core/half_convert.h"

namespace cpgen::testing {

inline constexpr double kErrorUlps = 2.0;
// A forward's out alone (no P or dS rounded into a second product): 1, where the worst seen is
// 0.29 of it, a margin of 3.4 (the emulated forward tests held it to 1e-2 before).
inline constexpr double kOutputUlps = 1.0;
inline double error_limit(Dtype dtype, double ulps = kErrorUlps) { return ulps * ulp_at_one(dtype); }

// Expects error < error_limit(dtype, ulps) (a NaN fails). CPGEN_PRINT_ULPS=1 prints each error in
// units of ulp_at_one, to see the margin.
inline void expect_within_limit(double error, Dtype dtype, const std::string& what, double ulps = kErrorUlps) {
  if (std::getenv("CPGEN_PRINT_ULPS")) std::printf("ULPS %.3f %s\n", error / ulp_at_one(dtype), what.c_str());
  EXPECT_LT(error, error_limit(dtype, ulps)) << what << " (" << dtype_name(dtype) << ")";
}

}  // namespace cpgen::testing
