// Shared by the commands that use the tuning database (tune, db, explain): the --db option and
// opening the database it names, reporting a bad file that was moved aside.
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include "cache/database.h"

namespace cpgen::cli {

inline void add_db_option(CLI::App* app, std::string* path) {
  app->add_option("--db", *path,
                  "tuning database (default: $CPGEN_DB, else $XDG_CACHE_HOME/cpgen/cpgen.db, else ~/.cache/cpgen/cpgen.db)");
}

// Opens (creating) the database named by --db or the defaults.
inline std::unique_ptr<Database> open_db(const std::string& flag) {
  return std::make_unique<Database>(resolve_db_path(flag));
}

// Opens the database only if the file exists (read-only commands never create one).
std::unique_ptr<Database> open_existing_db(const std::string& flag);

}  // namespace cpgen::cli
