// The tuner's comparison kernels (templates/compare.cuh) run by the CPU emulator on planted
// disagreements: the first disagreeing index of each tensor whatever thread, warp or CTA meets it
// first, a poisoned (NaN) element as a disagreement, nothing reported where all agree, and the
// gradient check's answer equal to the host's first_gradient_mismatch (tuner/step_inputs_bwd.h),
// which it replaces on the GPU. Every launch registers its buffers, so the sanitizer checks each
// access against them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "tuner/step_inputs.h"
#include "tuner/step_inputs_bwd.h"

// Last: defines __CUDACC__ and the CUDA keywords for the template header below.
#include "emulation/cuda_emulation.h"
#include "cpgen/compare.cuh"
#include "../emulation/finding_test_util.h"

namespace cpgen {
namespace {

using testing::LaunchBuffers;

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

struct OutputsFound {
  uint64_t out, lse;
  std::string failure;
};

// compare_outputs over `grid` CTAs of `threads`: fewer threads than elements, so each strides.
OutputsFound run_outputs(const std::vector<uint16_t>& got, const std::vector<uint16_t>& want, float tolerance,
                         const std::vector<float>& got_lse, const std::vector<float>& want_lse, unsigned grid,
                         unsigned threads) {
  std::vector<uint64_t> first = {got.size(), got_lse.size()};
  const LaunchBuffers buffers(
      {{got.data(), got.size() * 2}, {want.data(), want.size() * 2}, {got_lse.data(), got_lse.size() * 4},
       {want_lse.data(), want_lse.size() * 4}, {first.data(), first.size() * 8}});
  CompareParams p{};
  p.got = got.data();
  p.want = want.data();
  p.n = static_cast<long long>(got.size());
  p.tolerance = tolerance;
  p.bf16 = 1;
  p.got_lse = got_lse.data();
  p.want_lse = want_lse.data();
  p.n_lse = static_cast<long long>(got_lse.size());
  p.lse_absolute = 1e-3f;
  p.lse_relative = 1e-5f;
  p.first = reinterpret_cast<unsigned long long*>(first.data());
  OutputsFound found;
  found.failure = emulation::launch(grid, 1, threads, 0, [&] { device::compare_outputs(p); });
  found.out = first[0];
  found.lse = first[1];
  return found;
}

TEST(GpuCompareEmulated, OutputsReportTheFirstDisagreementOfEachTensor) {
  const int64_t n = 5000, n_lse = 700;
  std::vector<uint16_t> want(n);
  for (int64_t i = 0; i < n; ++i) want[i] = encode_exact(static_cast<double>(i % 64 - 32) / 64.0, Dtype::kBf16);
  const std::vector<float> want_lse(n_lse, 7.5f);
  std::vector<uint16_t> got = want;
  std::vector<float> got_lse = want_lse;

  OutputsFound f = run_outputs(got, want, 1e-3f, got_lse, want_lse, 3, 64);
  ASSERT_EQ(f.failure, "");
  EXPECT_EQ(f.out, static_cast<uint64_t>(n)) << "all agree: the start value stays";
  EXPECT_EQ(f.lse, static_cast<uint64_t>(n_lse));

  // Planted on different threads (192 striding: 4039 is thread 7's 22nd element, 4100 thread 68's,
  // 2222 thread 110's 12th, 3000 thread 120's 16th), so the answer is the minimum over threads
  // and not whichever reduction lands last; 2222 is a poisoned element (all-ones bits, a NaN).
  got[4100] = encode_exact(0.75, Dtype::kBf16);
  got[4039] = encode_exact(-0.75, Dtype::kBf16);
  got[2222] = 0xFFFF;
  got[3000] = encode_exact(0.5, Dtype::kBf16);
  got_lse[650] = 7.6f;
  got_lse[64] = kNan;
  f = run_outputs(got, want, 1e-3f, got_lse, want_lse, 3, 64);
  ASSERT_EQ(f.failure, "");
  EXPECT_EQ(f.out, 2222u);
  EXPECT_EQ(f.lse, 64u);

  // Within the tolerance is agreement: 1/64 off everywhere, tolerance 1/64.
  for (int64_t i = 0; i < n; ++i) got[i] = encode_exact(static_cast<double>(i % 64 - 31) / 64.0, Dtype::kBf16);
  f = run_outputs(got, want, 1.0f / 64, want_lse, want_lse, 3, 64);
  ASSERT_EQ(f.failure, "");
  EXPECT_EQ(f.out, static_cast<uint64_t>(n));
  f = run_outputs(got, want, 1.0f / 128, want_lse, want_lse, 3, 64);
  EXPECT_EQ(f.out, 0u) << "1/64 off is outside a tolerance of 1/128 from the first element on";
}

// Rows that see no key of the step (a window, documents) have lse -inf in every config: the
// kernel lets -inf agree with -inf, and with nothing else.
TEST(GpuCompareEmulated, RowsWithoutKeysAgreeOnMinusInfinityOnly) {
  const std::vector<uint16_t> out(256, encode_exact(0.0, Dtype::kBf16));
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> want_lse(300, 7.5f);
  for (int i = 100; i < 200; ++i) want_lse[i] = -inf;
  OutputsFound f = run_outputs(out, out, 1e-3f, want_lse, want_lse, 2, 64);
  ASSERT_EQ(f.failure, "");
  EXPECT_EQ(f.lse, 300u) << "every -inf row agrees with itself";
  std::vector<float> got_lse = want_lse;
  got_lse[150] = 0.0f;  // a candidate that gives an empty row a finite lse
  got_lse[250] = -inf;  // and a seeing row -inf
  f = run_outputs(out, out, 1e-3f, got_lse, want_lse, 2, 64);
  ASSERT_EQ(f.failure, "");
  EXPECT_EQ(f.lse, 150u);
  got_lse[150] = -inf;
  f = run_outputs(out, out, 1e-3f, got_lse, want_lse, 2, 64);
  EXPECT_EQ(f.lse, 250u);
}

uint64_t run_gradient(const std::vector<float>& got, const std::vector<float>& want, int head_dim, float relative,
                      unsigned grid, unsigned threads, std::string* failure, float want_scale = 1.0f) {
  std::vector<uint64_t> first = {want.size()};
  const LaunchBuffers buffers({{got.data(), got.size() * 4}, {want.data(), want.size() * 4}, {first.data(), 8}});
  GradientCompareParams p{};
  p.got = got.data();
  p.want = want.data();
  p.rows = static_cast<long long>(want.size()) / head_dim;
  p.head_dim = head_dim;
  p.relative = relative;
  p.want_scale = want_scale;
  p.first = reinterpret_cast<unsigned long long*>(first.data());
  *failure = emulation::launch(grid, 1, threads, 0, [&] { device::compare_gradients(p); });
  return first[0];
}

// The device's answer in the host's terms: -1 where all agree.
int64_t device_first_mismatch(const std::vector<float>& got, const std::vector<float>& want, int head_dim, Dtype dtype,
                              unsigned grid = 2, unsigned threads = 64) {
  std::string failure;
  const uint64_t at = run_gradient(got, want, head_dim, static_cast<float>(gradient_agreement_relative(dtype)), grid,
                                   threads, &failure);
  EXPECT_EQ(failure, "");
  return at < want.size() ? static_cast<int64_t>(at) : -1;
}

std::vector<float> gradient_rows(int64_t rows, int head_dim, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> g(static_cast<size_t>(rows) * head_dim);
  // Rows of very different sizes (the tolerance is relative to each row's rms).
  for (int64_t r = 0; r < rows; ++r)
    for (int d = 0; d < head_dim; ++d) g[r * head_dim + d] = normal(rng) * std::ldexp(1.0f, static_cast<int>(r % 7) - 3);
  return g;
}

TEST(GpuCompareEmulated, GradientsAgreeWithTheHostCheckOnPlantedErrors) {
  for (int head_dim : {64, 96, 128, 256}) {
    for (Dtype dtype : {Dtype::kBf16, Dtype::kFp16}) {
      const int64_t rows = 37;  // more rows than the launch's 4 warps: each warp strides
      const std::vector<float> want = gradient_rows(rows, head_dim, 11 + head_dim);
      const double u = gradient_agreement_relative(dtype) / 4;  // ulp at one
      // Summation-order noise: a quarter of the tolerance's unit on each element.
      std::vector<float> got = want;
      for (size_t i = 0; i < got.size(); ++i) got[i] += static_cast<float>((i % 3 == 0 ? 1 : -1) * u / 4 * std::abs(want[i]));
      double tol = 0;
      ASSERT_EQ(first_gradient_mismatch(got, want, head_dim, dtype, &tol), -1);
      EXPECT_EQ(device_first_mismatch(got, want, head_dim, dtype), -1) << "hd " << head_dim << " " << dtype_name(dtype);

      // A dropped tile's worth (one element far off) in a late row, found by the warp that holds
      // it; a NaN (unwritten) in an earlier row held by another warp; both after the element at
      // the start of the first bad row the last lane holds.
      std::vector<float> wrong = got;
      wrong[30 * head_dim + 5] += 1.0f;
      wrong[21 * head_dim + head_dim - 1] = kNan;
      wrong[22 * head_dim + 3] = -wrong[22 * head_dim + 3] - 0.5f;
      const int64_t host = first_gradient_mismatch(wrong, want, head_dim, dtype, &tol);
      ASSERT_EQ(host, 21 * head_dim + head_dim - 1);
      EXPECT_EQ(device_first_mismatch(wrong, want, head_dim, dtype), host) << "hd " << head_dim;
      EXPECT_EQ(device_first_mismatch(wrong, want, head_dim, dtype, 1, 32), host) << "one warp for all rows";
      EXPECT_EQ(device_first_mismatch(wrong, want, head_dim, dtype, 16, 256), host) << "more warps than rows";
    }
  }
}

// The backward timer's accumulating check (GpuBackwardTimer::measure) compares the sum of two
// launches with twice the reference: want_scale 2 scales each element and the row's rms alike.
TEST(GpuCompareEmulated, GradientWantScaleStandsForTwoLaunchesSum) {
  const int hd = 64;
  const Dtype dtype = Dtype::kBf16;
  const float rel = static_cast<float>(gradient_agreement_relative(dtype));
  const std::vector<float> want = gradient_rows(9, hd, 5);
  std::vector<float> twice = want;
  for (float& x : twice) x *= 2.0f;
  std::string failure;
  EXPECT_EQ(run_gradient(twice, want, hd, rel, 2, 64, &failure, 2.0f), want.size()) << "2 want agrees with scale 2";
  EXPECT_EQ(failure, "");
  // One launch's worth (an accumulating path that overwrote instead of adding): row 0's first
  // element that is not zero.
  size_t first_nonzero = 0;
  while (want[first_nonzero] == 0.0f) ++first_nonzero;
  EXPECT_EQ(run_gradient(want, want, hd, rel, 2, 64, &failure, 2.0f), first_nonzero);
  EXPECT_EQ(run_gradient(twice, want, hd, rel, 2, 64, &failure), first_nonzero) << "scale 1 is the plain check";
  // Just inside twice the row's tolerance at scale 2 (rms and element both doubled) agrees.
  std::vector<float> near = twice;
  double rms = 0;
  for (int d = 0; d < hd; ++d) rms += static_cast<double>(twice[d]) * twice[d];
  rms = std::sqrt(rms / hd);
  near[3] = static_cast<float>(twice[3] + 0.9 * rel * (std::abs(twice[3]) + rms));
  EXPECT_EQ(run_gradient(near, want, hd, rel, 2, 64, &failure, 2.0f), want.size());
  near[3] = static_cast<float>(twice[3] + 2.0 * rel * (std::abs(twice[3]) + rms));
  EXPECT_EQ(run_gradient(near, want, hd, rel, 2, 64, &failure, 2.0f), 3u);
}

// The boundary sits where the host puts it: just inside the row's tolerance agrees, twice it does
// not (the device works in fp32, the host in float64; the margin between keeps them apart).
TEST(GpuCompareEmulated, GradientToleranceIsRelativeToTheElementAndItsRowsRms) {
  const int hd = 64;
  std::vector<float> want(2 * hd, 0.0f);
  for (int d = 0; d < hd; ++d) want[d] = 1.0f;           // row 0: rms 1
  for (int d = 0; d < hd; ++d) want[hd + d] = d == 0 ? 8.0f : 0.0f;  // row 1: rms 1 (8 / sqrt(64))
  const Dtype dtype = Dtype::kBf16;
  const double rel = gradient_agreement_relative(dtype);
  std::vector<float> got = want;
  got[hd + 7] = static_cast<float>(0.9 * rel * (0.0 + 1.0));  // a zero element keeps the row's tolerance
  got[hd + 0] = static_cast<float>(8.0 + 0.9 * rel * (8.0 + 1.0));
  EXPECT_EQ(device_first_mismatch(got, want, hd, dtype), -1);
  got[hd + 7] = static_cast<float>(2 * rel);
  EXPECT_EQ(device_first_mismatch(got, want, hd, dtype), hd + 7);
  double tol = 0;
  EXPECT_EQ(first_gradient_mismatch(got, want, hd, dtype, &tol), hd + 7);
}

// A launch whose result word lies outside its buffers, or whose reads run past them, is a finding.
TEST(GpuCompareEmulated, TheSanitizerSeesTheKernelsAccesses) {
  const int hd = 64;
  const std::vector<float> want = gradient_rows(4, hd, 3);
  const std::vector<float> got = want;
  std::vector<uint64_t> first = {want.size()};
  // got's buffer registered one row short: the last row's reads fall outside every buffer.
  const LaunchBuffers buffers({{got.data(), (got.size() - hd) * 4}, {want.data(), want.size() * 4}, {first.data(), 8}});
  GradientCompareParams p{};
  p.got = got.data();
  p.want = want.data();
  p.rows = 4;
  p.head_dim = hd;
  p.relative = 1e-2f;
  p.want_scale = 1.0f;
  p.first = reinterpret_cast<unsigned long long*>(first.data());
  testing::expect_finding(emulation::launch(1, 1, 128, 0, [&] { device::compare_gradients(p); }),
                          {"outside every buffer", "compare.cuh"});
}

}  // namespace
}  // namespace cpgen
