#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "cache/database.h"
#include "cache/exchange.h"
#include "cache/pretuned.h"
#include "cache/records.h"
#include "cache_fixtures.h"
#include "cpgen/error.h"
#include "generator/kernel_spec.h"
#include "generator/kernel_spec_wgmma.h"
#include "test_util.h"

namespace cpgen::testing {
namespace {

class ExchangeTest : public TempDirTest {
 protected:
  // A database with every disposition, two environments, two step types and a pinned winner.
  void fill(Database& db) {
    WorkloadKey diag = test_workload();
    WorkloadKey half = test_workload(16384, StepType::kZigzagKvHalf);
    put_record(db, test_record(diag, 128, 64, 4, 2, 1.125));
    put_record(db, test_record(diag, 128, 128, 8, 2, 0.96875));
    put_record(db, test_record(diag, 64, 64, 4, 2, 0, Disposition::kInfeasible));
    put_record(db, test_record(diag, 64, 32, 4, 3, 0, Disposition::kCompileFailed));
    put_record(db, test_record(diag, 128, 32, 4, 2, 0, Disposition::kWrongResult));
    put_record(db, test_record(diag, 64, 128, 4, 2, 0, Disposition::kLaunchFailed));
    put_record(db, test_record(diag, 128, 64, 4, 3, 0, Disposition::kNotTimed));
    put_record(db, test_record(diag, 128, 64, 4, 2, 0.1 / 3.0, Disposition::kOk, test_env("12.8")));
    put_record(db, test_record(half, 128, 64, 4, 2, 0.7));
    Record win = test_record(diag, 128, 128, 8, 2, 0.96875);
    db.transaction([&] { pin_winner(db, diag, {win.kernel_uri, 0.96875, win.env.key(), "tune"}); });
  }
};

TEST_F(ExchangeTest, ExportThenImportRoundTripsExactly) {
  Database a(path("a.db"));
  fill(a);
  const std::string first = cache_text(export_cache(a));
  Database b(path("b.db"));
  ImportStats stats = import_cache(b, nlohmann::json::parse(first), "a.json");
  EXPECT_EQ(stats.added, 9);
  EXPECT_EQ(stats.winners, 1);
  const std::string second = cache_text(export_cache(b));
  EXPECT_EQ(first, second);
  // Doubles survive bit for bit (0.1/3 has no short decimal form).
  bool found = false;
  for (const Record& r : all_records(b)) {
    if (r.env.driver_version == "12.8") {
      found = true;
      EXPECT_EQ(*r.median_ms, 0.1 / 3.0);
    }
  }
  EXPECT_TRUE(found);
}

// A row import would refuse (here a backward kernel in a forward step, which an import before
// the direction check let in) is left out of an export with a warning, so the export imports.
TEST_F(ExchangeTest, AnExportLeavesOutWhatImportWouldRefuse) {
  Database a(path("a.db"));
  fill(a);
  const size_t all = all_records(a).size();
  Statement update = a.prepare("UPDATE records SET kernel_uri = ? WHERE id = (SELECT min(id) FROM records)");
  update.bind(1, std::string("ring_bwd_bf16_hd128_causal_gqa4_bm64_bn64_w8_s2"));
  update.run();
  std::string warning;
  const WarningSink previous = set_warning_sink([&](const std::string& m) { warning += m; });
  const nlohmann::json doc = export_cache(a, /*leave_out_invalid=*/true);
  set_warning_sink(previous);
  EXPECT_EQ(export_cache(a)["entries"].size(), all) << "db merge's source exports every record";
  EXPECT_EQ(doc["entries"].size(), all - 1);
  EXPECT_NE(warning.find("leaves out a record import would refuse"), std::string::npos) << warning;
  Database b(path("b.db"));
  EXPECT_NO_THROW(import_cache(b, doc, "a.json"));
}

// A read-only open of a database no writer had open takes no lock (immutable=1). A writer that
// begins after the open and commits (its log beside the file) is noticed, and the export reads
// again through the log: the new record is in it. Before, the export read the main file alone,
// without the new record, or (a writer checkpointing during the read) rows of two commits.
TEST_F(ExchangeTest, AnExportNoticesAWriterThatBeganAfterTheOpenAndReadsAgain) {
  {
    Database writer(path("a.db"));
    fill(writer);
  }
  ASSERT_FALSE(std::filesystem::exists(path("a.db-wal"))) << "the writer's close removes its log";
  Database reader(path("a.db"), Database::ReadOnly{});
  EXPECT_FALSE(reader.changed_since_open());
  const size_t before = export_cache(reader)["entries"].size();
  Database writer(path("a.db"));
  put_record(writer, test_record(test_workload(), 64, 64, 8, 1, 0.5));
  ASSERT_TRUE(std::filesystem::exists(path("a.db-wal")));
  EXPECT_TRUE(reader.changed_since_open());
  EXPECT_EQ(export_cache(reader)["entries"].size(), before + 1) << "the writer's committed record";
  EXPECT_FALSE(reader.changed_since_open()) << "read again through the log, with its locks";
  // A writing open reads through locks: never 'changed'.
  EXPECT_FALSE(writer.changed_since_open());
}

// db verify reads in one snapshot too: a writer that began after the open and committed is
// counted (read again through its log), as export does.
TEST_F(ExchangeTest, VerifyCountsWhatAWriterCommittedAfterTheOpen) {
  {
    Database writer(path("a.db"));
    fill(writer);
  }
  Database reader(path("a.db"), Database::ReadOnly{});
  const VerifyReport before = verify_database(reader, current_environment());
  ASSERT_TRUE(before.sound());
  Database writer(path("a.db"));
  put_record(writer, test_record(test_workload(), 64, 64, 8, 1, 0.5));
  const VerifyReport after = verify_database(reader, current_environment());
  EXPECT_TRUE(after.sound());
  EXPECT_EQ(after.records, before.records + 1) << "the writer's committed record";
  EXPECT_FALSE(reader.changed_since_open());
}

TEST_F(ExchangeTest, ExportFormatMatchesTheVersionedGolden) {
  Database db(path("g.db"));
  Record r = test_record(test_workload(), 128, 64, 4, 2, 1.5);
  put_record(db, r);
  db.transaction([&] { pin_winner(db, r.workload, {r.kernel_uri, 1.5, r.env.key(), "tune"}); });
  nlohmann::json golden = load_json(std::string(CPGEN_SOURCE_DIR) + "/tests/cache/golden/export_v1.json");
  EXPECT_EQ(export_cache(db), golden) << cache_text(export_cache(db));
}

TEST_F(ExchangeTest, ImportAndMergeKeepTheFasterValidRecord) {
  Database a(path("a.db"));
  Database b(path("b.db"));
  WorkloadKey w = test_workload();
  put_record(a, test_record(w, 128, 64, 4, 2, 2.0));     // slower than b's
  put_record(a, test_record(w, 64, 64, 4, 2, 0.5));      // b failed this one
  put_record(b, test_record(w, 128, 64, 4, 2, 1.0));
  put_record(b, test_record(w, 64, 64, 4, 2, 0, Disposition::kWrongResult));
  put_record(b, test_record(w, 128, 128, 8, 2, 3.0));    // only in b
  ImportStats stats = merge_database(a, path("b.db"));
  EXPECT_EQ(stats.added, 1);
  EXPECT_EQ(stats.replaced, 1);
  EXPECT_EQ(stats.kept, 1);
  std::map<std::string, std::optional<double>> by_uri;
  for (const Record& r : records_for(a, w)) by_uri[r.kernel_uri] = r.median_ms;
  EXPECT_EQ(by_uri["ring_fwd_bf16_hd128_causal_gqa4_bm128_bn64_w4_s2"], 1.0);
  EXPECT_EQ(by_uri["ring_fwd_bf16_hd128_causal_gqa4_bm64_bn64_w4_s2"], 0.5);
  EXPECT_EQ(by_uri.size(), 3u);
  EXPECT_EQ(by_uri["ring_fwd_bf16_hd128_causal_gqa4_bm128_bn128_w8_s2"], 3.0);
  EXPECT_THROW(merge_database(a, path("a.db")), Error);
}

TEST_F(ExchangeTest, ABadEntryRejectsTheWholeFileNamingTheField) {
  Database db(path("a.db"));
  put_record(db, test_record(test_workload(), 128, 64, 4, 2, 1.0));
  nlohmann::json doc = export_cache(db);
  doc["entries"].push_back(doc["entries"][0]);
  doc["entries"][1]["workload"].erase("head_dim");
  Database fresh(path("b.db"));
  try {
    import_cache(fresh, doc, "bad.json");
    FAIL() << "import should reject the entry";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadInput);
    EXPECT_NE(std::string(e.what()).find("bad.json entry 1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("head_dim"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(all_records(fresh).empty());
  // A missing field is named once, after the entry (its prefix was given twice).
  for (const char* field : {"disposition", "kernel"}) {
    nlohmann::json missing = export_cache(db);
    missing["entries"][0].erase(field);
    try {
      import_cache(fresh, missing, "bad.json");
      ADD_FAILURE() << field << " missing was imported";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), std::string("bad.json entry 0: field '") + field + "' is missing");
    }
  }
  doc["version"] = 2;
  EXPECT_THROW(import_cache(fresh, doc, "v2.json"), Error);
  EXPECT_THROW(import_cache(fresh, nlohmann::json{{"entries", nlohmann::json::array()}}, "x.json"), Error);
}

// A field no export writes (a misspelt one) is refused, naming the entry, where and the field:
// "winer" was ignored and the entry imported without its winner; and a winner must be a timed
// 'ok' entry (an infeasible one marked winner imported with no winner taken).
TEST_F(ExchangeTest, AMisspeltFieldOrAWinnerThatWasNotTimedIsRefused) {
  Database db(path("a.db"));
  put_record(db, test_record(test_workload(), 128, 64, 4, 2, 1.0));
  put_record(db, test_record(test_workload(), 64, 64, 4, 2, 0, Disposition::kInfeasible));
  const nlohmann::json good = export_cache(db);
  Database fresh(path("b.db"));
  struct Case {
    std::function<void(nlohmann::json&)> spoil;
    const char* names;
  };
  const Case cases[] = {
      {[](nlohmann::json& d) { d["entries"][0]["winer"] = true; }, "bad.json entry 0: entry field 'winer' is not one cpgen writes; allowed: "},
      {[](nlohmann::json& d) { d["entries"][0]["workload"]["head_dimm"] = 128; }, "bad.json entry 0: workload field 'head_dimm'"},
      {[](nlohmann::json& d) { d["entries"][0]["environment"]["gpu"] = "x"; }, "bad.json entry 0: environment field 'gpu'"},
      {[](nlohmann::json& d) { d["extra_top"] = 1; }, "bad.json: top-level field 'extra_top'"},
      {[](nlohmann::json& d) {
         for (auto& e : d["entries"])
           if (e["disposition"] == "infeasible") e["winner"] = true;
       },
       "field 'winner' is true on an entry of disposition 'infeasible' and no median; only a timed 'ok' entry can be a "
       "winner"},
  };
  for (const Case& c : cases) {
    nlohmann::json doc = good;
    c.spoil(doc);
    try {
      import_cache(fresh, doc, "bad.json");
      ADD_FAILURE() << c.names << ": imported";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kBadInput) << e.what();
      EXPECT_NE(std::string(e.what()).find(c.names), std::string::npos) << e.what();
    }
  }
  EXPECT_TRUE(all_records(fresh).empty());
  EXPECT_EQ(import_cache(fresh, good, "good.json").added, 2);  // the export itself still imports
  // A shipped cache with a winner that was not timed is skipped, with the same reason.
  std::filesystem::create_directories(path("caches"));
  nlohmann::json spoiled = good;
  cases[4].spoil(spoiled);
  std::ofstream(path("caches/spoiled.json")) << spoiled.dump();
  std::string warnings;
  const WarningSink previous = set_warning_sink([&](const std::string& w) { warnings += w; });
  const PretunedCaches caches = load_pretuned_caches({path("caches")});
  set_warning_sink(previous);
  EXPECT_TRUE(caches.files.empty());
  EXPECT_NE(warnings.find("spoiled.json entry "), std::string::npos) << warnings;
  EXPECT_NE(warnings.find("only a timed 'ok' entry can be a winner"), std::string::npos) << warnings;
}

// An entry keyed causal with a window's right side (written before the right side counted as moot
// under causal) is left out with a warning: no lookup asks for that key. The same entry keyed
// canonically (right side -1) imports.
TEST_F(ExchangeTest, ACausalKeyWithAWindowRightSideIsLeftOutOfAnImport) {
  Database db(path("a.db"));
  put_record(db, test_record(test_workload(), 128, 64, 4, 2, 1.0));
  nlohmann::json doc = export_cache(db);
  nlohmann::json& entry = doc["entries"][0];
  ASSERT_EQ(entry["workload"]["causal"], true);
  std::string uri = entry["kernel"];
  uri.replace(uri.find("_causal_"), 8, "_causal_ivl_");
  entry["kernel"] = uri;
  entry["workload"].update({{"window_left", 64}, {"window_right", 0}, {"document_len", 0}, {"softcap", false}});
  std::string warning;
  WarningSink previous = set_warning_sink([&](const std::string& w) { warning += w; });
  Database fresh(path("b.db"));
  const ImportStats legacy = import_cache(fresh, doc, "old.json");
  set_warning_sink(previous);
  EXPECT_EQ(legacy.added, 0);
  EXPECT_TRUE(all_records(fresh).empty());
  EXPECT_NE(warning.find("old.json entry 0: a causal workload keyed with window_right 0"), std::string::npos) << warning;
  entry["workload"]["window_right"] = -1;
  EXPECT_EQ(import_cache(fresh, doc, "new.json").added, 1);
}

TEST_F(ExchangeTest, ShippedDefaultCacheIsExactlyTheDocumentedDefaults) {
  nlohmann::json shipped = load_json(std::string(CPGEN_SOURCE_DIR) + "/caches/default-heuristic.json");
  EXPECT_EQ(shipped, default_heuristic_cache())
      << "regenerate with: cpgen db export --defaults > caches/default-heuristic.json";
  // Every combination's mma.sync default, and the sm_90a wgmma defaults (causal and full of each
  // measured combination), which name the arch and so come first.
  const size_t sm90a = 2 * std::size(kWgmmaDefaultShapes);
  ASSERT_EQ(shipped["entries"].size(), KernelSpec::all_defaults().size() + sm90a);
  for (size_t i = 0; i < shipped["entries"].size(); ++i) {
    const auto& e = shipped["entries"][i];
    EXPECT_EQ(e["workload"].contains("arch"), i < sm90a) << e.dump();
    EXPECT_EQ(is_wgmma_uri(e["kernel"].get<std::string>()), i < sm90a) << e.dump();
  }
  for (const auto& e : shipped["entries"]) {
    EXPECT_EQ(e["source"], "default-heuristic");
    EXPECT_FALSE(e.contains("median_ms")) << "a default must not pretend to be timed";
  }
}

TEST_F(ExchangeTest, VerifyCountsRowsOfOtherEnvironments) {
  Database db(path("v.db"));
  fill(db);
  VerifyReport report = verify_database(db, test_env());
  EXPECT_TRUE(report.sound());
  EXPECT_EQ(report.records, 9);
  EXPECT_EQ(report.other_environment, 1);
  EXPECT_EQ(report.by_environment.size(), 2u);
  EXPECT_EQ(report.workloads, 2);
  EXPECT_EQ(report.schema_version, Database::kSchemaVersion);
}

}  // namespace
}  // namespace cpgen::testing

namespace cpgen::testing {
namespace {

// Each entry defect with the field its message must name; the database stays as it was.
TEST_F(ExchangeTest, EveryEntryIsValidatedBeforeAnythingIsWritten) {
  Database source(path("a.db"));
  put_record(source, test_record(test_workload(), 128, 64, 4, 2, 1.0));
  const nlohmann::json good = export_cache(source);
  Database target(path("b.db"));
  put_record(target, test_record(test_workload(2048), 128, 64, 4, 2, 2.0));
  const nlohmann::json target_before = export_cache(target);

  struct Case {
    const char* what;
    std::function<void(nlohmann::json&)> edit;
    const char* field;
  };
  const Case cases[] = {
      {"kernel of another head dim", [](nlohmann::json& e) { e["kernel"] = "ring_fwd_bf16_hd64_causal_gqa4_bm128_bn64_w4_s2"; }, "'kernel'"},
      {"kernel of another dtype", [](nlohmann::json& e) { e["kernel"] = "ring_fwd_fp16_hd128_causal_gqa4_bm128_bn64_w4_s2"; }, "'kernel'"},
      {"kernel of another GQA group", [](nlohmann::json& e) { e["kernel"] = "ring_fwd_bf16_hd128_causal_gqa2_bm128_bn64_w4_s2"; }, "'kernel'"},
      {"kernel without the mask", [](nlohmann::json& e) { e["kernel"] = "ring_fwd_bf16_hd128_full_gqa4_bm128_bn64_w4_s2"; }, "'kernel'"},
      {"kernel too big for the arch", [](nlohmann::json& e) { e["kernel"] = "ring_fwd_bf16_hd128_causal_gqa4_bm256_bn256_w4_s4"; }, "'kernel'"},
      {"negative time", [](nlohmann::json& e) { e["median_ms"] = -1.0; }, "'median_ms'"},
      {"zero time", [](nlohmann::json& e) { e["median_ms"] = 0.0; }, "'median_ms'"},
      {"missing time", [](nlohmann::json& e) { e.erase("median_ms"); }, "'median_ms'"},
      // JSON cannot spell NaN; nlohmann writes a NaN double as null, which reads as no time.
      {"NaN time written as null", [](nlohmann::json& e) { e["median_ms"] = nullptr; }, "'median_ms'"},
      {"negative sample", [](nlohmann::json& e) { e["samples_ms"][1] = -0.5; }, "'samples_ms[1]'"},
      {"ok without samples", [](nlohmann::json& e) { e["samples_ms"] = nlohmann::json::array(); }, "'samples_ms'"},
      {"unknown disposition", [](nlohmann::json& e) { e["disposition"] = "great"; }, "disposition"},
      {"unknown step type", [](nlohmann::json& e) { e["workload"]["step_type"] = "sideways"; }, "step type"},
      {"unsupported arch", [](nlohmann::json& e) { e["workload"]["arch"] = "sm_70"; }, "'workload.arch'"},
      {"winner that is not a boolean", [](nlohmann::json& e) { e["winner"] = "yes"; }, "'winner'"},
  };
  for (const Case& c : cases) {
    nlohmann::json doc = good;
    doc["entries"].push_back(good["entries"][0]);
    doc["entries"][1]["workload"]["q_len"] = 4096;  // a second, distinct entry that is the bad one
    c.edit(doc["entries"][1]);
    try {
      import_cache(target, doc, "in.json");
      ADD_FAILURE() << c.what << ": accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kBadInput) << c.what;
      EXPECT_NE(std::string(e.what()).find("in.json entry 1"), std::string::npos) << c.what << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find(c.field), std::string::npos) << c.what << ": " << e.what();
    }
    EXPECT_EQ(export_cache(target), target_before) << c.what << ": the database changed";
  }
}

TEST_F(ExchangeTest, AnInfeasibleRecordMayNameAKernelThatDoesNotFit) {
  Database db(path("a.db"));
  Record r = test_record(test_workload(), 256, 256, 4, 4, 0, Disposition::kInfeasible);
  const nlohmann::json doc{{"format", kCacheFormatName}, {"version", kCacheFormatVersion},
                           {"entries", {record_to_json(r, false)}}};
  EXPECT_EQ(import_cache(db, doc, "in.json").added, 1);
}

}  // namespace
}  // namespace cpgen::testing
