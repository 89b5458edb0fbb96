#include "tools/cli/cli_db.h"

#include <filesystem>

#include "runtime/core/user_cache_dir.h"

namespace cpgen::cli {

PathOwner db_path_owner(const std::string& flag) {
  return flag.empty() && env_or_empty("CPGEN_DB").empty() ? PathOwner::kCpgen : PathOwner::kUser;
}

std::unique_ptr<Database> open_db(const std::string& flag) {
  return std::make_unique<Database>(resolve_db_path(flag), db_path_owner(flag));
}

std::unique_ptr<Database> open_existing_db(const std::string& flag) {
  const std::string path = resolve_db_path(flag);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return nullptr;
  return std::make_unique<Database>(path, Database::ReadOnly{.check_integrity = true});
}

}  // namespace cpgen::cli
