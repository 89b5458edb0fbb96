// cpgen bench: argument errors (exit 2, one line naming the field), the no-GPU exit (1, one line),
// and on a GPU a small loopback run whose slice check passes and whose report is complete.
#include <gtest/gtest.h>

#include "test_util.h"

namespace cpgen {
namespace {

using testing::run_cli;

int lines(const std::string& text) {
  int n = 0;
  for (char c : text) n += c == '\n';
  return n;
}

TEST(CliBench, BadShapeKeysAndValuesExitTwoNamingTheField) {
  auto r = run_cli("bench --shape head_dim=80");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("head_dim 80"), std::string::npos) << r.err;
  r = run_cli("bench --shape colour=blue");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("unknown key 'colour'"), std::string::npos) << r.err;
  r = run_cli("bench --shape seq_len=1000 --ranks 8");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("seq_len"), std::string::npos) << r.err;
  // The other commands' JSON shape says what bench's --shape takes instead.
  r = run_cli("bench --shape '{\"seq_len\": 1024}'");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("is not KEY=VALUE; bench's --shape takes comma-separated pairs, e.g. q_heads=32"), std::string::npos)
      << r.err;
  EXPECT_EQ(lines(r.err), 1) << r.err;
  for (const auto& [value, says] : {std::pair<std::string, std::string>{"abc", "softcap=abc is not a finite number"},
                                    {"nan", "softcap=nan is not a finite number"},
                                    {"-1", "softcap -1.000000 must be finite and >= 0"}}) {
    r = run_cli("bench --shape softcap=" + value);
    EXPECT_EQ(r.exit_code, 2) << value << "\n" << r.err;
    EXPECT_NE(r.err.find(says), std::string::npos) << r.err;
    EXPECT_EQ(lines(r.err), 1) << r.err;
  }
  r = run_cli("bench --transport carrier-pigeon");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("allowed: loopback, nccl"), std::string::npos) << r.err;
  EXPECT_EQ(lines(r.err), 1) << r.err;
}

TEST(CliBench, WithoutGpuExitsOneWithOneLine) {
  std::string why;
  if (testing::have_gpu(&why)) GTEST_SKIP() << "a GPU is present";
  for (const char* shape : {"seq_len=1024", "seq_len=1024,softcap=30"}) {
    auto r = run_cli(std::string("bench --shape ") + shape + " --ranks 2");
    EXPECT_EQ(r.exit_code, 1) << shape;
    EXPECT_NE(r.err.find("needs a GPU"), std::string::npos) << r.err;
    EXPECT_EQ(lines(r.err), 1) << r.err;
    EXPECT_EQ(r.out, "");
  }
}

// bench on a small loopback ring (q_heads 8 over 2 kv heads, head dim 128, 2048 tokens, 4 ranks)
// with `extra` keys, its JSON in j; fails the test unless it exits 0 with its check passed.
void run_small_bench(const std::string& extra, nlohmann::json& j) {
  auto r = run_cli("bench --shape q_heads=8,kv_heads=2,head_dim=128,seq_len=2048" + extra +
                   " --ranks 4 --iters 3 --warmup 1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["check"]["passed"].get<bool>()) << r.out;
}

// A softcap (the _cap kernels, their tanh from ex2 and rcp) times and checks like any shape: the
// slice check applies the cap, the FLOPs are the plain attention's.
TEST(CliBench, ASoftcapShapeRunsItsCapKernelsAndChecks) {
  CPGEN_REQUIRE_GPU();
  nlohmann::json j;
  ASSERT_NO_FATAL_FAILURE(run_small_bench(",softcap=30", j));
  for (const char* key : {"kernel", "single_kernel", "backward_kernel"})
    EXPECT_NE(j[key].get<std::string>().find("_causal_cap_"), std::string::npos) << key << ": " << j.dump();
  EXPECT_TRUE(j["check"]["grads_finite"].get<bool>()) << j.dump();
}

TEST(CliBench, SmallLoopbackRunReportsAndChecks) {
  CPGEN_REQUIRE_GPU();
  nlohmann::json j;
  ASSERT_NO_FATAL_FAILURE(run_small_bench("", j));
  const std::string out = j.dump();
  EXPECT_GT(j["check"]["rows"].get<int>(), 0);
  for (const char* key : {"ring_ms", "single_ms", "step_ms", "ring_tflops", "step_tflops", "backward_ms",
                          "backward_tflops", "fwd_bwd_ms", "fwd_bwd_tflops"})
    EXPECT_GT(j[key].get<double>(), 0) << key;
  // Either family: on sm_90a the wgmma family is the default for this combination
  // (generator/kernel_spec_wgmma.h kWgmmaDefaultShapes), elsewhere the mma.sync one.
  const std::string kernel = j["kernel"].get<std::string>();
  EXPECT_EQ(kernel.rfind("ring_fwd_", 0), 0u) << out;
  EXPECT_NE(kernel.find("bf16_hd128_causal_gqa4_"), std::string::npos) << out;
  // The single attention's own selection: the same combination over the whole sequence.
  EXPECT_EQ(j["single_kernel"].get<std::string>().rfind("ring_fwd_", 0), 0u) << out;
  EXPECT_NE(j["single_kernel"].get<std::string>().find("bf16_hd128_causal_gqa4_"), std::string::npos) << out;
  // Every (rank, step) launch alone: a zigzag ring of 4 launches all 16, one diagonal step per rank,
  // and the types' sums add up to the total.
  EXPECT_GT(j["steps_alone_ms"].get<double>(), 0) << out;
  int launches = 0;
  double ms = 0;
  for (const auto& t : j["step_types"]) {
    launches += t["launches"].get<int>();
    ms += t["ms"].get<double>();
    EXPECT_GT(t["ms"].get<double>(), 0) << t.dump();
    EXPECT_NE(t["kernel"].get<std::string>().find("bf16_hd128_causal_gqa4_"), std::string::npos) << t.dump();
    if (t["step_type"] == "diagonal") EXPECT_EQ(t["launches"].get<int>(), 4) << t.dump();
  }
  EXPECT_EQ(launches, 16) << out;
  EXPECT_NEAR(ms, j["steps_alone_ms"].get<double>(), 1e-9 * ms) << out;
  EXPECT_EQ(j["step_types"].at(0)["step_type"], "diagonal") << out;
  EXPECT_EQ(j["backward_kernel"].get<std::string>().rfind("ring_bwd_bf16_hd128_causal_gqa4", 0), 0u) << out;
  EXPECT_TRUE(j["check"]["grads_finite"].get<bool>()) << out;
  // Backward TFLOP/s count 2.5x the forward's FLOPs over the backward's own time.
  EXPECT_NEAR(j["backward_tflops"].get<double>(),
              2.5 * j["useful_flops"].get<double>() / (j["backward_ms"].get<double>() * 1e-3) / 1e12,
              1e-6 * j["backward_tflops"].get<double>());
}

}  // namespace
}  // namespace cpgen

namespace cpgen {
namespace {

TEST(CliBench, NcclTwoProcessesOnOneGpuReportsAndChecks) {
  CPGEN_REQUIRE_GPU();
  auto r = testing::run_cli("bench --transport nccl --shape q_heads=4,kv_heads=2,head_dim=64,seq_len=1024 "
                            "--ranks 2 --iters 2 --warmup 1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["check"]["passed"].get<bool>()) << r.out;
  EXPECT_GT(j["check"]["rows"].get<int>(), 0);
  EXPECT_GT(j["ring_ms"].get<double>(), 0);
  EXPECT_GT(j["single_ms"].get<double>(), 0);
  EXPECT_NE(j["single_kernel"].get<std::string>().find("_hd64_causal_gqa2_"), std::string::npos) << r.out;
  EXPECT_GT(j["backward_ms"].get<double>(), 0);
  EXPECT_GT(j["fwd_bwd_ms"].get<double>(), 0);
  EXPECT_TRUE(j["check"]["grads_finite"].get<bool>()) << r.out;
}

}  // namespace
}  // namespace cpgen
