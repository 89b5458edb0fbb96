#include "generator/kernel_spec_wgmma.h"

#include <gtest/gtest.h>

#include "cpgen/error.h"
#include "cpgen/traits_wgmma.cuh"

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

TEST(KernelSpecWgmma, CanonicalUriNamesTheFamilyAndConsumers) {
  const KernelSpec s = wgmma_default_for(Dtype::kBf16, 128, true, 1);
  EXPECT_EQ(s.uri(), "ring_fwd_wgmma_bf16_hd128_causal_gqa1_bm128_bn128_c2_s2");
  EXPECT_EQ(s.kind, KernelKind::kForwardWgmma);
  EXPECT_EQ(s.threads(), 384);  // one producer and two consumer warpgroups
  EXPECT_FALSE(s.is_backward());
  const KernelSpec one = KernelSpec::parse("ring_fwd_wgmma_fp16_hd64_full_gqa4_bm64_bn64_c1_s3");
  EXPECT_EQ(one.dtype, Dtype::kFp16);
  EXPECT_EQ(one.head_dim, 64);
  EXPECT_FALSE(one.causal);
  EXPECT_EQ(one.gqa_group, 4);
  EXPECT_EQ(one.block_m, 64);
  EXPECT_EQ(one.block_n, 64);
  EXPECT_EQ(wgmma_consumers(one), 1);
  EXPECT_EQ(one.threads(), 256);
  EXPECT_EQ(one.stages, 3);
}

TEST(KernelSpecWgmma, ParseIsTheInverseOfUri) {
  int count = 0;
  for (const KernelSpec& def : wgmma_defaults())
    for (int consumers : kSupportedWgmmaConsumers)
      for (int bn : kSupportedWgmmaBlockN)
        for (int stages : kSupportedWgmmaStages)
          for (int mask = 0; mask < 4; ++mask)
            for (int schedule = 0; schedule < 4; ++schedule) {
              const bool pingpong = schedule & 1, persistent = schedule & 2;
              if (pingpong && consumers != 2) continue;
              KernelSpec s = def;
              s.warps = 4 * (1 + consumers);
              s.block_m = 64 * consumers;
              s.block_n = bn;
              s.stages = stages;
              s.key_intervals = mask & 1;
              s.softcap = mask & 2;
              s.pingpong = pingpong;
              s.persistent = persistent;
              s.validate();
              EXPECT_EQ(KernelSpec::parse(s.uri()), s) << s.uri();
              EXPECT_EQ(KernelSpec::parse(s.uri()).uri(), s.uri());
              EXPECT_EQ(s.uri().ends_with(persistent ? "_persistent" : "_pingpong"), persistent || pingpong) << s.uri();
              EXPECT_EQ(s.uri().find("_pingpong") != std::string::npos, pingpong) << s.uri();
              ++count;
            }
  // dtypes x head dims x causal x groups, then (consumers 1 + consumers 2 with and without
  // ping-pong + consumers 3) x persistent or not x block_n x stages x masks.
  EXPECT_EQ(count, 2 * 4 * 2 * 5 * (1 + 2 + 1) * 2 * 4 * 3 * 4);
  // The mma.sync family's URIs still parse as that family.
  EXPECT_EQ(KernelSpec::parse("ring_fwd_bf16_hd128_causal_gqa4_bm128_bn64_w4_s2").kind, KernelKind::kForwardStep);
}

TEST(KernelSpecWgmma, BadUrisGetOneLineSayingWhatIsAllowed) {
  for (const auto& [uri, want] : std::vector<std::pair<std::string, std::string>>{
           {"ring_fwd_wgmma_bf16_hd80_causal_gqa1_bm128_bn128_c2_s2",
            "head_dim 80 is not supported by the wgmma family"},
           {"ring_fwd_wgmma_bf16_hd128_causal_gqa1_bm64_bn128_c2_s2", "block_m 64 in"},
           {"ring_fwd_wgmma_bf16_hd128_causal_gqa1_bm256_bn128_c4_s2", "consumers 4 is not supported"},
           {"ring_fwd_wgmma_bf16_hd128_causal_gqa1_bm128_bn128_c3_s2", "block_m 128 in"},
           // three consumers have no partner to alternate with either
           {"ring_fwd_wgmma_bf16_hd64_causal_gqa1_bm192_bn128_c3_s2_pingpong", "needs 2 consumer warpgroups"},
           {"ring_fwd_wgmma_bf16_hd128_causal_gqa32_bm128_bn128_c2_s2", "allowed: 1, 2, 4, 8, 16"},
           {"ring_fwd_wgmma_bf16_hd128_causal_gqa1_bm128_bn32_c2_s2", "allowed: 64, 80, 128, 176"},
           {"ring_fwd_wgmma_bf16_hd128_causal_gqa1_bm128_bn192_c2_s2", "block_n 192 is not supported"},
           {"ring_fwd_wgmma_bf16_hd128_causal_gqa1_bm128_bn128_w12_s2", "must read 'c<number>'"},
           // the mask tokens in the mma.sync family's order only, each once
           {"ring_fwd_wgmma_bf16_hd128_causal_cap_ivl_gqa1_bm128_bn128_c2_s2", "malformed"},
           {"ring_fwd_wgmma_bf16_hd128_causal_ivl_ivl_gqa1_bm128_bn128_c2_s2", "malformed"},
           {"ring_fwd_wgmma_bf16_hd128_ivl_causal_gqa1_bm128_bn128_c2_s2", "malformed"},
           {"ring_fwd_wgmma_fp32_hd128_causal_gqa1_bm128_bn128_c2_s2", "allowed: bf16, fp16"},
           {"ring_fwd_wgmma_bf16_hd128_window_gqa1_bm128_bn128_c2_s2", "allowed: causal, full"},
           // the S of a tile is issued before the P V of the one before retires: two stages at least
           {"ring_fwd_wgmma_bf16_hd128_causal_gqa1_bm128_bn128_c2_s1", "stages 1 is not supported by the wgmma family"},
           // ping-pong alternates two consumer warpgroups, and is the URI's last token, once
           {"ring_fwd_wgmma_bf16_hd128_causal_gqa1_bm64_bn128_c1_s2_pingpong", "needs 2 consumer warpgroups"},
           {"ring_fwd_wgmma_bf16_hd128_causal_gqa1_bm128_bn128_c2_s2_pingpong_pingpong", "malformed"},
           {"ring_fwd_wgmma_bf16_hd128_causal_gqa1_bm128_bn128_c2_pingpong_s2", "malformed"},
           {"ring_fwd_wgmma_bf16_hd128_causal_gqa1_bm128_bn128_c2_s2_pp", "malformed"},
           // _persistent is last, once, after _pingpong
           {"ring_fwd_wgmma_bf16_hd128_causal_gqa1_bm128_bn128_c2_s2_persistent_pingpong", "malformed"},
           {"ring_fwd_wgmma_bf16_hd128_causal_gqa1_bm128_bn128_c2_s2_persistent_persistent", "malformed"},
           {"ring_fwd_wgmma_bf16_hd128_causal_gqa1_bm128_bn128_c2_persistent_s2", "malformed"},
           // a URI of no family lists every family's form, this one's too
           {"nonsense", "ring_fwd_wgmma_<bf16|fp16>_hd<N>"}}) {
    const std::string message = bad_input_message(uri);
    EXPECT_NE(message.find(want), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

// The ping-pong schedule and the persistent launch belong to the wgmma family: a spec of another
// kind that sets either is refused with one line naming the flag.
TEST(KernelSpecWgmma, OtherKindsRefuseTheWgmmaSchedules) {
  for (int flag = 0; flag < 2; ++flag) {
    KernelSpec s = KernelSpec::default_for(Dtype::kBf16, 128, true, 1);
    (flag == 0 ? s.pingpong : s.persistent) = true;
    try {
      s.validate();
      ADD_FAILURE() << "validate accepted " << (flag == 0 ? "pingpong" : "persistent") << " on " << s.uri();
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kBadInput);
      EXPECT_NE(std::string(e.what()).find(flag == 0 ? "pingpong" : "persistent"), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
  }
}

// Both families spell and read the mask features the same way: the tokens between causal/full
// and gqa are equal, and each parser sets the same flags from them.
TEST(KernelSpecWgmma, MaskTokensMeanTheSameInBothFamilies) {
  for (bool causal : {false, true})
    for (int mask = 0; mask < 4; ++mask) {
      KernelSpec mma = KernelSpec::default_for(Dtype::kBf16, 128, causal, 1);
      KernelSpec wgmma = wgmma_default_for(Dtype::kBf16, 128, causal, 1);
      for (KernelSpec* s : {&mma, &wgmma}) {
        s->key_intervals = mask & 1;
        s->softcap = mask & 2;
      }
      auto mask_tokens = [](const std::string& uri) {
        const size_t hd = uri.find("_hd128_"), gqa = uri.find("_gqa");
        return uri.substr(hd + 7, gqa - hd - 7);
      };
      EXPECT_EQ(mask_tokens(mma.uri()), mask_tokens(wgmma.uri())) << mma.uri() << " vs " << wgmma.uri();
      for (const KernelSpec& s : {KernelSpec::parse(mma.uri()), KernelSpec::parse(wgmma.uri())}) {
        EXPECT_EQ(s.causal, causal) << s.uri();
        EXPECT_EQ(s.key_intervals, bool(mask & 1)) << s.uri();
        EXPECT_EQ(s.softcap, bool(mask & 2)) << s.uri();
      }
    }
  EXPECT_EQ(KernelSpec::parse("ring_fwd_wgmma_fp16_hd64_full_ivl_cap_gqa4_bm64_bn64_c1_s3").uri(),
            "ring_fwd_wgmma_fp16_hd64_full_ivl_cap_gqa4_bm64_bn64_c1_s3");
}

TEST(KernelSpecWgmma, OnlySm90aIsFeasible) {
  const KernelSpec s = wgmma_default_for(Dtype::kBf16, 128, true, 1);
  EXPECT_TRUE(check_feasibility(s, "sm_90a").feasible);
  for (const char* arch : {"sm_80", "sm_90", "sm_100"}) {
    const Feasibility f = check_feasibility(s, arch);
    EXPECT_FALSE(f.feasible) << arch;
    EXPECT_NE(f.reason.find("sm_90a only"), std::string::npos) << f.reason;
  }
}

// The model's shared bytes are the traits' (what the kernel asks for), and a ring too deep for
// 227 KB is refused before compiling: head dim 128, 128-key tiles, four stages = 1024 + 32 KB of
// Q + 4 x 64 KB of K/V + 256 of barriers.
Feasibility on_sm90a(const char* uri) { return check_feasibility(KernelSpec::parse(uri), "sm_90a"); }

template <typename Traits>
void expect_same_shared_bytes(const char* uri) {
  EXPECT_EQ(on_sm90a(uri).shared_bytes, Traits::kSharedBytes) << uri;
}

// Refused before compiling, with `why` in the reason; returns the verdict for further checks.
Feasibility expect_refused(const char* uri, const char* why) {
  const Feasibility f = on_sm90a(uri);
  EXPECT_FALSE(f.feasible) << uri;
  EXPECT_NE(f.reason.find(why), std::string::npos) << f.reason;
  return f;
}

TEST(KernelSpecWgmma, FeasibilityAsksForTheTraitsSharedBytes) {
  using device::Bf16;
  using device::Fp16;
  expect_same_shared_bytes<device::WgmmaFwdTraits<Bf16, 128, 128, 128, 2, 2, true, 1>>(
      "ring_fwd_wgmma_bf16_hd128_causal_gqa1_bm128_bn128_c2_s2");
  expect_same_shared_bytes<device::WgmmaFwdTraits<Fp16, 64, 64, 64, 1, 3, false, 4>>(
      "ring_fwd_wgmma_fp16_hd64_full_gqa4_bm64_bn64_c1_s3");
  // Slack, Q, four stages of K and V, and 17 barriers (Q full; K and V full and empty per stage)
  // in 136 bytes rounded up to 256.
  EXPECT_EQ(expect_refused("ring_fwd_wgmma_bf16_hd128_causal_gqa1_bm128_bn128_c2_s4", "shared memory").shared_bytes,
            1024 + 32768 + 4 * 65536 + 256);
  EXPECT_TRUE(on_sm90a("ring_fwd_wgmma_bf16_hd128_causal_gqa1_bm128_bn128_c2_s3").feasible);
  // Head dim 96: three 64-byte column blocks, the same bytes as any other head dim.
  expect_same_shared_bytes<device::WgmmaFwdTraits<Fp16, 96, 128, 128, 2, 2, false, 2>>(
      "ring_fwd_wgmma_fp16_hd96_full_gqa2_bm128_bn128_c2_s2");
  // Head dim 256: 64-key tiles (32 + 128 accumulators) fit, 128-key tiles (64 + 128) do not.
  expect_same_shared_bytes<device::WgmmaFwdTraits<Bf16, 256, 128, 64, 2, 2, true, 1>>(
      "ring_fwd_wgmma_bf16_hd256_causal_gqa1_bm128_bn64_c2_s2");
  EXPECT_EQ(wgmma_default_for(Dtype::kBf16, 256, true, 1).uri(), "ring_fwd_wgmma_bf16_hd256_causal_gqa1_bm128_bn64_c2_s2");
  EXPECT_TRUE(check_feasibility(wgmma_default_for(Dtype::kFp16, 256, false, 8), "sm_90a").feasible);
  expect_refused("ring_fwd_wgmma_bf16_hd256_causal_gqa1_bm128_bn128_c2_s2", "192 fp32 accumulator registers");
  // 176-key tiles: S 88 + O 64 registers at head dim 128 fit two stages (1024 + 32 KB of Q + 2 x
  // 2 x 44 KB + 256), not three; at head dim 256 (88 + 128) no stage count helps.
  expect_same_shared_bytes<device::WgmmaFwdTraits<Bf16, 128, 128, 176, 2, 2, false, 1>>(
      "ring_fwd_wgmma_bf16_hd128_full_gqa1_bm128_bn176_c2_s2");
  expect_same_shared_bytes<device::WgmmaFwdTraits<Fp16, 64, 64, 176, 1, 4, true, 2>>(
      "ring_fwd_wgmma_fp16_hd64_causal_gqa2_bm64_bn176_c1_s4");
  const Feasibility tile176 = on_sm90a("ring_fwd_wgmma_bf16_hd128_full_gqa1_bm128_bn176_c2_s2");
  EXPECT_TRUE(tile176.feasible) << tile176.reason;
  EXPECT_EQ(tile176.shared_bytes, 1024 + 32768 + 2 * 2 * 45056 + 128);
  expect_refused("ring_fwd_wgmma_bf16_hd128_full_gqa1_bm128_bn176_c2_s3", "shared memory");
  expect_refused("ring_fwd_wgmma_bf16_hd256_full_gqa1_bm128_bn176_c2_s2", "216 fp32 accumulator registers");
}

}  // namespace
}  // namespace cpgen
