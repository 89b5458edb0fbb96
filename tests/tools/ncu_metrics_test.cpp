// tools/ncu-metrics.py on the Nsight Compute reports committed under bench/results: the values
// it prints are the ones ncu measured on the GPU (the kernels' names, launch configurations and
// durations agree with the report written in the same session), the instructions where the PC
// sampler found warps most often, and a file that is not such a report is one line and exit 2.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "temp_dir.h"
#include "test_util.h"

namespace cpgen {
namespace {

class NcuMetrics : public ::testing::Test {
 protected:
  void SetUp() override {
    if (testing::run_shell("command -v python3", dir_.path() + "/which.txt").code != 0)
      GTEST_SKIP() << "no python3 on PATH";
  }
  testing::ShellResult metrics(const std::string& args) {
    return testing::run_shell("python3 '" + std::string(CPGEN_SOURCE_DIR) + "/tools/ncu-metrics.py' " + args,
                              dir_.path() + "/log.txt");
  }
  static std::string report(const std::string& kernel) {
    return "'" + std::string(CPGEN_SOURCE_DIR) + "/bench/results/2026-11-27-h200-ncu/" + kernel + ".ncu-rep'";
  }
  testing::TempDir dir_{"ncu_metrics"};
};

TEST_F(NcuMetrics, ReadsTheCommittedH200Profiles) {
  const auto r = metrics(report("ring_fwd_bf16_hd128_causal_gqa1_bm128_bn64_w4_s2") + " " +
                         report("ring_fwd_wgmma_bf16_hd128_causal_gqa1_bm128_bn128_c2_s2") +
                         " --match gpu__time_duration.sum,launch__block_size,launch__grid_size,"
                         "launch__registers_per_thread_allocated,device__attribute_display_name");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output,
            "metric\tring_fwd_bf16_hd128_causal_gqa1_bm128_bn64_w4_s2\tring_fwd_wgmma_bf16_hd128_causal_gqa1_bm128_bn128_c2_s2\n"
            "device__attribute_display_name\tNVIDIA H200\tNVIDIA H200\n"
            "gpu__time_duration.sum\t12011264\t6732096\n"
            "launch__block_size\t128\t384\n"
            "launch__grid_size\t8192\t8192\n"
            "launch__registers_per_thread_allocated\t256\t168\n");
}

// --hotspots: the wgmma kernel's profile (bf16, head dim 128, causal, 16K) spends 13.9% of its
// samples at the wait for all of a warpgroup's MMAs (its P V) before O is rescaled; the counts
// are ncu's, and with nvdisasm the instruction is named from the cubin inside the report.
TEST_F(NcuMetrics, HotspotsNameTheInstructionsWhereTheSamplerFoundWarpsMostOften) {
  const std::string kernel = "ring_fwd_wgmma_bf16_hd128_causal_gqa1_bm128_bn128_c2_s2";
  const std::string profile =
      "'" + std::string(CPGEN_SOURCE_DIR) + "/bench/results/2026-11-27-h200-ncu-persistent/" + kernel + ".ncu-rep'";
  const std::string nvdisasm = testing::find_cuda_tool("nvdisasm");
  const auto r = metrics(profile + " --hotspots 2" + (nvdisasm.empty() ? "" : " --nvdisasm '" + nvdisasm + "'"));
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string head = kernel + ": 737901 samples" + (nvdisasm.empty() ? " (no nvdisasm: offsets only)" : "") + "\n" +
                           "053d0\t13.9%\tbarrier 102346 selected 248 not_selected 131\t";
  ASSERT_EQ(r.output.rfind(head, 0), 0u) << r.output;
  if (!nvdisasm.empty()) EXPECT_EQ(r.output.find("WARPGROUP.DEPBAR.LE gsb0, 0x0\n", head.size()), head.size()) << r.output;
  EXPECT_NE(r.output.find("\n09df0\t5.7%\tlong_scoreboard 41835 "), std::string::npos) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 3) << r.output;

  // The first H200 session's profiles have no PC sampling; a negative count is refused.
  const auto none = metrics(report(kernel) + " --hotspots 2");
  EXPECT_EQ(none.code, 2) << none.output;
  EXPECT_NE(none.output.find("the report has no PC sampling data"), std::string::npos) << none.output;
  const auto negative = metrics(profile + " --hotspots -1");
  EXPECT_EQ(negative.code, 2) << negative.output;
  EXPECT_EQ(negative.output, "ncu-metrics: --hotspots -1: a number of instructions, at least 1\n");
}

TEST_F(NcuMetrics, AFileThatIsNotAReportIsOneLine) {
  const std::string readme = "'" + std::string(CPGEN_SOURCE_DIR) + "/README.md'";
  const auto r = metrics(readme);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_EQ(r.output, "ncu-metrics: " + std::string(CPGEN_SOURCE_DIR) +
                          "/README.md: no NVR magic at the start: not an Nsight Compute report\n");
}

}  // namespace
}  // namespace cpgen
