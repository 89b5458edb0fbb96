// The generated forward step kernel on a GPU: one ring step and whole rings of steps on one
// device, against the float64 vectors (tests/data/vectors) and against a float64
// reference computed here, for both dtypes, every head dim, causal and full, GQA 1 and 4.
// Outputs, padding and the carried state are poisoned (NaN) before the first step; every output
// element must be written and finite, and no padding may change. Tolerances (docs/formats.md,
// vectors): relative Frobenius error of out < 2e-2, |lse error| < 2e-2.
#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "generator/kernel_spec.h"
#include "ring_step_harness.h"
#include "test_util.h"

namespace cpgen {
namespace {

using testing::AttentionOutput;
using testing::AttentionProblem;

constexpr double kOutTolerance = 2e-2;
constexpr double kLseTolerance = 2e-2;

const char* const kVectorCases[] = {
    "mha_causal_hd64_s64",  "mha_full_hd64_s32_b2", "gqa4_causal_hd64_s32",
    "gqa2_causal_hd128_s32", "mha_full_hd256_s32",  "mqa_causal_hd96_s48",
    "mha_causal_hd64_s64_large_logits",
};

std::vector<std::vector<int>> one_rank(int seq_len) {
  std::vector<int> all(seq_len);
  for (int i = 0; i < seq_len; ++i) all[i] = i;
  return {all};
}

void expect_match(const AttentionProblem& p, const AttentionOutput& expected, const KernelSpec& spec,
                  const std::vector<std::vector<int>>& ranks, const std::string& what) {
  testing::RingRun run = testing::run_ring_on_gpu(p, spec, ranks);
  SCOPED_TRACE(spec.uri() + ", " + what + ", " + std::to_string(ranks.size()) + " ranks");
  EXPECT_TRUE(run.failure.empty()) << run.failure;
  EXPECT_EQ(run.launches, static_cast<int>(ranks.size() * ranks.size()));
  testing::Comparison c = testing::compare(expected, run.result, p.head_dim);
  EXPECT_LT(c.out_rel_frobenius, kOutTolerance) << "worst " << c.worst;
  EXPECT_LT(c.lse_max_abs, kLseTolerance);
}

KernelSpec spec_for(const AttentionProblem& p, Dtype dtype) {
  return KernelSpec::default_for(dtype, p.head_dim, p.causal, p.q_heads / p.kv_heads);
}

TEST(StepFwdGpu, OneStepMatchesTheVectors) {
  CPGEN_REQUIRE_GPU();
  for (const char* name : kVectorCases) {
    AttentionOutput expected;
    AttentionProblem p = testing::load_vector_case(testing::vectors_dir() + "/" + name + ".json", &expected);
    for (Dtype dtype : kSupportedDtypes) expect_match(p, expected, spec_for(p, dtype), one_rank(p.seq_len), name);
  }
}

TEST(StepFwdGpu, ZigzagRingOfStepsMatchesTheVectors) {
  CPGEN_REQUIRE_GPU();
  for (const char* name : kVectorCases) {
    AttentionOutput expected;
    AttentionProblem p = testing::load_vector_case(testing::vectors_dir() + "/" + name + ".json", &expected);
    for (int cp : {2, 4})
      for (Dtype dtype : kSupportedDtypes)
        expect_match(p, expected, spec_for(p, dtype), testing::zigzag_split(p.seq_len, cp), name);
  }
}

// dtype x head dim x causal x GQA group, on random data with a float64 reference. Lengths are not
// multiples of any tile: one step of 150 rows, and a zigzag ring of 3 ranks over 222 positions
// (74 local rows, chunks of 37, so some blocks see no key of a chunk and merge an empty state).
class StepFwdGpuRandom : public ::testing::TestWithParam<std::tuple<Dtype, int, bool, int>> {};

TEST_P(StepFwdGpuRandom, OneStepAndARingMatchFloat64) {
  CPGEN_REQUIRE_GPU();
  const auto [dtype, head_dim, causal, group] = GetParam();
  const KernelSpec spec = KernelSpec::default_for(dtype, head_dim, causal, group);
  const int kv_heads = 2, batch = 2;
  {
    AttentionProblem p = testing::random_problem(batch, kv_heads * group, kv_heads, head_dim, 150, causal, 11);
    expect_match(p, testing::reference_attention(p), spec, one_rank(p.seq_len), "random, one step");
  }
  {
    AttentionProblem p = testing::random_problem(batch, kv_heads * group, kv_heads, head_dim, 222, causal, 12);
    expect_match(p, testing::reference_attention(p), spec, testing::zigzag_split(222, 3), "random, zigzag ring");
  }
}

std::string random_case_name(const ::testing::TestParamInfo<StepFwdGpuRandom::ParamType>& info) {
  const auto [dtype, hd, causal, group] = info.param;
  return std::string(dtype_name(dtype)) + "_hd" + std::to_string(hd) + (causal ? "_causal" : "_full") +
         "_gqa" + std::to_string(group);
}

INSTANTIATE_TEST_SUITE_P(AllDefaults, StepFwdGpuRandom,
                         ::testing::Combine(::testing::Values(Dtype::kBf16, Dtype::kFp16),
                                            ::testing::Values(64, 96, 128, 256), ::testing::Bool(),
                                            ::testing::Values(1, 4)),
                         random_case_name);

// The other tile configs the tuner tries (pipeline depths 1-3, 8 warps, 128-key tiles, key
// sub-tiles) compute the same result.
TEST(StepFwdGpu, EveryCandidateTileConfigAgrees) {
  CPGEN_REQUIRE_GPU();
  for (bool causal : {true, false}) {
    AttentionProblem p = testing::random_problem(1, 8, 2, 128, 2 * 2 * 45, causal, 21);
    const AttentionOutput expected = testing::reference_attention(p);
    for (const KernelSpec& s : KernelSpec::candidates_for(Dtype::kBf16, 128, causal, 4)) {
      if (!check_feasibility(s, "sm_80").feasible) continue;
      expect_match(p, expected, s, testing::zigzag_split(p.seq_len, 2), "candidate tiles");
    }
  }
}

// Host-side pieces of the harness, checked everywhere (the GPU tests above rely on them).
TEST(StepFwdHarness, SixteenBitConversionsRoundTripTheTestGrid) {
  for (int k = -128; k <= 128; ++k) {
    const double x = k / 32.0;
    for (Dtype dtype : kSupportedDtypes) EXPECT_EQ(testing::from_bits(testing::to_bits(x, dtype), dtype), x);
  }
  EXPECT_EQ(testing::to_bits(1.0, Dtype::kBf16), 0x3f80);
  EXPECT_EQ(testing::to_bits(1.0, Dtype::kFp16), 0x3c00);
  EXPECT_EQ(testing::to_bits(-2.5, Dtype::kFp16), 0xc100);
  EXPECT_EQ(testing::from_bits(0x0001, Dtype::kFp16), 1.0 / (1 << 24));  // smallest subnormal
}

TEST(StepFwdHarness, ReferenceMatchesTheVectors) {
  AttentionOutput expected;
  AttentionProblem p =
      testing::load_vector_case(testing::vectors_dir() + "/gqa2_causal_hd128_s32.json", &expected);
  AttentionOutput mine = testing::reference_attention(p);
  testing::Comparison c = testing::compare(expected, mine, p.head_dim);
  // The vector files store 13 significant digits (other sets about 10), so float64 agrees to
  // ~1e-10 at worst, not 1e-16.
  EXPECT_LT(c.out_rel_frobenius, 1e-8) << c.worst;
  EXPECT_LT(c.lse_max_abs, 1e-8);
}

TEST(StepFwdHarness, ZigzagSplitCoversEveryPositionOnce) {
  auto ranks = testing::zigzag_split(222, 3);
  std::vector<int> seen(222, 0);
  for (const auto& r : ranks) {
    EXPECT_EQ(r.size(), 74u);
    for (size_t i = 1; i < r.size(); ++i) EXPECT_LT(r[i - 1], r[i]);
    for (int p : r) ++seen[p];
  }
  for (int s : seen) EXPECT_EQ(s, 1);
}

}  // namespace
}  // namespace cpgen
