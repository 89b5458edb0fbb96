// What the emulated ring tests share: the kernel store their host-compiled kernels live in (one
// per build tree, so kernels compiled by one test are read by the next), float conversion of the
// float64 vectors, and the relative error (tests/error_limit.h).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "runtime/jit/kernel_store.h"
#include "error_limit.h"
#include "test_util.h"

namespace cpgen::testing {

inline constexpr const char* kEmulatedArch = "sm_90";  // whose shared memory the launches assume

inline KernelStore* emulated_store() {
  static DirectoryKernelStore store(std::string(CPGEN_BINARY_DIR) + "/test-emulated-kernels");
  return &store;
}

// Relative Frobenius error; NaN (an element no kernel wrote) fails every bound. A reference entry
// of -inf (an lse row that sees no key) must be matched exactly and is left out of the sums.
inline double relative(const std::vector<float>& got, const std::vector<double>& want) {
  EXPECT_EQ(got.size(), want.size());
  double diff = 0, ref = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    if (std::isinf(want[i])) {
      if (got[i] != want[i]) return INFINITY;
      continue;
    }
    diff += (got[i] - want[i]) * (got[i] - want[i]);
    ref += want[i] * want[i];
  }
  return ref > 0 ? std::sqrt(diff / ref) : std::sqrt(diff);
}

}  // namespace cpgen::testing
