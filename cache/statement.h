// A prepared SQLite statement with RAII finalization. Binding indexes start at 1, column indexes
// at 0, as in SQLite. step() returns true while a row is available.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace cpgen {

class Statement {
 public:
  Statement(sqlite3* db, std::string_view sql);
  ~Statement();
  Statement(Statement&& other) noexcept;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  Statement& operator=(Statement&&) = delete;

  Statement& bind(int index, int64_t value);
  Statement& bind(int index, int value) { return bind(index, static_cast<int64_t>(value)); }
  Statement& bind(int index, double value);
  Statement& bind(int index, std::string_view text);
  Statement& bind(int index, const char* text) { return bind(index, std::string_view(text)); }
  Statement& bind(int index, const std::string& text) { return bind(index, std::string_view(text)); }
  Statement& bind_blob(int index, std::string_view bytes);
  Statement& bind_null(int index);

  bool step();   // true: a row is ready; false: done
  void run();    // steps to completion, for statements that return no rows
  void reset();  // ready to run again with new bindings

  int64_t column_int(int col) const;
  double column_double(int col) const;
  std::string column_text(int col) const;
  std::string column_blob(int col) const;
  bool column_is_null(int col) const;
  // The file of the database the statement reads (its main schema), for messages.
  std::string database_file() const;

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
};

}  // namespace cpgen
