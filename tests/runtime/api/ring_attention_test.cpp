// RingAttention and its launch geometry without a GPU: problem errors come first, a missing
// device is reported as such, and the step grid packs GQA query heads the way step_fwd.cuh reads
// them (x: blocks of block_m packed rows, y and z: the batch * kv_heads pairs, folded).
#include "cpgen/ring_attention.h"

#include <gtest/gtest.h>

#include <cmath>

#include "cpgen/error.h"
#include "runtime/backend/gpu_step_kernel.h"
#include "test_util.h"

namespace cpgen {
namespace {

Problem small_problem() {
  Problem p;
  p.q_heads = 8;
  p.kv_heads = 2;
  p.head_dim = 128;
  p.seq_len = 1024;
  p.cp_size = 4;
  return p;
}

TEST(RingAttention, BadProblemIsReportedBeforeTheDevice) {
  Problem p = small_problem();
  p.head_dim = 80;  // no kernel has it (any seq_len now runs: ranks may hold different counts)
  try {
    RingAttention::loopback(p);
    FAIL() << "accepted head_dim 80";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadInput);
    EXPECT_NE(std::string(e.what()).find("head_dim"), std::string::npos) << e.what();
  }
}

TEST(RingAttention, WithoutGpuLoopbackSaysNoDevice) {
  std::string why;
  if (testing::have_gpu(&why)) GTEST_SKIP() << "a GPU is present";
  try {
    RingAttention::loopback(small_problem());
    FAIL() << "a loopback ring was created without a GPU";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kNoDevice) << e.what();
  }
}

TEST(RingAttention, NullCommunicatorIsBadInput) {
  try {
    RingAttention::nccl(small_problem(), nullptr);
    FAIL() << "a null communicator was accepted";
  } catch (const Error& e) {
    EXPECT_TRUE(e.kind() == ErrorKind::kBadInput || e.kind() == ErrorKind::kNccl) << e.what();
  }
}

// The watchdog's limit is checked before anything touches the communicator (a pointer that is no
// communicator is never used): 0 or less aborted the ring at its first exchange, NaN never did.
TEST(RingAttention, AWatchdogMustBeFiniteAndPositive) {
  int not_a_communicator = 0;
  for (const double seconds : {0.0, -5.0, std::nan(""), HUGE_VAL}) {
    RingOptions options;
    options.watchdog_seconds = seconds;
    try {
      RingAttention::nccl(small_problem(), &not_a_communicator, options);
      FAIL() << "watchdog_seconds " << seconds << " was accepted";
    } catch (const Error& e) {
      if (e.kind() == ErrorKind::kNccl) GTEST_SKIP() << "built without NCCL: " << e.what();
      EXPECT_EQ(e.kind(), ErrorKind::kBadInput) << e.what();
      EXPECT_NE(std::string(e.what()).find("watchdog_seconds"), std::string::npos) << e.what();
    }
  }
}

TEST(StepGrid, PacksGqaRowsAndCoversEveryRow) {
  KernelSpec spec = KernelSpec::default_for(Dtype::kBf16, 128, true, 4);  // block_m 128
  RingFwdParams p{};
  p.batch = 3;
  p.q_heads = 8;
  p.kv_heads = 2;
  p.q_len = 100;  // 400 packed rows per kv head -> 4 blocks of 128 (the last partial)
  gpu::StepGrid g = gpu::step_grid(spec, p);
  EXPECT_EQ(g.x, 4u);
  EXPECT_EQ(g.y, 2u);  // kv heads on y and batch on z: no division to find a block's pair
  EXPECT_EQ(g.z, 3u);
  p.q_len = 96;  // exactly 3 blocks
  EXPECT_EQ(gpu::step_grid(spec, p).x, 3u);
  spec = KernelSpec::default_for(Dtype::kFp16, 256, false, 1);  // block_m 64
  p.q_len = 65;
  EXPECT_EQ(gpu::step_grid(spec, p).x, 2u);
}

// A persistent spec: one row of CTAs, as many as the device keeps resident but never more than
// there are (query block, pair) items; without a resident count the launch is refused.
TEST(StepGrid, PersistentSpecsLaunchAtMostTheResidentCtas) {
  KernelSpec spec = KernelSpec::parse("ring_fwd_wgmma_bf16_hd128_causal_gqa4_bm128_bn128_c2_s2_persistent");
  RingFwdParams p{};
  p.batch = 3;
  p.q_heads = 8;
  p.kv_heads = 2;
  p.q_len = 100;  // 4 blocks x 6 pairs = 24 items
  gpu::StepGrid g = gpu::step_grid(spec, p, 132);
  EXPECT_EQ(g.x, 24u);
  EXPECT_EQ(g.y, 1u);
  EXPECT_EQ(g.z, 1u);
  p.q_len = 8192;  // 256 blocks x 6 pairs
  EXPECT_EQ(gpu::step_grid(spec, p, 132).x, 132u);
  EXPECT_THROW(gpu::step_grid(spec, p), Error);
  // The CTAs hand item indices over as int (step_fwd_wgmma.cuh): 2^32 items are past INT32_MAX,
  // a bad input naming the limit.
  p.q_len = 1 << 30;  // x GQA 4 / 128 rows: 2^25 blocks
  p.batch = 64;       // x 2 kv heads: 128 pairs, 2^32 items
  try {
    gpu::step_grid(spec, p, 132);
    ADD_FAILURE() << "a persistent launch of 2^32 items was not refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadInput);
    EXPECT_NE(std::string(e.what()).find("a persistent launch takes at most 2147483647"), std::string::npos) << e.what();
  }
  p.q_len = 8192;
  p.batch = 3;
  spec.persistent = false;  // the plain grid, whatever the resident count
  EXPECT_EQ(gpu::step_grid(spec, p, 132).x, 256u);
}

// Regression for batch * kv_heads above 65535, which used to be launched as grid.y alone (a launch
// the driver refuses): y and z each stay within the limit (here kv heads and batch), and every pair
// has exactly one block.
TEST(StepGrid, BatchTimesKvHeadsAbove65535FoldsIntoZ) {
  KernelSpec spec = KernelSpec::default_for(Dtype::kBf16, 128, true, 4);
  RingFwdParams p{};
  p.batch = 8192;
  p.kv_heads = 16;
  p.q_heads = 64;
  p.q_len = 128;
  const gpu::StepGrid g = gpu::step_grid(spec, p);
  EXPECT_LE(g.y, 65535u);
  EXPECT_LE(g.z, 65535u);
  EXPECT_GT(g.z, 1u);
  const long long pairs = 8192LL * 16;
  EXPECT_GE(static_cast<long long>(g.y) * g.z, pairs);
  EXPECT_LT(static_cast<long long>(g.y) * g.z - pairs, static_cast<long long>(g.z));
  EXPECT_EQ(g.x, 4u);
}

}  // namespace
}  // namespace cpgen
