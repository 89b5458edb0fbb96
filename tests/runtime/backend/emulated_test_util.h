// What the emulated ring tests share: the kernel store their host-compiled kernels live in (one
// per build tree, so kernels compiled by one test are read by the next), float conversion of the
// float64 vectors, the relative error (tests/error_limit.h), and a masked ring problem from one
// line of a case table.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "cpgen/problem.h"
#include "runtime/backend/emulated_kernel.h"
#include "runtime/jit/kernel_store.h"
#include "error_limit.h"
#include "test_util.h"

namespace cpgen::testing {

inline constexpr const char* kEmulatedArch = "sm_90";  // whose shared memory the launches assume

// A ring problem of the case tables: sizes, scheme, layout and mask; q_heads = kv_heads * group,
// and seq_len the documents' sum when there are documents.
struct RingCase {
  Dtype dtype = Dtype::kBf16;
  Scheme scheme = Scheme::kZigzag;
  int cp_size = 2;
  bool causal = true;
  int64_t batch = 1, kv_heads = 1, group = 2, head_dim = 64;
  std::string layout;  // empty: bhsd
  std::vector<int64_t> documents;
  int64_t seq_len = 0;  // without documents
  int64_t window_left = -1, window_right = -1;
  double softcap = 0;
};
inline Problem ring_case_problem(const RingCase& c, const std::string& name) {
  Problem p;
  p.name = name;
  p.dtype = c.dtype;
  p.scheme = c.scheme;
  p.cp_size = c.cp_size;
  p.causal = c.causal;
  p.batch = c.batch;
  p.kv_heads = c.kv_heads;
  p.q_heads = c.kv_heads * c.group;
  p.head_dim = c.head_dim;
  p.layout = c.layout;
  p.documents = c.documents;
  p.seq_len = c.documents.empty() ? c.seq_len : 0;
  for (int64_t length : c.documents) p.seq_len += length;
  p.window_left = c.window_left;
  p.window_right = c.window_right;
  p.softcap = c.softcap;
  p.validate();
  return p;
}

// The emulated launches' .approx instructions at one edge of the PTX ISA's bound for the guard's
// life (set_emulated_approximation), then correctly rounded again.
class ScopedApproximation {
 public:
  explicit ScopedApproximation(EmulatedApproximation mode) { set_emulated_approximation(mode); }
  ~ScopedApproximation() { set_emulated_approximation(EmulatedApproximation::kCorrectlyRounded); }
  ScopedApproximation(const ScopedApproximation&) = delete;
  ScopedApproximation& operator=(const ScopedApproximation&) = delete;
};
inline constexpr EmulatedApproximation kApproximationEdges[] = {EmulatedApproximation::kHigh, EmulatedApproximation::kLow,
                                                                EmulatedApproximation::kMixed};

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
