// The sm_90a forward family (templates/step_fwd_wgmma.cuh) compiles with NVRTC for sm_90a from
// rendered specs: a representative subset of the defaults (both dtypes, head dims 64 to 256,
// causal and full, GQA 1 and > 1, one and two consumer warpgroups), of the mask variants (_ivl,
// _cap, both), of 176-key tiles, of the ping-pong schedule and of the persistent launch, with 0
// spill bytes and 0 stack, a setmaxnreg plan that fits the registers ptxas allocated at entry, the
// feasibility model's shared bytes equal to the traits' (the kernel asks for kSharedBytes of
// dynamic memory and has no static), no serialized wgmma pipeline and no wait or fence ptxas had
// to inject, and the SASS holds HGMMA and
// UTMALDG (the ping-pong kernels also their barrier sync and arrive) and runs each main-loop
// softmax while the warpgroup's O += P V is in flight, when cuobjdump exists. Needs no GPU.
#include <gtest/gtest.h>

#include <cstdio>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cpgen/error.h"
#include "cpgen/traits_wgmma.cuh"
#include "generator/kernel_spec_wgmma.h"
#include "runtime/jit/jit.h"
#include "temp_dir.h"
#include "test_util.h"

namespace cpgen {
namespace {

// Compiled once per process; both tests read them.
const std::vector<std::pair<KernelSpec, CompiledKernel>>& compiled() {
  static const std::vector<std::pair<KernelSpec, CompiledKernel>> kernels = [] {
    std::vector<std::pair<KernelSpec, CompiledKernel>> out;
    for (const KernelSpec& s :
         {wgmma_default_for(Dtype::kBf16, 128, true, 1), wgmma_default_for(Dtype::kFp16, 64, false, 1),
          wgmma_default_for(Dtype::kBf16, 64, true, 4), wgmma_default_for(Dtype::kFp16, 128, false, 8),
          // one consumer warpgroup: 256 threads, more registers per thread at entry
          KernelSpec::parse("ring_fwd_wgmma_fp16_hd128_causal_gqa1_bm64_bn128_c1_s3"),
          // the mask features (both, the heaviest in registers) on the head dim 128 default and
          // with one consumer warpgroup
          KernelSpec::parse("ring_fwd_wgmma_bf16_hd128_causal_ivl_cap_gqa1_bm128_bn128_c2_s2"),
          KernelSpec::parse("ring_fwd_wgmma_fp16_hd128_causal_ivl_cap_gqa1_bm64_bn128_c1_s3"),
          // the softcap alone on the head dim 128 causal default (its key loop's bound once spilled)
          KernelSpec::parse("ring_fwd_wgmma_bf16_hd128_causal_cap_gqa1_bm128_bn128_c2_s2"),
          // head dim 96 (64-byte swizzle, wgmma N = 96) and 256 (64-key tiles, masked variant)
          wgmma_default_for(Dtype::kFp16, 96, true, 4),
          wgmma_default_for(Dtype::kBf16, 256, true, 1),
          KernelSpec::parse("ring_fwd_wgmma_fp16_hd256_full_ivl_cap_gqa2_bm128_bn64_c2_s2"),
          // 176-key tiles (wgmma N = 176; S 88 + O 64 registers), plain and in the heaviest variant
          KernelSpec::parse("ring_fwd_wgmma_bf16_hd128_full_gqa1_bm128_bn176_c2_s2"),
          KernelSpec::parse("ring_fwd_wgmma_fp16_hd128_causal_ivl_cap_gqa1_bm128_bn176_c2_s2_pingpong"),
          // the ping-pong schedule of the two consumer warpgroups (CTA barriers 1 and 2)
          KernelSpec::parse("ring_fwd_wgmma_bf16_hd128_causal_gqa1_bm128_bn128_c2_s2_pingpong"),
          KernelSpec::parse("ring_fwd_wgmma_fp16_hd256_causal_ivl_cap_gqa1_bm128_bn64_c2_s2_pingpong"),
          // the persistent launch (a loop over query blocks around both roles): plain, with the
          // ping-pong turns, in the heaviest mask variant, and with one consumer warpgroup
          KernelSpec::parse("ring_fwd_wgmma_bf16_hd128_causal_gqa1_bm128_bn128_c2_s2_persistent"),
          KernelSpec::parse("ring_fwd_wgmma_bf16_hd128_full_gqa1_bm128_bn128_c2_s2_pingpong_persistent"),
          KernelSpec::parse("ring_fwd_wgmma_fp16_hd256_causal_ivl_cap_gqa8_bm128_bn64_c2_s2_persistent"),
          KernelSpec::parse("ring_fwd_wgmma_fp16_hd96_causal_gqa2_bm64_bn128_c1_s3_persistent"),
          // three consumer warpgroups (512 threads, 160 registers each): FlashAttention-3's head
          // dim 64 tile, plain, in the heaviest mask variant and persistent (persistent with both
          // mask features spills 572 bytes at 128-key tiles, NVRTC 13.0: the tuner prunes it),
          // and head dim 128 with 64-key tiles (S 32 + O 64, the three-consumer budget)
          KernelSpec::parse("ring_fwd_wgmma_fp16_hd64_full_gqa1_bm192_bn128_c3_s2"),
          KernelSpec::parse("ring_fwd_wgmma_bf16_hd64_causal_ivl_cap_gqa4_bm192_bn128_c3_s2"),
          KernelSpec::parse("ring_fwd_wgmma_bf16_hd64_causal_gqa4_bm192_bn128_c3_s2_persistent"),
          KernelSpec::parse("ring_fwd_wgmma_bf16_hd128_causal_gqa1_bm192_bn64_c3_s3"),
          // 80-key tiles at head dim 256 (S 40 + O 128 registers), plain and persistent in the
          // heaviest mask variant
          KernelSpec::parse("ring_fwd_wgmma_bf16_hd256_full_gqa1_bm128_bn80_c2_s2"),
          KernelSpec::parse("ring_fwd_wgmma_fp16_hd256_causal_ivl_cap_gqa8_bm128_bn80_c2_s2_pingpong_persistent")})
      out.emplace_back(s, compile_kernel(s, "sm_90a", nullptr));
    return out;
  }();
  return kernels;
}

TEST(StepFwdWgmmaCompile, RepresentativeDefaultsCompileForSm90aWithoutSpills) {
  try {
    for (const auto& [spec, k] : compiled()) {
      SCOPED_TRACE(spec.uri());
      EXPECT_GT(k.cubin.size(), 0u);
      EXPECT_EQ(k.stats.spill_bytes, 0) << k.log;
      EXPECT_EQ(k.stats.stack_bytes, 0) << k.log;
      EXPECT_EQ(k.stats.shared_bytes, 0) << "the kernel uses dynamic shared memory only";
      EXPECT_GT(k.stats.registers, 0);
      // setmaxnreg's plan fits what ptxas allocated (compile_kernel refuses a kernel whose plan
      // does not: wgmma_register_plan_problem); restated here so a change of either shows.
      EXPECT_EQ(wgmma_register_plan_problem(spec, k.stats.registers), "");
      EXPECT_LE(k.stats.registers, device::wgmma_consumer_registers(wgmma_consumers(spec), spec.persistent));
      // ptxas C7514: it serialized the wgmma pipeline because plain instructions read accumulators
      // of an unretired group (a branch around the groups of the main loop did that once).
      EXPECT_EQ(k.log.find("C7514"), std::string::npos) << k.log;
      // ptxas C7517 / C7519: it injected a wgmma wait (a register an unretired wgmma defines is
      // used) or a wgmma fence (a register a wgmma uses is written with no fence between): the
      // pipeline would not be the one the template wrote. (The emulator finds such accesses as
      // the ISA defines them: hopper_emulation.h, registers of a wgmma in flight.)
      EXPECT_EQ(k.log.find("C7517"), std::string::npos) << k.log;
      EXPECT_EQ(k.log.find("C7519"), std::string::npos) << k.log;
      // ptxas C7508: it ignored setmaxnreg (no register cap at entry, or roles not one branch each),
      // so the producer would keep registers the consumers need.
      EXPECT_EQ(k.log.find("C7508"), std::string::npos) << k.log;
      EXPECT_TRUE(check_feasibility(spec, "sm_90a").feasible);
    }
  } catch (const Error& e) {
    FAIL() << e.what();
  }
}

// The MUFU.EX2 and MUFU.RCP counts of each main-loop issue point of a consumer's SASS: the point
// issues S = Q K^T (HGMMA reading both operands from descriptors) and then O += P V (HGMMA with a
// transposed B, `tnspB`: V is MN-major) with no wait between; after it, WARPGROUP.DEPBAR.LE gsb0,
// 0x1 waits for S only, and the operations counted are those before the next wait, the one for P V.
struct MufuCounts {
  int exps = 0, rcps = 0;
};
std::vector<MufuCounts> mufu_while_pv_runs(const std::string& sass) {
  std::vector<std::string> lines;
  std::istringstream in(sass);
  for (std::string line; std::getline(in, line);)
    if (line.find("HGMMA") != std::string::npos || line.find("DEPBAR") != std::string::npos ||
        line.find("MUFU.EX2") != std::string::npos || line.find("MUFU.RCP") != std::string::npos)
      lines.push_back(line);
  const auto is = [&](size_t i, const char* what) { return lines[i].find(what) != std::string::npos; };
  std::vector<MufuCounts> counts;
  for (size_t i = 1; i < lines.size(); ++i) {
    // The first P V HGMMA of an issue point: the HGMMA kept just before it is one of S.
    if (!is(i, "HGMMA") || !is(i, "tnspB") || !is(i - 1, "HGMMA") || is(i - 1, "tnspB")) continue;
    size_t at = i;
    while (at < lines.size() && !is(at, "DEPBAR")) ++at;
    if (at == lines.size() || !is(at, "gsb0, 0x1")) continue;
    MufuCounts c;
    for (++at; at < lines.size() && !is(at, "DEPBAR"); ++at) {
      c.exps += is(at, "MUFU.EX2");
      c.rcps += is(at, "MUFU.RCP");
    }
    counts.push_back(c);
  }
  return counts;
}

// Besides HGMMA, UTMALDG and the ping-pong turns, the order of each main loop: the wait for P_t V_t
// comes before the softmax of S_(t+1), so no exp2 of the softmax runs between the wait for S and
// the wait for P V. A softcap kernel's tanh of S_(t+1) (one exp2 and one reciprocal a score,
// softmax.cuh tanh_and_slope) does run there, as ptxas placed its tanh.approx before: so the
// exp2s there must be the cap's, as many as the reciprocals, and none without a softcap. The order that overlapped them (4e918ba: every exp2 of the tile between the two waits) was
// slower on an H200 in every configuration timed (step_fwd_wgmma.cuh, wgmma_fwd_consume); a
// change that brings it back, by the template or by ptxas, shows here and needs a GPU's timing.
// (One test, so that ctest's process per test compiles and disassembles the kernels once.)
TEST(StepFwdWgmmaCompile, SassHoldsWgmmaTmaAndTheMeasuredLoopOrder) {
  testing::TempDir dir("wgmma_compile");
  try {
    for (const auto& [spec, k] : compiled()) {
      SCOPED_TRACE(spec.uri());
      const std::string cubin = dir.path() + "/" + spec.uri() + ".cubin";
      std::ofstream(cubin, std::ios::binary) << k.cubin;
      std::string skip;
      const std::string text = testing::disassemble_cubin(cubin, &skip);
      if (!skip.empty()) GTEST_SKIP() << skip;
      for (const char* instruction : {"HGMMA", "UTMALDG"})
        EXPECT_NE(text.find(instruction), std::string::npos) << instruction << " missing from the SASS";
      // The setmaxnreg plan as the SASS carries it: the consumers grow to their count (160 with
      // three consumers, 240 or 232 with fewer) and the producer drops to its own.
      char grow[64], drop[64];
      std::snprintf(grow, sizeof grow, "USETMAXREG.TRY_ALLOC.CTAPOOL UP0, 0x%x ",
                    device::wgmma_consumer_registers(wgmma_consumers(spec), spec.persistent));
      std::snprintf(drop, sizeof drop, "USETMAXREG.DEALLOC.CTAPOOL 0x%x ", device::wgmma_producer_registers(spec.persistent));
      EXPECT_NE(text.find(grow), std::string::npos) << grow;
      EXPECT_NE(text.find(drop), std::string::npos) << drop;
      // Ping-pong turns: a barrier sync and an arrive on a barrier id from a register (1 + the
      // consumer), which only the ping-pong kernels have; every kernel has __syncthreads' BAR.SYNC 0x0.
      const bool turns = text.find("BAR.SYNC.DEFER_BLOCKING R") != std::string::npos;
      EXPECT_EQ(turns, spec.pingpong) << "BAR.SYNC on a register barrier id";
      EXPECT_EQ(text.find("BAR.ARV R") != std::string::npos, spec.pingpong) << "BAR.ARV on a register barrier id";
      const std::vector<MufuCounts> counts = mufu_while_pv_runs(text);
      EXPECT_FALSE(counts.empty()) << "no main-loop issue point (S then P V, then a wait for S) in the SASS";
      for (const MufuCounts& c : counts) {
        EXPECT_EQ(c.exps, c.rcps) << "softmax exp2s between the waits for S and for P V";
        if (!spec.softcap) EXPECT_EQ(c.exps, 0) << "exp2s between the waits for S and for P V";
      }
    }
  } catch (const Error& e) {
    FAIL() << e.what();
  }
}

}  // namespace
}  // namespace cpgen
