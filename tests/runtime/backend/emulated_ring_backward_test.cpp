// The backward ring of the generated kernels run by the CUDA emulator (issue 10's CPU acceptance):
// the real pre, step and conversion kernels under KernelRingBackend and the ring driver, ranks on
// threads over the CPU transport, gradients poisoned (NaN) first. Checked against the float64
// reference (random problems) and against the vectors files (the project's, and ../shared when
// present), with relative Frobenius errors of dq, dk and dv below the dtype's limit
// (tests/error_limit.h: 2 ulps at 1, 1.6e-2 bf16 and 2e-3 fp16).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "runtime/backend/emulated_ring.h"
#include "runtime/ring/reference.h"
#include "runtime/ring/sampled_check.h"
#include "runtime/ring/vectors.h"
#include "test_util.h"
#include "tuner/candidates.h"
#include "tests/runtime/backend/emulated_test_util.h"

namespace cpgen {
namespace {

constexpr const char* kArch = testing::kEmulatedArch;
using testing::as_float;
using testing::relative;
KernelStore* test_store() { return testing::emulated_store(); }
using testing::expect_within_limit;

std::vector<std::pair<StepType, KernelSpec>> forward_defaults(const Problem& p) {
  std::vector<std::pair<StepType, KernelSpec>> per_step;
  for (StepType step : step_types_for(p))
    per_step.emplace_back(step, KernelSpec::default_for_arch(p.dtype, static_cast<int>(p.head_dim), p.causal,
                                                             static_cast<int>(p.gqa_group()), kArch));
  return per_step;
}

// The backward kernels of `p`: every step runs `step_spec`, or without one the default.
EmulatedBackward backward_kernels(const Problem& p, const std::vector<double>& dout,
                                  const std::optional<KernelSpec>& step_spec) {
  EmulatedBackward b;
  const int hd = static_cast<int>(p.head_dim);
  for (StepType step : backward_step_types_for(p))
    b.steps.emplace_back(step, step_spec ? *step_spec
                                         : KernelSpec::backward_default_for_arch(
                                               p.dtype, hd, p.causal, static_cast<int>(p.gqa_group()), kArch));
  b.pre = KernelSpec::backward_pre(p.dtype, hd);
  b.convert = KernelSpec::backward_convert(p.dtype, hd);
  b.dout = as_float(dout);
  return b;
}

struct GradErrors {
  double out = 0, dq = 0, dk = 0, dv = 0;
};

GradErrors run(const Problem& p, const AttentionVectors& vec, const ReferenceForward& fwd, const ReferenceGrads& grads,
               const std::optional<KernelSpec>& step_spec = std::nullopt) {
  const EmulatedBackward backward = backward_kernels(p, vec.dout, step_spec);
  const EmulatedRingResult got = run_emulated_ring(p, forward_defaults(p), kArch, as_float(vec.q), as_float(vec.k),
                                                   as_float(vec.v), test_store(), &backward);
  return {relative(got.out, fwd.out), relative(got.dq, grads.dq), relative(got.dk, grads.dk),
          relative(got.dv, grads.dv)};
}

// The float64 forward and gradients of a random problem over the whole sequence.
GradErrors run_random(const Problem& p, uint64_t seed, const std::optional<KernelSpec>& step_spec = std::nullopt) {
  const AttentionVectors vec = random_vectors(p, seed);
  std::vector<int64_t> positions(static_cast<size_t>(p.seq_len));
  for (int64_t i = 0; i < p.seq_len; ++i) positions[static_cast<size_t>(i)] = i;
  const ReferenceForward fwd = reference_forward(vec.shape, vec.q, vec.k, vec.v, positions, positions);
  const ReferenceGrads grads =
      reference_backward(vec.shape, vec.q, vec.k, vec.v, fwd.out, vec.dout, fwd.lse, positions, positions);
  return run(p, vec, fwd, grads, step_spec);
}

void expect_within(const GradErrors& e, Dtype dtype, const std::string& what) {
  expect_within_limit(e.out, dtype, what + " out", testing::kOutputUlps);
  expect_within_limit(e.dq, dtype, what + " dq");
  expect_within_limit(e.dk, dtype, what + " dk");
  expect_within_limit(e.dv, dtype, what + " dv");
}

Problem small_problem(Dtype dtype, int head_dim, bool causal, int group, int ranks, int64_t chunk, int kv_heads = 1,
                      int batch = 1) {
  Problem p;
  p.name = "emulated-backward";
  p.batch = batch;
  p.kv_heads = kv_heads;
  p.q_heads = group * kv_heads;
  p.head_dim = head_dim;
  p.seq_len = 2 * ranks * chunk;  // zigzag: 2N chunks
  p.cp_size = ranks;
  p.dtype = dtype;
  p.causal = causal;
  p.scheme = Scheme::kZigzag;
  return p;
}

// (dtype, head dim): each runs causal and full, GQA 1 and 4, on zigzag rings of 2 and 4 ranks.
class EmulatedBackwardDefaults : public ::testing::TestWithParam<std::tuple<Dtype, int>> {};

TEST_P(EmulatedBackwardDefaults, GradientsOfEveryMaskGroupAndRingSize) {
  const auto [dtype, head_dim] = GetParam();
  uint64_t seed = 300 + static_cast<uint64_t>(head_dim);
  for (int ranks : {2, 4})
    for (bool causal : {true, false})
      for (int group : {1, 4}) {
        // Chunks of 6 and 5 rows: partial tiles everywhere, and a 4-rank ring stays small.
        const Problem p = small_problem(dtype, head_dim, causal, group, ranks, ranks == 2 ? 6 : 5);
        expect_within(run_random(p, seed++), dtype, std::string(dtype_name(dtype)) + " hd" + std::to_string(head_dim) +
                                                 (causal ? " causal" : " full") + " group " +
                                                 std::to_string(group) + " ranks " + std::to_string(ranks));
      }
}

INSTANTIATE_TEST_SUITE_P(EveryDtypeAndHeadDim, EmulatedBackwardDefaults,
                         ::testing::Combine(::testing::Values(Dtype::kBf16, Dtype::kFp16),
                                            ::testing::Values(64, 128, 256)),
                         [](const auto& info) {
                           return std::string(dtype_name(std::get<0>(info.param))) + "_hd" +
                                  std::to_string(std::get<1>(info.param));
                         });

// GQA groups 8 and 16 (the defaults above run 1 and 4), with two kv heads and a batch of two: a
// query head's rows packed under the wrong kv head, or dK/dV summed over the wrong query heads or
// batch, shows in every gradient.
TEST(EmulatedBackwardGroups, EightAndSixteenWithTwoKvHeadsAndTwoBatches) {
  expect_within(run_random(small_problem(Dtype::kBf16, 64, true, 8, 2, 6, 2, 2), 401), Dtype::kBf16,
                "bf16 hd64 causal group 8 ranks 2");
  expect_within(run_random(small_problem(Dtype::kFp16, 64, false, 16, 2, 5, 2, 2), 402), Dtype::kFp16,
                "fp16 hd64 full group 16 ranks 2");
}

// Head dim 96 (8 warps, three 32-column slices of dK/dV per warp pair; the defaults above run 64,
// 128 and 256): fp16 causal with GQA 2 on a ring of 4, bf16 full on a ring of 2.
TEST(EmulatedBackwardHeadDim96, Fp16CausalAndBf16Full) {
  expect_within(run_random(small_problem(Dtype::kFp16, 96, true, 2, 4, 5), 411), Dtype::kFp16,
                "fp16 hd96 causal group 2 ranks 4");
  expect_within(run_random(small_problem(Dtype::kBf16, 96, false, 1, 2, 6), 412), Dtype::kBf16,
                "bf16 hd96 full group 1 ranks 2");
}

// Every viable candidate the tuner would time for the diagonal backward step of a head dim 64
// problem on the emulated arch (tuner/candidates.h: the tile grid and backward_candidates_for;
// the tests above run the defaults only): a causal ring of 2 with chunks of 72 rows, so each
// rank's 144 query and key rows span two to nine tiles of every size, the last one partial.
TEST(EmulatedBackwardTiles, EveryViableCandidateOfHeadDim64) {
  const Problem p = small_problem(Dtype::kBf16, 64, true, 2, 2, 72);
  const CandidateSet candidates =
      enumerate_candidates(workload_for(p, StepType::kBwdDiagonal, DeviceClass{"none", kArch, 0}));
  ASSERT_GE(candidates.viable.size(), 40u) << "the backward grid on " << kArch;
  uint64_t seed = 421;
  for (const KernelSpec& spec : candidates.viable) {
    ASSERT_EQ(spec.kind, KernelKind::kBackwardStep) << spec.uri();
    expect_within(run_random(p, seed++, spec), p.dtype, spec.uri());
  }
}

// Accuracy does not grow with the ring: the same problem on 8 ranks is within 1.2x of 1 rank (the
// kernels' own precision: bf16 inputs, fp32 accumulators, dK/dV accumulated across 8 ranks).
TEST(EmulatedBackwardAccuracy, EightRanksWithinOnePointTwoOfOne) {
  for (bool causal : {true, false}) {
    const Problem one = small_problem(Dtype::kBf16, 64, causal, 4, 1, 32);
    Problem eight = one;
    eight.cp_size = 8;
    const GradErrors e1 = run_random(one, 77), e8 = run_random(eight, 77);
    const std::string what = causal ? "causal" : "full";
    expect_within(e1, Dtype::kBf16, what + " 1 rank");
    expect_within(e8, Dtype::kBf16, what + " 8 ranks");
    EXPECT_LE(e8.dq, 1.2 * e1.dq) << what;
    EXPECT_LE(e8.dk, 1.2 * e1.dk) << what;
    EXPECT_LE(e8.dv, 1.2 * e1.dv) << what;
    std::printf("%s: dq %.3e -> %.3e, dk %.3e -> %.3e, dv %.3e -> %.3e (1 -> 8 ranks)\n", what.c_str(), e1.dq,
                e8.dq, e1.dk, e8.dk, e1.dv, e8.dv);
  }
}

// The vectors files' own gradients (independent float64), zigzag over 2 ranks in bf16 and over 4
// in fp16 where the length allows (one dtype per ring size keeps the kernels to compile, most of
// this test's time on a clean store, to half). Mask cases are left to the format-2 test
// (emulated_ring_v2_test.cpp), which runs them with the kernels specialized on them.
void check_vectors_dir(const std::string& dir, int max_seq, std::vector<int> ring_sizes) {
  int checked = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".json" || entry.path().filename() == "partitions.json") continue;
    const AttentionVectors vec = load_attention_vectors(entry.path().string());
    // Masked cases need the _ivl/_cap kernels; this test runs the defaults (see above).
    const AttentionShape& m = vec.shape;
    if (m.window_left >= 0 || m.window_right >= 0 || m.softcap > 0 || !m.cu_seqlens.empty() || vec.dq.empty() || vec.seq_len > max_seq) continue;
    for (int ranks : ring_sizes) {
      if (vec.seq_len % (2 * ranks) != 0) continue;
      {
        const Dtype dtype = ranks == 2 ? Dtype::kBf16 : Dtype::kFp16;
        const Problem p = problem_from_vectors(vec, ranks, Scheme::kZigzag, dtype);
        const ReferenceForward fwd{vec.out, vec.lse};
        const ReferenceGrads grads{vec.dq, vec.dk, vec.dv};
        expect_within(run(p, vec, fwd, grads), dtype, vec.name + " " + std::string(dtype_name(dtype)) + " ranks " +
                                                   std::to_string(ranks));
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 0) << dir;
}

TEST(EmulatedBackwardVectors, ProjectVectorsOnZigzagRingsOfTwoAndFour) {
  // Ring size 2 (bf16); fp16 rings of 4 are EmulatedBackwardDefaults' (CI's budget).
  check_vectors_dir(testing::vectors_dir(), 64, {2});
}

TEST(EmulatedBackwardVectors, SharedVectorsWhereTheyExist) {
  const std::string shared = testing::source_dir() + "/../shared/vectors";
  if (!std::filesystem::exists(shared)) GTEST_SKIP() << shared << " is not here";
  // Ring size 2 (bf16) only: the shared set's head dims and groups need kernels of their own,
  // and compiling them is most of this test's time on a clean kernel store (CI's budget).
  check_vectors_dir(shared, 128, {2});
}

}  // namespace
}  // namespace cpgen
