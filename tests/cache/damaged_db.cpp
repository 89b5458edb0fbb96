#include "damaged_db.h"

#include <filesystem>
#include <fstream>
#include <iterator>

#include "cache/database.h"
#include "cache/records.h"
#include "cache_fixtures.h"

namespace cpgen::testing {
namespace fs = std::filesystem;

void write_truncated_db(const std::string& path, int records) {
  {
    Database db(path);
    for (int i = 0; i < records; ++i) {
      Record r = test_record(test_workload(1024 + i), 128, 64, 4, 2, 1.0 + i);
      r.samples_ms.assign(100, 1.0 + i);
      put_record(db, r);
    }
    db.exec("PRAGMA wal_checkpoint(TRUNCATE)");
  }
  fs::resize_file(path, fs::file_size(path) / 2);
}

std::map<std::string, std::string> folder_snapshot(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const auto perms = static_cast<unsigned>(entry.status().permissions());
    out[entry.path().filename().string()] = std::to_string(perms) + ":" + file_bytes(entry.path().string());
  }
  return out;
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace cpgen::testing
