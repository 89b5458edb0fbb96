// The GPU timing harness on a real device: the reference config passes its float64 check, a
// correct candidate is timed with at least 20 samples, and a kernel computing something else is
// caught as a wrong result before any timing counts.
#include <gtest/gtest.h>

#include "../cache/cache_fixtures.h"
#include "generator/kernel_spec_wgmma.h"
#include "runtime/jit/jit.h"
#include "runtime/cuda/module.h"
#include "test_util.h"
#include "tuner/gpu_timer.h"

namespace cpgen::testing {
namespace {

WorkloadKey small(Dtype dtype, StepType step) {
  WorkloadKey w = test_workload(512, step);
  w.dtype = dtype;
  w.head_dim = 64;
  w.q_heads = 8;
  w.kv_heads = 2;
  w.batch = 2;
  if (step == StepType::kZigzagQHalf) {
    w.q_len = 256;
    w.kv_len = 512;
  }
  return w;
}

TEST(GpuTimer, VerifiesThenTimesAndCatchesAWrongKernel) {
  CPGEN_REQUIRE_GPU();
  const std::string arch = device_arch(0);
  for (Dtype dtype : {Dtype::kBf16, Dtype::kFp16}) {
    for (StepType step : {StepType::kDiagonal, StepType::kZigzagQHalf}) {
      WorkloadKey w = small(dtype, step);
      w.arch = arch;
      KernelSpec reference = KernelSpec::default_for(dtype, 64, true, 4);
      KernelSpec other = reference;
      other.block_m = 64;
      other.block_n = 32;
      other.stages = 3;
      KernelSpec unmasked = reference;
      unmasked.causal = false;  // ignores the causal mask: wrong for the diagonal step
      GpuTimer timer(0);
      TimingOutcome ref = timer.begin_workload(w, reference, compile_kernel(reference, arch, nullptr));
      ASSERT_EQ(ref.disposition, Disposition::kOk) << ref.detail;
      EXPECT_GT(timer.useful_flops(), 0);
      TimingOutcome t = timer.measure(other, compile_kernel(other, arch, nullptr), 2, 20, RaceLimit{});
      ASSERT_EQ(t.disposition, Disposition::kOk) << t.detail;
      ASSERT_EQ(t.samples_ms.size(), 20u);
      EXPECT_FALSE(t.stopped_early);
      for (double ms : t.samples_ms) EXPECT_GT(ms, 0);
      // The race: a bar no launch can pass stops the timing after the probe runs, one no launch
      // can miss lets all the runs through.
      const CompiledKernel other_kernel = compile_kernel(other, arch, nullptr);
      const TimingOutcome raced = timer.measure(other, other_kernel, 2, 20, RaceLimit{5, 0.0});
      EXPECT_TRUE(raced.stopped_early);
      EXPECT_EQ(raced.samples_ms.size(), 5u);
      const TimingOutcome through = timer.measure(other, other_kernel, 2, 20, RaceLimit{5, 1e9});
      EXPECT_FALSE(through.stopped_early);
      EXPECT_EQ(through.samples_ms.size(), 20u);
      EXPECT_GT(through.check_ms, 0) << "the checked launch is timed";
      // The cut at the checked launch: a bar it cannot pass leaves that launch as the one sample.
      const TimingOutcome cut = timer.measure(other, other_kernel, 2, 20, RaceLimit{5, 1e9, 1e-9});
      EXPECT_TRUE(cut.stopped_early && cut.stopped_after_check);
      ASSERT_EQ(cut.samples_ms.size(), 1u);
      EXPECT_EQ(cut.samples_ms[0], cut.check_ms);
      EXPECT_GT(cut.check_ms, 0);
      TimingOutcome wrong = timer.measure(unmasked, compile_kernel(unmasked, arch, nullptr), 2, 20, RaceLimit{});
      if (step == StepType::kDiagonal) {
        EXPECT_EQ(wrong.disposition, Disposition::kWrongResult) << "an unmasked kernel passed the diagonal check";
        EXPECT_TRUE(wrong.samples_ms.empty());
        EXPECT_NE(wrong.detail.find(unmasked.uri()), std::string::npos) << wrong.detail;
      } else {
        // Every key is in the past in the q-half step: masked and unmasked kernels agree.
        EXPECT_EQ(wrong.disposition, Disposition::kOk) << wrong.detail;
      }
      timer.end_workload();
    }
  }
}

// Issue 13: on an sm_90a device the timer runs wgmma candidates through the ring's own launch
// (tensor maps included): each is checked element by element against the mma.sync reference,
// then timed, and a wgmma kernel ignoring the causal mask is caught.
TEST(GpuTimer, TimesWgmmaCandidatesAgainstTheMmaSyncReference) {
  CPGEN_REQUIRE_GPU();
  const std::string arch = device_arch(0);
  if (arch != kWgmmaArch) GTEST_SKIP() << "the wgmma family needs sm_90a; device 0 is " << arch;
  for (Dtype dtype : {Dtype::kBf16, Dtype::kFp16}) {
    WorkloadKey w = small(dtype, StepType::kDiagonal);
    w.arch = arch;
    const KernelSpec reference = KernelSpec::default_for(dtype, 64, true, 4);
    GpuTimer timer(0);
    const TimingOutcome ref = timer.begin_workload(w, reference, compile_kernel(reference, arch, nullptr));
    ASSERT_EQ(ref.disposition, Disposition::kOk) << ref.detail;
    for (const char* tile : {"bm128_bn128_c2_s2", "bm64_bn64_c1_s3"}) {
      const KernelSpec wgmma = KernelSpec::parse(std::string("ring_fwd_wgmma_") + std::string(dtype_name(dtype)) +
                                                 "_hd64_causal_gqa4_" + tile);
      const TimingOutcome t = timer.measure(wgmma, compile_kernel(wgmma, arch, nullptr), 2, 20, RaceLimit{});
      ASSERT_EQ(t.disposition, Disposition::kOk) << wgmma.uri() << ": " << t.detail;
      ASSERT_EQ(t.samples_ms.size(), 20u);
      for (double ms : t.samples_ms) EXPECT_GT(ms, 0);
    }
    KernelSpec unmasked = wgmma_default_for(dtype, 64, false, 4);
    const TimingOutcome wrong = timer.measure(unmasked, compile_kernel(unmasked, arch, nullptr), 2, 20, RaceLimit{});
    EXPECT_EQ(wrong.disposition, Disposition::kWrongResult) << "an unmasked wgmma kernel passed the diagonal check";
    timer.end_workload();
  }
}

}  // namespace
}  // namespace cpgen::testing
