// bench/kernels.py's --pin without a GPU (--list-pins): a family name becomes each configuration's
// default kernel of that family as the library names it (cpgen_family_kernel_uri), a URI
// template is filled per configuration, and a bad pin is one line and exit 2. The benchmark
// itself needs a GPU and PyTorch (bench/kernels_smoke.py rehearses it on the CPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "temp_dir.h"
#include "test_util.h"

namespace cpgen {
namespace {

class BenchKernelsPin : public ::testing::Test {
 protected:
  void SetUp() override {
    if (testing::run_shell("command -v python3", dir_.path() + "/which.txt").code != 0)
      GTEST_SKIP() << "no python3 on PATH";
  }
  testing::ShellResult list(const std::string& args) {
    return testing::run_shell("python3 '" + std::string(CPGEN_SOURCE_DIR) + "/bench/kernels.py' --lib '" +
                                  CPGEN_LIBRARY_PATH + "' --list-pins " + args,
                              dir_.path() + "/log.txt");
  }
  testing::TempDir dir_{"bench_kernels_pin"};
};

TEST_F(BenchKernelsPin, AFamilyPinsItsDefaultTilesPerConfiguration) {
  const auto r = list("--pin wgmma --dtypes bf16 --head-dims 128,256 --causal 1 --gqa 1,4");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output,
            "bf16 hd128 causal gqa1: ring_fwd_wgmma_bf16_hd128_causal_gqa1_bm128_bn128_c2_s2\n"
            "bf16 hd128 causal gqa4: ring_fwd_wgmma_bf16_hd128_causal_gqa4_bm128_bn128_c2_s2\n"
            "bf16 hd256 causal gqa1: ring_fwd_wgmma_bf16_hd256_causal_gqa1_bm128_bn64_c2_s2\n"
            "bf16 hd256 causal gqa4: ring_fwd_wgmma_bf16_hd256_causal_gqa4_bm128_bn64_c2_s2\n");
  const auto pp = list("--pin wgmma-pingpong --dtypes fp16 --head-dims 64 --causal 0 --gqa 8");
  ASSERT_EQ(pp.code, 0) << pp.output;
  EXPECT_EQ(pp.output, "fp16 hd64 full gqa8: ring_fwd_wgmma_fp16_hd64_full_gqa8_bm128_bn128_c2_s2_pingpong\n");
  const auto persistent = list("--pin wgmma-persistent --dtypes bf16 --head-dims 128 --causal 1 --gqa 1");
  ASSERT_EQ(persistent.code, 0) << persistent.output;
  EXPECT_EQ(persistent.output,
            "bf16 hd128 causal gqa1: ring_fwd_wgmma_bf16_hd128_causal_gqa1_bm128_bn128_c2_s2_persistent\n");
  // mma.sync: that family's documented tiles, also at bf16 head dim 128 GQA 1, where sm_90a's
  // default is the wgmma family.
  const auto mma = list("--pin mma.sync --dtypes bf16 --head-dims 128,256 --causal 1 --gqa 1");
  ASSERT_EQ(mma.code, 0) << mma.output;
  EXPECT_EQ(mma.output,
            "bf16 hd128 causal gqa1: ring_fwd_bf16_hd128_causal_gqa1_bm128_bn64_w4_s2\n"
            "bf16 hd256 causal gqa1: ring_fwd_bf16_hd256_causal_gqa1_bm64_bn64_w4_s2\n");
}

TEST_F(BenchKernelsPin, ATemplateIsFilledAndABadPinIsOneLine) {
  const auto r = list("--pin 'ring_fwd_wgmma_{dtype}_hd{head_dim}_{mask}_gqa{group}_bm128_bn64_c2_s3' "
                      "--dtypes bf16 --head-dims 96 --causal 0 --gqa 2");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output, "bf16 hd96 full gqa2: ring_fwd_wgmma_bf16_hd96_full_gqa2_bm128_bn64_c2_s3\n");
  const auto bad = list("--pin 'ring_fwd_{block_n}' --head-dims 64 --gqa 1");
  EXPECT_EQ(bad.code, 2) << bad.output;
  EXPECT_EQ(bad.output,
            "kernels.py: --pin 'ring_fwd_{block_n}': unknown placeholder {block_n}; allowed: {dtype}, {head_dim}, "
            "{group}, {mask}, or a family: mma.sync, wgmma, wgmma-pingpong, wgmma-persistent\n");
  // The wgmma family has every group a problem may have (1-16); past that the problem is bad input.
  const auto group16 = list("--pin wgmma --dtypes bf16 --head-dims 64 --gqa 16 --q-heads 32 --causal 1");
  EXPECT_EQ(group16.code, 0) << group16.output;
  EXPECT_EQ(group16.output, "bf16 hd64 causal gqa16: ring_fwd_wgmma_bf16_hd64_causal_gqa16_bm128_bn128_c2_s2\n");
  const auto group32 = list("--pin wgmma --head-dims 64 --gqa 32 --q-heads 32");
  EXPECT_EQ(group32.code, 2) << group32.output;
  EXPECT_NE(group32.output.find("32 is not a supported GQA group; allowed: 1, 2, 4, 8, 16"), std::string::npos)
      << group32.output;
  EXPECT_EQ(std::count(group32.output.begin(), group32.output.end(), '\n'), 1) << group32.output;
}

// --arch: a family's tiles for that arch (what the benchmark asks of the GPU's arch when --arch is
// not given): mma.sync at head dim 256 fits the 99 KB sm_89 with smaller key tiles; a wgmma family
// off sm_90a is one line and exit 2.
TEST_F(BenchKernelsPin, AnArchGetsTheTilesThatFitIt) {
  const auto mma = list("--pin mma.sync --arch sm_89 --dtypes bf16 --head-dims 128,256 --causal 1 --gqa 1");
  ASSERT_EQ(mma.code, 0) << mma.output;
  EXPECT_EQ(mma.output,
            "bf16 hd128 causal gqa1: ring_fwd_bf16_hd128_causal_gqa1_bm128_bn64_w4_s2\n"
            "bf16 hd256 causal gqa1: ring_fwd_bf16_hd256_causal_gqa1_bm64_bn32_w4_s2\n");
  const auto wgmma = list("--pin wgmma --arch sm_89 --head-dims 64 --gqa 1");
  EXPECT_EQ(wgmma.code, 2) << wgmma.output;
  EXPECT_EQ(wgmma.output,
            "kernels.py: --pin 'wgmma': cpgen family_kernel_uri_for_arch: cpgen_family_kernel_uri_for_arch: family "
            "'wgmma' runs on sm_90a only (wgmma and TMA), not on sm_89; allowed there: mma.sync\n");
}

// --templates: a folder without .cuh templates is one line and exit 2; a folder of them pins as
// usual (the templates matter only once kernels compile, which --list-pins never does).
TEST_F(BenchKernelsPin, TemplatesMustBeAFolderOfTemplates) {
  const auto bad = list("--pin wgmma --templates '" + dir_.path() + "' --head-dims 64 --gqa 1");
  EXPECT_EQ(bad.code, 2) << bad.output;
  EXPECT_EQ(bad.output, "kernels.py: --templates '" + dir_.path() + "': not a folder of .cuh template files\n");
  const auto good = list("--pin wgmma --templates '" + std::string(CPGEN_SOURCE_DIR) +
                         "/templates' --dtypes bf16 --head-dims 64 --causal 1 --gqa 1");
  EXPECT_EQ(good.code, 0) << good.output;
  EXPECT_EQ(good.output, "bf16 hd64 causal gqa1: ring_fwd_wgmma_bf16_hd64_causal_gqa1_bm128_bn128_c2_s2\n");
}

// --tune N selects from a database of its own, so a pin (or --db) beside it is one line and exit
// 2, and so is a cpgen command line that is not there; both before PyTorch is imported.
TEST_F(BenchKernelsPin, TuneIsRefusedBesideAPinAndWithoutTheCommandLine) {
  const std::string message = "kernels.py: --tune 3: a number of candidates per workload (0: no tuning), not with "
                              "--pin or --db (it selects from a database of its own)\n";
  const auto pinned = list("--pin wgmma --tune 3 --head-dims 64 --gqa 1");
  EXPECT_EQ(pinned.code, 2) << pinned.output;
  EXPECT_EQ(pinned.output, message);
  const auto no_cli = testing::run_shell("python3 '" + std::string(CPGEN_SOURCE_DIR) + "/bench/kernels.py' --lib '" +
                                             CPGEN_LIBRARY_PATH + "' --tune 3 --cpgen '" + dir_.path() + "/none'",
                                         dir_.path() + "/no_cli.txt");
  EXPECT_EQ(no_cli.code, 2) << no_cli.output;
  EXPECT_EQ(no_cli.output, "kernels.py: --tune needs the cpgen command line: '" + dir_.path() +
                               "/none' is not executable (--cpgen PATH)\n");
}

// A pin names forward kernels, which selection never runs for a backward step: a pinned backward
// row timed the backward default under the pinned forward kernel's name (found by a reviewer).
// The pair is one line and exit 2, before PyTorch is imported.
TEST_F(BenchKernelsPin, APinIsRefusedBesideTheBackwardDirection) {
  const auto r = list("--pin mma.sync --direction bwd --head-dims 64 --gqa 1");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_EQ(r.output, "kernels.py: --pin 'mma.sync' names forward kernels; --direction bwd times the backward "
                      "kernels selection picks (no backward pin exists): leave out one of the two\n");
}

}  // namespace
}  // namespace cpgen
