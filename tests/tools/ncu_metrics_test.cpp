// tools/ncu-metrics.py on the Nsight Compute reports committed under bench/results: the values
// it prints are the ones ncu measured on the GPU (the kernels' names, launch configurations and
// durations agree with the report written in the same session), and a file that is not such a
// report is one line and exit 2.
#include <gtest/gtest.h>

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

TEST_F(NcuMetrics, AFileThatIsNotAReportIsOneLine) {
  const std::string readme = "'" + std::string(CPGEN_SOURCE_DIR) + "/README.md'";
  const auto r = metrics(readme);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_EQ(r.output, "ncu-metrics: " + std::string(CPGEN_SOURCE_DIR) +
                          "/README.md: no NVR magic at the start: not an Nsight Compute report\n");
}

}  // namespace
}  // namespace cpgen
