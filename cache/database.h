// The tuning database: one SQLite file in WAL mode with a busy timeout, a schema version with
// migrations, and every write inside a transaction that is retried when another process holds
// the write lock.
//
// What happens to a file at the path that is not a usable cpgen database depends on who named
// it and whether the open may write:
//   - a read-only open never creates, moves, locks or modifies anything: a file that is not
//     SQLite is refused (kBadInput), a damaged one is reported (kDatabase);
//   - a writing open of a path the user named (--db, $CPGEN_DB) refuses a file that is not
//     SQLite or is another program's database (kBadInput, the file left as it is) and moves a
//     damaged SQLite file aside (same name plus ".corrupt-<unix time>") with a warning;
//   - a writing open of cpgen's own default path moves anything unusable aside the same way.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cache/statement.h"

namespace cpgen {

// Path resolution, first match wins: the --db flag, $CPGEN_DB, $XDG_CACHE_HOME/cpgen/cpgen.db,
// ~/.cache/cpgen/cpgen.db.
std::string resolve_db_path(const std::string& flag_value = "");

// Where cache warnings go (a file moved aside, rows of another environment). Default: stderr,
// prefixed "cpgen: warning: ". Each warning reaches the sink as one line (one_line,
// runtime/core/json_text.h): a file name or a quoted value may hold a newline. Returns the
// previous sink.
using WarningSink = std::function<void(const std::string&)>;
WarningSink set_warning_sink(WarningSink sink);
void warn(const std::string& message);

// True when the file starts with the 16-byte SQLite header ("SQLite format 3" and a NUL); false
// for a shorter file. Throws Error(kIo) naming the path and the reason when it cannot be opened.
bool has_sqlite_header(const std::string& path);

// Who chose the path of a writing open (see the top of this file).
enum class PathOwner { kUser, kCpgen };

class Database {
 public:
  // The schema this build writes; migrations bring older files up to it.
  static constexpr int kSchemaVersion = 1;
  // How long one statement waits for another process's lock before SQLITE_BUSY.
  static constexpr int kBusyTimeoutMs = 10000;

  // Opens (creating folders and the file as needed), repairs and migrates. Throws
  // Error(kBadInput) for a user's file that is not a cpgen database, Error(kDatabase) when the
  // file cannot be opened or was written by a newer schema.
  explicit Database(const std::string& path, PathOwner owner = PathOwner::kUser);
  // Opens an existing file for reading only: nothing is created, repaired, moved aside, migrated
  // or locked. Throws Error(kBadInput) for a file that is not SQLite (or is empty) and
  // Error(kDatabase) naming the path and what is wrong (no such file, damaged, not a cpgen
  // database, a schema version other than kSchemaVersion). check_integrity adds PRAGMA
  // quick_check, so that a damaged file is reported at the open rather than by a later query.
  struct ReadOnly {
    bool check_integrity = false;
    // The file is the source of a merge (db merge OTHER), not a --db: messages say so instead of
    // suggesting --db or a writing command that would move it aside.
    bool merge_source = false;
  };
  Database(const std::string& path, ReadOnly options);
  // A read-only open without a write-ahead log beside the file takes no lock (immutable=1; see
  // database.cpp): true when, since the open, a writer has begun (its "-wal" appeared) or the
  // file changed (a checkpoint), so that what was read may mix two commits or miss the newest.
  // False for every other open, which reads through SQLite's locks.
  bool changed_since_open() const;
  // Closes and opens a read-only database again (now through the writer's log if it has one).
  // Like the first open, it opens again (up to kReadAttempts times) where it read pages that a
  // writer's checkpoint changed meanwhile.
  void reopen_read_only();
  // Runs fn inside one read transaction (BEGIN ... ROLLBACK): its statements see one snapshot,
  // and nothing they might write is kept.
  void read(const std::function<void()>& fn);
  // read(fn), made whole for a read-only open that took no lock: when a writer changed the file
  // during the read (changed_since_open), or the read found pages of two commits (kDatabase,
  // "malformed") in a file that changed, the database is opened again (now through the writer's
  // log and its locks) and fn runs again, up to kReadAttempts times; after that, kDatabase
  // naming the file and the running writer. fn must start its results afresh on every run.
  static constexpr int kReadAttempts = 5;
  void read_consistent(const std::function<void()>& fn);
  ~Database();
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  const std::string& path() const { return path_; }
  // Non-empty when opening found a bad file at path() and moved it there.
  const std::string& moved_aside_to() const { return moved_aside_to_; }
  int schema_version();

  Statement prepare(std::string_view sql) { return Statement(db_, sql); }
  void exec(const std::string& sql);
  // Runs fn inside BEGIN IMMEDIATE ... COMMIT. IMMEDIATE takes the write lock up front, so two
  // writers never deadlock upgrading read locks; if the lock stays busy past the busy timeout
  // (or a statement inside reports busy) the whole transaction is rolled back and rerun.
  void transaction(const std::function<void()>& fn);
  // PRAGMA integrity_check: {"ok"} for a sound file, otherwise one line per problem.
  std::vector<std::string> integrity_check();

  sqlite3* handle() { return db_; }

 private:
  struct FileState {
    uint64_t device = 0, inode = 0;
    int64_t size = -1, mtime_s = 0, mtime_ns = 0;
    bool operator==(const FileState&) const = default;
  };
  FileState file_state() const;
  void open_read_only(ReadOnly options);  // open_read_only_once, again where a writer changed the file
  void open_read_only_once(ReadOnly options);
  void open_checked(PathOwner owner);
  void move_aside(const std::string& why);
  void configure();
  void refuse_newer_schema();  // throws kDatabase for a schema version above this build's
  void migrate();

  std::string path_;
  std::string moved_aside_to_;
  sqlite3* db_ = nullptr;
  std::optional<ReadOnly> read_only_;  // the options of a read-only open
  bool immutable_ = false;             // opened with immutable=1
  FileState opened_state_;
};

}  // namespace cpgen
