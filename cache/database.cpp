#include "cache/database.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/file.h>
#include <unistd.h>

#include <charconv>
#include <chrono>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <random>
#include <thread>

#include "cache/schema.h"
#include "cache/sqlite_check.h"
#include "cpgen/error.h"
#include "runtime/core/json_text.h"
#include "runtime/core/user_cache_dir.h"

namespace cpgen {
namespace fs = std::filesystem;
namespace {

std::mutex g_sink_mutex;
WarningSink g_sink;

// Holds an advisory lock on the database's folder while a process opens, repairs and migrates,
// so that two processes never both decide to move the same bad file aside (the second would move
// the fresh database the first just created). Locking the folder itself leaves no lock file
// behind; the lock is held only for the open, so unrelated databases in one folder wait at most
// that long for each other.
class FolderLock {
 public:
  explicit FolderLock(const std::string& folder) {
    fd_ = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd_ < 0) throw Error(ErrorKind::kIo, "cannot open the folder " + folder + " of the tuning database: " + std::strerror(errno));
    while (::flock(fd_, LOCK_EX) != 0) {
      if (errno != EINTR) {
        const int saved = errno;
        ::close(fd_);
        throw Error(ErrorKind::kIo, "cannot lock the folder " + folder + ": " + std::strerror(saved));
      }
    }
  }
  ~FolderLock() {
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
  }
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;

 private:
  int fd_ = -1;
};

constexpr char kSqliteHeader[16] = {'S', 'Q', 'L', 'i', 't', 'e', ' ', 'f', 'o', 'r', 'm', 'a', 't', ' ', '3', '\0'};

// "file:" URI of a path, for sqlite3_open_v2 with SQLITE_OPEN_URI: absolute, with the characters
// a URI gives meaning to percent-encoded.
std::string file_uri(const std::string& path) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::error_code ec;
  std::string absolute = fs::absolute(path, ec).string();
  if (ec) absolute = path;
  std::string uri = "file://";
  for (unsigned char c : absolute) {
    if (c == '%' || c == '?' || c == '#' || c < 0x20 || c >= 0x7f) {
      uri += '%';
      uri += kHex[c >> 4];
      uri += kHex[c & 15];
    } else {
      uri += static_cast<char>(c);
    }
  }
  return uri;
}

// What to do about a file that is no cpgen database, where it was given as --db or a merge's source.
const char* open_advice(bool merge_source) {
  return merge_source ? "merge reads another cpgen tuning database (db import reads a JSON cache)"
                      : "pass --db with the path of a cpgen tuning database";
}

std::string not_sqlite_message(const std::string& path, bool merge_source = false) {
  return path + " is not an SQLite database (it does not start with the SQLite header); it was left as it is; " +
         open_advice(merge_source);
}

std::string foreign_message(const std::string& path, bool merge_source = false) {
  return path + " is an SQLite database of another program (no cpgen meta table), or one cpgen never wrote; it "
                "was left as it is; " +
         open_advice(merge_source);
}

// What a read-only open of a damaged file suggests.
const char* damaged_advice(bool merge_source) {
  return merge_source ? " (cpgen db verify --db FILE reports it; merge leaves the file it reads as it is)"
                      : " (cpgen db verify reports it; a writing command moves it aside)";
}

bool is_unusable_file(int code) { return code == SQLITE_NOTADB || code == SQLITE_CORRUPT; }

}  // namespace

bool has_sqlite_header(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  // A file that cannot be opened says nothing about what it holds: an intact database the user
  // may not read must not be called "not SQLite" (nor moved aside as such at the default path).
  if (!in.is_open()) {
    const int error = errno;
    throw Error(ErrorKind::kIo, "cannot read the tuning database " + path + ": " + std::strerror(error));
  }
  char header[sizeof kSqliteHeader] = {};
  if (!in.read(header, sizeof header)) return false;
  return std::memcmp(header, kSqliteHeader, sizeof header) == 0;
}

std::string resolve_db_path(const std::string& flag_value) {
  if (!flag_value.empty()) return flag_value;
  if (std::string env = env_or_empty("CPGEN_DB"); !env.empty()) return env;
  const std::string cache = user_cache_dir();
  if (cache.empty()) {
    throw_bad_input("no tuning database path: pass --db PATH or set CPGEN_DB, XDG_CACHE_HOME or HOME");
  }
  return cache + "/cpgen.db";
}

WarningSink set_warning_sink(WarningSink sink) {
  std::lock_guard<std::mutex> lock(g_sink_mutex);
  WarningSink previous = std::move(g_sink);
  g_sink = std::move(sink);
  return previous;
}

void warn(const std::string& message) {
  const std::string line = one_line(message);
  std::lock_guard<std::mutex> lock(g_sink_mutex);
  if (g_sink) {
    g_sink(line);
  } else {
    std::cerr << "cpgen: warning: " << line << "\n";
  }
}

Database::Database(const std::string& path, PathOwner owner) : path_(path) {
  if (path_.empty()) throw_bad_input("database path is empty; pass --db PATH");
  // Before any folder is made: "a/b/" names a folder (its parent_path is a/b itself).
  if (path_.back() == '/' || fs::is_directory(path_))
    throw_bad_input("database path " + path_ + " is a directory; pass the path of a file");
  fs::path parent = fs::path(path_).parent_path();
  std::error_code ec;
  if (!parent.empty()) fs::create_directories(parent, ec);
  if (ec) {
    throw Error(ErrorKind::kIo, "cannot create the folder " + parent.string() + " for the tuning database: " + ec.message());
  }
  if (fs::is_directory(path_)) {
    throw_bad_input("database path " + path_ + " is a directory; pass the path of a file");
  }
  // A file or folder this user cannot write: SQLite would open the file read-only without a word
  // and fail at the first write ("attempt to write a readonly database", exit 1), after making
  // its -wal and -shm files beside another user's database.
  // (A file this user cannot read either is the open's to report: "cannot read".)
  for (const std::string& needed : {path_, parent.empty() ? std::string(".") : parent.string()}) {
    if (fs::exists(needed, ec) && ::access(needed.c_str(), R_OK) == 0 && ::access(needed.c_str(), W_OK) != 0)
      throw_bad_input("the tuning database " + path_ + " cannot be written: " + needed + " is not writable (" +
                      std::strerror(errno) + "); a command that writes needs write access to the file and its folder "
                      "(pass --db with another path)");
  }
  FolderLock lock(parent.empty() ? std::string(".") : parent.string());
  open_checked(owner);
  try {
    // A newer cpgen's file is refused before anything is written to it (configure switches the
    // journal to WAL, which changes the file's header).
    refuse_newer_schema();
    configure();
    migrate();
  } catch (...) {
    sqlite3_close_v2(db_);  // no destructor runs for a constructor that throws
    db_ = nullptr;
    throw;
  }
}

Database::Database(const std::string& path, ReadOnly options) : path_(path), read_only_(options) {
  open_read_only(options);
}

void Database::reopen_read_only() {
  if (!read_only_) throw Error(ErrorKind::kInternal, "reopen_read_only: " + path_ + " was opened for writing");
  if (db_) sqlite3_close_v2(db_);
  db_ = nullptr;
  open_read_only(*read_only_);
}

// What identifies the file's contents without reading it: a writer's checkpoint changes its
// size or its modification time (nanoseconds), a replacement its inode.
Database::FileState Database::file_state() const {
  struct stat st {};
  if (::stat(path_.c_str(), &st) != 0) return {};
  return {static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino), static_cast<int64_t>(st.st_size),
          static_cast<int64_t>(st.st_mtim.tv_sec), static_cast<int64_t>(st.st_mtim.tv_nsec)};
}

bool Database::changed_since_open() const {
  if (!immutable_) return false;
  std::error_code ec;
  return fs::exists(path_ + "-wal", ec) || !(file_state() == opened_state_);
}

void Database::read(const std::function<void()>& fn) {
  exec("BEGIN");
  try {
    fn();
  } catch (...) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
  // A read has nothing to commit: ROLLBACK ends it (a COMMIT that follows reads of a damaged
  // file fails with SQLITE_CORRUPT, hiding what the reads themselves found).
  exec("ROLLBACK");
}

void Database::read_consistent(const std::function<void()>& fn) {
  for (int attempt = 1;; ++attempt) {
    try {
      read(fn);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kDatabase || !changed_since_open() || attempt == kReadAttempts) throw;
    }
    if (!changed_since_open()) return;
    if (attempt == kReadAttempts)
      throw Error(ErrorKind::kDatabase, "the tuning database " + path_ + " changed during each of " +
                                            std::to_string(kReadAttempts) + " reads (a writer is running); try again");
    reopen_read_only();
  }
}

void Database::open_read_only(ReadOnly options) {
  // The open reads the file too (its schema version, the quick check): one without a lock that
  // overlapped a writer's checkpoint may find pages of two commits and call a sound file damaged.
  for (int attempt = 1;; ++attempt) {
    try {
      open_read_only_once(options);
      return;
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kDatabase || !changed_since_open() || attempt == kReadAttempts) throw;
    }
  }
}

void Database::open_read_only_once(ReadOnly options) {
  if (path_.empty()) throw_bad_input("database path is empty; pass --db PATH");
  std::error_code ec;
  if (fs::is_directory(path_, ec)) throw_bad_input("database path " + path_ + " is a directory; pass the path of a file");
  if (!fs::is_regular_file(path_, ec)) throw Error(ErrorKind::kDatabase, "no tuning database file at " + path_);
  if (fs::file_size(path_, ec) == 0 && !ec) throw_bad_input(path_ + " is an empty file, not a cpgen tuning database");
  if (!has_sqlite_header(path_)) throw_bad_input(not_sqlite_message(path_, options.merge_source));
  // Plain SQLITE_OPEN_READONLY is not enough to leave a folder untouched: on a WAL database it
  // creates "-wal" and "-shm" files next to it when the folder is writable, and leaves them
  // there (a read-only connection cannot checkpoint them away); in a read-only folder it fails.
  // When no "-wal" file exists, every committed transaction is in the main file (the last
  // writer checkpointed and removed the log when it closed), so the file is opened with
  // immutable=1: no locks, no side files. A writer that starts meanwhile appends to its own log
  // (unseen here) and changes the main file only when it checkpoints; a read that overlaps that
  // checkpoint may mix two commits or report the file as damaged. changed_since_open tells
  // either, and a reader that must not (export_cache) opens again and reads again (through the
  // writer's log and its locks while that log is there). When a "-wal" file exists (a
  // writer is running, or one was killed), its transactions are needed: mode=ro reads them
  // through the "-shm" index that the writer already created, so nothing new appears either.
  const bool has_log = fs::exists(path_ + "-wal", ec);
  // An immutable read takes no lock, so a writer that starts meanwhile goes unseen until it
  // changes the file: changed_since_open compares this state (taken before the first read).
  immutable_ = !has_log;
  opened_state_ = file_state();
  const std::string uri = file_uri(path_) + (has_log ? "?mode=ro" : "?immutable=1");
  int status = sqlite3_open_v2(uri.c_str(), &db_, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_FULLMUTEX, nullptr);
  if (status != SQLITE_OK) {
    std::string message = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(status);
    if (db_) sqlite3_close_v2(db_);
    db_ = nullptr;
    throw SqliteError(status & 0xff, "cannot open the tuning database " + path_ + " for reading: " + message);
  }
  try {
    CPGEN_SQLITE_CHECK(db_, sqlite3_busy_timeout(db_, kBusyTimeoutMs));
    CPGEN_SQLITE_CHECK(db_, sqlite3_extended_result_codes(db_, 1));
    int version = 0;
    try {
      // The first read of the file's pages: SQLITE_NOTADB or SQLITE_CORRUPT for a damaged file.
      version = schema_version();
    } catch (const SqliteError& e) {
      if (!is_unusable_file(e.code())) throw;
      throw Error(ErrorKind::kDatabase, "the tuning database " + path_ + " is damaged: " + sqlite3_errstr(e.code()) +
                                            damaged_advice(options.merge_source));
    } catch (const Error&) {
      version = 0;  // a meta table that is not cpgen's, as the writing open takes it: another program's
    }
    // Another program's SQLite file is the user's mistake, as a writing open says (exit 2 there
    // and here; it was a database error here, and db verify called the sound file damaged).
    if (version == 0) throw_bad_input(foreign_message(path_, options.merge_source));
    if (version > kSchemaVersion) {
      throw Error(ErrorKind::kDatabase, "the tuning database " + path_ + " has schema version " + std::to_string(version) +
                                            ", written by a newer cpgen; this build reads versions up to " +
                                            std::to_string(kSchemaVersion) + " (the file itself may be sound)");
    }
    if (version != kSchemaVersion) {
      throw Error(ErrorKind::kDatabase, "the tuning database " + path_ + " has schema version " + std::to_string(version) +
                                            "; lookups read version " + std::to_string(kSchemaVersion) +
                                            " only (any cpgen db command that writes migrates an older file)");
    }
    if (options.check_integrity) {
      std::vector<std::string> problems;
      try {
        Statement check(db_, "PRAGMA quick_check(1)");
        while (check.step()) problems.push_back(check.column_text(0));
      } catch (const SqliteError& e) {
        if (!is_unusable_file(e.code())) throw;
        problems = {sqlite3_errstr(e.code())};
      }
      if (problems.size() != 1 || problems[0] != "ok") {
        throw Error(ErrorKind::kDatabase, "the tuning database " + path_ + " is damaged: " +
                                              (problems.empty() ? std::string("quick_check returned nothing") : problems[0]) +
                                              damaged_advice(options.merge_source));
      }
    }
  } catch (...) {
    sqlite3_close_v2(db_);
    db_ = nullptr;
    throw;
  }
}

Database::~Database() {
  if (db_) sqlite3_close_v2(db_);
}

void Database::open_checked(PathOwner owner) {
  std::error_code ec;
  // A non-empty file without the SQLite header was never a database. The user's own file (a
  // JSON export given by mistake, a text file) is refused untouched; at cpgen's own default path
  // it can only be a leftover, which is moved aside.
  if (fs::is_regular_file(path_, ec) && fs::file_size(path_, ec) > 0 && !has_sqlite_header(path_)) {
    if (owner == PathOwner::kUser) throw_bad_input(not_sqlite_message(path_));
    move_aside("it is not an SQLite database");
  }
  const bool existed = fs::exists(path_, ec) && fs::file_size(path_, ec) > 0;
  for (int attempt = 0; attempt < 2; ++attempt) {
    int status = sqlite3_open_v2(path_.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nullptr);
    if (status != SQLITE_OK) {
      std::string message = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(status);
      if (db_) sqlite3_close_v2(db_);
      db_ = nullptr;
      throw SqliteError(status & 0xff, "cannot open the tuning database " + path_ + ": " + message);
    }
    CPGEN_SQLITE_CHECK(db_, sqlite3_busy_timeout(db_, kBusyTimeoutMs));
    CPGEN_SQLITE_CHECK(db_, sqlite3_extended_result_codes(db_, 1));
    // Reading the schema is the first access to the file's pages: a damaged header answers
    // SQLITE_NOTADB here, a damaged schema SQLITE_CORRUPT. quick_check then reads every page, so
    // that a truncated or overwritten file is rebuilt now instead of failing in mid-tune.
    std::string why;
    bool foreign = false;
    try {
      Statement probe(db_, "SELECT count(*) FROM sqlite_master WHERE name NOT IN ('meta') AND type = 'table'");
      probe.step();
      int64_t other_tables = probe.column_int(0);
      // cpgen's own file has a meta table with a schema_version (a positive integer); another
      // program's may have a table named meta too, which schema_version calls not cpgen's.
      bool cpgen_meta = false;
      try {
        cpgen_meta = schema_version() > 0;
      } catch (const SqliteError&) {
        throw;  // busy, failing or damaged says nothing of whose the file is (damage: below)
      } catch (const Error&) {
      }
      if (!cpgen_meta && other_tables > 0) {
        why = "it is an SQLite database of another program (no cpgen meta table)";
        foreign = true;
      } else if (existed && attempt == 0) {
        Statement check(db_, "PRAGMA quick_check(1)");
        check.step();
        const std::string answer = check.column_text(0);
        if (answer != "ok") why = "it is damaged (quick_check: " + answer + ")";
      }
    } catch (const SqliteError& e) {
      if (!is_unusable_file(e.code())) throw;
      why = std::string("it is damaged (") + sqlite3_errstr(e.code()) + ")";
    }
    if (why.empty()) return;
    sqlite3_close_v2(db_);
    db_ = nullptr;
    if (foreign && owner == PathOwner::kUser) {
      throw_bad_input(foreign_message(path_));
    }
    if (attempt == 1) throw Error(ErrorKind::kDatabase, "the tuning database " + path_ + " is still unusable after it was rebuilt");
    move_aside(why);
  }
}

void Database::move_aside(const std::string& why) {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  std::string aside = path_ + ".corrupt-" + std::to_string(std::chrono::duration_cast<std::chrono::seconds>(now).count());
  for (int n = 1; fs::exists(aside); ++n) aside = path_ + ".corrupt-" + std::to_string(n);
  std::error_code ec;
  fs::rename(path_, aside, ec);
  if (ec) throw Error(ErrorKind::kIo, "cannot move the bad tuning database " + path_ + " aside: " + ec.message());
  // A stale write-ahead log belongs to the old file; it must not be replayed into the new one.
  for (const char* suffix : {"-wal", "-shm", "-journal"}) {
    if (fs::exists(path_ + suffix)) fs::rename(path_ + suffix, aside + suffix, ec);
  }
  moved_aside_to_ = aside;
  warn("the file at " + path_ + " was moved to " + aside + " because " + why + "; a fresh tuning database was created");
}

void Database::configure() {
  // Switching to WAL needs a brief exclusive lock; with several processes opening at once it can
  // report busy even with the timeout, so it is retried.
  for (int attempt = 0;; ++attempt) {
    try {
      Statement wal(db_, "PRAGMA journal_mode = WAL");
      wal.step();
      std::string mode = wal.column_text(0);
      if (mode != "wal") throw Error(ErrorKind::kDatabase, "the tuning database " + path_ + " refused WAL mode (it reports '" + mode + "'); is it on a network file system?");
      break;
    } catch (const SqliteError& e) {
      if (!e.busy() || attempt >= 50) throw;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  // In WAL mode NORMAL never corrupts and keeps every committed transaction when a process dies;
  // only an operating-system crash may lose the last ones.
  exec("PRAGMA synchronous = NORMAL");
  exec("PRAGMA foreign_keys = ON");
}

int Database::schema_version() {
  Statement has_meta(db_, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'meta'");
  has_meta.step();
  if (has_meta.column_int(0) == 0) return 0;
  std::string text;
  try {
    Statement version(db_, "SELECT value FROM meta WHERE key = 'schema_version'");
    if (!version.step()) return 0;
    text = version.column_text(0);
  } catch (const SqliteError& e) {
    if (e.code() != SQLITE_ERROR) throw;
    // Another program's meta table (no key or value column).
    throw Error(ErrorKind::kDatabase, "the file at " + path_ + " has a meta table that is not cpgen's; it is not a cpgen "
                                          "tuning database");
  }
  // cpgen writes a positive decimal integer.
  int value = 0;
  const char* end = text.data() + text.size();
  const auto [stop, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || stop != end || value < 1)
    throw Error(ErrorKind::kDatabase, "the file at " + path_ + " has a meta table whose schema_version '" +
                                          text.substr(0, 40) + "' is not cpgen's (a positive integer); it is not a cpgen "
                                          "tuning database, or a damaged one");
  return value;
}

void Database::refuse_newer_schema() {
  const int version = schema_version();
  if (version > kSchemaVersion) {
    throw Error(ErrorKind::kDatabase, "the tuning database " + path_ + " has schema version " + std::to_string(version) +
                                          ", written by a newer cpgen; this build reads versions up to " +
                                          std::to_string(kSchemaVersion) + " (pass --db to use another file)");
  }
}

void Database::migrate() {
  transaction([&] {
    refuse_newer_schema();  // again inside the write lock: another process may have migrated it
    int version = schema_version();
    const auto& steps = schema_migrations();
    for (int v = version; v < kSchemaVersion; ++v) exec(std::string(steps.at(v)));
    if (version == kSchemaVersion) return;
    Statement set(db_, "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value");
    set.bind(1, "schema_version").bind(2, std::to_string(kSchemaVersion)).run();
    if (version == 0) {
      set.reset();
      set.bind(1, "created_by").bind(2, std::string("cpgen ") + CPGEN_VERSION).run();
    }
  });
}

void Database::exec(const std::string& sql) {
  char* message = nullptr;
  int status = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &message);
  if (status != SQLITE_OK) {
    std::string text = message ? message : sqlite3_errstr(status);
    sqlite3_free(message);
    std::string first_line = sql.substr(0, sql.find('\n'));
    throw SqliteError(status & 0xff, "SQLite statement '" + first_line + "' failed: " + text + " [" + path_ + "]");
  }
}

void Database::transaction(const std::function<void()>& fn) {
  std::minstd_rand jitter(static_cast<unsigned>(::getpid()));
  for (int attempt = 0;; ++attempt) {
    try {
      exec("BEGIN IMMEDIATE");
    } catch (const SqliteError& e) {
      if (!e.busy() || attempt >= 100) throw;
      std::this_thread::sleep_for(std::chrono::milliseconds(5 + jitter() % 20));
      continue;
    }
    try {
      fn();
      exec("COMMIT");
      return;
    } catch (const SqliteError& e) {
      sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
      if (!e.busy() || attempt >= 100) throw;
      std::this_thread::sleep_for(std::chrono::milliseconds(5 + jitter() % 20));
    } catch (...) {
      sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
      throw;
    }
  }
}

std::vector<std::string> Database::integrity_check() {
  std::vector<std::string> lines;
  try {
    Statement check(db_, "PRAGMA integrity_check");
    while (check.step()) lines.push_back(check.column_text(0));
  } catch (const SqliteError& e) {
    // Damage bad enough to stop the check is its answer too.
    if (!is_unusable_file(e.code())) throw;
    lines.push_back(std::string("integrity_check stopped: ") + sqlite3_errstr(e.code()));
  }
  return lines;
}

}  // namespace cpgen
