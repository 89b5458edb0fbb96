// Launch grids of the backward kernels (runtime/backend/gpu_step_kernel.h), checked on the CPU.
#include "runtime/backend/gpu_step_kernel.h"

#include <gtest/gtest.h>

#include "cpgen/error.h"

namespace cpgen {
namespace {

TEST(StepBwdGrid, OneBlockPerBlockNKeysAndPerPair) {
  const KernelSpec spec = KernelSpec::backward_default_for(Dtype::kBf16, 128, true, 4);
  ASSERT_GT(spec.block_n, 1);
  RingBwdParams p{};
  p.batch = 3;
  p.q_heads = 8;
  p.kv_heads = 2;
  p.q_len = 1000;  // queries do not enter the grid: each CTA walks all of them for its keys
  p.kv_len = spec.block_n * 5 + 1;  // a partial last key block
  gpu::StepGrid g = gpu::step_bwd_grid(spec, p);
  EXPECT_EQ(g.x, 6u);
  EXPECT_EQ(g.y, 2u);  // kv heads on y and batch on z: no division to find a block's pair
  EXPECT_EQ(g.z, 3u);
  p.kv_len = spec.block_n * 5;
  EXPECT_EQ(gpu::step_bwd_grid(spec, p).x, 5u);
  p.kv_len = 1;
  EXPECT_EQ(gpu::step_bwd_grid(spec, p).x, 1u);
}

// batch * kv_heads past 65535 folds into z as the forward's grid does, one block per pair.
TEST(StepBwdGrid, BatchTimesKvHeadsAbove65535FoldsIntoZ) {
  const KernelSpec spec = KernelSpec::backward_default_for(Dtype::kFp16, 64, false, 1);
  RingBwdParams p{};
  p.batch = 5000;
  p.kv_heads = 32;
  p.q_heads = 32;
  p.q_len = p.kv_len = spec.block_n * 2;
  const gpu::StepGrid g = gpu::step_bwd_grid(spec, p);
  const long long pairs = 5000LL * 32;
  EXPECT_EQ(g.x, 2u);
  EXPECT_LE(g.y, 65535u);
  EXPECT_LE(g.z, 65535u);
  EXPECT_GT(g.z, 1u);
  EXPECT_GE(static_cast<long long>(g.y) * g.z, pairs);
  EXPECT_LT(static_cast<long long>(g.y) * g.z - pairs, static_cast<long long>(g.z));
}

TEST(RowGrid, CeilOfRowsOverWarps) {
  EXPECT_EQ(gpu::row_grid(14, 4).x, 4u);
  EXPECT_EQ(gpu::row_grid(16, 4).x, 4u);
  EXPECT_EQ(gpu::row_grid(1, 8).x, 1u);
  const gpu::StepGrid g = gpu::row_grid(2LL * 64 * 1000000, 4);  // batch 2, 64 heads, 1M rows
  EXPECT_EQ(g.x, 32000000u);
  EXPECT_EQ(g.y, 1u);
  EXPECT_EQ(g.z, 1u);
}

TEST(RowGrid, RefusesEmptyAndOversizedGrids) {
  EXPECT_THROW(gpu::row_grid(0, 4), Error);
  EXPECT_THROW(gpu::row_grid(10, 0), Error);
  EXPECT_THROW(gpu::row_grid(0x7fffffffLL * 4 + 1, 4), Error);
  EXPECT_EQ(gpu::row_grid(0x7fffffffLL * 4, 4).x, 0x7fffffffu);
}

}  // namespace
}  // namespace cpgen
