// The cpgen command line's own answers: an unknown command, and messages printed once with the
// program's name.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "test_util.h"

namespace cpgen::testing {
namespace {

TEST(Cli, UnknownCommandIsNamedAndTheCommandsListed) {
  CliResult r = run_cli("frobnicate");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(line_count(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("unknown command 'frobnicate'"), std::string::npos) << r.err;
  for (const char* command : {"compile", "db", "explain", "plan", "tune", "verify"}) {
    EXPECT_NE(r.err.find(command), std::string::npos) << command << " missing from: " << r.err;
  }
  EXPECT_EQ(r.err.find("_nccl-rank"), std::string::npos) << "internal commands stay hidden: " << r.err;
  EXPECT_EQ(r.err.find("A subcommand is required"), std::string::npos) << r.err;
}

TEST(Cli, NoDoubledCpgenPrefix) {
  CliResult unknown = run_cli("frobnicate");
  EXPECT_EQ(unknown.err.find("cpgen: cpgen"), std::string::npos) << unknown.err;
  // The GPU backend's errors began with "cpgen verify", printed after "cpgen: ". Without a GPU
  // (or without NCCL) the backend answers with one of them.
  const std::string vectors = vectors_dir() + "/mqa_causal_hd96_s48.json";
  if (!std::filesystem::exists(vectors)) GTEST_SKIP() << "no vectors file at " << vectors;
  for (const char* extra : {"", " --transport nccl"}) {
    CliResult r = run_cli("verify --vectors " + vectors + " --scheme zigzag --ranks 2 --backend gpu" + extra);
    if (r.exit_code == 0) continue;  // a GPU ran it: no error line to check
    EXPECT_EQ(r.err.find("cpgen: cpgen"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.rfind("cpgen: ", 0), 0u) << r.err;
  }
}

}  // namespace
}  // namespace cpgen::testing
