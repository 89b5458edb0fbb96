// A two-rank tune over real NCCL: both ranks end with rank 0's winners. On one GPU, distinct
// NCCL_HOSTID values make NCCL accept two ranks on the same device (over sockets; slow but real).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>

#include "../cache/cache_fixtures.h"
#include "test_util.h"

namespace cpgen::testing {
namespace {

class NcclTuneTest : public TempDirTest {};

TEST_F(NcclTuneTest, RanksAgreeOnEveryWinner) {
  CPGEN_REQUIRE_GPU();
#ifndef CPGEN_HAVE_NCCL
  GTEST_SKIP() << "built without NCCL";
#endif
  std::ofstream(path("one.json")) << R"({"shapes": [{"name": "s", "q_heads": 8, "kv_heads": 2, "head_dim": 128,
      "seq_len": 8192, "cp_size": 2, "dtype": "bf16", "causal": true, "scheme": "zigzag"}]})";
  std::vector<pid_t> children;
  for (int rank = 0; rank < 2; ++rank) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      setenv("NCCL_HOSTID", ("cpgen-tune-test-" + std::to_string(rank)).c_str(), 1);
      for (const auto& [name, value] : nccl_rank_test_env()) setenv(name, value, 1);
      const std::string cmd = std::string(CPGEN_CLI_PATH) + " tune --json -q --max-candidates 4 --shapes " + path("one.json") +
                              " --rank " + std::to_string(rank) + " --world-size 2 --nccl-id-file " + path("nccl.id") +
                              " --db " + path("rank" + std::to_string(rank) + ".db") + " --store " + path("store") + " > " +
                              path("out" + std::to_string(rank) + ".json") + " 2> " + path("err" + std::to_string(rank));
      _exit(WEXITSTATUS(std::system(cmd.c_str())));
    }
    children.push_back(pid);
  }
  for (int rank = 0; rank < 2; ++rank) {
    int status = 0;
    ASSERT_EQ(waitpid(children[rank], &status, 0), children[rank]);
    std::ifstream err(path("err" + std::to_string(rank)));
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "rank " << rank << ": " << std::string(std::istreambuf_iterator<char>(err), {});
  }
  nlohmann::json r0 = load_json(path("out0.json")), r1 = load_json(path("out1.json"));
  EXPECT_EQ(r0["timed"], true);
  EXPECT_EQ(r1["timed"], false) << "only rank 0 times";
  ASSERT_EQ(r0["workloads"].size(), r1["workloads"].size());
  for (size_t i = 0; i < r0["workloads"].size(); ++i) {
    ASSERT_FALSE(r0["workloads"][i]["winner"].is_null());
    EXPECT_EQ(r0["workloads"][i]["winner"], r1["workloads"][i]["winner"]) << "workload " << i;
  }
}

}  // namespace
}  // namespace cpgen::testing
