// The one rule of what each forward kernel family runs (runtime/ring/kernel_support.h): today the
// mma.sync family and the sm_90a wgmma family both run every mask and query views, so neither is
// refused a valid problem.
#include "runtime/ring/kernel_support.h"

#include <gtest/gtest.h>

#include "generator/kernel_spec_wgmma.h"

namespace cpgen {
namespace {

Problem causal_problem() {
  Problem p;
  p.q_heads = 2;
  p.kv_heads = 2;
  p.head_dim = 64;
  p.seq_len = 64;
  p.cp_size = 2;
  p.dtype = Dtype::kBf16;
  p.causal = true;
  return p;
}

TEST(KernelSupport, TheMmaSyncFamilyRunsEveryMaskAndQueryViews) {
  const KernelFamilyAbilities a = kernel_family_abilities(KernelKind::kForwardStep);
  EXPECT_TRUE(a.key_intervals);
  EXPECT_TRUE(a.softcap);
  EXPECT_TRUE(a.query_view);
  Problem p = causal_problem();
  p.window_left = 8;
  p.softcap = 30;
  KernelSpec spec = KernelSpec::default_for(p.dtype, 64, true, 1);
  spec.key_intervals = spec.softcap = true;
  EXPECT_EQ(kernel_family_refusal(spec, p), "");
}

// The wgmma template has key intervals, the softcap and state_len's pitch (step_fwd_wgmma.cuh):
// its family runs every mask the mma.sync family runs, and query views.
TEST(KernelSupport, TheWgmmaFamilyRunsEveryMaskAndQueryViews) {
  const KernelFamilyAbilities a = kernel_family_abilities(KernelKind::kForwardWgmma);
  EXPECT_TRUE(a.key_intervals);
  EXPECT_TRUE(a.softcap);
  EXPECT_TRUE(a.query_view);
  KernelSpec spec = wgmma_default_for(Dtype::kBf16, 64, true, 1);
  Problem p = causal_problem();
  EXPECT_EQ(kernel_family_refusal(spec, p), "") << "a causal problem runs";
  spec.key_intervals = spec.softcap = true;
  p.window_left = 8;
  p.softcap = 30;
  EXPECT_EQ(kernel_family_refusal(spec, p), "");
  p.window_left = -1;
  p.documents = {32, 32};
  EXPECT_EQ(kernel_family_refusal(spec, p), "");
}

}  // namespace
}  // namespace cpgen
