// cpgen db, explain and tune given files that are not (sound) tuning databases: what they refuse,
// what they report, and that a file they were only asked to read is never changed, moved or
// accompanied by new files. Each defect found by the issue 8 walk-through has a test named after it.
#include <gtest/gtest.h>
#include <grp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <utility>

#include "../cache/cache_fixtures.h"
#include "../cache/damaged_db.h"
#include "cache/database.h"
#include "cache/records.h"
#include "test_util.h"

namespace cpgen::testing {
namespace {

namespace fs = std::filesystem;

class CmdDb : public TempDirTest {
 protected:
  void make_db(const std::string& p) {
    Database db(p);
    put_record(db, test_record(test_workload(), 128, 64, 4, 2, 1.0));
    put_record(db, test_record(test_workload(4096), 128, 128, 8, 2, 0.5));
  }
  std::string shape() const {
    return R"('{"q_heads": 32, "kv_heads": 8, "head_dim": 128, "seq_len": 32768, "cp_size": 2, "dtype": "bf16", "causal": true}')";
  }
  std::string export_of(const std::string& db) {
    CliResult r = run_cli("db export --db " + db);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.out;
  }
};

TEST_F(CmdDb, JsonOrTextFileInPlaceOfADatabaseIsRefusedByEveryCommand) {
  make_db(path("real.db"));
  std::ofstream(path("cache.json")) << R"({"format": "cpgen-tuning-cache", "version": 1, "entries": []})" << "\n";
  std::ofstream(path("notes.txt")) << "not a database\nat all\n";
  const std::string shapes = std::string(CPGEN_SOURCE_DIR) + "/examples/shapes/video-dit-full-cp8.json";
  for (const char* name : {"cache.json", "notes.txt"}) {
    const std::string file = path(name);
    const std::vector<std::string> commands = {
        "db show --db " + file,
        "db export --db " + file,
        "db verify --db " + file,
        "db import " + path("cache.json") + " --db " + file,
        "db merge " + path("real.db") + " --db " + file,
        "db merge " + file + " --db " + path("real.db"),
        "explain --db " + file + " --shape " + shape(),
        "tune --db " + file + " --shapes " + shapes + " --max-candidates 1 -q --store " + path("store"),
    };
    for (const std::string& command : commands) {
      const auto before = folder_snapshot(dir_.string());
      CliResult r = run_cli(command);
      EXPECT_EQ(r.exit_code, 2) << command << "\n" << r.out << r.err;
      EXPECT_LE(line_count(r.err), 3) << command << "\n" << r.err;
      EXPECT_NE(r.err.find(file), std::string::npos) << command << "\n" << r.err;
      EXPECT_EQ(r.err.find(".cpp:"), std::string::npos) << "no C++ source line: " << r.err;
      EXPECT_EQ(folder_snapshot(dir_.string()), before) << command << ": the folder changed";
      // The file merged from is named as such; --db is not what was wrong.
      if (command.rfind("db merge " + file, 0) == 0) {
        EXPECT_NE(r.err.find("merge reads another cpgen tuning database"), std::string::npos) << r.err;
        EXPECT_EQ(r.err.find("pass --db"), std::string::npos) << r.err;
      }
    }
    // $CPGEN_DB names the file just as --db does.
    ScopedEnv env("CPGEN_DB", file.c_str());
    const auto before = folder_snapshot(dir_.string());
    for (const char* command : {"db show", "db import "}) {
      CliResult r = run_cli(std::string(command) + (std::string(command) == "db import " ? path("cache.json") : ""));
      EXPECT_EQ(r.exit_code, 2) << command << " with CPGEN_DB\n" << r.err;
      EXPECT_LE(line_count(r.err), 3) << r.err;
    }
    EXPECT_EQ(folder_snapshot(dir_.string()), before);
  }
}

// export -o naming the database it reads (by its path, a "./" respelling or a link) is refused,
// and the database keeps its bytes; it was replaced by the JSON before. An -o in a missing folder
// or naming a folder is refused before the database is read, with the reason.
TEST_F(CmdDb, ExportOverItsOwnDatabaseIsRefusedAndTheDatabaseKept) {
  make_db(path("a.db"));
  fs::create_symlink(path("a.db"), path("link.db"));
  const std::string before = slurp(path("a.db"));
  // With --defaults (no database read, --db still given) too, and over the database's log (its
  // committed rows): both were written over before.
  std::ofstream(path("a.db-wal")) << "log";
  for (const std::string& args :
       {" -o " + path("a.db"), " -o " + (dir_ / "." / "a.db").string(), " -o " + path("link.db"),
        " --defaults -o " + path("a.db"), " -o " + path("a.db-wal")}) {
    const std::string out = args;
    CliResult r = run_cli("db export --db " + path("a.db") + args);
    EXPECT_EQ(r.exit_code, 2) << out << ": " << r.err;
    EXPECT_NE(r.err.find("is the same file as the database"), std::string::npos) << r.err;
    EXPECT_EQ(line_count(r.err), 1) << r.err;
    EXPECT_EQ(slurp(path("a.db")), before) << out;
  }
  EXPECT_EQ(slurp(path("a.db-wal")), "log");
  fs::remove(path("a.db-wal"));
  for (const auto& [out, reason] : {std::pair<std::string, std::string>{path("no/such/x.json"), "does not exist"},
                                    {dir_.string(), "is a directory"}}) {
    CliResult r = run_cli("db export --db " + path("a.db") + " -o " + out);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find(reason), std::string::npos) << r.err;
    EXPECT_EQ(line_count(r.err), 1) << r.err;
  }
}

// A --db naming a folder that does not exist yet ("new/sub/") is refused before any folder is
// made; it made new/sub, then said it was a directory.
TEST_F(CmdDb, ADbPathNamingAFolderMakesNoFolder) {
  make_db(path("a.db"));
  std::ofstream(path("cache.json")) << export_of(path("a.db"));
  CliResult r = run_cli("db import " + path("cache.json") + " --db " + path("new/sub/"));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("is a directory"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(path("new"))) << "a refused --db made a folder";
}

TEST_F(CmdDb, ImportOfADirectoryIsBadInput) {
  CliResult r = run_cli("db import " + dir_.string() + " --db " + path("a.db"));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("is a directory"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("internal error"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(path("a.db"))) << "bad input must not create a database";
}

TEST_F(CmdDb, TruncatedJsonIsOneLineWithoutJsonException) {
  make_db(path("a.db"));
  const std::string text = export_of(path("a.db"));
  std::ofstream(path("cut.json")) << text.substr(0, text.size() / 2);
  CliResult r = run_cli("db import " + path("cut.json") + " --db " + path("b.db"));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(line_count(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("not valid JSON at line"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("json.exception"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("(the text ends early; is it truncated?)"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(path("b.db")));
}

// A field given twice is refused (nlohmann kept the last: a second "entries": [] imported
// nothing, silently), naming where, before any database is made.
TEST_F(CmdDb, AFieldGivenTwiceIsRefusedWhereItIs) {
  make_db(path("a.db"));
  std::string text = export_of(path("a.db"));
  text.insert(text.rfind('}'), R"(, "entries": [])");
  std::ofstream(path("twice.json")) << text;
  CliResult r = run_cli("db import " + path("twice.json") + " --db " + path("b.db"));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(line_count(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("the top level: field \"entries\" appears twice"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(path("b.db")));
}

// A NUL byte after the export (the parser took it for the end and never read the rest): one line
// naming where, exit 2, no database.
TEST_F(CmdDb, ANulByteInTheFileIsOneLine) {
  make_db(path("a.db"));
  std::ofstream(path("nul.json"), std::ios::binary) << export_of(path("a.db")) << std::string("\0{\"more\": 1}", 13);
  CliResult r = run_cli("db import " + path("nul.json") + " --db " + path("b.db"));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(line_count(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("import: " + path("nul.json") + ": a NUL byte at line"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(path("b.db")));
}

TEST_F(CmdDb, ImportOfBadEntriesExitsTwoAndLeavesTheDatabaseUnchanged) {
  make_db(path("a.db"));
  const std::string before = export_of(path("a.db"));
  nlohmann::json doc = nlohmann::json::parse(before);
  struct Case {
    const char* what;
    std::function<void(nlohmann::json&)> edit;
  };
  const Case cases[] = {
      {"mismatched kernel", [](nlohmann::json& e) { e["kernel"] = "ring_fwd_bf16_hd64_causal_gqa4_bm128_bn64_w4_s2"; }},
      // A backward kernel of the workload's dtype, head dim, mask and group in a forward step was
      // imported, and as its fastest record hid the step's other records from the lookup.
      {"backward kernel in a forward step",
       [](nlohmann::json& e) { e["kernel"] = "ring_bwd_bf16_hd128_causal_gqa4_bm64_bn64_w8_s2"; }},
      {"negative time", [](nlohmann::json& e) { e["median_ms"] = -2.5; }},
      {"NaN time (JSON null)", [](nlohmann::json& e) { e["median_ms"] = nullptr; }},
      {"missing time", [](nlohmann::json& e) { e.erase("median_ms"); }},
      // Integers outside their field's type, or not integers, were read modulo 2^32 or rounded
      // down: head_dim 4294967424 as 128, 128.9 as 128, batch 2^32 + 1 as 1, registers 2^32 + 168 as 168.
      {"head_dim past an int", [](nlohmann::json& e) { e["workload"]["head_dim"] = int64_t{4294967424}; }},
      {"head_dim not an integer", [](nlohmann::json& e) { e["workload"]["head_dim"] = 128.9; }},
      {"batch past an int", [](nlohmann::json& e) { e["workload"]["batch"] = int64_t{4294967297}; }},
      {"q_len far past int64", [](nlohmann::json& e) { e["workload"]["q_len"] = 1e300; }},
      {"negative sm_count", [](nlohmann::json& e) { e["workload"]["sm_count"] = -5; }},
      {"registers past an int", [](nlohmann::json& e) { e["registers"] = int64_t{4295967464}; }},
      // 2^62 + 1 keys: the workload's length bucket doubled until it wrapped, forever.
      {"q_len past the limit", [](nlohmann::json& e) { e["workload"]["q_len"] = (int64_t{1} << 62) + 1; }},
      {"sm_count past an int", [](nlohmann::json& e) { e["environment"]["sm_count"] = int64_t{4294967428}; }},
      {"negative environment sm_count", [](nlohmann::json& e) { e["environment"]["sm_count"] = -7; }},
      {"source not a string", [](nlohmann::json& e) { e["source"] = 5; }},
  };
  for (const Case& c : cases) {
    nlohmann::json bad = doc;
    for (auto& entry : bad["entries"]) entry["workload"]["q_len"] = 99;  // new entries, all would be added
    ASSERT_TRUE(bad["entries"][1].contains("registers")) << bad["entries"][1].dump();
    c.edit(bad["entries"][1]);
    std::ofstream(path("bad.json")) << bad.dump(2);
    CliResult r = run_cli("db import " + path("bad.json") + " --db " + path("a.db"));
    EXPECT_EQ(r.exit_code, 2) << c.what << "\n" << r.err;
    EXPECT_NE(r.err.find("entry 1"), std::string::npos) << c.what << "\n" << r.err;
    EXPECT_EQ(line_count(r.err), 1) << r.err;
    EXPECT_EQ(export_of(path("a.db")), before) << c.what;
  }
  // The literal NaN is not JSON at all: bad input too.
  std::string text = before;
  text.replace(text.find("\"median_ms\": ") + 13, 1, "NaN, \"x\": 1");
  std::ofstream(path("nan.json")) << text;
  EXPECT_EQ(run_cli("db import " + path("nan.json") + " --db " + path("a.db")).exit_code, 2);
  EXPECT_EQ(export_of(path("a.db")), before);
  // A format version past an int was read as version 1215752191 (99999999999 mod 2^32), 2^32 + 1
  // as 1 (and accepted).
  for (const int64_t version : {int64_t{99999999999}, int64_t{4294967297}}) {
    nlohmann::json bad = doc;
    bad["version"] = version;
    std::ofstream(path("version.json")) << bad.dump(2);
    CliResult r = run_cli("db import " + path("version.json") + " --db " + path("a.db"));
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find("version " + std::to_string(version) + " is not supported"), std::string::npos) << r.err;
  }
  // An endless source is read up to the limit and refused, not until the memory runs out.
  if (fs::exists("/dev/zero")) {
    CliResult r = run_cli("db import /dev/zero --db " + path("a.db"));
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find("is longer than 256 MiB"), std::string::npos) << r.err;
    EXPECT_EQ(line_count(r.err), 1) << r.err;
  }
  EXPECT_EQ(export_of(path("a.db")), before);
}

TEST_F(CmdDb, VerifyOfATruncatedDatabaseFailsAndLeavesTheFileAsItWas) {
  write_truncated_db(path("d.db"));
  const auto before = folder_snapshot(dir_.string());
  for (const char* args : {"db verify --db ", "db verify --json --db "}) {
    CliResult r = run_cli(args + path("d.db"));
    EXPECT_NE(r.exit_code, 0) << r.out;
    EXPECT_EQ(r.out.find("integrity ok"), std::string::npos) << r.out;
    EXPECT_EQ(folder_snapshot(dir_.string()), before);
  }
}

TEST_F(CmdDb, ReadOnlyCommandsReportADamagedDatabaseWithExitOne) {
  write_truncated_db(path("d.db"));
  const auto before = folder_snapshot(dir_.string());
  for (const std::string& command : {"db show --db " + path("d.db"), "db export --db " + path("d.db"),
                                     "explain --db " + path("d.db") + " --shape " + shape()}) {
    CliResult r = run_cli(command);
    EXPECT_EQ(r.exit_code, 1) << command << "\n" << r.out << r.err;
    EXPECT_NE(r.err.find(path("d.db")), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("damaged"), std::string::npos) << r.err;
    EXPECT_EQ(folder_snapshot(dir_.string()), before) << command;
  }
}

TEST_F(CmdDb, ImportIntoADamagedDatabaseMovesItAsideWithAWarning) {
  make_db(path("a.db"));
  ASSERT_EQ(run_cli("db export --db " + path("a.db") + " -o " + path("a.json")).exit_code, 0);
  write_truncated_db(path("d.db"));
  const std::string damaged = file_bytes(path("d.db"));
  CliResult r = run_cli("db import " + path("a.json") + " --db " + path("d.db"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("warning"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("2 added"), std::string::npos) << r.out;
  bool kept = false;
  for (const auto& entry : fs::directory_iterator(dir_)) {
    if (entry.path().filename().string().rfind("d.db.corrupt-", 0) == 0) kept = file_bytes(entry.path().string()) == damaged;
  }
  EXPECT_TRUE(kept) << "the damaged file must be kept aside byte for byte";
}

TEST_F(CmdDb, NoOpenLockFilesAreLeftBehind) {
  make_db(path("a.db"));
  ASSERT_EQ(run_cli("db export --db " + path("a.db") + " -o " + path("a.json")).exit_code, 0);
  ASSERT_EQ(run_cli("db import " + path("a.json") + " --db " + path("b.db")).exit_code, 0);
  ASSERT_EQ(run_cli("db merge " + path("a.db") + " --db " + path("b.db")).exit_code, 0);
  ASSERT_EQ(run_cli("db show --db " + path("b.db")).exit_code, 0);
  for (const auto& entry : fs::directory_iterator(dir_)) {
    EXPECT_EQ(entry.path().string().find("open-lock"), std::string::npos) << entry.path();
    EXPECT_EQ(entry.path().string().find("-shm"), std::string::npos) << entry.path();
  }
}

// The tests run as root, which ignores permissions; these run `body` in a child process that
// dropped to `nobody`. body returns 0 when all was as expected, else nonzero, and appends what it
// saw to its report. The result is the child's exit code with the report; 77 when the switch
// could not be made or nobody cannot run the command line (the caller skips).
std::pair<int, std::string> run_as_nobody(const std::function<int(std::string&)>& body) {
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) return {1, "pipe failed"};
  const pid_t child = ::fork();
  if (child < 0) return {1, "fork failed"};
  if (child == 0) {
    ::close(pipe_fds[0]);
    std::string report;
    int code = 0;
    if (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0) {
      report = "cannot switch to nobody";
      code = 77;
    } else if (::access(CPGEN_CLI_PATH, X_OK) != 0) {
      // A build inside a folder private to root (mktemp -d makes 0700 folders) is out of nobody's
      // reach; that says nothing about the database.
      report = std::string("nobody cannot run ") + CPGEN_CLI_PATH + ": a folder on its path is private to root";
      code = 77;
    } else {
      code = body(report);
    }
    (void)!::write(pipe_fds[1], report.data(), report.size());
    ::close(pipe_fds[1]);
    remove_cli_output_dir();
    ::_exit(code);
  }
  ::close(pipe_fds[1]);
  std::string report;
  char buffer[4096];
  for (ssize_t n; (n = ::read(pipe_fds[0], buffer, sizeof buffer)) > 0;) report.append(buffer, n);
  ::close(pipe_fds[0]);
  int status = 0;
  if (::waitpid(child, &status, 0) != child || !WIFEXITED(status)) return {1, report + " (the child did not exit)"};
  return {WEXITSTATUS(status), report};
}

// The read-only commands need no write access at all.
TEST_F(CmdDb, ReadOnlyCommandsWorkOnAReadOnlyDatabaseInAReadOnlyFolderAsNonRoot) {
  if (::geteuid() != 0) GTEST_SKIP() << "not root: cannot switch to nobody (run as root, or see the chmod checks below)";
  const std::string folder = path("shared");
  fs::create_directory(folder);
  const std::string db = folder + "/team.db";
  make_db(db);
  fs::permissions(db, fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read);
  fs::permissions(folder, fs::perms::owner_read | fs::perms::owner_exec | fs::perms::group_read | fs::perms::group_exec |
                              fs::perms::others_read | fs::perms::others_exec);
  const auto before = folder_snapshot(folder);
  const std::string shape_arg = shape();
  const auto [code, report] = run_as_nobody([&](std::string& report) {
    int code = 0;
    ::setenv("XDG_CACHE_HOME", (folder + "/no-cache").c_str(), 1);
    for (const std::string& command : {"db show --db " + db, "db export --db " + db, "db verify --db " + db,
                                       "explain --db " + db + " --shape " + shape_arg}) {
      CliResult r = run_cli(command);
      if (r.exit_code != 0) {
        report += command + " exited " + std::to_string(r.exit_code) + ": " + r.err + "\n";
        code = 1;
      } else if (command.rfind("explain", 0) == 0 && r.out.find("database-exact") == std::string::npos &&
                 r.out.find(db) == std::string::npos) {
        report += "explain did not read the database: " + r.out + "\n";
        code = 1;
      }
    }
    return code;
  });
  if (code == 77) GTEST_SKIP() << report;
  EXPECT_EQ(code, 0) << report;
  EXPECT_EQ(folder_snapshot(folder), before) << "a read-only command created or changed a file";
  fs::permissions(folder, fs::perms::owner_all);
}

// A sound database the user may not read is reported as unreadable, never as "not an SQLite
// database", and at cpgen's default path it is not moved aside as such (a writing command used
// to rename another user's intact cpgen.db to cpgen.db.corrupt-<time>).
TEST_F(CmdDb, AnUnreadableDatabaseIsNeitherCalledNotSqliteNorMovedAside) {
  if (::geteuid() != 0) GTEST_SKIP() << "not root: cannot switch to nobody";
  const std::string cache = path("cache"), folder = cache + "/cpgen", db = folder + "/cpgen.db";
  fs::create_directories(folder);
  make_db(db);
  ASSERT_EQ(run_cli("db export --db " + db + " -o " + path("cache/g.json")).exit_code, 0);
  fs::permissions(db, fs::perms::owner_read | fs::perms::owner_write);  // root's alone
  fs::permissions(path("cache/g.json"), fs::perms::all);
  fs::permissions(cache, fs::perms::all);
  fs::permissions(folder, fs::perms::all);  // nobody may create files beside it
  fs::permissions(dir_, fs::perms::all);
  const std::string before = slurp(db);
  const auto [code, report] = run_as_nobody([&](std::string& report) {
    ::setenv("XDG_CACHE_HOME", cache.c_str(), 1);
    ::unsetenv("CPGEN_DB");
    int code = 0;
    for (const std::string& command : {"db import " + cache + "/g.json", "db show --db " + db}) {
      CliResult r = run_cli(command);
      if (r.exit_code == 0 || r.err.find("cannot read the tuning database") == std::string::npos ||
          r.err.find("not an SQLite database") != std::string::npos) {
        report += command + " exited " + std::to_string(r.exit_code) + ": " + r.err + "\n";
        code = 1;
      }
    }
    return code;
  });
  fs::permissions(dir_, fs::perms::owner_all);
  if (code == 77) GTEST_SKIP() << report;
  EXPECT_EQ(code, 0) << report;
  EXPECT_EQ(slurp(db), before);
  for (const auto& entry : fs::directory_iterator(folder))
    EXPECT_EQ(entry.path().filename().string().find(".corrupt-"), std::string::npos) << entry.path();
}

// A bad value quoted from a file is cut in the message: a 5,000-character disposition gave a
// 5,000-character line (a fuzzer's 200 MB one gave a 200 MB line).
TEST_F(CmdDb, AHugeBadValueIsCutInItsOneLine) {
  make_db(path("a.db"));
  ASSERT_EQ(run_cli("db export --db " + path("a.db") + " -o " + path("a.json")).exit_code, 0);
  nlohmann::json doc = nlohmann::json::parse(slurp(path("a.json")));
  doc["entries"][0]["disposition"] = std::string(5000, 'x');
  std::ofstream(path("huge.json")) << doc.dump();
  const CliResult r = run_cli("db import " + path("huge.json") + " --db " + path("b.db"));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err.substr(0, 300);
  EXPECT_LT(r.err.size(), 2100u);
  EXPECT_NE(r.err.find("disposition"), std::string::npos) << r.err.substr(0, 300);
  EXPECT_NE(r.err.find("characters in all)"), std::string::npos) << r.err.substr(r.err.size() - 100);
}

// A database the user may read but not write, named to a writing command: one line, exit 2, and
// nothing made beside it. SQLite opened it read-only without a word, failed at the first write
// ("attempt to write a readonly database", exit 1), and left -wal and -shm files owned by this
// user beside another user's database.
TEST_F(CmdDb, AWritingCommandRefusesADatabaseItMayNotWrite) {
  if (::geteuid() != 0) GTEST_SKIP() << "not root: cannot switch to nobody";
  const std::string folder = path("shared"), db = folder + "/t.db";
  fs::create_directories(folder);
  make_db(db);
  ASSERT_EQ(run_cli("db export --db " + db + " -o " + path("g.json")).exit_code, 0);
  fs::permissions(db, fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read | fs::perms::others_read);
  fs::permissions(path("g.json"), fs::perms::all);
  fs::permissions(folder, fs::perms::all);  // anyone may create files beside it
  fs::permissions(dir_, fs::perms::all);
  const auto before = folder_snapshot(folder);
  const auto [code, report] = run_as_nobody([&](std::string& report) {
    const CliResult r = run_cli("db import " + path("g.json") + " --db " + db);
    if (r.exit_code != 2 || r.err.find("cannot be written: " + db + " is not writable") == std::string::npos ||
        std::count(r.err.begin(), r.err.end(), '\n') != 1) {
      report = "exited " + std::to_string(r.exit_code) + ": " + r.err;
      return 1;
    }
    return 0;
  });
  fs::permissions(dir_, fs::perms::owner_all);
  if (code == 77) GTEST_SKIP() << report;
  EXPECT_EQ(code, 0) << report;
  EXPECT_EQ(folder_snapshot(folder), before) << "files were made or changed beside the database";
}

}  // namespace
}  // namespace cpgen::testing
