// The tuner's candidate check on the GPU (templates/compare.cuh, tuner/gpu_compare.h): its
// predicates on the CPU against the host's decoding, its kernel through NVRTC, and on a GPU the
// first disagreement it reports.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "cpgen/compare.cuh"
#include "cpgen/error.h"
#include "runtime/cuda/device_buffer.h"
#include "runtime/cuda/gpu_stream.h"
#include "runtime/jit/jit.h"
#include "test_util.h"
#include "tuner/gpu_compare.h"
#include "tuner/step_inputs.h"
#include "tuner/step_inputs_bwd.h"

namespace cpgen::testing {
namespace {

using device::lses_agree;
using device::outputs_agree;
using device::value_of_16;

TEST(GpuCompare, EverySixteenBitPatternDecodesAsTheHostDecodesIt) {
  for (Dtype dtype : {Dtype::kBf16, Dtype::kFp16}) {
    for (unsigned bits = 0; bits < 65536; ++bits) {
      const double want = decode_16(static_cast<uint16_t>(bits), dtype);
      const float got = value_of_16(static_cast<unsigned short>(bits), dtype == Dtype::kBf16);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got)) << bits;
      } else {
        ASSERT_EQ(static_cast<double>(got), want) << dtype_name(dtype) << " bits " << bits;
      }
    }
  }
}

TEST(GpuCompare, AgreementIsWithinTheToleranceAndNeverWithANan) {
  const auto bits = [](double v, Dtype dtype) { return encode_exact(v, dtype); };
  for (Dtype dtype : {Dtype::kBf16, Dtype::kFp16}) {
    const bool bf16 = dtype == Dtype::kBf16;
    EXPECT_TRUE(outputs_agree(bits(0.5, dtype), bits(0.5, dtype), 0.0f, bf16));
    EXPECT_TRUE(outputs_agree(bits(0.5, dtype), bits(0.25, dtype), 0.25f, bf16));
    EXPECT_FALSE(outputs_agree(bits(0.5, dtype), bits(0.25, dtype), 0.24f, bf16));
    EXPECT_FALSE(outputs_agree(bits(-0.5, dtype), bits(0.25, dtype), 0.5f, bf16));
    EXPECT_FALSE(outputs_agree(0xFFFF, bits(0.25, dtype), 1e30f, bf16)) << "the poison is a NaN";
    EXPECT_FALSE(outputs_agree(bits(0.25, dtype), 0xFFFF, 1e30f, bf16));
  }
  EXPECT_TRUE(lses_agree(10.0f, 10.0005f, 1e-3f, 0.0f));
  EXPECT_FALSE(lses_agree(10.0f, 10.01f, 1e-3f, 0.0f));
  EXPECT_TRUE(lses_agree(-100.0f, -100.05f, 0.0f, 1e-3f)) << "relative to |want|";
  EXPECT_FALSE(lses_agree(-100.0f, -100.2f, 0.0f, 1e-3f));
  EXPECT_FALSE(lses_agree(std::numeric_limits<float>::quiet_NaN(), 1.0f, 1e30f, 0.0f));
  EXPECT_FALSE(lses_agree(1.0f, std::numeric_limits<float>::quiet_NaN(), 1e30f, 0.0f));
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(lses_agree(nan, nan, 1e30f, 1e30f)) << "an unwritten row against an unwritten row";
  // A row that sees no key: -inf in the reference config and the candidate alike.
  EXPECT_TRUE(lses_agree(-inf, -inf, 1e-3f, 1e-5f));
  EXPECT_FALSE(lses_agree(-inf, 0.0f, 1e-3f, 1e-5f));
  EXPECT_FALSE(lses_agree(0.0f, -inf, 1e-3f, 1e-5f));
  EXPECT_FALSE(lses_agree(inf, -inf, 1e30f, 1e30f));
}

TEST(GpuCompare, TheKernelsCompileWithoutSpillsForEveryGpuTheTunerTimes) {
  for (const char* kernel : {kCompareKernel, kCompareGradientsKernel}) {
    for (const char* arch : {"sm_80", "sm_90a"}) {
      const CompiledKernel k = compile_source(kernel, compare_source(kernel), arch, nullptr);
      EXPECT_EQ(k.stats.spill_bytes, 0) << kernel << " " << arch;
      EXPECT_FALSE(k.cubin.empty()) << kernel << " " << arch;
    }
  }
  EXPECT_THROW(compare_source("cpgen_compare_something"), Error);
}

TEST(GpuCompare, GradientAgreementIsTheHostsToleranceAndNeverWithANan) {
  using device::gradients_agree;
  for (Dtype dtype : {Dtype::kBf16, Dtype::kFp16}) {
    const float rel = static_cast<float>(gradient_agreement_relative(dtype));
    for (const double want : {-3.0, -0.25, 0.0, 0.5, 8.0}) {
      for (const double rms : {0.0, 0.125, 1.0, 4.0}) {
        const double tol = gradient_agreement_tolerance(dtype, want, rms);
        const float w = static_cast<float>(want), r = static_cast<float>(rms);
        EXPECT_TRUE(gradients_agree(static_cast<float>(want + 0.9 * tol), w, r, rel)) << want << " rms " << rms;
        EXPECT_TRUE(gradients_agree(static_cast<float>(want - 0.9 * tol), w, r, rel)) << want << " rms " << rms;
        if (tol > 0) {
          EXPECT_FALSE(gradients_agree(static_cast<float>(want + 1.1 * tol), w, r, rel)) << want << " rms " << rms;
          EXPECT_FALSE(gradients_agree(static_cast<float>(want - 1.1 * tol), w, r, rel)) << want << " rms " << rms;
        }
      }
    }
    EXPECT_FALSE(gradients_agree(std::numeric_limits<float>::quiet_NaN(), 1.0f, 1.0f, rel));
    EXPECT_FALSE(gradients_agree(1.0f, std::numeric_limits<float>::quiet_NaN(), 1.0f, rel));
    EXPECT_FALSE(gradients_agree(1.0f, 1.0f, std::numeric_limits<float>::quiet_NaN(), rel));
  }
}

// On a GPU: the first disagreement of each tensor, a NaN among them, and none where all agree.
TEST(GpuCompare, OnAGpuItFindsTheFirstDisagreementOfEach) {
  CPGEN_REQUIRE_GPU();
  const int64_t n = 1 << 20, n_lse = 4096;
  std::vector<uint16_t> want(n), got;
  for (int64_t i = 0; i < n; ++i) want[i] = encode_exact(static_cast<double>(i % 64) / 64.0, Dtype::kBf16);
  std::vector<float> want_lse(n_lse, 7.5f), got_lse;
  GpuCompare compare(0);
  gpu::Stream stream;
  const auto run = [&] {
    return compare.run(DeviceBuffer::from_host(0, got), DeviceBuffer::from_host(0, want), n, 1e-3, Dtype::kBf16,
                       DeviceBuffer::from_host(0, got_lse), DeviceBuffer::from_host(0, want_lse), n_lse, 1e-3, 1e-5,
                       stream.get());
  };
  got = want;
  got_lse = want_lse;
  Disagreement d = run();
  EXPECT_EQ(d.out, -1);
  EXPECT_EQ(d.lse, -1);
  got[900001] = encode_exact(0.5, Dtype::kBf16) == got[900001] ? encode_exact(0.25, Dtype::kBf16) : encode_exact(0.5, Dtype::kBf16);
  got[777777] = 0xFFFF;  // a poisoned element, never written
  got_lse[4000] = 7.6f;
  got_lse[3] = 7.51f;
  d = run();
  EXPECT_EQ(d.out, 777777);
  EXPECT_EQ(d.lse, 3);
}

// On a GPU: the gradient check's first disagreement, a NaN before it, and none where all agree.
TEST(GpuCompare, OnAGpuTheGradientCheckFindsTheFirstDisagreement) {
  CPGEN_REQUIRE_GPU();
  const int hd = 128;
  const int64_t rows = 20000;
  std::vector<float> want(rows * hd);
  for (size_t i = 0; i < want.size(); ++i) want[i] = static_cast<float>(static_cast<int>(i % 97) - 48) / 16.0f;
  std::vector<float> got = want;
  GpuCompare compare(0);
  gpu::Stream stream;
  const double rel = gradient_agreement_relative(Dtype::kBf16);
  const auto run = [&] {
    return compare.run_gradient(DeviceBuffer::from_host(0, got), DeviceBuffer::from_host(0, want), rows, hd, rel,
                                stream.get());
  };
  EXPECT_EQ(run(), -1);
  got[19000 * hd + 3] += 1.0f;
  got[12345 * hd + 127] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(run(), 12345 * hd + 127);
}

}  // namespace
}  // namespace cpgen::testing
