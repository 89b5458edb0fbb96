#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "generator/kernel_spec_wgmma.h"
#include "runtime/ring/kernel_support.h"
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
    // Both families have masked kernels (runtime/ring/kernel_support.h): on sm_90a the wgmma
    // candidates come along with the mask's flags like the mma.sync ones.
    const CandidateSet a = enumerate_candidates(plain);
    const CandidateSet b = enumerate_candidates(masked);
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
  // bf16, head dim 128, GQA 4 on sm_90a: the wgmma family's default (kWgmmaDefaultShapes).
  EXPECT_EQ(set.viable.front(), forward_default_for_arch(Dtype::kBf16, 128, true, 4, "sm_90a"));
  EXPECT_GE(set.viable.size(), 24u) << "the GPU acceptance run needs at least 24 candidates";
  std::set<std::string> uris;
  for (const KernelSpec& s : set.viable) {
    EXPECT_TRUE(uris.insert(s.uri()).second) << "duplicate " << s.uri();
    EXPECT_TRUE(check_feasibility(s, "sm_90a").feasible) << s.uri();
    if (s.kind == KernelKind::kForwardStep) EXPECT_EQ(s.block_m % (16 * s.warps), 0) << s.uri();
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
  // On sm_90a this combination's default is the wgmma family's (128 x 128 tiles), kept as well.
  EXPECT_EQ(set.viable.front(), wgmma_default_for(Dtype::kBf16, 128, true, 1));
  EXPECT_EQ(enumerate_candidates([&] {
              WorkloadKey sm90 = w;
              sm90.arch = "sm_90";
              return sm90;
            }()).viable.front(),
            KernelSpec::default_for(Dtype::kBf16, 128, true, 1));
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
  EXPECT_EQ(set.viable.front(), forward_default_for_arch(Dtype::kBf16, 128, true, 4, "sm_90a"));
  WorkloadKey sm90 = llama_diagonal();
  sm90.arch = "sm_90";
  set = enumerate_candidates(sm90, 3);
  ASSERT_EQ(set.viable.size(), 3u);
  EXPECT_EQ(set.viable.front(), KernelSpec::default_for(Dtype::kBf16, 128, true, 4));
}

// On sm_90a a forward workload searches the wgmma family too, before the mma.sync tiles: the
// workload's default first (the reference every candidate is checked against), then the other
// family's default, then every wgmma candidate (its default, its persistent launch, every
// (block_n, consumers, stages) of the tuning axes, the ping-pong schedules), each named by a
// ring_fwd_wgmma_ URI and feasible on sm_90a, then the rest of the mma.sync grid. So a short
// --max-candidates search times both defaults and the wgmma family's configs first (on the
// first GPU tune every wgmma candidate beat every mma.sync one).
TEST(Candidates, Sm90aForwardWorkloadsAlsoSearchTheWgmmaFamily) {
  const WorkloadKey w = llama_diagonal();
  const CandidateSet set = enumerate_candidates(w);
  const KernelSpec wgmma_default = wgmma_default_for(Dtype::kBf16, 128, true, 4);
  const KernelSpec mma_default = KernelSpec::default_for(Dtype::kBf16, 128, true, 4);
  KernelSpec persistent = wgmma_default;
  persistent.persistent = true;
  ASSERT_GE(set.viable.size(), 3u);
  EXPECT_EQ(set.viable[0], wgmma_default) << "the documented default at bf16 hd128 GQA 4 on sm_90a";
  EXPECT_EQ(set.viable[1], mma_default) << "then the other family's default";
  EXPECT_EQ(set.viable[2], persistent) << "then the wgmma default's persistent launch";
  const CandidateSet few = enumerate_candidates(w, 3);
  ASSERT_EQ(few.viable.size(), 3u);
  EXPECT_EQ(few.viable[1], mma_default) << "a short search times both families";
  EXPECT_TRUE(few.viable[2].persistent) << "and both launches of the wgmma default";
  // A combination no GPU has timed keeps the mma.sync default first; the wgmma default follows.
  WorkloadKey gqa2 = w;
  gqa2.kv_heads = 16;
  ASSERT_FALSE(wgmma_is_default(Dtype::kBf16, 128, 2, "sm_90a"));
  const CandidateSet two = enumerate_candidates(gqa2);
  ASSERT_GE(two.viable.size(), 3u);
  EXPECT_EQ(two.viable[0], KernelSpec::default_for(Dtype::kBf16, 128, true, 2));
  EXPECT_EQ(two.viable[1], wgmma_default_for(Dtype::kBf16, 128, true, 2));
  EXPECT_TRUE(two.viable[2].persistent) << two.viable[2].uri();
  std::set<std::string> wgmma;
  bool mma_tile_seen = false, wgmma_after_mma_tile = false;
  for (size_t i = 0; i < set.viable.size(); ++i) {
    const KernelSpec& s = set.viable[i];
    if (s.kind != KernelKind::kForwardWgmma) {
      mma_tile_seen = mma_tile_seen || s != mma_default;
      continue;
    }
    wgmma_after_mma_tile = wgmma_after_mma_tile || mma_tile_seen;
    EXPECT_EQ(s.uri().rfind("ring_fwd_wgmma_bf16_hd128_causal_gqa4_", 0), 0u) << s.uri();
    EXPECT_TRUE(check_feasibility(s, "sm_90a").feasible) << s.uri();
    wgmma.insert(s.uri());
  }
  EXPECT_FALSE(wgmma_after_mma_tile) << "every wgmma candidate comes before the mma.sync tiles";
  for (const KernelSpec& s : enumerate_candidates(w, static_cast<int>(wgmma.size()) + 1).viable)
    if (s != mma_default) EXPECT_TRUE(wgmma.count(s.uri())) << s.uri() << ": a wgmma candidate was cut instead";
  EXPECT_TRUE(wgmma.count(wgmma_default_for(Dtype::kBf16, 128, true, 4).uri()));
  // Every axis value is searched, viable or pruned with a reason.
  std::set<std::string> listed = wgmma;
  for (const PrunedCandidate& p : set.pruned)
    if (p.spec.kind == KernelKind::kForwardWgmma) {
      EXPECT_FALSE(p.reason.empty()) << p.spec.uri();
      listed.insert(p.spec.uri());
    }
  for (int consumers : kTuneWgmmaConsumers)
    for (int bn : kTuneWgmmaBlockN)
      for (int stages : kTuneWgmmaStages) {
        if (bn == kTuneWgmmaHeadDim256BlockN) continue;  // head dim 256 only (below)
        const std::string uri = "ring_fwd_wgmma_bf16_hd128_causal_gqa4_bm" + std::to_string(64 * consumers) + "_bn" +
                                std::to_string(bn) + "_c" + std::to_string(consumers) + "_s" + std::to_string(stages);
        EXPECT_TRUE(listed.count(uri)) << uri;
        // Two consumer warpgroups: the ping-pong schedule too; one has no partner to alternate with.
        EXPECT_EQ(listed.count(uri + "_pingpong"), consumers == 2 ? 1u : 0u) << uri << "_pingpong";
      }
  // The default tiles in the persistent launch, in both schedules.
  EXPECT_TRUE(listed.count(persistent.uri())) << persistent.uri();
  EXPECT_TRUE(listed.count(wgmma_default_for(Dtype::kBf16, 128, true, 4).uri() + "_pingpong_persistent"));
  EXPECT_GE(wgmma.size(), 8u);
  // The default stays the plain schedule until a GPU has measured ping-pong.
  EXPECT_FALSE(wgmma_default_for(Dtype::kBf16, 128, true, 4).pingpong);
}

// Three consumer warpgroups (FlashAttention-3's split at head dim 64) come before one in the
// search order, so the tune's 24-candidate search of a head dim 64 workload times them; one
// consumer's configs are what the cap cuts first.
TEST(Candidates, AShortHeadDim64SearchTimesThreeConsumersBeforeOne) {
  WorkloadKey w = llama_diagonal();
  w.dtype = Dtype::kFp16;
  w.head_dim = 64;
  w.causal = false;
  w.step = StepType::kFull;
  w.q_heads = w.kv_heads = 16;
  const CandidateSet set = enumerate_candidates(w, 24);
  ASSERT_EQ(set.viable.size(), 24u);
  int three = 0, one = 0;
  for (const KernelSpec& s : set.viable) {
    if (s.kind != KernelKind::kForwardWgmma) continue;
    three += wgmma_consumers(s) == 3;
    one += wgmma_consumers(s) == 1;
  }
  // FlashAttention-3's head dim 64 tile (192 x 128) is in; three consumers have six viable configs
  // (128- and 64-key tiles at 2-4 stages; 176 keys need 120 accumulator registers, over their 96),
  // of which the cap leaves at least the three 128-key ones.
  KernelSpec fa3 = wgmma_default_for(Dtype::kFp16, 64, false, 1);
  fa3.warps = 16;
  fa3.block_m = 192;
  EXPECT_NE(std::find(set.viable.begin(), set.viable.end(), fa3), set.viable.end()) << fa3.uri();
  EXPECT_GE(three, 3);
  EXPECT_EQ(one, 0) << "the cap cuts one consumer's configs first";
  int all_three = 0;
  for (const KernelSpec& s : enumerate_candidates(w).viable)
    all_three += s.kind == KernelKind::kForwardWgmma && wgmma_consumers(s) == 3;
  EXPECT_EQ(all_three, 6);
  for (const PrunedCandidate& p : set.pruned)
    if (p.spec.kind == KernelKind::kForwardWgmma && wgmma_consumers(p.spec) == 3) {
      EXPECT_EQ(p.spec.block_n, 176) << p.spec.uri();
      EXPECT_NE(p.reason.find("budget is 96 at 3 consumer warpgroups"), std::string::npos) << p.reason;
    }
}

// 80-key tiles are searched at head dim 256 only, where 128 keys do not fit the registers: its
// two-stage configs are viable (the plain and ping-pong schedules), three stages are pruned for
// shared memory; no other head dim lists them.
TEST(Candidates, EightyKeyTilesAtHeadDim256Only) {
  WorkloadKey w = llama_diagonal();
  w.head_dim = 256;
  const auto listed_with_80 = [](const CandidateSet& set) {
    std::vector<std::string> out;
    for (const KernelSpec& s : set.viable)
      if (s.block_n == 80) out.push_back(s.uri());
    for (const PrunedCandidate& p : set.pruned)
      if (p.spec.block_n == 80) out.push_back(p.spec.uri() + " (pruned: " + p.reason + ")");
    return out;
  };
  const CandidateSet set = enumerate_candidates(w);
  const std::string plain = "ring_fwd_wgmma_bf16_hd256_causal_gqa4_bm128_bn80_c2_s2";
  int viable = 0;
  for (const KernelSpec& s : set.viable) viable += s.block_n == 80;
  EXPECT_NE(std::find_if(set.viable.begin(), set.viable.end(), [&](const KernelSpec& s) { return s.uri() == plain; }),
            set.viable.end());
  EXPECT_NE(std::find_if(set.viable.begin(), set.viable.end(),
                         [&](const KernelSpec& s) { return s.uri() == plain + "_pingpong"; }),
            set.viable.end());
  for (const PrunedCandidate& p : set.pruned)
    if (p.spec.block_n == 80 && wgmma_consumers(p.spec) == 2)
      EXPECT_NE(p.reason.find("shared memory"), std::string::npos) << p.spec.uri() << ": " << p.reason;
  EXPECT_GE(viable, 3) << "two consumers (plain, ping-pong) and one";
  for (int head_dim : {64, 96, 128}) {
    w.head_dim = head_dim;
    EXPECT_TRUE(listed_with_80(enumerate_candidates(w)).empty()) << "head dim " << head_dim;
  }
}

// Where the family cannot run the workload as it is timed, no wgmma candidate appears: another
// arch, a mask it lacks, the zigzag query-half step (timed over a
// query view, which the family cannot launch over), and backward workloads.
TEST(Candidates, NoWgmmaCandidatesWhereTheFamilyCannotRunTheWorkload) {
  auto count_wgmma = [](const WorkloadKey& w) {
    int n = 0;
    const CandidateSet set = enumerate_candidates(w);
    for (const KernelSpec& s : set.viable) n += s.kind == KernelKind::kForwardWgmma;
    for (const PrunedCandidate& p : set.pruned) n += p.spec.kind == KernelKind::kForwardWgmma;
    return n;
  };
  ASSERT_GT(count_wgmma(llama_diagonal()), 0);
  WorkloadKey w = llama_diagonal();
  w.arch = "sm_90";
  EXPECT_EQ(count_wgmma(w), 0) << "sm_90 (not sm_90a)";
  w = llama_diagonal();
  w.head_dim = 256;
  EXPECT_GT(count_wgmma(w), 0) << "head dim 256";
  w = llama_diagonal();
  w.q_heads = 32;
  w.kv_heads = 2;  // group 16
  EXPECT_GT(count_wgmma(w), 0) << "group 16";
  w = llama_diagonal();
  w.mask.window_left = 128;
  EXPECT_EQ(count_wgmma(w) > 0, kernel_family_abilities(KernelKind::kForwardWgmma).key_intervals) << "a window";
  w = llama_diagonal();
  w.mask.softcap = true;
  EXPECT_EQ(count_wgmma(w) > 0, kernel_family_abilities(KernelKind::kForwardWgmma).softcap) << "a softcap";
  w = llama_diagonal();
  w.step = StepType::kZigzagQHalf;
  EXPECT_EQ(count_wgmma(w) > 0, kernel_family_abilities(KernelKind::kForwardWgmma).query_view) << "q-half";
  w.step = StepType::kZigzagKvHalf;
  EXPECT_GT(count_wgmma(w), 0) << "kv-half";
  EXPECT_EQ(count_wgmma(llama_backward_diagonal()), 0) << "backward";
}

// Where the wgmma family is the documented default (sm_90a, kWgmmaDefaultShapes), its default is
// the reference and the first candidate, so a short search keeps it; the mma.sync grid follows,
// grown from that family's own default, and no candidate is listed twice. Elsewhere (sm_90, an
// unmeasured dtype or group) the mma.sync default leads as before.
TEST(Candidates, TheWgmmaDefaultLeadsWhereItIsTheDocumentedDefault) {
  WorkloadKey w = llama_diagonal();
  w.kv_heads = 32;  // group 1
  const KernelSpec wgmma = wgmma_default_for(Dtype::kBf16, 128, true, 1);
  ASSERT_TRUE(wgmma_is_default(Dtype::kBf16, 128, 1, "sm_90a"));
  EXPECT_EQ(tuning_default(w), wgmma);
  const CandidateSet set = enumerate_candidates(w);
  ASSERT_GE(set.viable.size(), 2u);
  EXPECT_EQ(set.viable.front(), wgmma);
  EXPECT_EQ(set.viable[1], KernelSpec::default_for(Dtype::kBf16, 128, true, 1)) << "the mma.sync default next";
  EXPECT_EQ(set.viable[2].uri(), wgmma.uri() + "_persistent") << "then its persistent launch";
  std::set<std::string> uris;
  for (const KernelSpec& s : set.viable) EXPECT_TRUE(uris.insert(s.uri()).second) << s.uri() << " listed twice";
  EXPECT_TRUE(uris.count(KernelSpec::default_for(Dtype::kBf16, 128, true, 1).uri()));
  EXPECT_TRUE(uris.count(wgmma.uri() + "_pingpong") || [&] {
    for (const PrunedCandidate& p : set.pruned)
      if (p.spec.uri() == wgmma.uri() + "_pingpong") return true;
    return false;
  }()) << "the ping-pong variant of the default tiles is still searched";
  EXPECT_EQ(enumerate_candidates(w, 24).viable.front(), wgmma);
  // A masked workload's reference is the same kernel with the mask's flags.
  WorkloadKey masked = w;
  masked.mask.window_left = 128;
  KernelSpec masked_wgmma = wgmma;
  masked_wgmma.key_intervals = true;
  EXPECT_EQ(tuning_default(masked), masked_wgmma);
  EXPECT_EQ(enumerate_candidates(masked).viable.front(), masked_wgmma);
  // Not sm_90a, not a measured combination, or a backward step: as before.
  WorkloadKey other = w;
  other.arch = "sm_90";
  EXPECT_EQ(enumerate_candidates(other).viable.front(), KernelSpec::default_for(Dtype::kBf16, 128, true, 1));
  other = w;
  other.kv_heads = 16;  // group 2, not timed on a GPU
  EXPECT_EQ(tuning_default(other), KernelSpec::default_for(Dtype::kBf16, 128, true, 2));
  other = w;
  other.step = StepType::kBwdDiagonal;
  EXPECT_EQ(tuning_default(other).kind, KernelKind::kBackwardStep);
}

}  // namespace
}  // namespace cpgen::testing
