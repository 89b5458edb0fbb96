// Files that stand where a tuning database should, for the tests of what cpgen does with them: a
// damaged database, and a snapshot of a folder to show that a command changed nothing in it.
#pragma once

#include <map>
#include <string>

namespace cpgen::testing {

// A tuning database of `records` records, checkpointed (no -wal), then cut to half its size: an
// SQLite header and schema that open, and pages that are missing.
void write_truncated_db(const std::string& path, int records = 300);

// Every file of a folder (not recursive) with its bytes and permission bits.
std::map<std::string, std::string> folder_snapshot(const std::string& dir);

std::string file_bytes(const std::string& path);

}  // namespace cpgen::testing
