#include "cache/database.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <random>
#include <thread>

#include "cache/schema.h"
#include "cache/sqlite_check.h"
#include "cpgen/error.h"
#include "runtime/core/user_cache_dir.h"

namespace cpgen {
namespace fs = std::filesystem;
namespace {

std::mutex g_sink_mutex;
WarningSink g_sink;

// Holds an advisory lock on "<db>.open-lock" while a process opens, repairs and migrates, so
// that two processes never both decide to move the same bad file aside (the second would move
// the fresh database the first just created).
class OpenLock {
 public:
  explicit OpenLock(const std::string& db_path) {
    std::string lock_path = db_path + ".open-lock";
    fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) {
      throw Error(ErrorKind::kIo, "cannot create the lock file " + lock_path + ": " + std::strerror(errno));
    }
    while (::flock(fd_, LOCK_EX) != 0) {
      if (errno != EINTR) {
        ::close(fd_);
        throw Error(ErrorKind::kIo, "cannot lock " + lock_path + ": " + std::strerror(errno));
      }
    }
  }
  ~OpenLock() {
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
  }

 private:
  int fd_ = -1;
};

bool is_unusable_file(int code) { return code == SQLITE_NOTADB || code == SQLITE_CORRUPT; }

}  // namespace

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
  std::lock_guard<std::mutex> lock(g_sink_mutex);
  if (g_sink) {
    g_sink(message);
  } else {
    std::cerr << "cpgen: warning: " << message << "\n";
  }
}

Database::Database(const std::string& path) : path_(path) {
  if (path_.empty()) throw_bad_input("database path is empty; pass --db PATH");
  fs::path parent = fs::path(path_).parent_path();
  std::error_code ec;
  if (!parent.empty()) fs::create_directories(parent, ec);
  if (ec) {
    throw Error(ErrorKind::kIo, "cannot create the folder " + parent.string() + " for the tuning database: " + ec.message());
  }
  if (fs::is_directory(path_)) {
    throw_bad_input("database path " + path_ + " is a directory; pass the path of a file");
  }
  OpenLock lock(path_);
  open_checked();
  configure();
  migrate();
}

Database::Database(const std::string& path, ReadOnly) : path_(path) {
  if (path_.empty()) throw_bad_input("database path is empty; pass --db PATH");
  if (!fs::is_regular_file(path_)) throw Error(ErrorKind::kDatabase, "no tuning database file at " + path_);
  int status = sqlite3_open_v2(path_.c_str(), &db_, SQLITE_OPEN_READONLY | SQLITE_OPEN_FULLMUTEX, nullptr);
  if (status != SQLITE_OK) {
    std::string message = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(status);
    if (db_) sqlite3_close_v2(db_);
    db_ = nullptr;
    throw SqliteError(status & 0xff, "cannot open the tuning database " + path_ + " for reading: " + message);
  }
  try {
    CPGEN_SQLITE_CHECK(db_, sqlite3_busy_timeout(db_, kBusyTimeoutMs));
    CPGEN_SQLITE_CHECK(db_, sqlite3_extended_result_codes(db_, 1));
    // The first read of the file's pages: SQLITE_NOTADB or SQLITE_CORRUPT for a bad file.
    const int version = schema_version();
    if (version == 0) throw Error(ErrorKind::kDatabase, "the file at " + path_ + " is not a cpgen tuning database (no meta table)");
    if (version != kSchemaVersion) {
      throw Error(ErrorKind::kDatabase, "the tuning database " + path_ + " has schema version " + std::to_string(version) +
                                            "; lookups read version " + std::to_string(kSchemaVersion) +
                                            " only (any cpgen db command migrates an older file)");
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

void Database::open_checked() {
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
    // Reading the schema is the first access to the file's pages: a file that is not SQLite
    // answers SQLITE_NOTADB here, a damaged one SQLITE_CORRUPT.
    std::string why;
    try {
      Statement probe(db_, "SELECT count(*) FROM sqlite_master WHERE name NOT IN ('meta') AND type = 'table'");
      probe.step();
      int64_t other_tables = probe.column_int(0);
      Statement has_meta(db_, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'meta'");
      has_meta.step();
      if (has_meta.column_int(0) == 0 && other_tables > 0) why = "it is an SQLite database of another program (no cpgen meta table)";
    } catch (const SqliteError& e) {
      if (!is_unusable_file(e.code())) throw;
      why = std::string("it is not a usable SQLite database (") + sqlite3_errstr(e.code()) + ")";
    }
    if (why.empty()) return;
    sqlite3_close_v2(db_);
    db_ = nullptr;
    if (attempt == 1) throw Error(ErrorKind::kDatabase, "the tuning database " + path_ + " is still unusable after it was rebuilt");
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
  Statement version(db_, "SELECT value FROM meta WHERE key = 'schema_version'");
  return version.step() ? std::stoi(version.column_text(0)) : 0;
}

void Database::migrate() {
  transaction([&] {
    int version = schema_version();
    if (version > kSchemaVersion) {
      throw Error(ErrorKind::kDatabase, "the tuning database " + path_ + " has schema version " + std::to_string(version) +
                                            ", written by a newer cpgen; this build reads versions up to " +
                                            std::to_string(kSchemaVersion) + " (pass --db to use another file)");
    }
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
