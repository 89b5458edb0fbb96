#include "runtime/core/user_cache_dir.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "cpgen/error.h"

namespace cpgen {
namespace {

// Creates `dir` 0700 unless it exists, then checks it is this user's private folder.
void make_private_dir(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    throw Error(ErrorKind::kIo, "cannot create the folder " + dir + ": " + std::strerror(errno));
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) throw Error(ErrorKind::kIo, "cannot read " + dir + ": " + std::strerror(errno));
  char mode[8];
  std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
  if (!S_ISDIR(st.st_mode) || st.st_uid != ::geteuid() || (st.st_mode & 022) != 0)
    throw Error(ErrorKind::kIo, dir + " is not a private folder of this user (" +
                                    (S_ISLNK(st.st_mode) ? std::string("a symbolic link")
                                     : !S_ISDIR(st.st_mode) ? std::string("not a folder")
                                                            : "owner uid " + std::to_string(st.st_uid) + ", mode " + mode) +
                                    "; cpgen needs one owned by uid " + std::to_string(::geteuid()) +
                                    " that no one else may write): remove it, or set TMPDIR to a folder of your own");
}

}  // namespace

std::string env_or_empty(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

std::string user_cache_dir() {
  if (std::string xdg = env_or_empty("XDG_CACHE_HOME"); !xdg.empty()) return xdg + "/cpgen";
  if (std::string home = env_or_empty("HOME"); !home.empty()) return home + "/.cache/cpgen";
  return "";
}

std::string temp_dir() {
  std::error_code ec;
  const std::filesystem::path dir = std::filesystem::temp_directory_path(ec);
  if (!ec) return dir.string();
  const std::string named = env_or_empty("TMPDIR");
  throw Error(ErrorKind::kIo, "the temporary folder " + (named.empty() ? std::string("/tmp") : "$TMPDIR " + named) +
                                  " cannot be used (" + ec.message() + "); set TMPDIR to a folder of your own");
}

std::string user_temp_dir(const std::string& sub) {
  const std::string base = (std::filesystem::path(temp_dir()) / ("cpgen-" + std::to_string(::geteuid()))).string();
  make_private_dir(base);
  const std::string dir = base + "/" + sub;
  make_private_dir(dir);
  return dir;
}

}  // namespace cpgen
