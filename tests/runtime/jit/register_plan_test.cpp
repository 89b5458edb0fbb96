// wgmma_register_plan_problem (runtime/jit/jit.h): a wgmma kernel whose setmaxnreg plan (24
// registers for the producer warpgroup, 240 for each consumer; 32 and 232 when persistent; 160 for
// each of three consumers) does not fit what ptxas allocated
// at entry is refused, because setmaxnreg.inc would wait forever for the CTA's pool, or would be
// asked to shrink a consumer. The counts below are what-ifs around ptxas's real ones (168 at 384
// threads, at most 232 at 256); the NVRTC compile tests check the real ones pass.
#include <gtest/gtest.h>

#include <string>

#include "generator/kernel_spec.h"
#include "runtime/jit/jit.h"

namespace cpgen {
namespace {

const KernelSpec kTwoConsumers = KernelSpec::parse("ring_fwd_wgmma_bf16_hd128_causal_gqa1_bm128_bn128_c2_s2");
const KernelSpec kOneConsumer = KernelSpec::parse("ring_fwd_wgmma_fp16_hd128_causal_gqa1_bm64_bn128_c1_s3");

TEST(RegisterPlan, FitsWhenThePoolHoldsTheProducerAndEveryConsumer) {
  // 384 x 168 = 64512 = 128 x 24 + 256 x 240: exactly the plan.
  EXPECT_EQ(wgmma_register_plan_problem(kTwoConsumers, 168), "");
  EXPECT_EQ(wgmma_register_plan_problem(kOneConsumer, 232), "");
  EXPECT_EQ(wgmma_register_plan_problem(kOneConsumer, 240), "");
}

TEST(RegisterPlan, APoolSmallerThanThePlanWouldHangTheConsumers) {
  const std::string why = wgmma_register_plan_problem(kTwoConsumers, 160);
  EXPECT_EQ(why,
            "ptxas allocated 160 registers per thread at entry (61440 for the CTA); setmaxnreg asks 24 for the "
            "producer and 240 for each consumer thread (64512): the consumers' setmaxnreg.inc would wait forever "
            "for registers");
  // One consumer needs 33792: 128 registers at 256 threads would not do (32768), 132 would.
  EXPECT_NE(wgmma_register_plan_problem(kOneConsumer, 128), "");
  EXPECT_EQ(wgmma_register_plan_problem(kOneConsumer, 132), "");
}

TEST(RegisterPlan, AnEntryCountAboveTheConsumersTargetWouldShrinkThem) {
  const std::string why = wgmma_register_plan_problem(kOneConsumer, 248);
  EXPECT_NE(why.find("setmaxnreg.inc would shrink them"), std::string::npos) << why;
}

// A persistent kernel's plan is 32 for the producer (its loader and scheduler) and 232 for each
// consumer: 63488 at two consumers, within 384 x 168; a one-consumer kernel whose ptxas gave 240
// at entry would have its consumers shrunk to 232.
TEST(RegisterPlan, APersistentKernelPlansThirtyTwoAndTwoHundredThirtyTwo) {
  const KernelSpec persistent = KernelSpec::parse("ring_fwd_wgmma_bf16_hd128_causal_gqa1_bm128_bn128_c2_s2_persistent");
  EXPECT_EQ(wgmma_register_plan_problem(persistent, 168), "");
  EXPECT_EQ(wgmma_register_plan_problem(persistent, 165),
            "ptxas allocated 165 registers per thread at entry (63360 for the CTA); setmaxnreg asks 32 for the "
            "producer and 232 for each consumer thread (63488): the consumers' setmaxnreg.inc would wait forever "
            "for registers");
  const KernelSpec one = KernelSpec::parse("ring_fwd_wgmma_fp16_hd96_causal_gqa2_bm64_bn128_c1_s3_persistent");
  EXPECT_EQ(wgmma_register_plan_problem(one, 232), "");
  EXPECT_NE(wgmma_register_plan_problem(one, 240).find("setmaxnreg.inc would shrink them"), std::string::npos);
}

// Three consumers: 512 threads, 128 registers each at entry (the whole 64K file); the plan is 24
// for the producer and 160 for each consumer (64512), persistent 32 and 160 (65536, all of it).
TEST(RegisterPlan, ThreeConsumersPlanOneHundredSixtyEach) {
  const KernelSpec three = KernelSpec::parse("ring_fwd_wgmma_fp16_hd64_full_gqa1_bm192_bn128_c3_s2");
  EXPECT_EQ(wgmma_register_plan_problem(three, 128), "");
  EXPECT_EQ(wgmma_register_plan_problem(three, 120),
            "ptxas allocated 120 registers per thread at entry (61440 for the CTA); setmaxnreg asks 24 for the "
            "producer and 160 for each consumer thread (64512): the consumers' setmaxnreg.inc would wait forever "
            "for registers");
  const KernelSpec persistent = KernelSpec::parse("ring_fwd_wgmma_fp16_hd64_full_gqa1_bm192_bn128_c3_s2_persistent");
  EXPECT_EQ(wgmma_register_plan_problem(persistent, 128), "");
  EXPECT_NE(wgmma_register_plan_problem(persistent, 127).find("would wait forever"), std::string::npos);
  EXPECT_NE(wgmma_register_plan_problem(three, 168).find("setmaxnreg.inc would shrink them"), std::string::npos);
}

TEST(RegisterPlan, OtherKindsAndUnknownCountsHaveNoPlan) {
  EXPECT_EQ(wgmma_register_plan_problem(KernelSpec::parse("ring_fwd_bf16_hd128_causal_gqa4_bm128_bn64_w4_s2"), 10), "");
  EXPECT_EQ(wgmma_register_plan_problem(kTwoConsumers, 0), "");
}

}  // namespace
}  // namespace cpgen
