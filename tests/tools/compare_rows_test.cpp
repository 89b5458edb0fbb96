// bench/compare_rows.py --many, the table tools/gpu-check.sh --ab sets several commits' runs side
// by side with: one row per configuration, each run's ratio to its own cuDNN timing with its
// TFLOP/s, a failed or wrong run named as such, and a mean over the configurations every run
// measured correct. Bad arguments are one line and exit 2.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "temp_dir.h"
#include "test_util.h"

namespace cpgen {
namespace {

// One bench/kernels.py JSON line: bf16, head dim 128, 16 heads, one rank.
std::string row(bool causal, int seq, double tflops, double ratio, const char* check = "ok") {
  return std::string("{\"dtype\": \"bf16\", \"head_dim\": 128, \"causal\": ") + (causal ? "true" : "false") +
         ", \"seq_len\": " + std::to_string(seq) +
         ", \"q_heads\": 16, \"kv_heads\": 16, \"batch\": 1, \"ranks\": 1, \"scheme\": \"contiguous\", "
         "\"cpgen_tflops\": " + std::to_string(tflops) + ", \"ratio_cudnn\": " + std::to_string(ratio) +
         ", \"cpgen_check\": \"" + check + "\", \"cpgen_uri\": \"k\"}\n";
}

class CompareRows : public ::testing::Test {
 protected:
  void SetUp() override {
    if (testing::run_shell("command -v python3", dir_.path() + "/which.txt").code != 0)
      GTEST_SKIP() << "no python3 on PATH";
  }
  std::string file(const std::string& name, const std::string& text) {
    const std::string path = dir_.path() + "/" + name;
    std::ofstream(path) << text;
    return path;
  }
  testing::ShellResult many(const std::string& args) {
    return testing::run_shell("python3 '" + std::string(CPGEN_SOURCE_DIR) + "/bench/compare_rows.py' --many " + args,
                              dir_.path() + "/log.txt");
  }
  // The two-run table of BASE and OTHER.
  testing::ShellResult pair(const std::string& base, const std::string& other) {
    return testing::run_shell("python3 '" + std::string(CPGEN_SOURCE_DIR) + "/bench/compare_rows.py' '" + base + "' '" +
                                  other + "'",
                              dir_.path() + "/pair.txt");
  }
  testing::TempDir dir_{"compare_rows"};
};

TEST_F(CompareRows, ManyRunsSideBySideWithTheMeanOverWhatEveryRunGotRight) {
  const std::string a = file("a.jsonl", row(false, 8192, 600, 0.90) + row(true, 8192, 530, 0.88) + row(true, 16384, 570, 0.92));
  const std::string b = file("b.jsonl", row(false, 8192, 640, 0.96) + row(true, 8192, 560, 0.93, "FAILED"));
  const std::string c = file("c.jsonl", row(false, 8192, 650, 0.98) + row(true, 8192, 575, 0.95) +
                                            "{\"dtype\": \"bf16\", \"head_dim\": 128, \"causal\": true, \"seq_len\": 16384, "
                                            "\"q_heads\": 16, \"kv_heads\": 16, \"batch\": 1, \"ranks\": 1, "
                                            "\"scheme\": \"contiguous\", \"failed\": \"cpgen: stalled\"}\n");
  const auto r = many("e59b2ca='" + a + "' 3360f1e='" + b + "' tree='" + c + "'");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output,
            "| dtype | hd | causal | seq | gqa | e59b2ca vs cuDNN (TFLOP/s) | 3360f1e vs cuDNN (TFLOP/s) | tree vs cuDNN "
            "(TFLOP/s) |\n"
            "|---|---|---|---|---|---|---|---|\n"
            "| bf16 | 128 | 0 | 8192 | 1 | 0.900 (600) | 0.960 (640) | 0.980 (650) |\n"
            "| bf16 | 128 | 1 | 8192 | 1 | 0.880 (530) | wrong | 0.950 (575) |\n"
            "| bf16 | 128 | 1 | 16384 | 1 | 0.920 (570) | - | failed |\n"
            "| mean of 1 | | | | | 0.900 | 0.960 | 0.980 |\n"
            "\n"
            "1 configurations measured and correct in all 3 runs (e59b2ca 3, 3360f1e 2, tree 3 rows)\n");
}

TEST_F(CompareRows, ManyRefusesWhatItCannotJoinInOneLine) {
  const std::string a = file("a.jsonl", row(false, 8192, 600, 0.90));
  const auto one = many("x='" + a + "'");
  EXPECT_EQ(one.code, 2);
  EXPECT_EQ(one.output, "compare_rows: --many needs two runs or more (LABEL=FILE.jsonl ...)\n");
  const auto unlabeled = many("'" + a + "' y='" + a + "'");
  EXPECT_EQ(unlabeled.code, 2);
  EXPECT_EQ(unlabeled.output, "compare_rows: --many '" + a + "': LABEL=FILE.jsonl expected\n");
  const auto twice = many("x='" + a + "' x='" + a + "'");
  EXPECT_EQ(twice.code, 2);
  EXPECT_EQ(twice.output, "compare_rows: --many: the label 'x' names two runs\n");
  const auto missing = many("x='" + a + "' y='" + a + ".gone'");
  EXPECT_EQ(missing.code, 2);
  EXPECT_NE(missing.output.find("compare_rows: y: "), std::string::npos) << missing.output;
  const auto broken = many("x='" + a + "' y='" + file("b.jsonl", "{not json\n") + "'");
  EXPECT_EQ(broken.code, 2);
  EXPECT_EQ(broken.output.rfind("compare_rows: y: ", 0), 0u) << broken.output;
}

// kernels.py --jsonl appends, so a file two runs went into holds each configuration twice: which
// row to join cannot be told, and the file is refused in one line naming both lines (it kept the
// last one silently, so that a good row could stand for a failed one or the other way round).
TEST_F(CompareRows, AConfigurationTwiceInOneFileIsRefused) {
  const std::string a = file("a.jsonl", row(false, 8192, 600, 0.90));
  const std::string twice = file("twice.jsonl", row(false, 8192, 600, 0.90) + row(true, 8192, 530, 0.88) +
                                                    row(false, 8192, 610, 0.91));
  const auto r = many("x='" + a + "' y='" + twice + "'");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.output, "compare_rows: y: " + twice +
                          ": line 3 repeats the configuration of line 1 (kernels.py --jsonl appends: give each run "
                          "a file of its own)\n");
  const auto two = pair(a, twice);
  EXPECT_EQ(two.code, 2);
  EXPECT_NE(two.output.find("line 3 repeats the configuration of line 1"), std::string::npos) << two.output;
}

// A row whose cuDNN output failed kernels.py's check has no ratio to cuDNN: the cell says so, the
// mean leaves it out (it counted a ratio of 3.0 against a wrong cuDNN), and the two-run table
// prints "wrong" in its vs-cuDNN column, as kernels.py's own table does.
TEST_F(CompareRows, ARatioToAWrongCudnnOutputIsNotCounted) {
  std::string bad = row(false, 8192, 640, 3.0);
  bad.insert(bad.rfind('}'), ", \"cudnn_check\": \"FAILED\"");
  const std::string a = file("a.jsonl", row(false, 8192, 600, 0.90) + row(true, 8192, 530, 0.88));
  const std::string b = file("b.jsonl", bad + row(true, 8192, 560, 0.93));
  const auto r = many("a='" + a + "' b='" + b + "'");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("| bf16 | 128 | 0 | 8192 | 1 | 0.900 (600) | cuDNN wrong (640) |"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("| mean of 1 | | | | | 0.880 | 0.930 |"), std::string::npos) << r.output;
  const auto two = pair(a, b);
  ASSERT_EQ(two.code, 0) << two.output;
  EXPECT_NE(two.output.find("| 600 | 640 | 1.07 | 0.90 | wrong | k | k |"), std::string::npos) << two.output;
}

// Rows that differ only in their ring (kernels.py --ranks) or direction get the columns that tell
// them apart, and a backward row names the backward kernel it timed, not the forward one that ran
// untimed before it.
TEST_F(CompareRows, RowsDifferingInTheirRingOrDirectionAreToldApart) {
  std::string ring8 = row(true, 8192, 500, 0.85);
  const std::string one_rank = "\"ranks\": 1, \"scheme\": \"contiguous\"";
  ring8.replace(ring8.find(one_rank), one_rank.size(), "\"ranks\": 8, \"scheme\": \"zigzag\"");
  std::string bwd = row(true, 8192, 400, 0.80);
  bwd.insert(bwd.rfind('}'), ", \"direction\": \"bwd\", \"cpgen_backward_uri\": \"ring_bwd_x\"");
  const std::string a = file("a.jsonl", row(true, 8192, 530, 0.88) + ring8 + bwd);
  const std::string b = file("b.jsonl", row(true, 8192, 560, 0.93) + ring8 + bwd);
  const auto r = many("a='" + a + "' b='" + b + "'");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("| dtype | hd | causal | seq | gqa | ring | dir | a vs cuDNN"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("| bf16 | 128 | 1 | 8192 | 1 | 1 | fwd | 0.880 (530) | 0.930 (560) |"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("| bf16 | 128 | 1 | 8192 | 1 | 8 zigzag | fwd | 0.850 (500) | 0.850 (500) |"),
            std::string::npos) << r.output;
  EXPECT_NE(r.output.find("| bf16 | 128 | 1 | 8192 | 1 | 1 | bwd |"), std::string::npos) << r.output;
  const auto two = pair(a, b);
  ASSERT_EQ(two.code, 0) << two.output;
  EXPECT_NE(two.output.find("| ring_bwd_x | ring_bwd_x |"), std::string::npos) << two.output;
}

}  // namespace
}  // namespace cpgen
