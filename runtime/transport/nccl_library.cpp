#include "runtime/transport/nccl_library.h"

#include <dlfcn.h>
#include <link.h>

#include <cstdlib>

#include "cpgen/error.h"

#define CPGEN_NCCL_STR2(x) #x
#define CPGEN_NCCL_STR(x) CPGEN_NCCL_STR2(x)

namespace cpgen::nccl {
namespace {

constexpr const char* kSoname = "libnccl.so.2";

struct Loaded {
  NcclApi api;
  std::string why;  // empty when loaded
};

std::string dl_error() {
  const char* e = dlerror();
  return e ? e : "unknown dlopen error";
}

// Which NCCL, in this order:
// 1. CPGEN_NCCL_LIBRARY, when set: that file (or soname) and nothing else;
// 2. an NCCL the process has already loaded (the caller's: its communicators are that NCCL's);
// 3. the library cpgen was built against (CPGEN_NCCL_BUILD_LIBRARY);
// 4. libnccl.so.2 on the loader's search path (LD_LIBRARY_PATH, libcpgen's run path, ld.so.cache).
// Once loaded, it stays the process's NCCL: a library loaded later that needs libnccl.so.2 gets it.
void* open_library(std::string* why) {
  if (const char* chosen = std::getenv("CPGEN_NCCL_LIBRARY"); chosen && *chosen) {
    void* handle = dlopen(chosen, RTLD_NOW | RTLD_LOCAL);
    if (!handle) *why = std::string("CPGEN_NCCL_LIBRARY=") + chosen + " could not be loaded: " + dl_error();
    return handle;
  }
  if (void* handle = dlopen(kSoname, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD)) return handle;
#ifdef CPGEN_NCCL_BUILD_LIBRARY
  if (void* handle = dlopen(CPGEN_NCCL_BUILD_LIBRARY, RTLD_NOW | RTLD_LOCAL)) return handle;
#endif
  if (void* handle = dlopen(kSoname, RTLD_NOW | RTLD_LOCAL)) return handle;
  *why = std::string("no NCCL library: none is loaded in this process, ") +
#ifdef CPGEN_NCCL_BUILD_LIBRARY
         "the one cpgen was built with (" CPGEN_NCCL_BUILD_LIBRARY ") did not load, " +
#endif
         "and " + kSoname + " is not on the library search path (" + dl_error() +
         "); install NCCL (or the nvidia-nccl Python package) or set CPGEN_NCCL_LIBRARY to its path";
  return nullptr;
}

Loaded load() {
  Loaded out;
  void* handle = open_library(&out.why);
  if (!handle) return out;
  const link_map* map = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name) out.api.library.path = map->l_name;
  // api() throws out.why from then on; what out.api holds is never read.
  auto fail = [&](std::string why) {
    out.why = std::move(why);
    dlclose(handle);
    return out;
  };
  const int& version = out.api.library.version;
  const std::string where = "the NCCL at " + out.api.library.path;
  // The version first: an old NCCL is named as such rather than by the first function it lacks.
  out.api.ncclGetVersion = reinterpret_cast<decltype(out.api.ncclGetVersion)>(dlsym(handle, "ncclGetVersion"));
  if (!out.api.ncclGetVersion || out.api.ncclGetVersion(&out.api.library.version) != ncclSuccess)
    return fail(where + " does not report its version (ncclGetVersion); is it NCCL?");
  if (version < kMinNcclVersion)
    return fail(where + " is version " + version_text(version) + "; cpgen needs " +
                version_text(kMinNcclVersion) + " or newer (ncclCommSplit)");
#define CPGEN_NCCL_FN(name)                                                                  \
  out.api.name = reinterpret_cast<decltype(out.api.name)>(dlsym(handle, CPGEN_NCCL_STR(name))); \
  if (!out.api.name) return fail(where + " (version " + version_text(version) +               \
                                 ") lacks " CPGEN_NCCL_STR(name));
#include "runtime/transport/nccl_fns.inc"
#undef CPGEN_NCCL_FN
  return out;  // the handle stays open for the life of the process
}

}  // namespace

std::string version_text(int code) {
  const int major = code >= 10000 ? code / 10000 : code / 1000;
  const int minor = code >= 10000 ? code / 100 % 100 : code / 100 % 10;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(code % 100);
}

const NcclApi& api() {
  static const Loaded loaded = load();
  if (!loaded.why.empty()) throw Error(ErrorKind::kNccl, loaded.why);
  return loaded.api;
}

}  // namespace cpgen::nccl
