#include "tools/cli/store_dir.h"

#include <unistd.h>

#include <filesystem>

#include "cpgen/error.h"

namespace cpgen::cli {
namespace fs = std::filesystem;

void check_store_dir(const std::string& dir, const std::string& what, const std::string& option, bool writable) {
  std::error_code ec;
  const std::string named = what + ": " + option + " " + dir;
  if (fs::exists(dir, ec)) {
    if (!fs::is_directory(dir, ec)) throw_bad_input(named + " is not a directory; pass a folder for compiled kernels");
    if (writable && ::access(dir.c_str(), W_OK | X_OK) != 0) throw_bad_input(named + " is not writable");
    return;
  }
  // A link to nothing cannot be created as a folder (every store write failed behind it).
  if (fs::is_symlink(dir, ec)) throw_bad_input(named + " is a link to a missing folder (" + fs::read_symlink(dir, ec).string() + ")");
  if (!writable) return;
  // The store creates missing folders; the nearest existing ancestor must allow that.
  fs::path ancestor = fs::absolute(dir, ec).parent_path();
  while (!ancestor.empty() && !fs::exists(ancestor, ec) && ancestor != ancestor.parent_path()) ancestor = ancestor.parent_path();
  if (!fs::is_directory(ancestor, ec)) {
    throw_bad_input(named + " cannot be created: " + ancestor.string() + " is not a directory");
  }
  if (::access(ancestor.c_str(), W_OK | X_OK) != 0) {
    throw_bad_input(named + " cannot be created: " + ancestor.string() + " is not writable");
  }
}

void check_output_file(const std::string& path, const std::string& what, const std::string& option) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw_bad_input(what + ": " + option + " " + path + " is a directory; pass a file path");
  fs::path folder = fs::absolute(path, ec).parent_path();
  if (!fs::is_directory(folder, ec)) {
    throw_bad_input(what + ": " + option + " " + path + ": the folder " + folder.string() + " does not exist");
  }
  if (::access(folder.c_str(), W_OK | X_OK) != 0) {
    throw_bad_input(what + ": " + option + " " + path + ": the folder " + folder.string() + " is not writable");
  }
  if (fs::exists(path, ec) && ::access(path.c_str(), W_OK) != 0) {
    throw_bad_input(what + ": " + option + " " + path + " is not writable");
  }
}

bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  if (fs::exists(a, ec) && fs::exists(b, ec)) {
    const bool same = fs::equivalent(a, b, ec);
    if (!ec) return same;
  }
  const fs::path ca = fs::weakly_canonical(fs::absolute(a, ec), ec), cb = fs::weakly_canonical(fs::absolute(b, ec), ec);
  return ca == cb;
}

void check_distinct_files(const std::string& output, const std::string& option, const std::string& other,
                          const std::string& other_option, const std::string& what) {
  if (output.empty() || other.empty() || !same_file(output, other)) return;
  throw_bad_input(what + ": " + option + " " + output + " is the same file as " + other_option + " " + other +
                  ", which it would overwrite; pass another path");
}

}  // namespace cpgen::cli
