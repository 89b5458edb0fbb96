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

}  // namespace
}  // namespace cpgen
