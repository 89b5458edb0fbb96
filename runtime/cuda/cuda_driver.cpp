#include "runtime/cuda/cuda_driver.h"

#include <dlfcn.h>

#include <mutex>

#include "cpgen/error.h"

#define CPGEN_STR2(x) #x
#define CPGEN_STR(x) CPGEN_STR2(x)

namespace cpgen::cu {
namespace {

struct Loaded {
  DriverApi api;
  bool ok = false;
  std::string why;
};

Loaded load() {
  Loaded out;
  void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    out.why = "no CUDA driver (libcuda.so.1 could not be loaded)";
    return out;
  }
  // The stringified names are the versioned symbols (cuMemAlloc -> "cuMemAlloc_v2").
#define CPGEN_CU_FN(name)                                                              \
  out.api.name = reinterpret_cast<decltype(out.api.name)>(dlsym(handle, CPGEN_STR(name))); \
  if (!out.api.name) {                                                                 \
    out.why = "the CUDA driver lacks " CPGEN_STR(name) "; it is older than cpgen needs";  \
    return out;                                                                        \
  }
#include "runtime/cuda/cuda_driver_fns.inc"
#undef CPGEN_CU_FN
  // An optional entry point that is missing stays null; only what needs it fails.
#define CPGEN_CU_FN(name) out.api.name = reinterpret_cast<decltype(out.api.name)>(dlsym(handle, CPGEN_STR(name)));
#include "runtime/cuda/cuda_driver_optional_fns.inc"
#undef CPGEN_CU_FN
  CUresult status = out.api.cuInit(0);
  if (status != CUDA_SUCCESS) {
    const char* name = nullptr;
    out.api.cuGetErrorName(status, &name);
    out.why = std::string("cuInit failed: ") + (name ? name : "unknown error") +
              " (no usable CUDA device)";
    return out;
  }
  int count = 0;
  if (out.api.cuDeviceGetCount(&count) != CUDA_SUCCESS || count == 0) {
    out.why = "the CUDA driver reports no device";
    return out;
  }
  out.ok = true;
  return out;
}

const Loaded& loaded() {
  static const Loaded instance = load();
  return instance;
}

}  // namespace

const DriverApi* try_driver(std::string* why) {
  const Loaded& l = loaded();
  if (!l.ok && why) *why = l.why;
  return l.ok ? &l.api : nullptr;
}

const DriverApi& driver() {
  std::string why;
  const DriverApi* api = try_driver(&why);
  if (!api) throw Error(ErrorKind::kNoDevice, why);
  return *api;
}

int device_count() {
  const DriverApi* api = try_driver();
  if (!api) return 0;
  int count = 0;
  return api->cuDeviceGetCount(&count) == CUDA_SUCCESS ? count : 0;
}

std::string describe(CUresult status) {
  const DriverApi* api = try_driver();
  const char* name = nullptr;
  const char* text = nullptr;
  if (api) {
    api->cuGetErrorName(status, &name);
    api->cuGetErrorString(status, &text);
  }
  return std::string(name ? name : "CUresult " + std::to_string(static_cast<int>(status))) + ": " +
         (text ? text : "no description");
}

void raise(CUresult status, const char* call, const char* file, int line) {
  throw Error(ErrorKind::kCuda, std::string(call) + " failed at " + file + ":" +
                                    std::to_string(line) + ": " + describe(status));
}

}  // namespace cpgen::cu
