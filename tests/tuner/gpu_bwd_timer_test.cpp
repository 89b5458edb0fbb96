// The backward timing harness on a real device, through GpuTimer as the tuner uses it: the
// backward default passes its float64 check of dq, dk and dv, another backward config agrees
// with it and is timed, a backward kernel that ignores the causal mask is caught on the
// diagonal step before any timing counts, and a forward workload after a backward one is timed
// by the forward harness again.
#include <gtest/gtest.h>

#include "../cache/cache_fixtures.h"
#include "runtime/cuda/module.h"
#include "runtime/jit/jit.h"
#include "test_util.h"
#include "tuner/gpu_timer.h"

namespace cpgen::testing {
namespace {

WorkloadKey small_backward(Dtype dtype, StepType step) {
  WorkloadKey w = test_workload(512, step);
  w.dtype = dtype;
  w.head_dim = 64;
  w.q_heads = 8;
  w.kv_heads = 2;
  w.batch = 2;
  if (step == StepType::kBwdZigzagQHalf) {
    w.q_len = 256;
    w.kv_len = 512;
  }
  return w;
}

TEST(GpuBackwardTimer, VerifiesThenTimesAndCatchesAWrongKernel) {
  CPGEN_REQUIRE_GPU();
  const std::string arch = device_arch(0);
  GpuTimer timer(0);
  for (Dtype dtype : {Dtype::kBf16, Dtype::kFp16}) {
    for (StepType step : {StepType::kBwdDiagonal, StepType::kBwdZigzagQHalf}) {
      WorkloadKey w = small_backward(dtype, step);
      w.arch = arch;
      const KernelSpec reference = KernelSpec::backward_default_for_arch(dtype, 64, true, 4, arch);
      KernelSpec other = reference;
      other.block_m = 32;
      other.block_n = 64;
      other.warps = 4;
      other.stages = 1;
      ASSERT_NE(other, reference);
      KernelSpec unmasked = reference;
      unmasked.causal = false;  // ignores the causal mask: wrong for the diagonal step
      TimingOutcome ref = timer.begin_workload(w, reference, compile_kernel(reference, arch, nullptr));
      ASSERT_EQ(ref.disposition, Disposition::kOk) << ref.detail;
      EXPECT_GT(timer.useful_flops(), 0);
      TimingOutcome t = timer.measure(other, compile_kernel(other, arch, nullptr), 2, 20, RaceLimit{});
      ASSERT_EQ(t.disposition, Disposition::kOk) << t.detail;
      ASSERT_EQ(t.samples_ms.size(), 20u);
      for (double ms : t.samples_ms) EXPECT_GT(ms, 0);
      EXPECT_GT(t.check_ms, 0) << "the checked launch is timed";
      const TimingOutcome cut = timer.measure(other, compile_kernel(other, arch, nullptr), 2, 20, RaceLimit{5, 1e9, 1e-9});
      EXPECT_TRUE(cut.stopped_after_check);
      ASSERT_EQ(cut.samples_ms.size(), 1u);
      EXPECT_EQ(cut.samples_ms[0], cut.check_ms);
      TimingOutcome wrong = timer.measure(unmasked, compile_kernel(unmasked, arch, nullptr), 2, 20, RaceLimit{});
      if (step == StepType::kBwdDiagonal) {
        EXPECT_EQ(wrong.disposition, Disposition::kWrongResult) << "an unmasked backward kernel passed the diagonal check";
        EXPECT_TRUE(wrong.samples_ms.empty());
        EXPECT_NE(wrong.detail.find(unmasked.uri()), std::string::npos) << wrong.detail;
      } else {
        // Every key is in the past in the q-half step: masked and unmasked kernels agree.
        EXPECT_EQ(wrong.disposition, Disposition::kOk) << wrong.detail;
      }
      timer.end_workload();
    }
  }
  // Back to a forward workload on the same timer.
  WorkloadKey forward = test_workload(512, StepType::kDiagonal);
  forward.head_dim = 64;
  forward.q_heads = 8;
  forward.kv_heads = 2;
  forward.arch = arch;
  const KernelSpec fwd = KernelSpec::default_for(Dtype::kBf16, 64, true, 4);
  TimingOutcome ref = timer.begin_workload(forward, fwd, compile_kernel(fwd, arch, nullptr));
  ASSERT_EQ(ref.disposition, Disposition::kOk) << ref.detail;
  TimingOutcome t = timer.measure(fwd, compile_kernel(fwd, arch, nullptr), 2, 20, RaceLimit{});
  EXPECT_EQ(t.disposition, Disposition::kOk) << t.detail;
  timer.end_workload();
}

}  // namespace
}  // namespace cpgen::testing
