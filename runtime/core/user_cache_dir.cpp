#include "runtime/core/user_cache_dir.h"

#include <cstdlib>

namespace cpgen {

std::string env_or_empty(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

std::string user_cache_dir() {
  if (std::string xdg = env_or_empty("XDG_CACHE_HOME"); !xdg.empty()) return xdg + "/cpgen";
  if (std::string home = env_or_empty("HOME"); !home.empty()) return home + "/.cache/cpgen";
  return "";
}

}  // namespace cpgen
