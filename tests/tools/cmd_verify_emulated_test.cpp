// cpgen verify --backend emulated: the acceptance command of issue 12 on the project's vectors
// (and ../shared/vectors where present), its report, --output, --spec and bad input. The kernels
// are compiled by the host compiler into a store in the build folder ($CPGEN_KERNEL_DIR for the
// command), so only the first run pays for compiling.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <tuple>

#include "runtime/ring/vectors.h"
#include "test_util.h"

namespace cpgen {
namespace {

using testing::run_cli;

// Points the command's kernel store at the build folder while a test runs.
class CmdVerifyEmulated : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* old = std::getenv("CPGEN_KERNEL_DIR");
    had_old_ = old != nullptr;
    if (had_old_) old_ = old;
    ::setenv("CPGEN_KERNEL_DIR", (std::string(CPGEN_BINARY_DIR) + "/test-emulated-kernels").c_str(), 1);
  }
  void TearDown() override {
    if (had_old_)
      ::setenv("CPGEN_KERNEL_DIR", old_.c_str(), 1);
    else
      ::unsetenv("CPGEN_KERNEL_DIR");
  }

 private:
  bool had_old_ = false;
  std::string old_;
};

std::string vectors(const std::string& name) { return testing::vectors_dir() + "/" + name; }

TEST_F(CmdVerifyEmulated, ReproducesTheVectorsOnAZigzagRingOfTwo) {
  const std::string output = (std::filesystem::temp_directory_path() /
                              ("cpgen_verify_emulated_" + std::to_string(::getpid()) + ".json")).string();
  const auto r = run_cli("verify --vectors " + vectors("gqa2_causal_hd128_s32.json") +
                         " --backend emulated --dtype bf16 --scheme zigzag --ranks 2 --json --output " + output);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto doc = nlohmann::json::parse(r.out);
  EXPECT_EQ(doc.at("backend"), "emulated");
  EXPECT_TRUE(doc.at("ok").get<bool>());
  // out and lse, then dq, dk, dv: the vectors file has gradients, so the backward ring ran too.
  ASSERT_EQ(doc.at("checks").size(), 5u);
  EXPECT_EQ(doc.at("checks").at(2).at("tensor"), "dq");
  for (const auto& check : doc.at("checks")) {
    EXPECT_LE(check.at("error").get<double>(), 2e-2) << check;
    EXPECT_EQ(check.at("limit").get<double>(), 2e-2);
  }
  // The kernel is what selection gives (the default of hd128 causal group 2 on sm_90).
  EXPECT_NE(doc.at("precision").get<std::string>().find("ring_fwd_bf16_hd128_causal_gqa2_"), std::string::npos)
      << doc.at("precision");
  EXPECT_NE(doc.at("precision").get<std::string>().find(" and ring_bwd_bf16_hd128_causal_gqa2_"), std::string::npos)
      << doc.at("precision");
  // Forward: 2 ranks x 2 steps. Backward: per rank the preprocessing, the steps (each may be
  // split into launches per part of the key range) and three conversions; at least 2 x 6 more.
  ASSERT_EQ(doc.at("notes").size(), 1u);
  const std::string note = doc.at("notes").at(0).get<std::string>();
  EXPECT_NE(note.find(" kernel launches emulated in"), std::string::npos) << note;
  EXPECT_GE(std::stol(note), 16) << note;
  // --output: the vectors file's layout, with the gradients.
  const auto written = testing::load_json(output);
  std::filesystem::remove(output);
  EXPECT_EQ(written.at("backend"), "emulated");
  EXPECT_EQ(written.at("out").size(), load_attention_vectors(vectors("gqa2_causal_hd128_s32.json")).out.size());
  ASSERT_TRUE(written.contains("dq"));
  EXPECT_EQ(written.at("dk").size(), load_attention_vectors(vectors("gqa2_causal_hd128_s32.json")).dk.size());
}

TEST_F(CmdVerifyEmulated, RunsTheSharedVectorsWhereTheyExist) {
  const std::string shared = testing::source_dir() + "/../shared/vectors/gqa2_causal_hd64_s256.json";
  if (!std::filesystem::exists(shared)) GTEST_SKIP() << shared << " is not here";
  const auto r = run_cli("verify --vectors " + shared + " --backend emulated --dtype fp16 --scheme zigzag --ranks 2");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("dv"), std::string::npos) << r.out;
}

// Striped positions: every step is masked like the diagonal, with 8 rows per rank.
TEST_F(CmdVerifyEmulated, ReproducesTheVectorsOnAStripedRingOfFour) {
  const auto r = run_cli("verify --vectors " + vectors("gqa2_causal_hd128_s32.json") +
                         " --backend emulated --dtype fp16 --scheme striped --ranks 4");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("striped over 4 ranks"), std::string::npos) << r.out;
  // Forward: 4 ranks x 4 steps. Backward, per rank: the preprocessing, 4 steps (one launch or
  // more each) and 3 conversions.
  const size_t note = r.out.find("note: ");
  ASSERT_NE(note, std::string::npos) << r.out;
  EXPECT_GE(std::stol(r.out.substr(note + 6)), 16 + 4 * (1 + 4 + 3)) << r.out;
  EXPECT_NE(r.out.find("dv   relative Frobenius"), std::string::npos) << r.out;
}

// A shapes entry on random inputs: the entry's dtype is what the kernels compute in.
TEST_F(CmdVerifyEmulated, RunsARandomShape) {
  const auto r = run_cli(
      "verify --backend emulated --random --seed 5 --json --shape '{\"q_heads\": 4, \"kv_heads\": 2, \"head_dim\": 64, "
      "\"seq_len\": 96, \"cp_size\": 2, \"dtype\": \"fp16\", \"causal\": true}'");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto doc = nlohmann::json::parse(r.out);
  EXPECT_TRUE(doc.at("ok").get<bool>());
  EXPECT_NE(doc.at("precision").get<std::string>().find("ring_fwd_fp16_hd64_causal_gqa2_"), std::string::npos)
      << doc.at("precision");
}

// A --shape's mask and layout reach the run: the masked kernels (_ivl, _cap) over shards in the
// shape's layout, checked against the masked float64 reference (the mask and layout were dropped,
// and every masked shape ran as the unmasked bhsd one).
TEST_F(CmdVerifyEmulated, ARandomShapeRunsWithItsMaskAndLayout) {
  const std::string base = "verify --backend emulated --random --json --shape '{\"q_heads\": 4, \"kv_heads\": 2, "
                           "\"head_dim\": 64, \"seq_len\": 96, \"cp_size\": 2, \"dtype\": \"bf16\", \"causal\": true";
  for (const auto& [extra, uri, layout] :
       {std::tuple<std::string, std::string, bool>{", \"window\": {\"left\": 8, \"right\": null}, \"softcap\": 20",
                                                   "ring_fwd_bf16_hd64_causal_ivl_cap_gqa2_", false},
        {", \"documents\": [40, 56], \"layout\": \"sbhd\"", "ring_fwd_bf16_hd64_causal_ivl_gqa2_", true}}) {
    const auto r = run_cli(base + extra + "}'");
    ASSERT_EQ(r.exit_code, 0) << extra << "\n" << r.out << r.err;
    const auto doc = nlohmann::json::parse(r.out);
    EXPECT_TRUE(doc.at("ok").get<bool>()) << r.out;
    const std::string precision = doc.at("precision").get<std::string>();
    EXPECT_NE(precision.find(uri), std::string::npos) << precision;
    EXPECT_EQ(precision.find("tensors in layout sbhd") != std::string::npos, layout) << precision;
  }
}

TEST_F(CmdVerifyEmulated, SpecChoosesTheKernelPerStepType) {
  const auto r = run_cli("verify --vectors " + vectors("gqa4_causal_hd64_s32.json") +
                         " --backend emulated --scheme zigzag --ranks 2 --json"
                         " --spec ring_fwd_bf16_hd64_causal_gqa4_bm64_bn32_w2_s3"
                         " --spec zigzag-q-half=ring_fwd_bf16_hd64_causal_gqa4_bm128_bn64_w8_s1");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const std::string precision = nlohmann::json::parse(r.out).at("precision");
  EXPECT_NE(precision.find("diagonal ring_fwd_bf16_hd64_causal_gqa4_bm64_bn32_w2_s3"), std::string::npos) << precision;
  EXPECT_NE(precision.find("zigzag-q-half ring_fwd_bf16_hd64_causal_gqa4_bm128_bn64_w8_s1"), std::string::npos)
      << precision;
  // Kernels that differ by step type are listed by step, the backward's after "; backward:" (an
  // " and" after the last forward step read as that step's).
  EXPECT_EQ(nlohmann::json::parse(r.out).at("checks").size(), 5u) << "the file has gradients: the backward ran";
  EXPECT_NE(precision.find("; backward: ring_bwd_bf16_hd64_causal_gqa4_"), std::string::npos) << precision;
}

// A ring_bwd_ URI chooses the backward kernel of its step type (or of every backward step type
// without STEP=): the emulated backward runs it and the report names it. (--spec took forward
// kernels only, and its refusal of a backward one said the backend checks the forward alone,
// while the backward ran whatever selection chose.)
TEST_F(CmdVerifyEmulated, SpecChoosesTheBackwardKernelPerStepType) {
  const auto r = run_cli("verify --vectors " + vectors("gqa4_causal_hd64_s32.json") +
                         " --backend emulated --scheme zigzag --ranks 2 --json"
                         " --spec bwd-diagonal=ring_bwd_bf16_hd64_causal_gqa4_bm64_bn32_w4_s2");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const nlohmann::json report = nlohmann::json::parse(r.out);
  const std::string precision = report.at("precision");
  EXPECT_NE(precision.find("bwd-diagonal ring_bwd_bf16_hd64_causal_gqa4_bm64_bn32_w4_s2"), std::string::npos) << precision;
  EXPECT_NE(precision.find("bwd-zigzag-q-half ring_bwd_bf16_hd64_causal_gqa4_bm64_bn64_"), std::string::npos) << precision;
  ASSERT_EQ(report.at("checks").size(), 5u) << r.out;
  for (const auto& check : report.at("checks")) EXPECT_TRUE(check.at("ok").get<bool>()) << check.dump();
}

// No host compiler: one line naming what to install, exit 1 (not the user's input).
TEST_F(CmdVerifyEmulated, MissingCompilerIsOneLineNamingThePackage) {
  const char* old = std::getenv("CXX");
  const std::string saved = old ? old : "";
  ::setenv("CXX", "no-such-compiler-cpgen", 1);
  const auto r = run_cli("verify --vectors " + vectors("gqa4_causal_hd64_s32.json") +
                         " --backend emulated --scheme zigzag --ranks 2");
  if (old)
    ::setenv("CXX", saved.c_str(), 1);
  else
    ::unsetenv("CXX");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("apt-get install g++"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

TEST_F(CmdVerifyEmulated, BadInputIsOneLineAndExitTwo) {
  const std::string base = "verify --vectors " + vectors("gqa4_causal_hd64_s32.json") + " --scheme zigzag --ranks 2 ";
  struct Case {
    std::string args, says;
  };
  for (const Case& c : std::vector<Case>{
           {"--backend emulated --dtype fp32", "--dtype fp32 is not supported by --backend emulated; allowed: bf16, fp16"},
           {"--backend emulated --spec ring_fwd_bf16_hd128_causal_gqa4_bm128_bn64_w4_s2", "the problem is bf16 hd64"},
           {"--backend emulated --spec full=ring_fwd_bf16_hd64_causal_gqa4_bm128_bn64_w4_s2", "has no full step"},
           {"--backend emulated --spec nonsense", "--spec 'nonsense'"},
           {"--backend emulated --spec diag=ring_fwd_bf16_hd64_causal_gqa4_bm128_bn64_w4_s2",
            "'diag' is not a step type of this problem; its step types: diagonal, zigzag-kv-half, zigzag-q-half, "
            "bwd-diagonal, bwd-zigzag-kv-half, bwd-zigzag-q-half"},
           {"--backend emulated --spec diagonal=ring_bwd_bf16_hd64_causal_gqa4_bm64_bn64_w4_s2",
            "a backward kernel cannot run the diagonal step"},
           {"--backend emulated --spec ring_bwd_pre_bf16_hd64_w4", "not a ring step kernel"},
           {"--backend cpu --spec ring_fwd_bf16_hd64_causal_gqa4_bm128_bn64_w4_s2", "--spec is not taken by --backend cpu"},
           {"--backend emulated --transport nccl", "allowed: threads"},
           {"--backend cpu --approx high", "--approx is taken by --backend emulated only"},
           {"--backend emulated --approx worst", "--approx 'worst' is not one of exact, high, low, mixed"},
           {"--backend emulated --spec ring_fwd_bf16_hd64_causal_ivl_gqa4_bm128_bn64_w4_s2",
            "the kernel is with key intervals (_ivl) and without softcap (_cap); the problem needs no _ivl"}}) {
    const auto r = run_cli(base + c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << c.args << "\n" << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

// --approx: the emulator's .approx instructions at an edge of the PTX ISA's bound. A softcapped
// shape's kernels (ex2, and rcp in the cap) still pass at each edge, and the report says which edge ran.
TEST_F(CmdVerifyEmulated, ApproxRunsAtTheEdgesOfTheIsasBound) {
  const std::string shape = "verify --backend emulated --random --seed 9 --shape '{\"q_heads\": 2, \"kv_heads\": 1, "
                            "\"head_dim\": 64, \"seq_len\": 64, \"cp_size\": 2, \"dtype\": \"bf16\", \"causal\": true, "
                            "\"softcap\": 1.5}' --approx ";
  for (const std::string mode : {"high", "low", "mixed"}) {
    const auto r = run_cli(shape + mode + " --json");
    ASSERT_EQ(r.exit_code, 0) << mode << "\n" << r.out << r.err;
    const auto doc = nlohmann::json::parse(r.out);
    EXPECT_TRUE(doc.at("ok").get<bool>()) << r.out;
    EXPECT_EQ(doc.at("approx"), mode);
  }
  const auto text = run_cli(shape + "high");
  ASSERT_EQ(text.exit_code, 0) << text.out << text.err;
  EXPECT_NE(text.out.find(".approx instructions (ex2, rcp): at the high edge of the PTX ISA's error bound"),
            std::string::npos)
      << text.out;
}

// A window problem needs the kernels with key intervals: one without them is refused.
TEST_F(CmdVerifyEmulated, SpecWithoutTheProblemsMaskFeaturesIsRefused) {
  const auto r = run_cli("verify --vectors " + vectors("mha_window16_hd64_s64.json") +
                         " --scheme zigzag --ranks 2 --backend emulated --spec ring_fwd_bf16_hd64_causal_gqa1_bm128_bn64_w4_s2");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("the kernel is without key intervals (_ivl) and without softcap (_cap); the problem needs _ivl"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

// Issue 13: `--spec wgmma` names the sm_90a family's default tiles of the problem, with its mask's
// flags: a window problem runs the `_ivl` kernel of the family and passes, and so does its
// ping-pong variant (`--spec wgmma-pingpong`) and its persistent launch (`--spec wgmma-persistent`,
// which the emulated device launches over EmulatedDevice::kResidentCtas CTAs); a wgmma URI without
// the flag is refused in one line like any kernel lacking the problem's mask.
TEST_F(CmdVerifyEmulated, SpecWgmmaRunsTheFamilysDefaultWithTheProblemsMask) {
  const std::string base = "verify --vectors " + vectors("mha_window16_hd64_s64.json") +
                           " --scheme zigzag --ranks 2 --backend emulated --dtype bf16 --json --spec ";
  const auto ok = run_cli(base + "wgmma");
  ASSERT_EQ(ok.exit_code, 0) << ok.out << ok.err;
  EXPECT_NE(ok.out.find("ring_fwd_wgmma_bf16_hd64_causal_ivl_gqa1_bm128_bn128_c2_s2"), std::string::npos) << ok.out;
  // `--spec wgmma-pingpong`: the same tiles and mask in the ping-pong schedule.
  const auto pingpong = run_cli(base + "wgmma-pingpong");
  ASSERT_EQ(pingpong.exit_code, 0) << pingpong.out << pingpong.err;
  EXPECT_NE(pingpong.out.find("ring_fwd_wgmma_bf16_hd64_causal_ivl_gqa1_bm128_bn128_c2_s2_pingpong"), std::string::npos)
      << pingpong.out;
  const auto persistent = run_cli(base + "wgmma-persistent");
  ASSERT_EQ(persistent.exit_code, 0) << persistent.out << persistent.err;
  EXPECT_NE(persistent.out.find("ring_fwd_wgmma_bf16_hd64_causal_ivl_gqa1_bm128_bn128_c2_s2_persistent"),
            std::string::npos)
      << persistent.out;
  const auto refused = run_cli(base + "ring_fwd_wgmma_bf16_hd64_causal_gqa1_bm64_bn64_c1_s2");
  EXPECT_EQ(refused.exit_code, 2) << refused.err;
  EXPECT_NE(refused.err.find("without key intervals (_ivl)"), std::string::npos) << refused.err;
  EXPECT_EQ(std::count(refused.err.begin(), refused.err.end(), '\n'), 1) << refused.err;
}

}  // namespace
}  // namespace cpgen
