#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "cache/database.h"
#include "cache/records.h"
#include "cache/sqlite_check.h"
#include "cache_fixtures.h"
#include "cpgen/error.h"
#include "test_util.h"

namespace cpgen::testing {
namespace {

namespace fs = std::filesystem;

class DatabaseTest : public TempDirTest {};

std::string pragma_text(Database& db, const char* pragma) {
  Statement s = db.prepare(std::string("PRAGMA ") + pragma);
  EXPECT_TRUE(s.step());
  return s.column_text(0);
}

// Every warning is one line whatever it quotes (a cache file named with a newline), on stderr and
// through a sink alike.
TEST(Warnings, EveryWarningIsOneLine) {
  std::string warning;
  WarningSink previous = set_warning_sink([&](const std::string& w) { warning = w; });
  warn("pretuned cache skipped: /tmp/a\nb.json: not JSON");
  set_warning_sink(previous);
  EXPECT_EQ(warning, "pretuned cache skipped: /tmp/a\\x0ab.json: not JSON");
  ::testing::internal::CaptureStderr();
  warn("x\ny");
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "cpgen: warning: x\\x0ay\n");
}

TEST_F(DatabaseTest, FreshDatabaseUsesWalAndCurrentSchema) {
  Database db(path("sub/dir/cpgen.db"));
  EXPECT_TRUE(fs::exists(path("sub/dir/cpgen.db")));
  EXPECT_EQ(pragma_text(db, "journal_mode"), "wal");
  EXPECT_EQ(db.schema_version(), Database::kSchemaVersion);
  EXPECT_EQ(db.integrity_check(), std::vector<std::string>{"ok"});
  EXPECT_TRUE(db.moved_aside_to().empty());
  for (const char* table : {"meta", "workloads", "records", "kernels"}) {
    Statement s = db.prepare("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?");
    s.bind(1, table);
    ASSERT_TRUE(s.step());
    EXPECT_EQ(s.column_int(0), 1) << "table " << table;
  }
  Statement created = db.prepare("SELECT value FROM meta WHERE key = 'created_by'");
  ASSERT_TRUE(created.step());
  EXPECT_EQ(created.column_text(0).rfind("cpgen ", 0), 0u);
}

TEST_F(DatabaseTest, ReopeningKeepsRecords) {
  {
    Database db(path("a.db"));
    put_record(db, test_record(test_workload(), 128, 64, 4, 2, 1.5));
  }
  Database again(path("a.db"));
  EXPECT_EQ(all_records(again).size(), 1u);
  EXPECT_TRUE(again.moved_aside_to().empty());
}

// A row whose samples_ms is no JSON array of numbers (a damaged or hand-edited file) is the
// database's error, naming the kernel; it was nlohmann's, an internal error in every command.
TEST_F(DatabaseTest, ADamagedSamplesRowIsTheDatabasesError) {
  Database db(path("a.db"));
  put_record(db, test_record(test_workload(), 128, 64, 4, 2, 1.5));
  for (const char* damaged : {"garbage", "[\"a\"]"}) {
    Statement update = db.prepare("UPDATE records SET samples_ms = ?");
    update.bind(1, std::string(damaged));
    update.run();
    try {
      all_records(db);
      ADD_FAILURE() << damaged << " was read";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kDatabase) << e.what();
      EXPECT_NE(std::string(e.what()).find("samples_ms"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("ring_fwd_"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(path("a.db")), std::string::npos) << e.what();
    }
  }
}

// A row whose dtype or scheme (or step type) names nothing cpgen knows is the database's
// damage naming its file (it was the parser's bad input, exit 2, naming neither).
TEST_F(DatabaseTest, ADamagedTextColumnIsTheDatabasesErrorNamingTheFile) {
  int n = 0;
  for (const char* update : {"UPDATE workloads SET dtype = 'bf17'", "UPDATE workloads SET scheme = 'spiral'"}) {
    Database fresh(path("damaged" + std::to_string(n++) + ".db"));
    put_record(fresh, test_record(test_workload(), 128, 64, 4, 2, 1.5));
    fresh.exec(update);
    try {
      all_records(fresh);
      ADD_FAILURE() << update << ": read";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kDatabase) << e.what();
      EXPECT_NE(std::string(e.what()).find("a record in the tuning database " + fresh.path() + " is damaged: "),
                std::string::npos)
          << e.what();
    }
  }
}

TEST_F(DatabaseTest, GarbageAtCpgensOwnPathIsMovedAsideAndRebuilt) {
  const std::string db_path = path("cpgen.db");
  {
    std::ofstream out(db_path);
    out << "this is not a database, just some text that happens to be here\n";
    for (int i = 0; i < 200; ++i) out << "garbage line " << i << "\n";
  }
  std::string warning;
  WarningSink previous = set_warning_sink([&](const std::string& w) { warning = w; });
  std::unique_ptr<Database> db;
  ASSERT_NO_THROW(db = std::make_unique<Database>(db_path, PathOwner::kCpgen));
  set_warning_sink(previous);
  ASSERT_FALSE(db->moved_aside_to().empty());
  EXPECT_EQ(db->moved_aside_to().rfind(db_path + ".corrupt-", 0), 0u) << db->moved_aside_to();
  EXPECT_TRUE(fs::exists(db->moved_aside_to()));
  std::ifstream aside(db->moved_aside_to());
  std::string first_line;
  std::getline(aside, first_line);
  EXPECT_EQ(first_line, "this is not a database, just some text that happens to be here");
  EXPECT_NE(warning.find(db->moved_aside_to()), std::string::npos) << warning;
  EXPECT_EQ(db->schema_version(), Database::kSchemaVersion);
  put_record(*db, test_record(test_workload(), 128, 64, 4, 2, 1.0));
  EXPECT_EQ(all_records(*db).size(), 1u);
}

TEST_F(DatabaseTest, DatabaseOfAnotherProgramAtCpgensOwnPathIsMovedAsideNotReused) {
  const std::string db_path = path("other.db");
  {
    sqlite3* raw = nullptr;
    ASSERT_EQ(sqlite3_open(db_path.c_str(), &raw), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(raw, "CREATE TABLE photos (id INTEGER); INSERT INTO photos VALUES (7);", nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(raw);
  }
  WarningSink previous = set_warning_sink([](const std::string&) {});
  Database db(db_path, PathOwner::kCpgen);
  set_warning_sink(previous);
  ASSERT_FALSE(db.moved_aside_to().empty());
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(db.moved_aside_to().c_str(), &raw), SQLITE_OK);
  sqlite3_stmt* stmt = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(raw, "SELECT id FROM photos", -1, &stmt, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_step(stmt), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int(stmt, 0), 7);
  sqlite3_finalize(stmt);
  sqlite3_close(raw);
}

TEST_F(DatabaseTest, NewerSchemaIsRefusedWithAClearMessage) {
  const std::string db_path = path("future.db");
  { Database db(db_path); db.exec("UPDATE meta SET value = '99' WHERE key = 'schema_version'"); }
  try {
    Database db(db_path);
    FAIL() << "opening a schema-99 database should throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kDatabase);
    EXPECT_NE(std::string(e.what()).find("schema version 99"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(fs::exists(db_path));  // refused, never moved aside or rewritten
}

// A newer cpgen's file in rollback-journal mode (as any SQLite tool leaves one) is refused with
// its bytes as they were and no side files: the WAL switch used to run before the version check,
// rewriting the header and leaving -wal and -shm beside it.
TEST_F(DatabaseTest, NewerSchemaIsRefusedBeforeAnythingIsWritten) {
  const std::string db_path = path("future.db");
  {
    Database db(db_path);
    db.exec("UPDATE meta SET value = '99' WHERE key = 'schema_version'");
  }
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(db_path.c_str(), &raw), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(raw, "PRAGMA journal_mode = DELETE", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(raw);
  const std::string before = slurp(db_path);
  EXPECT_THROW(Database db(db_path), Error);
  EXPECT_EQ(slurp(db_path), before);
  for (const char* suffix : {"-wal", "-shm", "-journal"}) EXPECT_FALSE(fs::exists(db_path + suffix)) << suffix;
}

TEST_F(DatabaseTest, SqliteFailuresCarryTheCallAndMessage) {
  Database db(path("x.db"));
  try {
    db.prepare("SELECT no_such_column FROM records");
    FAIL() << "preparing bad SQL should throw";
  } catch (const SqliteError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kDatabase);
    std::string what = e.what();
    EXPECT_NE(what.find("sqlite3_prepare_v2"), std::string::npos) << what;
    EXPECT_NE(what.find("no_such_column"), std::string::npos) << what;
    EXPECT_NE(what.find("statement.cpp:"), std::string::npos) << what;
  }
}

TEST_F(DatabaseTest, FailedTransactionLeavesNothingBehind) {
  Database db(path("t.db"));
  EXPECT_THROW(db.transaction([&] {
    store_record(db, test_record(test_workload(), 128, 64, 4, 2, 1.0));
    throw Error(ErrorKind::kInternal, "stop halfway");
  }), Error);
  EXPECT_TRUE(all_records(db).empty());
  EXPECT_TRUE(all_workloads(db).empty());
}

TEST_F(DatabaseTest, PathResolutionOrder) {
  ScopedEnv db_env("CPGEN_DB", "/tmp/from-env.db");
  ScopedEnv xdg("XDG_CACHE_HOME", "/tmp/xdg");
  ScopedEnv home("HOME", "/tmp/home");
  EXPECT_EQ(resolve_db_path("/tmp/flag.db"), "/tmp/flag.db");
  EXPECT_EQ(resolve_db_path(""), "/tmp/from-env.db");
  unsetenv("CPGEN_DB");
  EXPECT_EQ(resolve_db_path(""), "/tmp/xdg/cpgen/cpgen.db");
  unsetenv("XDG_CACHE_HOME");
  EXPECT_EQ(resolve_db_path(""), "/tmp/home/.cache/cpgen/cpgen.db");
}

TEST_F(DatabaseTest, DirectoryAtThePathIsBadInput) {
  fs::create_directories(path("dir.db"));
  try {
    Database db(path("dir.db"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadInput);
  }
}

}  // namespace
}  // namespace cpgen::testing
