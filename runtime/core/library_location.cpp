#include "runtime/core/library_location.h"

#include <dlfcn.h>

#include <filesystem>

namespace cpgen {
namespace fs = std::filesystem;

std::string library_path() {
  // Any function defined in this library will do: dladdr names the object that contains it.
  Dl_info info{};
  if (!dladdr(reinterpret_cast<void*>(&library_path), &info) || !info.dli_fname) return "";
  std::error_code ec;
  const fs::path path = fs::canonical(info.dli_fname, ec);
  return ec ? "" : path.string();
}

bool running_from_build_tree() {
  const std::string lib = library_path();
  if (lib.empty()) return false;
  std::error_code ec;
  // fs::equivalent compares the files themselves, so symlinked build folders still match; it
  // reports an error (false here) once the build folder is gone.
  return fs::equivalent(fs::path(lib).parent_path(), CPGEN_BUILD_LIBRARY_DIR, ec) && !ec;
}

}  // namespace cpgen
