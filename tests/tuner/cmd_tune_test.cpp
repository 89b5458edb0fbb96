// cpgen tune on this (GPU-less) machine, end to end through the real NVRTC and a temporary
// database and kernel store; and the same command's GPU path where a GPU exists.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>

#include "../cache/cache_fixtures.h"
#include "cache/database.h"
#include "cache/records.h"
#include "runtime/cuda/module.h"
#include "runtime/ring/shapes.h"
#include "test_util.h"
#include "tuner/candidates.h"
#include "tuner/tuner.h"

namespace cpgen::testing {
namespace {

class CmdTuneTest : public TempDirTest {
 protected:
  std::string shapes_file() const { return std::string(CPGEN_SOURCE_DIR) + "/examples/shapes/video-dit-full-cp8.json"; }
  std::string common() const { return " --db " + path("t.db") + " --store " + path("store") + " -q"; }
};

// A masked shape tunes workloads that carry its mask: without a GPU the masked kernels are
// compiled and recorded as not timed under the masked workloads, the unmasked shape gets nothing,
// and --json names the mask. One rank, the default candidate only: two NVRTC compiles.
TEST_F(CmdTuneTest, MaskedShapeCompilesTheMaskedKernelsUnderMaskedWorkloads) {
  if (have_gpu()) GTEST_SKIP() << "a GPU is present: tune times instead";
  std::ofstream(path("masked.json"))
      << R"({"shapes": [{"name": "swa", "q_heads": 8, "kv_heads": 8, "head_dim": 128, "seq_len": 1024, )"
      << R"("cp_size": 1, "dtype": "bf16", "causal": true, "window": {"left": 256, "right": null}, "softcap": 30}]})";
  CliResult r = run_cli("tune --json --max-candidates 1 --shapes " + path("masked.json") + common());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["workloads"].size(), 2u) << r.out;
  for (const auto& item : j["workloads"]) {
    EXPECT_EQ(item["workload"]["window_left"], 256) << item.dump();
    EXPECT_EQ(item["workload"]["softcap"], true) << item.dump();
  }
  Database db(path("t.db"));
  const Problem p = load_shapes_file(path("masked.json")).at(0);
  const std::vector<WorkloadKey> workloads = tuned_workloads(p, {"none", "sm_90a", 0}, TuneOptions{});
  ASSERT_EQ(workloads.size(), 2u);
  for (const WorkloadKey& w : workloads) {
    EXPECT_EQ(w.mask.name(), "window=256,-1 softcap") << w.describe();
    // The one viable candidate compiled, the pruned ones recorded as infeasible; all masked.
    const CandidateSet set = enumerate_candidates(w, 1);
    const std::vector<Record> rs = records_for(db, w);
    EXPECT_EQ(rs.size(), set.viable.size() + set.pruned.size()) << w.describe();
    int not_timed = 0;
    for (const Record& rec : rs) {
      not_timed += rec.disposition == Disposition::kNotTimed;
      EXPECT_NE(rec.kernel_uri.find("_causal_ivl_cap_"), std::string::npos) << rec.kernel_uri;
    }
    EXPECT_EQ(not_timed, 1) << w.describe();
    EXPECT_TRUE(records_for(db, w.unmasked()).empty()) << "nothing filed under the unmasked shape";
  }
}

TEST_F(CmdTuneTest, WithoutAGpuCompilesRecordsNotTimedAndExitsZero) {
  if (have_gpu()) GTEST_SKIP() << "a GPU is present: tune times instead (see TuneOnGpu)";
  CliResult r = run_cli("tune --shapes " + shapes_file() + common() + " --max-candidates 2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("timing needs a GPU"), std::string::npos) << r.out;
  Database db(path("t.db"));
  std::vector<Problem> problems = load_shapes_file(shapes_file());
  DeviceClass none{"none", "sm_90a", 0};
  int records = 0, not_timed = 0;
  int backward_workloads = 0;
  for (const Problem& p : problems) {
    // Both directions by default: the forward step types and the backward ones.
    for (const WorkloadKey& w : tuned_workloads(p, none, TuneOptions{})) {
      backward_workloads += is_backward(w.step);
      const CandidateSet set = enumerate_candidates(w, 2);
      std::vector<Record> rs = records_for(db, w);
      EXPECT_EQ(rs.size(), set.viable.size() + set.pruned.size()) << w.describe();
      for (const Record& rec : rs) {
        EXPECT_NE(rec.disposition, Disposition::kOk) << rec.kernel_uri;
        EXPECT_FALSE(rec.median_ms.has_value()) << "nothing may claim a timing without a GPU";
        if (rec.disposition == Disposition::kNotTimed) {
          EXPECT_EQ(rec.detail, "compiled; timing needs a GPU");
          EXPECT_TRUE(rec.registers.has_value()) << "the ptxas report is kept with the record";
          ++not_timed;
        }
        if (rec.disposition != Disposition::kNotTimed) EXPECT_FALSE(rec.detail.empty()) << rec.kernel_uri;
        ++records;
      }
      EXPECT_FALSE(pinned_winner(db, w)) << w.describe();
    }
  }
  EXPECT_GT(records, 0);
  EXPECT_GT(not_timed, 0) << "the documented defaults compile with NVRTC";
  EXPECT_EQ(backward_workloads, static_cast<int>(problems.size())) << "one bwd-full workload per non-causal shape";
}

TEST_F(CmdTuneTest, RequireGpuExitsThreeWithoutAGpu) {
  if (have_gpu()) GTEST_SKIP() << "a GPU is present";
  CliResult r = run_cli("tune --shapes " + shapes_file() + common() + " --require-gpu");
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
  EXPECT_NE(r.err.find("needs a GPU"), std::string::npos) << r.err;
}

TEST_F(CmdTuneTest, JsonReportParses) {
  if (have_gpu()) GTEST_SKIP() << "a GPU is present";
  CliResult r = run_cli("tune --json --shapes " + shapes_file() + common() + " --max-candidates 1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["timed"], false);
  // Two non-causal shapes: a full and a bwd-full workload each, forward first.
  ASSERT_EQ(j["workloads"].size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    const nlohmann::json& item = j["workloads"][i];
    const bool backward = i % 2 == 1;
    EXPECT_EQ(item["direction"], backward ? "backward" : "forward") << item.dump();
    EXPECT_EQ(item["workload"]["step_type"], backward ? "bwd-full" : "full") << item.dump();
    // Where the time went; without a GPU nothing is prepared or timed.
    EXPECT_GE(item["compile_s"].get<double>(), 0) << item.dump();
    EXPECT_EQ(item["setup_s"].get<double>(), 0) << item.dump();
    EXPECT_EQ(item["timing_s"].get<double>(), 0) << item.dump();
    EXPECT_EQ(item["measure_s"].get<double>(), 0) << item.dump();
    EXPECT_EQ(item["store_s"].get<double>(), 0) << item.dump();
  }
  EXPECT_NE(j["notice"].get<std::string>().find("timing needs a GPU"), std::string::npos);
}

TEST_F(CmdTuneTest, KernelsInTheDatabaseMakeTheSecondRunCompileNothing) {
  if (have_gpu()) GTEST_SKIP() << "a GPU is present";
  const std::string args = "tune --json -q --kernels-in-db --max-candidates 1 --db " + path("k.db") + " --shapes " + shapes_file();
  ASSERT_EQ(run_cli(args).exit_code, 0);
  Database db(path("k.db"));
  Statement count = db.prepare("SELECT count(*) FROM kernels");
  ASSERT_TRUE(count.step());
  EXPECT_EQ(count.column_int(0), 4) << "one default forward and one default backward kernel per shape";
  const auto start = std::chrono::steady_clock::now();
  CliResult again = run_cli(args);
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 2.0)
      << "the second run should read all four kernels from the database instead of compiling";
}

TEST_F(CmdTuneTest, OnlyChoosesTheDirection) {
  if (have_gpu()) GTEST_SKIP() << "a GPU is present";
  for (const std::string only : {"bwd", "fwd"}) {
    const std::string db = path(only + ".db");
    CliResult r = run_cli("tune --json --only " + only + " --shapes " + shapes_file() + " --db " + db + " --store " +
                          path("store") + " -q --max-candidates 1");
    ASSERT_EQ(r.exit_code, 0) << only << ": " << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    ASSERT_EQ(j["workloads"].size(), 2u) << only;
    for (const auto& item : j["workloads"]) {
      EXPECT_EQ(item["direction"], only == "bwd" ? "backward" : "forward") << item.dump();
      EXPECT_EQ(is_backward(WorkloadKey::from_json(item["workload"]).step), only == "bwd") << item.dump();
    }
    // Nothing of the other direction reached the database.
    Database opened(db);
    for (const Problem& p : load_shapes_file(shapes_file())) {
      TuneOptions other;
      other.forward = only == "bwd";
      other.backward = only == "fwd";
      for (const WorkloadKey& w : tuned_workloads(p, {"none", "sm_90a", 0}, other)) {
        EXPECT_TRUE(records_for(opened, w).empty()) << only << ": " << w.describe();
      }
    }
  }
}

TEST_F(CmdTuneTest, TextAndProgressLinesNameTheDirection) {
  if (have_gpu()) GTEST_SKIP() << "a GPU is present";
  // Both directions, text output, progress on stderr (not -q).
  CliResult r = run_cli("tune --shapes " + shapes_file() + " --db " + path("t.db") + " --store " + path("store") +
                        " --max-candidates 1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("compile forward full q"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("compile backward bwd-full q"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("  forward: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  backward: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tuned 4 workload(s) of 2 shape(s)"), std::string::npos) << r.out;
}

TEST_F(CmdTuneTest, BadOnlyIsRefusedWithOneLine) {
  CliResult r = run_cli("tune --only both --shapes " + shapes_file() + common());
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find("--only 'both'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("allowed: fwd, bwd"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(path("t.db"))) << "a refused tune must not create the database";
}

TEST_F(CmdTuneTest, BadInputExitsTwoWithOneLine) {
  std::ofstream(path("bad.json")) << R"({"shapes": [{"q_heads": 8, "kv_heads": 3, "head_dim": 128, "seq_len": 4096,
                                        "cp_size": 2, "dtype": "bf16", "causal": true}]})";
  CliResult r = run_cli("tune --shapes " + path("bad.json") + common());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("kv_heads"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  CliResult arch = run_cli("tune --shapes " + shapes_file() + common() + " --arch sm_75");
  EXPECT_EQ(arch.exit_code, 2);
  EXPECT_NE(arch.err.find("sm_75"), std::string::npos) << arch.err;
  CliResult race = run_cli("tune --shapes " + shapes_file() + common() + " --race-margin 0.5");
  EXPECT_EQ(race.exit_code, 2);
  EXPECT_NE(race.err.find("--race-margin 0.5 is not allowed; allowed: 0 (no race) or >= 1"), std::string::npos) << race.err;
  EXPECT_EQ(std::count(race.err.begin(), race.err.end(), '\n'), 1) << race.err;
  CliResult cut = run_cli("tune --shapes " + shapes_file() + common() + " --check-race-margin 0.9");
  EXPECT_EQ(cut.exit_code, 2);
  EXPECT_NE(cut.err.find("--check-race-margin 0.9 is not allowed; allowed: 0 (no such cut) or >= 1"), std::string::npos)
      << cut.err;
  EXPECT_EQ(std::count(cut.err.begin(), cut.err.end(), '\n'), 1) << cut.err;
  // Numeric options are checked as text, before the database exists: --runs and --warmup were
  // checked after it was created (a refused tune left a database), NaN was no --budget-s limit,
  // an empty value was 0, and hex was a count.
  const std::pair<const char*, const char*> options[] = {
      {" --runs 5", "--runs: must be an integer 20..1000000, got 5"},
      {" --warmup 0", "--warmup: must be an integer 1..1000000, got 0"},
      {" --budget-s nan", "--budget-s: must be a finite number >= 0 (0: no limit), got 'nan'"},
      {" --budget-s ''", "(after --budget-s) is empty"},
      {" --max-candidates ''", "(after --max-candidates) is empty"},
      {" --max-candidates 0x10", "--max-candidates: must be an integer 0..1000000 (0: all), got 0x10"},
      {" --race-margin ''", "(after --race-margin) is empty"},
  };
  for (const auto& [option, message] : options) {
    CliResult bad = run_cli("tune --shapes " + shapes_file() + common() + option);
    EXPECT_EQ(bad.exit_code, 2) << option;
    EXPECT_NE(bad.err.find(message), std::string::npos) << option << ": " << bad.err;
    EXPECT_EQ(std::count(bad.err.begin(), bad.err.end(), '\n'), 1) << bad.err;
    EXPECT_FALSE(std::filesystem::exists(path("t.db"))) << option << " created the database";
  }
}

// The GPU acceptance of the forward: one shape, at least 24 candidates, under 30 s, and a verified
// winner at least as fast as the documented default.
TEST_F(CmdTuneTest, TuneOnGpu) {
  CPGEN_REQUIRE_GPU();
  std::ofstream(path("one.json")) << R"({"shapes": [{"name": "llama-8b-32k-cp2", "q_heads": 32, "kv_heads": 8,
      "head_dim": 128, "seq_len": 32768, "cp_size": 2, "dtype": "bf16", "causal": true, "scheme": "contiguous"}]})";
  // Warm the kernel store first: the 30 s target is for tuning, compiles are cached by then. The
  // warm-up sees no GPU (CUDA_VISIBLE_DEVICES empty), so it compiles every candidate for this
  // device's arch and times nothing: one GPU tune, not two, inside the per-test limit.
  {
    const ScopedEnv no_gpu("CUDA_VISIBLE_DEVICES", "");  // for the child: this process's CUDA is set up
    ASSERT_EQ(run_cli("tune --only fwd --max-candidates 24 --arch " + device_arch(0) + " --shapes " + path("one.json") + " --db " +
                      path("warm.db") + " --store " + path("store") + " -q").exit_code, 0);
  }
  const auto start = std::chrono::steady_clock::now();
  // The issue's target is 24 candidates per shape in under 30 s; every workload of the shape gets
  // 24 here. The full search (about 50 per workload) took 48.7 s on the first H100 (2026-11-26).
  CliResult r = run_cli("tune --only fwd --json --require-gpu --max-candidates 24 --shapes " + path("one.json") + common());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["timed"], true);
  EXPECT_LT(seconds, 30.0);
  Database db(path("t.db"));
  for (const auto& item : j["workloads"]) {
    WorkloadKey w = WorkloadKey::from_json(item["workload"]);
    if (w.step != StepType::kDiagonal) continue;
    EXPECT_GE(item["timed"].get<int>() + item["rejected"].get<int>(), 24) << w.describe();
    EXPECT_EQ(item["rejected"].get<int>(), 0) << "a candidate disagreed with the reference config: " << w.describe();
    ASSERT_FALSE(item["winner"].is_null());
    // The documented default of the workload (on sm_90a at bf16 hd128 GQA 4 the wgmma family's).
    const std::string default_uri = tuning_default(w).uri();
    std::optional<double> default_ms;
    for (const Record& rec : records_for(db, w)) {
      if (rec.kernel_uri == default_uri) default_ms = rec.median_ms;
    }
    ASSERT_TRUE(default_ms) << "the default must be timed and verified";
    EXPECT_LE(item["winner_median_ms"].get<double>(), *default_ms);
  }
}

// The same for the backward: every candidate of the bwd-diagonal step agrees with the backward
// default on dq, dk and dv, the default is timed, and the winner is no slower than it. 24
// candidates per workload, compiled beforehand as in TuneOnGpu: the whole backward search
// (every viable tile config, compiles included) was still running after 96 s on the first H200
// (2026-11-27), past what a device call can give one test.
TEST_F(CmdTuneTest, TuneBackwardOnGpu) {
  CPGEN_REQUIRE_GPU();
  std::ofstream(path("one.json")) << R"({"shapes": [{"name": "llama-8b-32k-cp2", "q_heads": 32, "kv_heads": 8,
      "head_dim": 128, "seq_len": 32768, "cp_size": 2, "dtype": "bf16", "causal": true, "scheme": "contiguous"}]})";
  {
    const ScopedEnv no_gpu("CUDA_VISIBLE_DEVICES", "");
    ASSERT_EQ(run_cli("tune --only bwd --max-candidates 24 --arch " + device_arch(0) + " --shapes " + path("one.json") + " --db " +
                      path("warm.db") + " --store " + path("store") + " -q").exit_code, 0);
  }
  CliResult r = run_cli("tune --only bwd --json --require-gpu --max-candidates 24 --shapes " + path("one.json") + common());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["timed"], true);
  Database db(path("t.db"));
  int diagonal = 0;
  for (const auto& item : j["workloads"]) {
    EXPECT_EQ(item["direction"], "backward");
    WorkloadKey w = WorkloadKey::from_json(item["workload"]);
    if (w.step != StepType::kBwdDiagonal) continue;
    ++diagonal;
    EXPECT_EQ(item["rejected"].get<int>(), 0) << "a backward candidate disagreed with the reference config: " << w.describe();
    ASSERT_FALSE(item["winner"].is_null());
    EXPECT_EQ(KernelSpec::parse(item["winner"].get<std::string>()).kind, KernelKind::kBackwardStep);
    const std::string default_uri = tuning_default(w).uri();
    std::optional<double> default_ms;
    for (const Record& rec : records_for(db, w)) {
      if (rec.kernel_uri == default_uri) default_ms = rec.median_ms;
    }
    ASSERT_TRUE(default_ms) << "the backward default must be timed and verified";
    EXPECT_LE(item["winner_median_ms"].get<double>(), *default_ms);
  }
  EXPECT_EQ(diagonal, 1);
}

}  // namespace
}  // namespace cpgen::testing
