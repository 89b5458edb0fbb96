// Loads libcpgen into a fresh process the way an FFI user does, and reports which NCCL it runs on
// (tests/runtime/transport/nccl_library_test.cpp reads the lines). Usage:
//   cpgen_nccl_probe LIBCPGEN [NCCL]
// NCCL, when given, is loaded first, as a framework that loaded its own NCCL before cpgen would.
// Prints, one per line:
//   nccl_after_load=N    libnccl objects in the process once libcpgen (and NCCL) are loaded
//   status=S             cpgen_nccl_library's status, then version=V and path=P, or error=...
//   nccl_after_query=N   libnccl objects in the process after that call
#include <dlfcn.h>
#include <link.h>

#include <cstdint>
#include <cstdio>
#include <cstring>

namespace {

int count_nccl_objects() {
  int count = 0;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        if (info->dlpi_name && std::strstr(info->dlpi_name, "libnccl")) ++*static_cast<int*>(data);
        return 0;
      },
      &count);
  return count;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::fprintf(stderr, "usage: %s LIBCPGEN [NCCL]\n", argv[0]);
    return 2;
  }
  if (argc == 3 && !dlopen(argv[2], RTLD_NOW | RTLD_LOCAL)) {
    std::fprintf(stderr, "cannot load %s: %s\n", argv[2], dlerror());
    return 2;
  }
  void* cpgen = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!cpgen) {
    std::fprintf(stderr, "cannot load %s: %s\n", argv[1], dlerror());
    return 2;
  }
  std::printf("nccl_after_load=%d\n", count_nccl_objects());
  using Query = int (*)(int32_t*, const char**);
  using LastError = const char* (*)();
  auto query = reinterpret_cast<Query>(dlsym(cpgen, "cpgen_nccl_library"));
  auto last_error = reinterpret_cast<LastError>(dlsym(cpgen, "cpgen_last_error"));
  if (!query || !last_error) {
    std::fprintf(stderr, "libcpgen lacks cpgen_nccl_library or cpgen_last_error\n");
    return 2;
  }
  int32_t version = 0;
  const char* path = nullptr;
  const int status = query(&version, &path);
  std::printf("status=%d\n", status);
  if (status == 0) {
    std::printf("version=%d\npath=%s\n", static_cast<int>(version), path);
  } else {
    std::printf("error=%s\n", last_error());
  }
  std::printf("nccl_after_query=%d\n", count_nccl_objects());
  return 0;
}
