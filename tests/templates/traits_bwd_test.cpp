// The backward feasibility model (generator/kernel_spec.cpp) against the backward traits
// (templates/traits_bwd.cuh): same shared-memory bytes, and a spec is feasible exactly when
// BwdTraits' static_asserts would hold.
#include "cpgen/traits_bwd.cuh"

#include <gtest/gtest.h>

#include "generator/kernel_spec.h"

namespace cpgen {
namespace {

bool traits_accept(const device::BwdLayout& l, const KernelSpec& s, int arch) {
  return s.warps % l.key_groups == 0 && (s.block_n / 16) % l.key_groups == 0 && s.head_dim % (16 * l.dim_splits) == 0 &&
         l.accumulator_registers <= device::kBwdAccumulatorBudget &&
         l.shared_bytes <= device::shared_limit_for_arch(arch) && s.block_m % s.gqa_group == 0;
}

TEST(TraitsBwd, FeasibilityModelMatchesTheTraitsForEveryTileConfig) {
  int checked = 0, feasible = 0;
  for (int hd : kSupportedHeadDims)
    for (int bm : kSupportedBwdBlockM)
      for (int bn : kSupportedBwdBlockN)
        for (int w : kSupportedWarps)
          for (int st : kSupportedBwdStages)
            for (bool intervals : {false, true}) {
              KernelSpec s = KernelSpec::backward_default_for(Dtype::kFp16, hd, false, 4);
              s.block_m = bm;
              s.block_n = bn;
              s.warps = w;
              s.stages = st;
              s.key_intervals = intervals;
              const device::BwdLayout l = device::bwd_layout(2, hd, bm, bn, w, st, intervals);
              for (auto [arch, arch_number] : {std::pair{"sm_80", 800}, {"sm_90", 900}}) {
                Feasibility f = check_feasibility(s, arch);
                EXPECT_EQ(f.shared_bytes, l.shared_bytes) << s.uri();
                EXPECT_EQ(f.feasible, traits_accept(l, s, arch_number)) << s.uri() << " on " << arch
                                                                        << ": " << f.reason;
                feasible += f.feasible;
                ++checked;
              }
            }
  EXPECT_GT(checked, 500);
  EXPECT_GT(feasible, 100);
}

TEST(TraitsBwd, Hd128DefaultSplitsHeadDimOverTwoWarpsPerKeySlice) {
  // ring_bwd_*_hd128_*_bm64_bn64_w8_s2: 4 key slices of 16 keys, each over 2 warps of 64 columns.
  const device::BwdLayout l = device::bwd_layout(2, 128, 64, 64, 8, 2);
  EXPECT_EQ(l.key_groups, 4);
  EXPECT_EQ(l.dim_splits, 2);
  EXPECT_EQ(l.key_m_tiles, 1);
  EXPECT_EQ(l.dim_cols_per_warp, 64);
  // S^T and dP^T: 2 x 8 n8 tiles; dK and dV: 2 x 8 n8 tiles; 4 floats each.
  EXPECT_EQ(l.accumulator_registers, 128);
  EXPECT_EQ(l.shared_bytes, 2 * 64 * 128 * 2 + 2 * 2 * 64 * 128 * 2 + 64 * 72 * 2 + 64 * 12);
}

}  // namespace
}  // namespace cpgen
