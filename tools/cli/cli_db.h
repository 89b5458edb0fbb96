// Shared by the commands that use the tuning database (tune, db, explain): the --db option and
// opening the database it names. Reading commands open it read-only (nothing is created, moved or
// locked); writing commands refuse a file of the user's that is not a cpgen database and move a
// damaged one aside with a warning.
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

// Whether the database path came from the user (--db or $CPGEN_DB) rather than cpgen's default.
PathOwner db_path_owner(const std::string& flag);

// Opens the database for writing, creating it when absent.
std::unique_ptr<Database> open_db(const std::string& flag);

// Opens an existing database read-only with an integrity check; nullptr when there is no file.
// A file that is not SQLite throws kBadInput (exit 2), a damaged one kDatabase (exit 1).
std::unique_ptr<Database> open_existing_db(const std::string& flag);

}  // namespace cpgen::cli
