// The feasibility model (generator/kernel_spec.cpp) against the template's traits
// (templates/traits.cuh): same shared-memory bytes, and a spec is feasible exactly when the
// traits' static_asserts would hold.
#include "cpgen/traits.cuh"

#include <gtest/gtest.h>

#include "cpgen/error.h"
#include "generator/kernel_spec.h"

namespace cpgen {
namespace {

bool traits_accept(const device::FwdLayout& l, const KernelSpec& s, int arch) {
  return l.accumulator_registers <= l.accumulator_budget &&
         l.shared_bytes <= device::shared_limit_for_arch(arch) && s.block_m % s.gqa_group == 0 &&
         s.block_n % l.sub_keys == 0;
}

TEST(Traits, FeasibilityModelMatchesTheTraitsForEveryTileConfig) {
  int checked = 0, feasible = 0;
  for (int hd : kSupportedHeadDims)
    for (int bm : kSupportedBlockM)
      for (int bn : kSupportedBlockN)
        for (int w : kSupportedWarps)
          for (int st : kSupportedStages)
            for (bool softcap : {false, true}) {
              if (bm % (16 * w) != 0) continue;  // rejected by validate()
              KernelSpec s = KernelSpec::default_for(Dtype::kBf16, hd, true, 4);
              s.block_m = bm;
              s.block_n = bn;
              s.warps = w;
              s.stages = st;
              s.softcap = softcap;
              const device::FwdLayout l = device::fwd_layout(2, hd, bm, bn, w, st, softcap);
              for (auto [arch, arch_number] : {std::pair{"sm_80", 800}, {"sm_86", 860}, {"sm_89", 890},
                                               {"sm_90", 900}, {"sm_100", 1000}, {"sm_120", 1200}}) {
                Feasibility f = check_feasibility(s, arch);
                EXPECT_EQ(f.shared_bytes, l.shared_bytes) << s.uri();
                EXPECT_EQ(f.feasible, traits_accept(l, s, arch_number)) << s.uri() << " on " << arch
                                                                        << ": " << f.reason;
                if (f.feasible) EXPECT_LE(f.register_estimate, 255) << s.uri();
                feasible += f.feasible;
                ++checked;
              }
            }
  EXPECT_GT(checked, 3000);
  EXPECT_GT(feasible, 200);
}

TEST(Traits, DefaultAt32RowsPerWarpScoresWholeTiles) {
  // ring_fwd_bf16_hd128_causal_gqa4_bm128_bn64_w4_s2: 2 m-tiles per warp score all 64 keys of a
  // tile at once: 2 x (16 + 8) x 4 = 192 accumulators, the budget.
  device::FwdLayout l = device::fwd_layout(2, 128, 128, 64, 4, 2);
  EXPECT_EQ(l.m_tiles, 2);
  EXPECT_EQ(l.sub_keys, 64);
  EXPECT_EQ(l.accumulator_registers, 192);
  EXPECT_EQ(l.accumulator_registers, device::kAccumulatorBudget);
  EXPECT_EQ(l.shared_bytes, 128 * 128 * 2 + 2 * 2 * 64 * 128 * 2);
  EXPECT_EQ(l.kv_loads_per_thread, 8);
  // Head dim 256 at 16 rows per warp keeps whole 64-key tiles.
  EXPECT_EQ(device::fwd_layout(2, 256, 64, 64, 4, 2).sub_keys, 64);
}

TEST(Traits, SubTilesAreAtMost64KeysWithinTheSmallerBudget) {
  // 128-key tiles are scored in 64-key halves even where 128 at once would fit the whole-tile
  // budget (head dim 64: 2 x (8 + 16) x 4 = 192), which spilled on sm_80.
  const device::FwdLayout hd64 = device::fwd_layout(2, 64, 128, 128, 4, 2);
  EXPECT_EQ(hd64.sub_keys, 64);
  EXPECT_EQ(hd64.accumulator_budget, device::kSubTileAccumulatorBudget);
  // Head dim 128: two 64-key sub-tiles would need 192, beyond the sub-tile budget (they spilled on
  // sm_80): four 32-key ones.
  EXPECT_EQ(device::fwd_layout(2, 128, 128, 128, 4, 2).sub_keys, 32);
  // Four m-tiles per warp at head dim 64: a whole 64-key tile would need 4 x (8 + 8) x 4 = 256,
  // 32 keys 192 > 160, 16 keys 160.
  EXPECT_EQ(device::fwd_layout(2, 64, 128, 64, 2, 2).sub_keys, 16);
  // Short tiles are scored whole.
  EXPECT_EQ(device::fwd_layout(2, 128, 128, 32, 4, 2).sub_keys, 32);
  // The softcap variant keeps the smaller budget: 32-key halves at the head dim 128 default.
  const device::FwdLayout capped = device::fwd_layout(2, 128, 128, 64, 4, 2, true);
  EXPECT_EQ(capped.accumulator_budget, device::kSubTileAccumulatorBudget);
  EXPECT_EQ(capped.sub_keys, 32);
  EXPECT_EQ(capped.accumulator_registers, 160);
}

// The per-block opt-in shared memory of each target (CUDA C++ Programming Guide), in the model and
// in the traits the kernel asserts against.
TEST(Traits, SharedMemoryLimitPerArch) {
  const std::pair<const char*, int> limits[] = {{"sm_80", 163 * 1024}, {"sm_86", 99 * 1024},
                                                {"sm_89", 99 * 1024},  {"sm_90", 227 * 1024},
                                                {"sm_90a", 227 * 1024}, {"sm_100", 227 * 1024},
                                                {"sm_120", 99 * 1024}};
  for (auto [arch, bytes] : limits) EXPECT_EQ(shared_memory_limit(arch), bytes) << arch;
  for (auto [number, bytes] : {std::pair{800, 163 * 1024}, {860, 99 * 1024}, {870, 163 * 1024}, {890, 99 * 1024},
                               {900, 227 * 1024}, {1000, 227 * 1024}, {1200, 99 * 1024}})
    EXPECT_EQ(device::shared_limit_for_arch(number), bytes) << number;
  EXPECT_THROW(shared_memory_limit("sm_75"), Error);
}

// On the 99 KB targets head dim 256's default (64 x 64 tiles, 2 stages: 160 KB) does not fit;
// default_for_arch keeps two stages and halves block_n until it does.
TEST(Traits, DefaultForArchFitsEveryTarget) {
  for (std::string_view arch : kSupportedArchs)
    for (const KernelSpec& generic : KernelSpec::all_defaults()) {
      const KernelSpec s = KernelSpec::default_for_arch(generic.dtype, generic.head_dim, generic.causal,
                                                        generic.gqa_group, arch);
      const Feasibility f = check_feasibility(s, arch);
      EXPECT_TRUE(f.feasible) << s.uri() << " on " << arch << ": " << f.reason;
      if (check_feasibility(generic, arch).feasible) EXPECT_EQ(s, generic) << arch;
    }
  const KernelSpec hd256 = KernelSpec::default_for_arch(Dtype::kBf16, 256, true, 1, "sm_120");
  EXPECT_EQ(hd256.uri(), "ring_fwd_bf16_hd256_causal_gqa1_bm64_bn32_w4_s2");
}

}  // namespace
}  // namespace cpgen
