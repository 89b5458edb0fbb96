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
  const std::string standin = CPGEN_STANDIN_CUDA_DIR;
  const auto explain = [&](const std::string& caches) {
    ScopedEnv env("LD_LIBRARY_PATH", standin.c_str());
    env.set("CPGEN_CACHES_DIR", caches.c_str());
    CliResult r = run_cli("explain --json --db " + path("none.db") + " --shape " + std::string(kShape));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return nlohmann::json::parse(r.out);
  };
  const nlohmann::json before = explain(path("no-caches"));
  ASSERT_EQ(before["device"], "FakeGPU") << before.dump(1);
  ASSERT_EQ(before["arch"], "sm_90a") << before.dump(1);
  const nlohmann::json& steps = before["shapes"][0]["steps"];
  ASSERT_FALSE(steps.empty()) << before.dump(1);

  // As `cpgen tune` stamps its records (cache/environment.h, current_environment), on a vendor's
  // FakeGPU with another NVRTC and driver than this machine's.
  Environment vendor;
  vendor.cpgen_version = cpgen_version();
  vendor.template_hash = "per-kernel";
  vendor.per_kernel = true;  // each record gets its kernel's code hash
  vendor.nvrtc_version = nvrtc_version() + ".1";
  vendor.driver_version = "12.8";
  vendor.gpu_name = "FakeGPU";
  vendor.sm_count = 132;
  const auto write_cache = [&](const std::string& name, const Environment& env) {
    Database db(path(name + ".db"));
    for (const nlohmann::json& step : steps) {
      WorkloadKey w = WorkloadKey::from_json(step["workload"]);
      w.gpu_name = env.gpu_name;
      // Not the documented default (on sm_90a the wgmma one), so that the answer shows its source.
      const Record winner = test_record(w, 64, 64, 4, 2, 0.5, Disposition::kOk, env);
      ASSERT_NE(winner.kernel_uri, step["kernel"].get<std::string>());
      put_record(db, winner);
      db.transaction([&] { pin_winner(db, w, {winner.kernel_uri, 0.5, winner.env.key(), "tune"}); });
    }
    std::filesystem::create_directories(path(name));
    std::ofstream(path(name + "/examples.json")) << cache_text(export_cache(db));
  };
  write_cache("this-gpu", vendor);
  Environment other_gpu = vendor;
  other_gpu.gpu_name = "NVIDIA H200";
  write_cache("other-gpu", other_gpu);
  Environment other_code = vendor;
  other_code.per_kernel = false;
  other_code.template_hash = "0123456789abcdef";
  write_cache("other-code", other_code);

  const nlohmann::json found = explain(path("this-gpu"));
  for (const nlohmann::json& step : found["shapes"][0]["steps"]) {
    EXPECT_EQ(step["source"], "pretuned-exact") << step.dump(1);
    EXPECT_EQ(step["origin"], path("this-gpu") + "/examples.json") << step.dump(1);
    EXPECT_EQ(step["kernel"], "ring_fwd_bf16_hd128_causal_gqa1_bm64_bn64_w4_s2") << step.dump(1);
  }
  for (const char* name : {"other-gpu", "other-code"}) {
    const nlohmann::json other = explain(path(name));
    for (size_t i = 0; i < steps.size(); ++i) {
      const nlohmann::json& step = other["shapes"][0]["steps"][i];
      EXPECT_NE(step["source"], "pretuned-exact") << name << ": " << step.dump(1);
      EXPECT_EQ(step["kernel"], steps[i]["kernel"]) << name << ": " << step.dump(1);
    }
  }
}
#endif

}  // namespace
}  // namespace cpgen::testing
