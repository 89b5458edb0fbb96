#include "cache/statement.h"

#include "cache/sqlite_check.h"

namespace cpgen {

void raise_sqlite(sqlite3* handle, int status, const char* call, const char* file, int line) {
  // The extended code names the exact case (SQLITE_BUSY_SNAPSHOT, SQLITE_IOERR_FSYNC, ...).
  std::string message = std::string("SQLite call ") + call + " failed at " + file + ":" +
                        std::to_string(line) + ": " + sqlite3_errstr(status);
  if (handle) {
    const char* detail = sqlite3_errmsg(handle);
    const char* path = sqlite3_db_filename(handle, "main");
    if (detail && std::string(detail) != sqlite3_errstr(status)) message += std::string(" (") + detail + ")";
    if (path && *path) message += std::string(" [") + path + "]";
  }
  throw SqliteError(status & 0xff, message);
}

Statement::Statement(sqlite3* db, std::string_view sql) : db_(db) {
  CPGEN_SQLITE_CHECK(db_, sqlite3_prepare_v2(db_, sql.data(), static_cast<int>(sql.size()), &stmt_, nullptr));
}

Statement::~Statement() {
  if (stmt_) sqlite3_finalize(stmt_);
}

Statement::Statement(Statement&& other) noexcept : db_(other.db_), stmt_(other.stmt_) { other.stmt_ = nullptr; }

Statement& Statement::bind(int index, int64_t value) {
  CPGEN_SQLITE_CHECK(db_, sqlite3_bind_int64(stmt_, index, value));
  return *this;
}

Statement& Statement::bind(int index, double value) {
  CPGEN_SQLITE_CHECK(db_, sqlite3_bind_double(stmt_, index, value));
  return *this;
}

Statement& Statement::bind(int index, std::string_view text) {
  CPGEN_SQLITE_CHECK(db_, sqlite3_bind_text(stmt_, index, text.data(), static_cast<int>(text.size()), SQLITE_TRANSIENT));
  return *this;
}

Statement& Statement::bind_blob(int index, std::string_view bytes) {
  CPGEN_SQLITE_CHECK(db_, sqlite3_bind_blob(stmt_, index, bytes.data(), static_cast<int>(bytes.size()), SQLITE_TRANSIENT));
  return *this;
}

Statement& Statement::bind_null(int index) {
  CPGEN_SQLITE_CHECK(db_, sqlite3_bind_null(stmt_, index));
  return *this;
}

bool Statement::step() {
  int status = sqlite3_step(stmt_);
  if (status == SQLITE_ROW) return true;
  if (status == SQLITE_DONE) return false;
  raise_sqlite(db_, status, "sqlite3_step", __FILE__, __LINE__);
}

void Statement::run() {
  while (step()) {
  }
}

void Statement::reset() {
  sqlite3_reset(stmt_);  // returns the previous step's error, already reported by step()
  CPGEN_SQLITE_CHECK(db_, sqlite3_clear_bindings(stmt_));
}

int64_t Statement::column_int(int col) const { return sqlite3_column_int64(stmt_, col); }
double Statement::column_double(int col) const { return sqlite3_column_double(stmt_, col); }

std::string Statement::column_text(int col) const {
  const unsigned char* text = sqlite3_column_text(stmt_, col);
  return text ? std::string(reinterpret_cast<const char*>(text), sqlite3_column_bytes(stmt_, col)) : std::string();
}

std::string Statement::column_blob(int col) const {
  const void* data = sqlite3_column_blob(stmt_, col);
  return data ? std::string(static_cast<const char*>(data), sqlite3_column_bytes(stmt_, col)) : std::string();
}

bool Statement::column_is_null(int col) const { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }

std::string Statement::database_file() const {
  const char* file = sqlite3_db_filename(db_, "main");
  return file ? file : "";
}

}  // namespace cpgen
