// cpgen db and cpgen explain through the command line, on databases the test builds itself.
#include <gtest/gtest.h>

#include <fstream>

#include "cache/database.h"
#include "cache/records.h"
#include "cache_fixtures.h"
#include "test_util.h"

namespace cpgen::testing {
namespace {

class CmdDbTest : public TempDirTest {
 protected:
  // A database holding records of the machine's real environment (so explain can select them)
  // and one of a stale driver.
  void fill(const std::string& db_path) {
    Database db(db_path);
    Environment here = current_environment();
    WorkloadKey w = test_workload();
    w.gpu_name = here.gpu_name;
    w.sm_count = here.sm_count;
    put_record(db, test_record(w, 128, 128, 8, 2, 0.75, Disposition::kOk, here));
    put_record(db, test_record(w, 128, 64, 4, 2, 0.9, Disposition::kOk, here));
    Environment stale = here;
    stale.driver_version = "11.0";
    put_record(db, test_record(w, 64, 64, 4, 2, 0.1, Disposition::kOk, stale));
  }
  std::string shape() const {
    // The shape whose diagonal workload is test_workload(): local length 16384 with cp 2.
    return R"('{"name": "s", "q_heads": 32, "kv_heads": 8, "head_dim": 128, "seq_len": 32768, "cp_size": 2, "dtype": "bf16", "causal": true, "scheme": "zigzag"}')";
  }
};

TEST_F(CmdDbTest, ExportImportRoundTripsThroughFiles) {
  fill(path("a.db"));
  ASSERT_EQ(run_cli("db export --db " + path("a.db") + " -o " + path("a.json")).exit_code, 0);
  CliResult imported = run_cli("db import " + path("a.json") + " --db " + path("b.db"));
  ASSERT_EQ(imported.exit_code, 0) << imported.err;
  EXPECT_NE(imported.out.find("3 added"), std::string::npos) << imported.out;
  CliResult again = run_cli("db export --db " + path("b.db"));
  ASSERT_EQ(again.exit_code, 0);
  std::ifstream in(path("a.json"));
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), again.out);
  CliResult merged = run_cli("db merge " + path("a.db") + " --db " + path("b.db") + " --json");
  ASSERT_EQ(merged.exit_code, 0) << merged.err;
  EXPECT_EQ(nlohmann::json::parse(merged.out)["kept"], 3);
}

TEST_F(CmdDbTest, VerifyReportsOtherEnvironmentRows) {
  fill(path("a.db"));
  CliResult r = run_cli("db verify --json --db " + path("a.db"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["sound"], true);
  EXPECT_EQ(j["records"], 3);
  EXPECT_EQ(j["other_environment"], 1);
  CliResult text = run_cli("db verify --db " + path("a.db"));
  EXPECT_NE(text.out.find("integrity ok"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("1 record(s) of another environment"), std::string::npos) << text.out;
}

TEST_F(CmdDbTest, GarbageNamedByTheUserIsRefusedAndLeftAsItIs) {
  const std::string garbage(5000, 'x');
  std::ofstream(path("g.db")) << garbage;
  CliResult r = run_cli("db show --db " + path("g.db"));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("not an SQLite database"), std::string::npos) << r.err;
  std::ifstream in(path("g.db"));
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), garbage);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir_), {}), 1) << "nothing may be created beside it";
}

TEST_F(CmdDbTest, ExplainSaysWhereTheConfigCameFrom) {
  fill(path("a.db"));
  CliResult r = run_cli("explain --json --db " + path("a.db") + " --shape " + shape());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  const auto& steps = j["shapes"][0]["steps"];
  ASSERT_EQ(steps.size(), 3u);
  EXPECT_EQ(steps[0]["step_type"], "diagonal");
  EXPECT_EQ(steps[0]["source"], "database-exact");
  EXPECT_EQ(steps[0]["kernel"], "ring_fwd_bf16_hd128_causal_gqa4_bm128_bn128_w8_s2");  // not the faster stale row
  EXPECT_EQ(steps[0]["ignored_other_environment"], 1);
  // The half steps were never tuned: the shipped default-heuristic cache answers, on sm_90a
  // (explain's arch without a GPU) with the wgmma family's default at bf16 hd128 GQA 4.
  EXPECT_EQ(steps[1]["source"], "pretuned-pattern");
  EXPECT_EQ(steps[1]["kernel"], "ring_fwd_wgmma_bf16_hd128_causal_gqa4_bm128_bn128_c2_s2");
  CliResult none = run_cli("explain --db " + path("absent.db") + " --shape " + shape());
  ASSERT_EQ(none.exit_code, 0) << none.err;
  EXPECT_NE(none.out.find("(absent)"), std::string::npos) << none.out;
  EXPECT_FALSE(std::filesystem::exists(path("absent.db"))) << "explain must not create a database";
  EXPECT_EQ(run_cli("explain --shape '{\"q_heads\": 8}'").exit_code, 2);
}

}  // namespace
}  // namespace cpgen::testing

namespace cpgen::testing {
namespace {

TEST_F(CmdDbTest, ReadOnlySubcommandsNeverCreateADatabase) {
  for (const char* sub : {"show", "export", "verify"}) {
    CliResult r = run_cli(std::string("db ") + sub + " --db " + path("none.db"));
    EXPECT_EQ(r.exit_code, 2) << sub;
    EXPECT_NE(r.err.find("no tuning database at " + path("none.db")), std::string::npos) << r.err;
    EXPECT_FALSE(std::filesystem::exists(path("none.db"))) << sub;
  }
}

}  // namespace
}  // namespace cpgen::testing

namespace cpgen::testing {
namespace {

TEST_F(CmdDbTest, VerifyFailsOnADamagedFile) {
  {
    Database db(path("d.db"));
    for (int i = 0; i < 300; ++i) {
      Record r = test_record(test_workload(1024 + i), 128, 64, 4, 2, 1.0 + i);
      r.samples_ms.assign(100, 1.0 + i);
      put_record(db, r);
    }
    db.exec("PRAGMA wal_checkpoint(TRUNCATE)");
  }
  // Overwrite the middle of the file (record and index pages; the schema page stays readable).
  const auto size = std::filesystem::file_size(path("d.db"));
  ASSERT_GT(size, 64u * 1024);
  {
    std::fstream f(path("d.db"), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(size / 2));
    const std::string junk(8192, '\x5a');
    f.write(junk.data(), junk.size());
  }
  CliResult r = run_cli("db verify --json --db " + path("d.db"));
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["sound"], false);
  EXPECT_NE(j["integrity"][0], "ok");
}

}  // namespace
}  // namespace cpgen::testing
