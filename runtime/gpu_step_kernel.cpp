#include "runtime/gpu_step_kernel.h"

#include <map>
#include <mutex>
#include <tuple>

#include "cpgen/error.h"
#include "runtime/cuda_driver.h"
#if __has_include("runtime/jit.h")
#include "runtime/jit.h"
#define CPGEN_GPU_HAVE_JIT 1
#endif

namespace cpgen::gpu {
namespace {

// One loaded module per (device, arch, URI) for the life of the process: a ring, a benchmark
// and a verify run of the same kernel share it, and loading happens once.
struct Loaded {
  CUmodule module = nullptr;
  CUfunction function = nullptr;
  int raised_shared = 0;  // the dynamic shared memory limit already set on the function
};

std::mutex g_modules_mutex;
std::map<std::tuple<int, std::string, std::string>, Loaded>& modules() {
  static auto* loaded = new std::map<std::tuple<int, std::string, std::string>, Loaded>();
  return *loaded;  // never destroyed: modules die with the context at exit
}

}  // namespace

StepGrid step_grid(const KernelSpec& spec, const RingFwdParams& params) {
  const int64_t packed_rows = static_cast<int64_t>(params.q_len) * spec.gqa_group;
  StepGrid grid;
  grid.x = static_cast<unsigned>((packed_rows + spec.block_m - 1) / spec.block_m);
  grid.y = static_cast<unsigned>(params.kv_heads);
  grid.z = static_cast<unsigned>(params.batch);
  return grid;
}

std::string arch_for_device(int device_ordinal) {
  const cu::DriverApi& api = cu::driver();
  CUdevice device;
  CPGEN_CU_CHECK(api.cuDeviceGet(&device, device_ordinal));
  int major = 0, minor = 0;
  CPGEN_CU_CHECK(api.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device));
  CPGEN_CU_CHECK(api.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device));
  if (major == 9 && minor == 0) return "sm_90a";
  if (major >= 8) return major == 8 ? "sm_80" : "sm_90";
  throw_bad_input("CUDA device " + std::to_string(device_ordinal) + " has compute capability " +
                  std::to_string(major) + "." + std::to_string(minor) +
                  "; cpgen's kernels need 8.0 or newer (sm_80, sm_90, sm_90a)");
}

StepKernel::StepKernel(const KernelSpec& spec, const std::string& arch, int device_ordinal)
    : spec_(spec), arch_(arch) {
  Feasibility f = check_feasibility(spec, arch);
  if (!f.feasible) throw Error(ErrorKind::kInfeasible, spec.uri() + " on " + arch + ": " + f.reason);
  shared_bytes_ = f.shared_bytes;
  const auto key = std::make_tuple(device_ordinal, arch, spec.uri());
  std::lock_guard lock(g_modules_mutex);
  Loaded& loaded = modules()[key];
  if (!loaded.function) {
#ifdef CPGEN_GPU_HAVE_JIT
    CompiledKernel compiled = compile_kernel(spec, arch);
#else
    struct { std::string cubin, uri; } compiled;
    throw Error(ErrorKind::kInternal, "this build has no JIT (runtime/jit.h) to compile " + spec.uri());
#endif
    const cu::DriverApi& api = cu::driver();
    CPGEN_CU_CHECK(api.cuModuleLoadData(&loaded.module, compiled.cubin.data()));
    CPGEN_CU_CHECK(api.cuModuleGetFunction(&loaded.function, loaded.module, compiled.uri.c_str()));
  }
  // Above 48 KB a kernel must opt in to dynamic shared memory.
  if (shared_bytes_ > 48 * 1024 && loaded.raised_shared < shared_bytes_) {
    CPGEN_CU_CHECK(cu::driver().cuFuncSetAttribute(
        loaded.function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared_bytes_));
    loaded.raised_shared = shared_bytes_;
  }
  function_ = loaded.function;
}

void StepKernel::launch(const RingFwdParams& params, CUstream stream) const {
  if (params.kv_heads <= 0 || params.q_heads != params.kv_heads * spec_.gqa_group)
    throw Error(ErrorKind::kInternal, spec_.uri() + ": launched with q_heads " +
                                          std::to_string(params.q_heads) + " and kv_heads " +
                                          std::to_string(params.kv_heads) + ", which is not GQA group " +
                                          std::to_string(spec_.gqa_group));
  const StepGrid grid = step_grid(spec_, params);
  RingFwdParams copy = params;
  void* args[] = {&copy};
  CPGEN_CU_CHECK(cu::driver().cuLaunchKernel(function_, grid.x, grid.y, grid.z,
                                             static_cast<unsigned>(spec_.threads()), 1, 1,
                                             static_cast<unsigned>(shared_bytes_), stream, args, nullptr));
}

}  // namespace cpgen::gpu
