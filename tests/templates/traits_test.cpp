// The feasibility model (generator/kernel_spec.cpp) against the template's traits
// (templates/traits.cuh): same shared-memory bytes, and a spec is feasible exactly when the
// traits' static_asserts would hold.
#include "cpgen/traits.cuh"

#include <gtest/gtest.h>

#include "generator/kernel_spec.h"

namespace cpgen {
namespace {

bool traits_accept(const device::FwdLayout& l, const KernelSpec& s, int arch) {
  return l.accumulator_registers <= device::kAccumulatorBudget &&
         l.shared_bytes <= device::shared_limit_for_arch(arch) && s.block_m % s.gqa_group == 0 &&
         s.block_n % l.sub_keys == 0;
}

TEST(Traits, FeasibilityModelMatchesTheTraitsForEveryTileConfig) {
  int checked = 0, feasible = 0;
  for (int hd : kSupportedHeadDims)
    for (int bm : kSupportedBlockM)
      for (int bn : kSupportedBlockN)
        for (int w : kSupportedWarps)
          for (int st : kSupportedStages) {
            if (bm % (16 * w) != 0) continue;  // rejected by validate()
            KernelSpec s = KernelSpec::default_for(Dtype::kBf16, hd, true, 4);
            s.block_m = bm;
            s.block_n = bn;
            s.warps = w;
            s.stages = st;
            const device::FwdLayout l = device::fwd_layout(2, hd, bm, bn, w, st);
            for (auto [arch, arch_number] : {std::pair{"sm_80", 800}, {"sm_90", 900}}) {
              Feasibility f = check_feasibility(s, arch);
              EXPECT_EQ(f.shared_bytes, l.shared_bytes) << s.uri();
              EXPECT_EQ(f.feasible, traits_accept(l, s, arch_number)) << s.uri() << " on " << arch
                                                                      << ": " << f.reason;
              if (f.feasible) EXPECT_LE(f.register_estimate, 255) << s.uri();
              feasible += f.feasible;
              ++checked;
            }
          }
  EXPECT_GT(checked, 500);
  EXPECT_GT(feasible, 100);
}

TEST(Traits, DefaultAt32RowsPerWarpScoresHalfTiles) {
  // ring_fwd_bf16_hd128_causal_gqa4_bm128_bn64_w4_s2: 2 m-tiles per warp; 64 keys at once would
  // need 192 accumulators, so keys are scored 32 at a time (160).
  device::FwdLayout l = device::fwd_layout(2, 128, 128, 64, 4, 2);
  EXPECT_EQ(l.m_tiles, 2);
  EXPECT_EQ(l.sub_keys, 32);
  EXPECT_EQ(l.accumulator_registers, 160);
  EXPECT_EQ(l.shared_bytes, 128 * 128 * 2 + 2 * 2 * 64 * 128 * 2);
  EXPECT_EQ(l.kv_loads_per_thread, 8);
  // Head dim 256 at 16 rows per warp keeps whole 64-key tiles.
  EXPECT_EQ(device::fwd_layout(2, 256, 64, 64, 4, 2).sub_keys, 64);
}

}  // namespace
}  // namespace cpgen
