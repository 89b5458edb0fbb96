// cpgen verify --backend gpu: option errors (exit 2), the no-GPU exit (1, one line), and on a GPU
// the loopback and NCCL rings passing on a vectors case.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <set>
#include <string>

#include "test_util.h"

namespace cpgen {
namespace {

using testing::run_cli;

std::string vectors(const char* name) { return testing::vectors_dir() + "/" + name; }

TEST(CliVerifyGpu, BadTransportAndDtypeAreBadInputButUnequalShardsAreNot) {
  auto r = run_cli("verify --vectors " + vectors("mha_causal_hd64_s64.json") +
                   " --scheme zigzag --ranks 2 --backend gpu --transport pigeon");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("allowed: loopback, nccl"), std::string::npos) << r.err;
  // 64 positions over 3 zigzag ranks give unequal shards, which the kernel ring runs (issue 11):
  // not bad input; here it stops only for want of a GPU (exit 1, when none is present).
  r = run_cli("verify --vectors " + vectors("mha_causal_hd64_s64.json") +
              " --scheme zigzag --ranks 3 --backend gpu");
  EXPECT_NE(r.exit_code, 2) << r.err;
  EXPECT_EQ(r.err.find("unequal"), std::string::npos) << r.err;
  r = run_cli("verify --vectors " + vectors("mha_causal_hd64_s64.json") +
              " --scheme zigzag --ranks 2 --backend gpu --dtype fp8");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("fp8"), std::string::npos) << r.err;
}

TEST(CliVerifyGpu, WithoutGpuExitsOneWithOneLine) {
  std::string why;
  if (testing::have_gpu(&why)) GTEST_SKIP() << "a GPU is present";
  auto r = run_cli("verify --vectors " + vectors("mha_causal_hd64_s64.json") +
                   " --scheme zigzag --ranks 2 --backend gpu");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("needs a GPU"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

TEST(CliVerifyGpu, LoopbackAndNcclRingsPass) {
  CPGEN_REQUIRE_GPU();
  for (const char* dtype : {"bf16", "fp16"}) {
    auto r = run_cli("verify --vectors " + vectors("gqa2_causal_hd128_s32.json") +
                     " --scheme zigzag --ranks 4 --backend gpu --dtype " + dtype + " --json");
    EXPECT_EQ(r.exit_code, 0) << dtype << ": " << r.out << r.err;
  }
  auto r = run_cli("verify --vectors " + vectors("gqa4_causal_hd64_s32.json") +
                   " --scheme striped --ranks 2 --backend gpu --transport nccl --json");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
}

// The vectors have gradients, so both transports check the backward ring's dq, dk and dv too. The
// name holds "Nccl": gpu-check runs such tests one at a time (they share the GPU and loopback).
TEST(CliVerifyGpu, GradientsAreCheckedOnLoopbackAndNccl) {
  CPGEN_REQUIRE_GPU();
  for (const char* transport : {"loopback", "nccl"}) {
    auto r = run_cli("verify --vectors " + vectors("gqa4_causal_hd64_s32.json") +
                     " --scheme zigzag --ranks 2 --backend gpu --json --transport " + transport);
    ASSERT_EQ(r.exit_code, 0) << transport << ": " << r.out << r.err;
    std::set<std::string> checked;
    // The parsed report is a named object: a range-for over a member of the temporary parse()
    // returns iterates freed memory (the temporary dies before the loop body runs).
    const nlohmann::json report = nlohmann::json::parse(r.out);
    for (const auto& c : report["checks"]) {
      checked.insert(c["tensor"].get<std::string>());
      EXPECT_TRUE(c["ok"].get<bool>()) << transport << ": " << c.dump();
    }
    for (const char* grad : {"dq", "dk", "dv"})
      EXPECT_EQ(checked.count(grad), 1u) << transport << ": no " << grad << " check in\n" << r.out << r.err;
  }
}

}  // namespace
}  // namespace cpgen
