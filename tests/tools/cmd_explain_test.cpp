// cpgen explain's answers to bad input and its JSON report of the database it looked at.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "../cache/cache_fixtures.h"
#include "../cache/damaged_db.h"
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

}  // namespace
}  // namespace cpgen::testing
