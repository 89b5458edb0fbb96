#include <gtest/gtest.h>

#include <set>

#include "tuner/candidates.h"

namespace cpgen::testing {
namespace {

WorkloadKey llama_diagonal() {
  WorkloadKey w;
  w.dtype = Dtype::kBf16;
  w.head_dim = 128;
  w.q_heads = 32;
  w.kv_heads = 8;
  w.q_len = w.kv_len = 16384;
  w.scheme = Scheme::kZigzag;
  w.step = StepType::kDiagonal;
  w.gpu_name = "NVIDIA H200";
  w.arch = "sm_90a";
  w.sm_count = 132;
  return w;
}

// A masked workload searches the unmasked workload's tiles, each specialized on the mask, in
// both directions.
TEST(Candidates, MaskedWorkloadSearchesTheSameTilesWithTheMaskFlags) {
  for (StepType step : {StepType::kDiagonal, StepType::kBwdDiagonal}) {
    WorkloadKey plain = llama_diagonal();
    plain.step = step;
    WorkloadKey masked = plain;
    masked.mask.document_len = 1024;
    masked.mask.softcap = true;
    const CandidateSet a = enumerate_candidates(plain), b = enumerate_candidates(masked);
    ASSERT_EQ(a.viable.size(), b.viable.size()) << step_type_name(step);
    ASSERT_EQ(a.pruned.size(), b.pruned.size()) << step_type_name(step);
    for (size_t i = 0; i < a.viable.size(); ++i) {
      EXPECT_TRUE(b.viable[i].key_intervals && b.viable[i].softcap) << b.viable[i].uri();
      KernelSpec unflagged = b.viable[i];
      unflagged.key_intervals = unflagged.softcap = false;
      EXPECT_EQ(unflagged, a.viable[i]) << b.viable[i].uri();
    }
    for (const PrunedCandidate& p : b.pruned) EXPECT_TRUE(p.spec.key_intervals && p.spec.softcap) << p.spec.uri();
    EXPECT_NE(b.viable.front().uri().find("_ivl_cap_"), std::string::npos) << b.viable.front().uri();
  }
}

TEST(Candidates, DefaultFirstAndAtLeast24ViableForALlamaStep) {
  CandidateSet set = enumerate_candidates(llama_diagonal());
  ASSERT_FALSE(set.viable.empty());
  EXPECT_EQ(set.viable.front(), KernelSpec::default_for(Dtype::kBf16, 128, true, 4));
  EXPECT_GE(set.viable.size(), 24u) << "the GPU acceptance run needs at least 24 candidates";
  std::set<std::string> uris;
  for (const KernelSpec& s : set.viable) {
    EXPECT_TRUE(uris.insert(s.uri()).second) << "duplicate " << s.uri();
    EXPECT_TRUE(check_feasibility(s, "sm_90a").feasible) << s.uri();
    EXPECT_EQ(s.block_m % (16 * s.warps), 0) << s.uri();
  }
  for (const PrunedCandidate& p : set.pruned) {
    EXPECT_FALSE(p.reason.empty()) << p.spec.uri();
    EXPECT_FALSE(uris.count(p.spec.uri())) << p.spec.uri();
  }
}

TEST(Candidates, FeasibilityModelPrunesWithAReason) {
  WorkloadKey w = llama_diagonal();
  w.head_dim = 256;
  w.arch = "sm_80";
  CandidateSet set = enumerate_candidates(w);
  bool found_shared = false;
  for (const PrunedCandidate& p : set.pruned) {
    EXPECT_FALSE(check_feasibility(p.spec, "sm_80").feasible) << p.spec.uri();
    if (p.reason.find("shared memory") != std::string::npos) found_shared = true;
  }
  EXPECT_TRUE(found_shared) << "head dim 256 with 256-row tiles and 3 stages cannot fit 163 KB";
}

TEST(Candidates, TilesLargerThanTheStepArePrunedButTheDefaultStays) {
  WorkloadKey w = llama_diagonal();
  w.q_heads = w.kv_heads = 2;  // group 1
  w.q_len = 64;
  w.kv_len = 32;
  w.step = StepType::kZigzagKvHalf;
  CandidateSet set = enumerate_candidates(w);
  ASSERT_FALSE(set.viable.empty());
  EXPECT_EQ(set.viable.front(), KernelSpec::default_for(Dtype::kBf16, 128, true, 1));
  for (size_t i = 1; i < set.viable.size(); ++i) {
    EXPECT_LE(set.viable[i].block_n, 32) << set.viable[i].uri();
    EXPECT_LE(set.viable[i].block_m, 64) << set.viable[i].uri();
  }
}

WorkloadKey llama_backward_diagonal() {
  WorkloadKey w = llama_diagonal();
  w.step = StepType::kBwdDiagonal;
  return w;
}

TEST(Candidates, BackwardWorkloadSearchesBackwardKernelsOnly) {
  const WorkloadKey w = llama_backward_diagonal();
  CandidateSet set = enumerate_candidates(w);
  ASSERT_FALSE(set.viable.empty());
  EXPECT_EQ(set.viable.front(), KernelSpec::backward_default_for_arch(Dtype::kBf16, 128, true, 4, "sm_90a"));
  EXPECT_GE(set.viable.size(), 10u);
  std::set<std::string> uris;
  for (const KernelSpec& s : set.viable) {
    EXPECT_EQ(s.kind, KernelKind::kBackwardStep) << s.uri();
    EXPECT_EQ(s.uri().rfind("ring_bwd_", 0), 0u) << s.uri();
    EXPECT_TRUE(uris.insert(s.uri()).second) << "duplicate " << s.uri();
    EXPECT_TRUE(check_feasibility(s, "sm_90a").feasible) << s.uri();
  }
  for (const PrunedCandidate& p : set.pruned) {
    EXPECT_EQ(p.spec.kind, KernelKind::kBackwardStep) << p.spec.uri();
    EXPECT_FALSE(p.reason.empty()) << p.spec.uri();
    EXPECT_FALSE(check_feasibility(p.spec, "sm_90a").feasible) << p.spec.uri() << ": " << p.reason;
  }
  // The configs `cpgen compile --all --filter bwd` checks are all searched (viable or pruned).
  for (const KernelSpec& s : KernelSpec::backward_candidates_for(Dtype::kBf16, 128, true, 4)) {
    bool listed = uris.count(s.uri()) > 0;
    for (const PrunedCandidate& p : set.pruned) listed = listed || p.spec == s;
    EXPECT_TRUE(listed) << s.uri();
  }
  // Forward and backward spaces of the same shape share no kernel.
  for (const KernelSpec& s : enumerate_candidates(llama_diagonal()).viable) EXPECT_FALSE(uris.count(s.uri())) << s.uri();
}

TEST(Candidates, BackwardDefaultFollowsTheArch) {
  // On the 99 KB targets the backward default is smaller than on sm_90a; the tuner's reference is
  // the one that fits, as the runtime's default is.
  WorkloadKey w = llama_backward_diagonal();
  w.head_dim = 256;
  w.arch = "sm_86";
  const KernelSpec fitted = KernelSpec::backward_default_for_arch(Dtype::kBf16, 256, true, 4, "sm_86");
  EXPECT_NE(fitted, KernelSpec::backward_default_for(Dtype::kBf16, 256, true, 4));
  EXPECT_EQ(tuning_default(w), fitted);
  CandidateSet set = enumerate_candidates(w);
  ASSERT_FALSE(set.viable.empty());
  EXPECT_EQ(set.viable.front(), fitted);
  bool found_shared = false;
  for (const PrunedCandidate& p : set.pruned) found_shared = found_shared || p.reason.find("shared memory") != std::string::npos;
  EXPECT_TRUE(found_shared) << "head dim 256 with 128-key tiles cannot fit 99 KB";
}

TEST(Candidates, BackwardTilesLargerThanTheStepArePruned) {
  WorkloadKey w = llama_backward_diagonal();
  w.q_heads = w.kv_heads = 2;  // group 1
  w.q_len = 32;
  w.kv_len = 32;
  CandidateSet set = enumerate_candidates(w);
  ASSERT_FALSE(set.viable.empty());
  EXPECT_EQ(set.viable.front(), tuning_default(w));
  for (size_t i = 1; i < set.viable.size(); ++i) {
    EXPECT_LE(set.viable[i].block_n, 32) << set.viable[i].uri();
    EXPECT_LE(set.viable[i].block_m, 32) << set.viable[i].uri();
  }
}

TEST(Candidates, MaxCandidatesKeepsTheDefault) {
  CandidateSet set = enumerate_candidates(llama_diagonal(), 3);
  ASSERT_EQ(set.viable.size(), 3u);
  EXPECT_EQ(set.viable.front(), KernelSpec::default_for(Dtype::kBf16, 128, true, 4));
}

}  // namespace
}  // namespace cpgen::testing
