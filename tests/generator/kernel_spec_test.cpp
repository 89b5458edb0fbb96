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

TEST(KernelSpec, MaskFeatureTokensRoundTripInTheirPlace) {
  for (KernelSpec s : {KernelSpec::default_for(Dtype::kBf16, 128, true, 4),
                       KernelSpec::backward_default_for(Dtype::kFp16, 64, false, 1)}) {
    const bool bwd = s.is_backward();
    const std::string stem = bwd ? "ring_bwd_fp16_hd64_full" : "ring_fwd_bf16_hd128_causal";
    s.key_intervals = true;
    EXPECT_EQ(s.uri().rfind(stem + "_ivl_gqa", 0), 0u) << s.uri();
    EXPECT_EQ(KernelSpec::parse(s.uri()), s);
    s.softcap = true;
    EXPECT_EQ(s.uri().rfind(stem + "_ivl_cap_gqa", 0), 0u) << s.uri();
    EXPECT_EQ(KernelSpec::parse(s.uri()), s);
    s.key_intervals = false;
    EXPECT_EQ(s.uri().rfind(stem + "_cap_gqa", 0), 0u) << s.uri();
    EXPECT_EQ(KernelSpec::parse(s.uri()), s);
  }
  // Out of order, repeated, or on a kernel that has no mask: refused.
  for (const char* uri : {"ring_fwd_bf16_hd128_causal_cap_ivl_gqa4_bm128_bn64_w4_s2",
                          "ring_fwd_bf16_hd128_causal_ivl_ivl_gqa4_bm128_bn64_w4_s2",
                          "ring_fwd_bf16_hd128_ivl_causal_gqa4_bm128_bn64_w4_s2"}) {
    EXPECT_FALSE(bad_input_message(uri).empty()) << uri;
  }
  KernelSpec pre = KernelSpec::backward_pre(Dtype::kBf16, 128);
  pre.softcap = true;
  EXPECT_THROW(pre.validate(), Error);
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
      "ring_bwx_bf16_hd128_causal_gqa4_bm128_bn64_w4_s2",
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

// The documented defaults fit the 163 KB+ targets as they are; every target gets a feasible
// default through default_for_arch, which changes them only where they do not fit.
TEST(KernelSpec, EveryDefaultIsFeasibleOnEveryArch) {
  for (const KernelSpec& d : KernelSpec::all_defaults())
    for (auto arch : kSupportedArchs) {
      const KernelSpec s = KernelSpec::default_for_arch(d.dtype, d.head_dim, d.causal, d.gqa_group, arch);
      Feasibility f = check_feasibility(s, arch);
      EXPECT_TRUE(f.feasible) << s.uri() << " on " << arch << ": " << f.reason;
      if (check_feasibility(d, arch).feasible) EXPECT_EQ(s, d) << "a default that fits is kept on " << arch;
    }
  for (const KernelSpec& d : KernelSpec::all_defaults())
    for (auto arch : {"sm_80", "sm_90", "sm_90a", "sm_100"}) EXPECT_TRUE(check_feasibility(d, arch).feasible) << d.uri();
}

TEST(KernelSpec, BackwardUrisRoundTripAndKeepTheirKind) {
  int count = 0;
  for (const KernelSpec& def : KernelSpec::all_defaults()) {
    for (const KernelSpec& s :
         KernelSpec::backward_candidates_for(def.dtype, def.head_dim, def.causal, def.gqa_group)) {
      const KernelSpec back = KernelSpec::parse(s.uri());
      EXPECT_EQ(back, s) << s.uri();
      EXPECT_EQ(back.kind, KernelKind::kBackwardStep) << s.uri();
      EXPECT_EQ(back.uri(), s.uri());
      ++count;
    }
  }
  EXPECT_GE(count, 700);
  for (const KernelSpec& s : KernelSpec::backward_defaults()) {
    EXPECT_EQ(KernelSpec::parse(s.uri()), s) << s.uri();
    EXPECT_TRUE(s.is_backward()) << s.uri();
  }
  EXPECT_EQ(KernelSpec::backward_defaults().size(), 2u * 4u * 2u * 5u + 2u * 4u * 2u);
}

TEST(KernelSpec, BackwardCanonicalUrisMatchTheDesign) {
  KernelSpec s = KernelSpec::backward_default_for(Dtype::kBf16, 128, true, 4);
  EXPECT_EQ(s.uri(), "ring_bwd_bf16_hd128_causal_gqa4_bm64_bn64_w8_s2");
  EXPECT_EQ(KernelSpec::backward_default_for(Dtype::kFp16, 256, false, 1).uri(),
            "ring_bwd_fp16_hd256_full_gqa1_bm64_bn32_w8_s1");
  EXPECT_EQ(KernelSpec::backward_default_for(Dtype::kBf16, 64, true, 1).uri(),
            "ring_bwd_bf16_hd64_causal_gqa1_bm64_bn64_w4_s2");
  const KernelSpec pre = KernelSpec::backward_pre(Dtype::kFp16, 96);
  EXPECT_EQ(pre.uri(), "ring_bwd_pre_fp16_hd96_w4");
  EXPECT_EQ(KernelSpec::parse("ring_bwd_pre_fp16_hd96_w4").kind, KernelKind::kBackwardPre);
  const KernelSpec cvt = KernelSpec::backward_convert(Dtype::kBf16, 256, 8);
  EXPECT_EQ(cvt.uri(), "ring_bwd_cvt_bf16_hd256_w8");
  EXPECT_EQ(KernelSpec::parse("ring_bwd_cvt_bf16_hd256_w8"), cvt);
  EXPECT_EQ(cvt.kind, KernelKind::kBackwardConvert);
  EXPECT_TRUE(cvt.is_backward());
  // Same fields as the pre kernel, a different kernel.
  EXPECT_NE(cvt, KernelSpec::backward_pre(Dtype::kBf16, 256, 8));
  // The same tile parameters under the forward and backward names are different kernels.
  const KernelSpec bwd64 = KernelSpec::backward_default_for(Dtype::kBf16, 64, true, 1);
  KernelSpec fwd = bwd64;
  fwd.kind = KernelKind::kForwardStep;
  EXPECT_NE(fwd, bwd64);
  EXPECT_NE(fwd.uri(), bwd64.uri());
  EXPECT_EQ(KernelSpec::parse(bwd64.uri()).kind, KernelKind::kBackwardStep);
  EXPECT_EQ(KernelSpec::parse(fwd.uri()).kind, KernelKind::kForwardStep);
}

TEST(KernelSpec, RejectsMalformedBackwardUris) {
  const char* bad[] = {
      "ring_bwd_pre",
      "ring_bwd_pre_bf16_hd128",
      "ring_bwd_pre_bf16_hd128_w3",
      "ring_bwd_pre_fp32_hd128_w4",
      "ring_bwd_pre_bf16_hd100_w4",
      "ring_bwd_pre_bf16_hd128_w4_s2",
      "ring_bwd_pre_bf16_hd128_causal_gqa4_bm64_bn64_w8",
      "ring_bwd_cvt_bf16_hd128",
      "ring_bwd_cvt_fp32_hd128_w4",
      "ring_bwd_cvt_bf16_hd100_w4",
      "ring_bwd_cvt_bf16_hd128_w4_s2",
      "ring_bwd_convert_bf16_hd128_w4",
      "ring_bwd_bf16_hd128_causal_gqa4_bm64_bn64_w8_s3",    // one or two Q/dO stages
      "ring_bwd_bf16_hd128_causal_gqa4_bm256_bn64_w8_s2",
      "ring_bwd_bf16_hd128_causal_gqa4_bm64_bn256_w8_s2",
      "ring_bwd_bf16_hd128_causal_gqa4_bm64_bn64_w8",
      "ring_bwd_bf16_hd128_sliding_gqa4_bm64_bn64_w8_s2",
  };
  for (const char* uri : bad) {
    std::string msg = bad_input_message(uri);
    EXPECT_FALSE(msg.empty()) << uri;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

TEST(KernelSpec, BackwardPreRejectsFieldsItDoesNotTake) {
  KernelSpec s = KernelSpec::backward_pre(Dtype::kBf16, 128);
  s.causal = true;
  EXPECT_THROW(s.validate(), Error);
  s = KernelSpec::backward_pre(Dtype::kBf16, 128);
  s.stages = 2;
  EXPECT_THROW(s.validate(), Error);
}

TEST(KernelSpec, EveryBackwardDefaultIsFeasibleOnEveryArch) {
  for (const KernelSpec& d : KernelSpec::backward_defaults())
    for (auto arch : kSupportedArchs) {
      const KernelSpec s = d.kind == KernelKind::kBackwardStep
                               ? KernelSpec::backward_default_for_arch(d.dtype, d.head_dim, d.causal, d.gqa_group, arch)
                               : d;
      Feasibility f = check_feasibility(s, arch);
      EXPECT_TRUE(f.feasible) << s.uri() << " on " << arch << ": " << f.reason;
      if (check_feasibility(d, arch).feasible) EXPECT_EQ(s, d) << "a default that fits is kept on " << arch;
    }
  for (const KernelSpec& d : KernelSpec::backward_defaults())
    for (auto arch : {"sm_80", "sm_90", "sm_90a", "sm_100"}) EXPECT_TRUE(check_feasibility(d, arch).feasible) << d.uri();
}

TEST(KernelSpec, BackwardFeasibilityNamesWhatDoesNotFit) {
  KernelSpec s = KernelSpec::backward_default_for(Dtype::kBf16, 256, true, 1);
  s.stages = 2;  // a second Q/dO stage at head dim 256 passes sm_80's 163 KB
  Feasibility f = check_feasibility(s, "sm_80");
  EXPECT_FALSE(f.feasible);
  EXPECT_NE(f.reason.find("shared memory"), std::string::npos) << f.reason;
  EXPECT_TRUE(check_feasibility(s, "sm_90").feasible) << check_feasibility(s, "sm_90").reason;
  s = KernelSpec::backward_default_for(Dtype::kBf16, 128, true, 1);
  s.warps = 4;  // 4 warps over 64 keys: each holds dK and dV over all 128 columns
  f = check_feasibility(s, "sm_90");
  EXPECT_FALSE(f.feasible);
  EXPECT_NE(f.reason.find("accumulator registers"), std::string::npos) << f.reason;
  s = KernelSpec::backward_default_for(Dtype::kBf16, 96, true, 1);
  s.block_n = 32;  // 8 warps over 2 key slices: head dim 96 in 4 slices of 24 columns
  f = check_feasibility(s, "sm_90");
  EXPECT_FALSE(f.feasible);
  EXPECT_NE(f.reason.find("head_dim 96"), std::string::npos) << f.reason;
}

TEST(KernelSpec, UnknownArchIsBadInput) {
  EXPECT_THROW(validate_arch("sm_70"), Error);
  EXPECT_NO_THROW(validate_arch("sm_90a"));
}

}  // namespace
}  // namespace cpgen
