// What opening a tuning database may and may not do to the file at its path: a read-only open
// changes nothing in the folder; a writing open refuses a user's file that is not a cpgen
// database, moves a damaged one aside, and leaves no lock file behind.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <filesystem>
#include <fstream>

#include "cache/database.h"
#include "cache/records.h"
#include "cache_fixtures.h"
#include "cpgen/error.h"
#include "damaged_db.h"

namespace cpgen::testing {
namespace {

namespace fs = std::filesystem;

class DatabaseSafetyTest : public TempDirTest {
 protected:
  void make_db(const std::string& p, int records = 2) {
    Database db(p);
    for (int i = 0; i < records; ++i) put_record(db, test_record(test_workload(1024 << i), 128, 64, 4, 2, 1.0 + i));
  }
};

TEST_F(DatabaseSafetyTest, ReadOnlyOpenCreatesNothingBesideTheFile) {
  make_db(path("a.db"));
  const auto before = folder_snapshot(dir_.string());
  ASSERT_EQ(before.size(), 1u) << "a closed writer leaves only the database file";
  {
    Database db(path("a.db"), Database::ReadOnly{.check_integrity = true});
    EXPECT_EQ(all_records(db).size(), 2u);
    EXPECT_EQ(db.integrity_check(), std::vector<std::string>{"ok"});
  }
  EXPECT_EQ(folder_snapshot(dir_.string()), before) << "no -wal, -shm, lock or journal file may appear";
}

TEST_F(DatabaseSafetyTest, ReadOnlyOpenSeesWhatARunningWriterCommitted) {
  make_db(path("a.db"), 1);
  Database writer(path("a.db"));
  put_record(writer, test_record(test_workload(8192), 128, 64, 4, 2, 3.0));
  ASSERT_TRUE(fs::exists(path("a.db-wal"))) << "the open writer keeps its log";
  Database reader(path("a.db"), Database::ReadOnly{});
  EXPECT_EQ(all_records(reader).size(), 2u) << "the record still in the writer's log must be read";
}

TEST_F(DatabaseSafetyTest, ReadOnlyOpenRefusesAFileThatIsNotSqlite) {
  std::ofstream(path("x.json")) << R"({"format": "cpgen-tuning-cache", "version": 1, "entries": []})";
  const auto before = folder_snapshot(dir_.string());
  try {
    Database db(path("x.json"), Database::ReadOnly{});
    FAIL() << "a JSON file was opened as a database";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadInput);
    EXPECT_NE(std::string(e.what()).find("not an SQLite database"), std::string::npos) << e.what();
  }
  EXPECT_EQ(folder_snapshot(dir_.string()), before);
}

TEST_F(DatabaseSafetyTest, ReadOnlyOpenReportsADamagedFileAndLeavesIt) {
  write_truncated_db(path("d.db"));
  const auto before = folder_snapshot(dir_.string());
  try {
    Database db(path("d.db"), Database::ReadOnly{.check_integrity = true});
    FAIL() << "a truncated database opened as sound";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kDatabase);
    EXPECT_NE(std::string(e.what()).find(path("d.db")), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("damaged"), std::string::npos) << e.what();
  }
  EXPECT_EQ(folder_snapshot(dir_.string()), before);
}

TEST_F(DatabaseSafetyTest, WritingOpenRefusesTheUsersTextFileUntouched) {
  std::ofstream(path("notes.txt")) << "my notes\n";
  const auto before = folder_snapshot(dir_.string());
  try {
    Database db(path("notes.txt"));
    FAIL() << "a text file was taken as a database";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadInput);
    EXPECT_NE(std::string(e.what()).find("left as it is"), std::string::npos) << e.what();
  }
  EXPECT_EQ(folder_snapshot(dir_.string()), before);
}

TEST_F(DatabaseSafetyTest, WritingOpenRefusesTheUsersDatabaseOfAnotherProgram) {
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(path("photos.db").c_str(), &raw), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(raw, "CREATE TABLE photos (id INTEGER)", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(raw);
  const auto before = folder_snapshot(dir_.string());
  EXPECT_THROW(Database db(path("photos.db")), Error);
  EXPECT_EQ(folder_snapshot(dir_.string()), before);
}

// Another program's file with a table named meta is not cpgen's either: cpgen's meta holds a
// positive integer schema_version. Such a file was switched to WAL and then failed on raw SQL
// ("no such column: value", "table meta already exists"), and a non-numeric version was
// std::stoi's internal error in every command.
TEST_F(DatabaseSafetyTest, AnotherProgramsMetaTableIsNotCpgens) {
  const std::pair<const char*, const char*> files[] = {
      {"settings.db", "CREATE TABLE meta (name TEXT, val TEXT); CREATE TABLE users (id INTEGER)"},
      {"app.db", "CREATE TABLE meta (key TEXT, value TEXT); INSERT INTO meta VALUES ('schema_version', 'v2.3'); "
                 "CREATE TABLE users (id INTEGER)"}};
  for (const auto& [name, sql] : files) {
    sqlite3* raw = nullptr;
    ASSERT_EQ(sqlite3_open(path(name).c_str(), &raw), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(raw, sql, nullptr, nullptr, nullptr), SQLITE_OK) << name;
    sqlite3_close(raw);
    const auto before = folder_snapshot(dir_.string());
    try {
      Database db(path(name));
      ADD_FAILURE() << name << " was opened for writing";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kBadInput) << e.what();
      EXPECT_NE(std::string(e.what()).find("another program"), std::string::npos) << e.what();
    }
    EXPECT_EQ(folder_snapshot(dir_.string()), before) << name << " was changed";
    try {
      Database db(path(name), Database::ReadOnly{});
      ADD_FAILURE() << name << " was opened for reading";
    } catch (const Error& e) {
      // The user's mistake, as the writing open above says (it was a database error, exit 1).
      EXPECT_EQ(e.kind(), ErrorKind::kBadInput) << e.what();
      EXPECT_NE(std::string(e.what()).find("another program"), std::string::npos) << e.what();
    }
  }
}

TEST_F(DatabaseSafetyTest, WritingOpenMovesADamagedDatabaseAsideWithAWarning) {
  write_truncated_db(path("d.db"));
  const std::string damaged = file_bytes(path("d.db"));
  std::string warning;
  WarningSink previous = set_warning_sink([&](const std::string& w) { warning = w; });
  std::unique_ptr<Database> db;
  ASSERT_NO_THROW(db = std::make_unique<Database>(path("d.db")));
  set_warning_sink(previous);
  ASSERT_FALSE(db->moved_aside_to().empty());
  EXPECT_EQ(file_bytes(db->moved_aside_to()), damaged) << "the damaged file is kept, byte for byte";
  EXPECT_NE(warning.find("damaged"), std::string::npos) << warning;
  EXPECT_TRUE(all_records(*db).empty());
}

TEST_F(DatabaseSafetyTest, NoLockFileIsLeftAfterAnOpen) {
  make_db(path("a.db"));
  { Database again(path("a.db")); }
  for (const auto& entry : fs::directory_iterator(dir_)) {
    EXPECT_EQ(entry.path().string().find("lock"), std::string::npos) << entry.path();
  }
  EXPECT_EQ(folder_snapshot(dir_.string()).size(), 1u);
}

}  // namespace
}  // namespace cpgen::testing
