#include "generator/kernel_spec.h"

#include <gtest/gtest.h>

#include "cpgen/error.h"

namespace cpgen {
namespace {

std::string bad_input_message(std::string_view uri) {
  try {
    KernelSpec::parse(uri);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadInput);
    return e.what();
  }
  ADD_FAILURE() << "parse accepted " << uri;
  return {};
}

TEST(KernelSpec, UriRoundTripsForEverySupportedSpec) {
  int count = 0;
  for (const KernelSpec& def : KernelSpec::all_defaults()) {
    for (const KernelSpec& s : KernelSpec::candidates_for(def.dtype, def.head_dim, def.causal, def.gqa_group)) {
      EXPECT_EQ(KernelSpec::parse(s.uri()), s) << s.uri();
      EXPECT_EQ(KernelSpec::parse(s.uri()).uri(), s.uri());
      ++count;
    }
    EXPECT_EQ(KernelSpec::parse(def.uri()), def);
  }
  EXPECT_GE(count, 800);
}

TEST(KernelSpec, CanonicalUriMatchesTheDesign) {
  KernelSpec s = KernelSpec::default_for(Dtype::kBf16, 128, true, 4);
  EXPECT_EQ(s.uri(), "ring_fwd_bf16_hd128_causal_gqa4_bm128_bn64_w4_s2");
  s.causal = false;
  s.dtype = Dtype::kFp16;
  EXPECT_EQ(s.uri(), "ring_fwd_fp16_hd128_full_gqa4_bm128_bn64_w4_s2");
}

TEST(KernelSpec, BadHeadDimNamesFieldAndAllowedValues) {
  std::string msg = bad_input_message("ring_fwd_bf16_hd100_causal_gqa4_bm128_bn64_w4_s2");
  EXPECT_NE(msg.find("head_dim 100"), std::string::npos) << msg;
  EXPECT_NE(msg.find("64, 96, 128, 256"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

TEST(KernelSpec, RejectsEveryMalformedField) {
  const char* bad[] = {
      "",
      "ring_fwd",
      "ring_bwd_bf16_hd128_causal_gqa4_bm128_bn64_w4_s2",
      "ring_fwd_fp32_hd128_causal_gqa4_bm128_bn64_w4_s2",
      "ring_fwd_bf16_hd0128_causal_gqa4_bm128_bn64_w4_s2",
      "ring_fwd_bf16_hd128_window_gqa4_bm128_bn64_w4_s2",
      "ring_fwd_bf16_hd128_causal_gqa3_bm128_bn64_w4_s2",
      "ring_fwd_bf16_hd128_causal_gqa4_bm100_bn64_w4_s2",
      "ring_fwd_bf16_hd128_causal_gqa4_bm128_bn48_w4_s2",
      "ring_fwd_bf16_hd128_causal_gqa4_bm128_bn64_w3_s2",
      "ring_fwd_bf16_hd128_causal_gqa4_bm128_bn64_w4_s9",
      "ring_fwd_bf16_hd128_causal_gqa4_bm128_bn64_w4_s2_extra",
      "ring_fwd_bf16_hd128_causal_gqa4_bm128_bn64_w4_s+2",
      "ring_fwd_bf16_hd128_causal_gqa4_bm32_bn64_w4_s2",  // 32 rows for 4 warps of 16
      "RING_fwd_bf16_hd128_causal_gqa4_bm128_bn64_w4_s2",
  };
  for (const char* uri : bad) {
    std::string msg = bad_input_message(uri);
    EXPECT_FALSE(msg.empty()) << uri;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

TEST(KernelSpec, FeasibilityRejectsOversizedTiles) {
  KernelSpec s = KernelSpec::default_for(Dtype::kBf16, 256, false, 1);
  s.block_m = 256;
  s.warps = 4;
  Feasibility f = check_feasibility(s, "sm_90");
  EXPECT_FALSE(f.feasible);
  EXPECT_FALSE(f.reason.empty());
  s.block_m = 64;
  s.block_n = 256;
  s.stages = 4;
  f = check_feasibility(s, "sm_80");
  EXPECT_FALSE(f.feasible);
  EXPECT_NE(f.reason.find("shared memory"), std::string::npos) << f.reason;
}

TEST(KernelSpec, EveryDefaultIsFeasibleOnEveryArch) {
  for (const KernelSpec& s : KernelSpec::all_defaults())
    for (auto arch : kSupportedArchs) {
      Feasibility f = check_feasibility(s, arch);
      EXPECT_TRUE(f.feasible) << s.uri() << " on " << arch << ": " << f.reason;
    }
}

TEST(KernelSpec, UnknownArchIsBadInput) {
  EXPECT_THROW(validate_arch("sm_70"), Error);
  EXPECT_NO_THROW(validate_arch("sm_90a"));
}

}  // namespace
}  // namespace cpgen
