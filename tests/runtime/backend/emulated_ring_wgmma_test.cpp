// The sm_90a wgmma family through the emulated backend (issue 13): the same KernelRingBackend,
// launches and params as on the GPU, with the tensor maps built by wgmma_params and the kernel
// compiled by the host JIT. Acceptance on the CPU: zigzag rings of 2 and 4 reproduce the format-1
// vectors of every set (the in-repo set and ../shared/vectors where present) within the dtype's
// limit (tests/error_limit.h; inside the 2e-2), under
// the emulator's sanitizer (a finding fails the launch), outputs poisoned first.
//
// Kernels: one bf16 and one fp16 (head dim 64, causal, GQA 1, one consumer warpgroup, 64-key
// tiles), so the vectors of that shape run; each distinct kernel is a host compile of seconds.
// The zigzag query-half steps launch over half the queries with the state at state_len's pitch,
// so a wrong pitch shows as a wrong result here. Format 2 (documents, windows, softcap): the
// project's own files, bf16, each with the family's default tiles specialized on its mask.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <utility>
#include <string>
#include <vector>

#include "cpgen/error.h"
#include "generator/kernel_spec_wgmma.h"
#include "runtime/backend/emulated_ring.h"
#include "runtime/ring/kernel_support.h"
#include "runtime/core/attention_shape.h"
#include "runtime/ring/partition.h"
#include "runtime/ring/reference.h"
#include "runtime/ring/sampled_check.h"
#include "runtime/ring/vectors.h"
#include "test_util.h"
#include "tests/runtime/backend/emulated_test_util.h"

namespace cpgen {
namespace {

using testing::as_float;
using testing::emulated_store;
using testing::partitionable;
using testing::relative;

constexpr const char* kWgmmaTestArch = "sm_90a";

KernelSpec wgmma_spec(Dtype dtype) {
  return KernelSpec::parse(std::string("ring_fwd_wgmma_") + (dtype == Dtype::kBf16 ? "bf16" : "fp16") +
                           "_hd64_causal_gqa1_bm64_bn64_c1_s2");
}

// Whether the test's kernels compute this case: head dim 64, causal, one query head per kv head,
// and no window (a format-1 window needs an `_ivl` kernel: the format-2 test runs those).
bool runs_case(const AttentionVectors& vec) {
  const KernelSpec s = wgmma_spec(Dtype::kBf16);
  return vec.shape.head_dim == s.head_dim && vec.shape.causal == s.causal &&
         vec.shape.q_heads == vec.shape.kv_heads * s.gqa_group &&
         !kernel_needs_key_intervals(problem_from_vectors(vec, 1, Scheme::kContiguous, Dtype::kBf16));
}

double lse_max_abs(const std::vector<float>& got, const std::vector<double>& want) {
  double worst = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    const double err = std::isinf(want[i]) && got[i] == want[i] ? 0 : std::abs(got[i] - want[i]);
    worst = std::isnan(err) || std::isnan(worst) ? NAN : std::max(worst, err);
  }
  return worst;
}

// Runs the ring of `p` with `spec` for every step type on the vectors' inputs; checks out and lse
// against the vectors and returns the number of launches (-1 when the ring threw).
int run_and_check(const Problem& p, const KernelSpec& spec, const AttentionVectors& vec) {
  EXPECT_EQ(kernel_family_refusal(spec, p), "");
  std::vector<std::pair<StepType, KernelSpec>> per_step;
  for (StepType step : step_types_for(p)) per_step.emplace_back(step, spec);
  try {
    const EmulatedRingResult got = run_emulated_ring(p, per_step, kWgmmaTestArch, as_float(vec.q), as_float(vec.k),
                                                     as_float(vec.v), emulated_store());
    testing::expect_within_limit(relative(got.out, vec.out), p.dtype, vec.name + " " + spec.uri() + " out", testing::kOutputUlps);
    testing::expect_within_limit(lse_max_abs(got.lse, vec.lse), p.dtype, vec.name + " " + spec.uri() + " lse");
    return got.launches;
  } catch (const Error& e) {
    ADD_FAILURE() << e.what();
    return -1;
  }
}

TEST(EmulatedRingWgmma, ZigzagRingsOfTwoAndFourReproduceTheFormat1Vectors) {
  int runs = 0;
  for (const std::string& file : testing::vector_files()) {
    const AttentionVectors vec = load_attention_vectors(file);
    if (!runs_case(vec)) continue;
    for (Dtype dtype : {Dtype::kBf16, Dtype::kFp16})
      for (int n : {2, 4}) {
        if (!partitionable(Scheme::kZigzag, vec.seq_len, n)) continue;
        const Problem p = problem_from_vectors(vec, n, Scheme::kZigzag, dtype);
        const KernelSpec spec = wgmma_spec(dtype);
        const std::string what = testing::vector_case_name(file) + " " + std::string(dtype_name(dtype)) +
                                 " N=" + std::to_string(n) + " " + spec.uri();
        SCOPED_TRACE(what);
        EXPECT_EQ(run_and_check(p, spec, vec), n * n) << "every step of a causal zigzag ring launches";
        ++runs;
      }
  }
  // The in-repo set alone holds two such cases (mha_causal_hd64_s64 and its large-logits twin).
  EXPECT_GE(runs, 2 * 2 * 2);
}

// Format 2 adds documents, windows and softcaps: the family's `_ivl` / `_cap` kernels (the
// default tiles of each file's head dim, causality and group, one consumer warpgroup and 64-key
// tiles to keep the emulation small), bf16, zigzag rings of 2 and 4 (no file's length divides
// them: ranks hold different counts, and the query-half steps are views). One kernel per file.
TEST(EmulatedRingWgmma, ZigzagRingsOfTwoAndFourReproduceTheProjectsFormat2Vectors) {
  int runs = 0;
  for (const std::string& file : testing::vector_files_v2()) {
    if (file.find(testing::vectors_dir()) != 0) continue;  // ../shared's set: by hand (bench/results)
    const AttentionVectors vec = load_attention_vectors(file);
    for (int n : {2, 4}) {
      const Problem p = problem_from_vectors(vec, n, Scheme::kZigzag, Dtype::kBf16);
      KernelSpec spec = wgmma_default_for(Dtype::kBf16, static_cast<int>(p.head_dim), p.causal,
                                          static_cast<int>(p.q_heads / p.kv_heads));
      spec.block_m = 64;
      spec.warps = 8;
      spec.block_n = 64;
      spec.key_intervals = kernel_needs_key_intervals(p);
      spec.softcap = kernel_needs_softcap(p);
      SCOPED_TRACE(testing::vector_case_name(file) + " N=" + std::to_string(n) + " " + spec.uri());
      EXPECT_GT(run_and_check(p, spec, vec), 0);
      ++runs;
    }
  }
  EXPECT_GE(runs, 4) << "the in-repo v2 set has three files";
}

// A problem of random inputs with its float64 forward as the expected out and lse.
AttentionVectors random_case(const Problem& p, uint64_t seed) {
  AttentionVectors vec = random_vectors(p, seed);
  std::vector<int64_t> positions(static_cast<size_t>(p.seq_len));
  for (int64_t i = 0; i < p.seq_len; ++i) positions[static_cast<size_t>(i)] = i;
  ReferenceForward want = reference_forward(attention_shape_of(p), vec.q, vec.k, vec.v, positions, positions);
  vec.out = std::move(want.out);
  vec.lse = std::move(want.lse);
  return vec;
}

Problem wide_problem(Scheme scheme, int cp_size, int64_t batch, int64_t kv_heads, int64_t group, int64_t head_dim,
                     const std::string& layout, const std::vector<int64_t>& documents, int64_t window_left,
                     double softcap) {
  return testing::ring_case_problem(
      {Dtype::kBf16, scheme, cp_size, true, batch, kv_heads, group, head_dim, layout, documents, 0, window_left, -1, softcap},
      "wide");
}

// The default two-consumer tiles in the plain, ping-pong and persistent launches on a masked
// problem of what the format-2 files leave out (a reviewer's list; its own runs passed): GQA 8
// over two kv heads, batch 2, head dim 128, bshd, a zigzag ring of 3, documents with an empty one,
// a left window and a softcap; the three-consumer tiles (bm192) on it too; and a ring whose ranks
// partly hold no row.
TEST(EmulatedRingWgmma, MaskedGqaBatchLayoutInEveryLaunchAndEmptyRanks) {
  const Problem p = wide_problem(Scheme::kZigzag, 3, 2, 2, 8, 128, "bshd", {30, 0, 50, 16}, 12, 15);
  const AttentionVectors vec = random_case(p, 701);
  KernelSpec spec = wgmma_default_for(Dtype::kBf16, 128, true, 8);
  spec.key_intervals = kernel_needs_key_intervals(p);
  spec.softcap = kernel_needs_softcap(p);
  for (const auto& [pingpong, persistent] : {std::pair{false, false}, {true, false}, {false, true}}) {
    KernelSpec s = spec;
    s.pingpong = pingpong;
    s.persistent = persistent;
    SCOPED_TRACE(s.uri());
    EXPECT_GT(run_and_check(p, s, vec), 0);
  }
  KernelSpec three = spec;
  three.block_m = 192;
  three.block_n = 64;
  three.warps = 16;
  SCOPED_TRACE(three.uri());
  EXPECT_GT(run_and_check(p, three, vec), 0);

  // Six tokens over eight ranks: four hold none.
  const Problem sparse = wide_problem(Scheme::kContiguous, 8, 1, 1, 2, 64, "", {4, 2}, 1, 0);
  KernelSpec small = wgmma_default_for(Dtype::kBf16, 64, true, 2);
  small.block_m = 64;
  small.warps = 8;
  small.block_n = 64;
  small.key_intervals = true;
  SCOPED_TRACE(small.uri());
  EXPECT_GT(run_and_check(sparse, small, random_case(sparse, 702)), 0);
}

}  // namespace
}  // namespace cpgen
