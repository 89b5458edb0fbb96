// Issues 11 and 12, CPU acceptance on format-2 vectors: the generated kernels with key intervals
// and softcap, run by the CUDA emulator through the kernel ring backend (forward and backward),
// reproduce every format-2 file (packed documents of any length, two-sided windows, softcap):
// the project's own (tests/data/vectors/v2) and ../shared/vectors/v2 when present. bf16, zigzag
// rings of 2 and 3 (no length divides: ranks hold different token counts) and a striped ring of 2;
// out, lse, dq, dk, dv within the dtype's limit (tests/error_limit.h) of the files' float64
// values, outputs poisoned first.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "cache/workload.h"
#include "runtime/backend/emulated_ring.h"
#include "runtime/ring/kernel_support.h"
#include "runtime/ring/vectors.h"
#include "test_util.h"
#include "tests/runtime/backend/emulated_test_util.h"

namespace cpgen {
namespace {

constexpr const char* kArch = testing::kEmulatedArch;
using testing::as_float;
using testing::relative;
KernelStore* test_store() { return testing::emulated_store(); }
using testing::expect_within_limit;

// The kernels a problem with these mask features runs: the defaults with key intervals when it has
// documents or a window, and softcap when it has one (what selection picks, runtime/api/kernel_select).
KernelSpec with_mask(KernelSpec s, const Problem& p) {
  s.key_intervals = kernel_needs_key_intervals(p);
  s.softcap = kernel_needs_softcap(p);
  return s;
}

struct Errors {
  double out, lse, dq, dk, dv;
};

Errors run(const AttentionVectors& vec, int ranks, Scheme scheme) {
  const Problem p = problem_from_vectors(vec, ranks, scheme, Dtype::kBf16);
  const int hd = static_cast<int>(p.head_dim), group = static_cast<int>(p.gqa_group());
  std::vector<std::pair<StepType, KernelSpec>> forward;
  for (StepType step : step_types_for(p))
    forward.emplace_back(step, with_mask(KernelSpec::default_for_arch(p.dtype, hd, p.causal, group, kArch), p));
  EmulatedBackward backward;
  for (StepType step : backward_step_types_for(p))
    backward.steps.emplace_back(
        step, with_mask(KernelSpec::backward_default_for_arch(p.dtype, hd, p.causal, group, kArch), p));
  backward.pre = KernelSpec::backward_pre(p.dtype, hd);
  backward.convert = KernelSpec::backward_convert(p.dtype, hd);
  backward.dout = as_float(vec.dout);
  const EmulatedRingResult got = run_emulated_ring(p, forward, kArch, as_float(vec.q), as_float(vec.k),
                                                   as_float(vec.v), test_store(), &backward);
  return {relative(got.out, vec.out), relative(got.lse, vec.lse), relative(got.dq, vec.dq),
          relative(got.dk, vec.dk), relative(got.dv, vec.dv)};
}

void check_v2_dir(const std::string& dir) {
  int checked = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".json") continue;
    const AttentionVectors vec = load_attention_vectors(entry.path().string());
    ASSERT_FALSE(vec.dq.empty()) << entry.path();
    struct Ring {
      int ranks;
      Scheme scheme;
    };
    for (const Ring ring : {Ring{2, Scheme::kZigzag}, Ring{3, Scheme::kZigzag}, Ring{2, Scheme::kStriped}}) {
      const std::string what = vec.name + " " + std::string(scheme_name(ring.scheme)) + " ranks " +
                               std::to_string(ring.ranks);
      const Errors e = run(vec, ring.ranks, ring.scheme);
      expect_within_limit(e.out, Dtype::kBf16, what + " out", testing::kOutputUlps);
      expect_within_limit(e.lse, Dtype::kBf16, what + " lse");
      expect_within_limit(e.dq, Dtype::kBf16, what + " dq");
      expect_within_limit(e.dk, Dtype::kBf16, what + " dk");
      expect_within_limit(e.dv, Dtype::kBf16, what + " dv");
      ++checked;
    }
  }
  EXPECT_GT(checked, 0) << dir;
}

TEST(EmulatedRingVectorsV2, ProjectFormatTwoFilesForwardAndBackward) {
  check_v2_dir(testing::vectors_dir() + "/v2");
}

TEST(EmulatedRingVectorsV2, SharedFormatTwoFilesWhereTheyExist) {
  const std::string shared = testing::source_dir() + "/../shared/vectors/v2";
  if (!std::filesystem::exists(shared)) GTEST_SKIP() << shared << " is not here";
  check_v2_dir(shared);
}

}  // namespace
}  // namespace cpgen
