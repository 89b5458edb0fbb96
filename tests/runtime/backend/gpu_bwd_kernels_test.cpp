// BackwardKernels' argument checks, which come before any compile or load and so run without a
// GPU. Launching the loaded kernels is covered by the GPU ring tests (tests/runtime/api).
#include "runtime/backend/gpu_bwd_kernels.h"

#include <gtest/gtest.h>

#include <string>

#include "cpgen/error.h"

namespace cpgen::gpu {
namespace {

ErrorKind kind_of_failure(const BackwardSpecs& specs, std::string& message) {
  try {
    BackwardKernels kernels(specs, "sm_90", 0);
  } catch (const Error& e) {
    message = e.what();
    return e.kind();
  }
  ADD_FAILURE() << "BackwardKernels accepted the specs";
  return ErrorKind::kInternal;
}

BackwardSpecs good_specs() {
  BackwardSpecs s;
  s.steps = {{StepType::kBwdDiagonal, KernelSpec::backward_default_for(Dtype::kBf16, 128, true, 4)}};
  s.pre = KernelSpec::backward_pre(Dtype::kBf16, 128);
  s.convert = KernelSpec::backward_convert(Dtype::kBf16, 128);
  return s;
}

TEST(BackwardKernels, RefusesAForwardStepTypeOrAKernelOfTheWrongKind) {
  std::string message;
  BackwardSpecs s = good_specs();
  s.steps[0].first = StepType::kDiagonal;
  EXPECT_EQ(kind_of_failure(s, message), ErrorKind::kInternal);
  EXPECT_NE(message.find("diagonal is not a backward step type"), std::string::npos) << message;

  s = good_specs();
  s.steps[0].second = KernelSpec::default_for(Dtype::kBf16, 128, true, 4);
  EXPECT_EQ(kind_of_failure(s, message), ErrorKind::kInternal);
  EXPECT_NE(message.find("given as the backward step kernel"), std::string::npos) << message;

  s = good_specs();
  s.steps.clear();
  EXPECT_EQ(kind_of_failure(s, message), ErrorKind::kInternal);
  EXPECT_NE(message.find("no backward step spec"), std::string::npos) << message;
}

}  // namespace
}  // namespace cpgen::gpu
