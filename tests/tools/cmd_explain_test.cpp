// cpgen explain's answers to bad input and its JSON report of the database it looked at.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "../cache/cache_fixtures.h"
#include "../cache/damaged_db.h"
#include "cache/exchange.h"
#include "cache/records.h"
#include "cpgen/cpgen_c.h"
#include "runtime/jit/jit.h"
#include "test_util.h"

namespace cpgen::testing {
namespace {

const char* kShape =
    R"('{"q_heads": 8, "kv_heads": 8, "head_dim": 128, "seq_len": 4096, "cp_size": 2, "dtype": "bf16", "causal": true}')";

class CmdExplain : public TempDirTest {};

// A window and a softcap select the same tile configs, specialized on key intervals and softcap;
// a causal-only shape keeps the kernels without them. On sm_90 (the mma.sync default); on sm_90a,
// where this combination's default is the wgmma family, its kernel is specialized the same way.
TEST_F(CmdExplain, MaskedShapeShowsTheSpecializedKernels) {
  const std::string masked =
      R"('{"q_heads": 8, "kv_heads": 8, "head_dim": 128, "seq_len": 4096, "cp_size": 2, "dtype": "bf16", )"
      R"("causal": true, "window": {"left": 256, "right": null}, "softcap": 30}')";
  CliResult hopper = run_cli("explain --arch sm_90a --db " + path("none.db") + " --shape " + masked);
  ASSERT_EQ(hopper.exit_code, 0) << hopper.err;
  EXPECT_NE(hopper.out.find("ring_fwd_wgmma_bf16_hd128_causal_ivl_cap_gqa1_"), std::string::npos) << hopper.out;
  CliResult r = run_cli("explain --arch sm_90 --db " + path("none.db") + " --shape " + masked);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("ring_fwd_bf16_hd128_causal_ivl_cap_gqa1_"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ring_bwd_bf16_hd128_causal_ivl_cap_gqa1_"), std::string::npos) << r.out;
  // Nothing was tuned for the mask: the reason says the unmasked shape's config stands in.
  EXPECT_NE(r.out.find("no record for the masked workload (window=256,-1 softcap)"), std::string::npos) << r.out;
  CliResult plain = run_cli("explain --arch sm_90 --db " + path("none.db") + " --shape " + kShape);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_NE(plain.out.find("ring_fwd_bf16_hd128_causal_gqa1_"), std::string::npos) << plain.out;
  EXPECT_EQ(plain.out.find("_ivl"), std::string::npos) << plain.out;
  EXPECT_EQ(plain.out.find("_cap"), std::string::npos) << plain.out;
}

// Under CPGEN_TEMPLATES_DIR the records and cache entries of kernels those templates change are
// passed over (their code hash differs); explain says so on its second line, and not without the
// variable. Set for the child only: the test process keeps its own templates.
TEST_F(CmdExplain, UnderAnotherTemplatesFolderItSaysTimedRecordsDoNotApply) {
  const std::string folder = std::string(CPGEN_SOURCE_DIR) + "/templates";
  const std::string command = " '" + std::string(CPGEN_CLI_PATH) + "' explain --arch sm_90a --db " + path("none.db") +
                              " --shape " + kShape;
  const ShellResult with = run_shell("CPGEN_TEMPLATES_DIR='" + folder + "'" + command, path("with.log"));
  ASSERT_EQ(with.code, 0) << with.output;
  const std::string line = "templates " + folder + " (CPGEN_TEMPLATES_DIR): records and cache entries apply only "
                           "to kernels these templates leave unchanged\n";
  EXPECT_NE(with.output.find("\n" + line), std::string::npos) << with.output;
  const ShellResult without = run_shell("env -u CPGEN_TEMPLATES_DIR" + command, path("without.log"));
  ASSERT_EQ(without.code, 0) << without.output;
  EXPECT_EQ(without.output.find("CPGEN_TEMPLATES_DIR"), std::string::npos) << without.output;
}

TEST_F(CmdExplain, NotADbIsOneLineNoSourceLine) {
  std::ofstream(path("notadb")) << "hello\n";
  CliResult r = run_cli("explain --db " + path("notadb") + " --shape " + kShape);
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_EQ(line_count(r.err), 1) << r.err;
  EXPECT_EQ(r.err.find(".cpp"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("sqlite3_"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("not an SQLite database"), std::string::npos) << r.err;
  EXPECT_EQ(file_bytes(path("notadb")), "hello\n");
}

TEST_F(CmdExplain, ShapeThatIsNotJsonQuotesOnlyWhatTheUserWrote) {
  CliResult r = run_cli("explain --shape 'not json'");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(line_count(r.err), 1) << r.err;
  EXPECT_EQ(r.err.find("shapes"), std::string::npos) << "the user never wrote a shapes wrapper: " << r.err;
  EXPECT_NE(r.err.find("--shape"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("line 1, column "), std::string::npos) << r.err;
  // A shape that is JSON but not an object says so, also without a wrapper.
  CliResult list = run_cli("explain --shape '[1, 2]'");
  EXPECT_EQ(list.exit_code, 2);
  EXPECT_EQ(list.err.find("shapes"), std::string::npos) << list.err;
}

TEST_F(CmdExplain, JsonNamesTheDefaultDatabasePath) {
  // No --db and no $CPGEN_DB: the default under $XDG_CACHE_HOME, where no file exists.
  CliResult r, text;
  {
    ScopedEnv env("CPGEN_DB", nullptr);
    env.set("XDG_CACHE_HOME", path("xdg").c_str());
    r = run_cli("explain --json --shape " + std::string(kShape));
    text = run_cli("explain --shape " + std::string(kShape));
  }
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string default_path = path("xdg") + "/cpgen/cpgen.db";
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["db"], default_path) << r.out;
  EXPECT_EQ(j["db_used"], false);
  EXPECT_EQ(j["db_note"], "absent");
  EXPECT_NE(text.out.find(default_path), std::string::npos) << "text mode names it too: " << text.out;
  EXPECT_FALSE(std::filesystem::exists(path("xdg"))) << "explain must not create the default folder";
}

TEST_F(CmdExplain, DamagedDbIsReportedWithExitOne) {
  write_truncated_db(path("d.db"));
  const std::string before = file_bytes(path("d.db"));
  CliResult r = run_cli("explain --db " + path("d.db") + " --shape " + kShape);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find(path("d.db")), std::string::npos) << r.err;
  EXPECT_EQ(file_bytes(path("d.db")), before);
}

// A shipped cache in folder `dir` (examples.json) whose winner for each of `steps` (explain
// --json's forward steps) is the mma.sync tile 64x64, 4 warps, 2 stages, timed in `env` as `cpgen
// tune` stamps its records (cache/environment.h, current_environment; per_kernel gives each record
// its kernel's code hash). That tile is no documented default, so an answer shows its source.
void write_timed_cache(const std::string& dir, const nlohmann::json& steps, const Environment& env) {
  std::filesystem::create_directories(dir);
  Database db(dir + "/tuned.db");
  for (const nlohmann::json& step : steps) {
    WorkloadKey w = WorkloadKey::from_json(step["workload"]);
    w.gpu_name = env.gpu_name;
    w.sm_count = env.sm_count;
    const Record winner = test_record(w, 64, 64, 4, 2, 0.5, Disposition::kOk, env);
    ASSERT_NE(winner.kernel_uri, step["kernel"].get<std::string>());
    put_record(db, winner);
    db.transaction([&] { pin_winner(db, w, {winner.kernel_uri, 0.5, winner.env.key(), "tune"}); });
  }
  std::ofstream(dir + "/examples.json") << cache_text(export_cache(db));
}

// A vendor's environment: `gpu` with `sm_count` SMs, another NVRTC and driver than this machine's.
Environment vendor_env(const std::string& gpu, int sm_count) {
  Environment e;
  e.cpgen_version = cpgen_version();
  e.template_hash = "per-kernel";
  e.per_kernel = true;
  e.nvrtc_version = nvrtc_version() + ".1";
  e.driver_version = "12.8";
  e.gpu_name = gpu;
  e.sm_count = sm_count;
  return e;
}

const char* kTimedKernel = "ring_fwd_bf16_hd128_causal_gqa1_bm64_bn64_w4_s2";

// explain --json of kShape with `args` and the shipped caches of `caches` (no database).
nlohmann::json explain_json(const std::string& db, const std::string& caches, const std::string& args = "") {
  ScopedEnv env("CPGEN_CACHES_DIR", caches.c_str());
  CliResult r = run_cli("explain --json --db " + db + " " + args + " --shape " + std::string(kShape));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return nlohmann::json::parse(r.out);
}

#ifdef CPGEN_STANDIN_CUDA_DIR
// Issue 14's shipped cache is to be found by `explain` on a machine of its GPU type with no
// database. The chain behind that, run here on the stand-in driver (tests/nccl_probe/standin_cuda.cpp:
// one "FakeGPU" of compute capability 9.0 with 132 SMs): the device class explain keys workloads
// by, the environment it trusts a shipped entry in (the same GPU name and SM count and the
// kernel's code hash; not NVRTC's or the driver's version, which a user's machine rarely shares
// with the vendor's), and the cache folder's export read back. A cache timed on FakeGPU answers
// every forward step with its winner; the same cache timed on another GPU, or on other kernel
// code, answers none of them.
TEST_F(CmdExplain, AShippedCacheTimedOnThisGpuAnswersWithNoDatabase) {
  ScopedEnv driver("LD_LIBRARY_PATH", CPGEN_STANDIN_CUDA_DIR);
  const nlohmann::json before = explain_json(path("none.db"), path("no-caches"));
  ASSERT_EQ(before["device"], "FakeGPU") << before.dump(1);
  ASSERT_EQ(before["arch"], "sm_90a") << before.dump(1);
  ASSERT_EQ(before["device_assumed"], false) << before.dump(1);
  const nlohmann::json& steps = before["shapes"][0]["steps"];
  ASSERT_FALSE(steps.empty()) << before.dump(1);

  const Environment vendor = vendor_env("FakeGPU", 132);
  write_timed_cache(path("this-gpu"), steps, vendor);
  write_timed_cache(path("other-gpu"), steps, vendor_env("NVIDIA H200", 132));
  Environment other_code = vendor;
  other_code.per_kernel = false;
  other_code.template_hash = "0123456789abcdef";
  write_timed_cache(path("other-code"), steps, other_code);

  const nlohmann::json found = explain_json(path("none.db"), path("this-gpu"));
  for (const nlohmann::json& step : found["shapes"][0]["steps"]) {
    EXPECT_EQ(step["source"], "pretuned-exact") << step.dump(1);
    EXPECT_EQ(step["origin"], path("this-gpu") + "/examples.json") << step.dump(1);
    EXPECT_EQ(step["kernel"], kTimedKernel) << step.dump(1);
  }
  for (const char* name : {"other-gpu", "other-code"}) {
    const nlohmann::json other = explain_json(path("none.db"), path(name));
    for (size_t i = 0; i < steps.size(); ++i) {
      const nlohmann::json& step = other["shapes"][0]["steps"][i];
      EXPECT_NE(step["source"], "pretuned-exact") << name << ": " << step.dump(1);
      EXPECT_EQ(step["kernel"], steps[i]["kernel"]) << name << ": " << step.dump(1);
    }
  }
}
#endif

// explain --gpu NAME --arch A --sm-count N selects as on that GPU, wherever it runs: a cache timed
// on an H200 answers for --gpu 'NVIDIA H200' with 132 SMs and not for 114 SMs (an H100 PCIe's
// count under the same name would be another device class). --gpu needs both other options, and
// --sm-count means nothing without it: one line each, exit 2.
TEST_F(CmdExplain, GpuOptionSelectsAsOnThatGpu) {
  const std::string h200 = "--gpu 'NVIDIA H200' --arch sm_90a --sm-count 132";
  const nlohmann::json before = explain_json(path("none.db"), path("no-caches"), h200);
  ASSERT_EQ(before["device"], "NVIDIA H200") << before.dump(1);
  ASSERT_EQ(before["sm_count"], 132) << before.dump(1);
  ASSERT_EQ(before["device_assumed"], true) << before.dump(1);
  const nlohmann::json& steps = before["shapes"][0]["steps"];
  ASSERT_FALSE(steps.empty()) << before.dump(1);
  EXPECT_EQ(steps[0]["workload"]["gpu_name"], "NVIDIA H200") << steps[0].dump(1);
  write_timed_cache(path("h200"), steps, vendor_env("NVIDIA H200", 132));

  const nlohmann::json found = explain_json(path("none.db"), path("h200"), h200);
  for (const nlohmann::json& step : found["shapes"][0]["steps"]) {
    EXPECT_EQ(step["source"], "pretuned-exact") << step.dump(1);
    EXPECT_EQ(step["kernel"], kTimedKernel) << step.dump(1);
  }
  const nlohmann::json fewer_sms =
      explain_json(path("none.db"), path("h200"), "--gpu 'NVIDIA H200' --arch sm_90a --sm-count 114");
  for (const nlohmann::json& step : fewer_sms["shapes"][0]["steps"])
    EXPECT_NE(step["source"], "pretuned-exact") << step.dump(1);
  {
    ScopedEnv env("CPGEN_CACHES_DIR", path("h200").c_str());
    CliResult text = run_cli("explain --db " + path("none.db") + " " + h200 + " --shape " + kShape);
    ASSERT_EQ(text.exit_code, 0) << text.err;
    EXPECT_EQ(text.out.rfind("device NVIDIA H200 (sm_90a, 132 SMs, assumed by --gpu), nccl ring", 0), 0) << text.out;
  }

  for (const std::string& bad : {std::string("--gpu 'NVIDIA H200' --sm-count 132"), std::string("--gpu 'NVIDIA H200' --arch sm_90a"),
                                 std::string("--sm-count 132")}) {
    CliResult r = run_cli("explain --db " + path("none.db") + " " + bad + " --shape " + kShape);
    EXPECT_EQ(r.exit_code, 2) << bad << ": " << r.err;
    EXPECT_EQ(line_count(r.err), 1) << bad << ": " << r.err;
    EXPECT_NE(r.err.find(bad.find("--gpu") == 0 ? "needs --arch and --sm-count" : "only read with --gpu"), std::string::npos)
        << bad << ": " << r.err;
    EXPECT_TRUE(r.out.empty()) << bad << ": " << r.out;
  }
  // Not a name any driver reports: a control character (here a newline) or 256 characters.
  for (const std::string& name : {std::string("NVIDIA\nH200"), std::string(256, 'H')}) {
    CliResult r = run_cli("explain --db " + path("none.db") + " --gpu '" + name + "' --arch sm_90a --sm-count 132 --shape " + kShape);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_EQ(line_count(r.err), 1) << r.err;
    EXPECT_NE(r.err.find("is not a GPU's name as a driver reports it"), std::string::npos) << r.err;
  }
}

}  // namespace
}  // namespace cpgen::testing
