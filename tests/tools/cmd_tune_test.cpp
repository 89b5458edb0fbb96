// cpgen tune's command-line checks and its progress in --json mode (the tuning itself is tested
// in tests/tuner).
#include <gtest/gtest.h>

#include <algorithm>

#include "../cache/cache_fixtures.h"
#include "test_util.h"

namespace cpgen::testing {
namespace {

class CmdTune : public TempDirTest {
 protected:
  std::string shapes() const { return std::string(CPGEN_SOURCE_DIR) + "/examples/shapes/video-dit-full-cp8.json"; }
};

TEST_F(CmdTune, WorldSizeZeroNamesTheFieldAndTheRange) {
  CliResult r = run_cli("tune --shapes " + shapes() + " --db " + path("t.db") + " --world-size 0");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--world-size: must be an integer 1..1024, got 0"), std::string::npos) << r.err;
  EXPECT_EQ(line_count(r.err), 1) << r.err;
  EXPECT_FALSE(std::filesystem::exists(path("t.db")));
}

TEST_F(CmdTune, RankBeyondAnIntNamesTheFieldAndTheRange) {
  CliResult r = run_cli("tune --shapes " + shapes() + " --db " + path("t.db") + " --rank 99999999999");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--rank: must be an integer 0..1023, got 99999999999"), std::string::npos) << r.err;
  EXPECT_EQ(line_count(r.err), 1) << r.err;
}

// Where compiled kernels go is one choice: --store DIR, --kernels-in-db or --no-store. Two of them
// were taken silently (--no-store won over --store), refused before a GPU is looked for or a
// database made.
TEST_F(CmdTune, TwoKernelStoreChoicesAreRefused) {
  const std::vector<std::string> pairs = {"--store " + path("s") + " --no-store", "--kernels-in-db --no-store",
                                          "--store " + path("s") + " --kernels-in-db"};
  for (const std::string& both : pairs) {
    CliResult r = run_cli("tune --shapes " + shapes() + " --db " + path("t.db") + " " + both);
    EXPECT_EQ(r.exit_code, 2) << both << ": " << r.err;
    EXPECT_NE(r.err.find("tune: give one of --store DIR, --kernels-in-db or --no-store, not several"), std::string::npos)
        << r.err;
    EXPECT_EQ(line_count(r.err), 1) << r.err;
    EXPECT_FALSE(std::filesystem::exists(path("t.db"))) << both;
    EXPECT_FALSE(std::filesystem::exists(path("s"))) << both;
  }
}

TEST_F(CmdTune, JsonModeShowsProgressOnStderr) {
  if (have_gpu()) GTEST_SKIP() << "a GPU is present: a timed tune would take minutes here";
  CliResult r = run_cli("tune --json --shapes " + shapes() + " --db " + path("t.db") + " --store " + path("store") +
                        " --max-candidates 1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json report;
  EXPECT_NO_THROW(report = nlohmann::json::parse(r.out)) << "stdout stays pure JSON: " << r.out;
  EXPECT_NE(r.err.find("compile"), std::string::npos) << "progress goes to stderr in --json mode too: " << r.err;
}

}  // namespace
}  // namespace cpgen::testing
