// One check shape for every SQLite call: a failure becomes a cpgen::Error(kDatabase) carrying the
// call text, file:line, SQLite's own message and the primary result code (so that the
// transaction loop can tell a busy database from a real failure).
#pragma once

#include <sqlite3.h>

#include <string>

#include "cpgen/error.h"

namespace cpgen {

class SqliteError : public Error {
 public:
  SqliteError(int code, const std::string& message) : Error(ErrorKind::kDatabase, message), code_(code) {}
  int code() const { return code_; }       // primary result code (SQLITE_BUSY, SQLITE_NOTADB, ...)
  bool busy() const { return code_ == SQLITE_BUSY || code_ == SQLITE_LOCKED; }

 private:
  int code_;
};

[[noreturn]] void raise_sqlite(sqlite3* handle, int status, const char* call, const char* file, int line);

}  // namespace cpgen

// SQLITE_ROW and SQLITE_DONE are successes of sqlite3_step; everything else but SQLITE_OK throws.
#define CPGEN_SQLITE_CHECK(handle, call)                                                   \
  do {                                                                                     \
    int cpgen_sqlite_status_ = (call);                                                     \
    if (cpgen_sqlite_status_ != SQLITE_OK && cpgen_sqlite_status_ != SQLITE_ROW &&         \
        cpgen_sqlite_status_ != SQLITE_DONE)                                               \
      ::cpgen::raise_sqlite((handle), cpgen_sqlite_status_, #call, __FILE__, __LINE__);    \
  } while (0)
