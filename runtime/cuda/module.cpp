#include "runtime/cuda/module.h"

#include <map>
#include <memory>
#include <utility>

#include "cpgen/error.h"
#include "runtime/cuda/cuda_driver.h"

namespace cpgen {
namespace {

int device_attribute(CUdevice_attribute attribute, int device) {
  const cu::DriverApi& api = cu::driver();
  CUdevice handle;
  CPGEN_CU_CHECK(api.cuDeviceGet(&handle, device));
  int value = 0;
  CPGEN_CU_CHECK(api.cuDeviceGetAttribute(&value, attribute, handle));
  return value;
}

int function_attribute(CUfunction_attribute attribute, CUfunction function) {
  int value = 0;
  CPGEN_CU_CHECK(cu::driver().cuFuncGetAttribute(&value, attribute, function));
  return value;
}

}  // namespace

CUcontext use_primary_context(int device) {
  static std::mutex mutex;
  static std::map<int, CUcontext> contexts;
  const cu::DriverApi& api = cu::driver();
  CUcontext context = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = contexts.find(device);
    if (it == contexts.end()) {
      int count = 0;
      CPGEN_CU_CHECK(api.cuDeviceGetCount(&count));
      if (device < 0 || device >= count) {
        throw_bad_input("device " + std::to_string(device) + " does not exist; this machine has " +
                        std::to_string(count) + " CUDA device(s)");
      }
      CUdevice handle;
      CPGEN_CU_CHECK(api.cuDeviceGet(&handle, device));
      CPGEN_CU_CHECK(api.cuDevicePrimaryCtxRetain(&context, handle));
      contexts.emplace(device, context);
    } else {
      context = it->second;
    }
  }
  CPGEN_CU_CHECK(api.cuCtxSetCurrent(context));
  return context;
}

CallerContextGuard::CallerContextGuard() noexcept {
  const cu::DriverApi* api = cu::try_driver();
  if (api && api->cuCtxGetCurrent(&saved_) != CUDA_SUCCESS) saved_ = nullptr;
}

CallerContextGuard::~CallerContextGuard() {
  if (!saved_) return;
  // A destructor has nowhere to report a failure; the next cpgen call sets its own context anyway.
  if (const cu::DriverApi* api = cu::try_driver()) api->cuCtxSetCurrent(saved_);
}

std::string device_arch(int device) {
  int major = device_attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device);
  int minor = device_attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device);
  // A cubin runs on its own major version at the same or a higher minor, so a few capabilities
  // use the target below them: 8.7 (Orin) sm_86, 10.3 (B300) sm_100, 12.1 sm_120. The smaller
  // shared-memory limit of the lower target keeps every config legal there.
  const int cc = major * 10 + minor;
  switch (cc) {
    case 80: return "sm_80";
    case 86:
    case 87: return "sm_86";
    case 89: return "sm_89";
    case 90: return "sm_90a";
    case 100:
    case 103: return "sm_100";
    case 120:
    case 121: return "sm_120";
    default: break;
  }
  throw_bad_input("device " + std::to_string(device) + " has compute capability " +
                  std::to_string(major) + "." + std::to_string(minor) +
                  "; cpgen supports 8.0 (sm_80), 8.6/8.7 (sm_86), 8.9 (sm_89), 9.0 (sm_90, sm_90a), "
                  "10.0/10.3 (sm_100) and 12.0/12.1 (sm_120)");
}

LoadedKernel::LoadedKernel(std::string uri, int device, CUmodule module, CUfunction function)
    : uri_(std::move(uri)),
      device_(device),
      module_(module),
      function_(function),
      l2_cache_bytes_(device_attribute(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, device)) {}

int LoadedKernel::registers() const { return function_attribute(CU_FUNC_ATTRIBUTE_NUM_REGS, function_); }

int LoadedKernel::max_threads_per_block() const {
  return function_attribute(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, function_);
}

void check_sm_margin(int sm_margin, int sm_count, const std::string& what) {
  if (sm_margin < 0 || sm_margin >= sm_count)
    throw Error(ErrorKind::kBadInput, what + ": an SM margin of " + std::to_string(sm_margin) + " is not allowed on a device of " +
                                          std::to_string(sm_count) + " SMs; allowed: 0 to " + std::to_string(sm_count - 1));
}

int resident_ctas_beside(int per_sm, int sm_count, int sm_margin, const std::string& uri) {
  check_sm_margin(sm_margin, sm_count, uri);
  return per_sm * (sm_count - sm_margin);
}

int device_sm_count(int device) { return device_attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device); }

int LoadedKernel::resident_ctas(int block_threads, int dynamic_shared_bytes, int sm_margin) const {
  reserve_dynamic_shared(dynamic_shared_bytes);
  std::lock_guard<std::mutex> lock(resident_mutex_);
  if (resident_threads_ == block_threads && resident_shared_ == dynamic_shared_bytes)
    return resident_ctas_beside(resident_per_sm_, resident_sm_count_, sm_margin, uri_);
  int per_sm = 0;
  CPGEN_CU_CHECK(cu::driver().cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, function_, block_threads,
                                                                           static_cast<size_t>(dynamic_shared_bytes)));
  if (per_sm <= 0)
    throw Error(ErrorKind::kInfeasible, uri_ + ": no CTA of " + std::to_string(block_threads) + " threads and " +
                                            std::to_string(dynamic_shared_bytes) +
                                            " bytes of dynamic shared memory fits an SM of device " +
                                            std::to_string(device_));
  resident_threads_ = block_threads;
  resident_shared_ = dynamic_shared_bytes;
  resident_per_sm_ = per_sm;
  resident_sm_count_ = device_attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device_);
  return resident_ctas_beside(per_sm, resident_sm_count_, sm_margin, uri_);
}

void LoadedKernel::reserve_dynamic_shared(int bytes) const {
  if (bytes <= granted_dynamic_shared_.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lock(shared_mutex_);
  if (bytes <= granted_dynamic_shared_.load(std::memory_order_relaxed)) return;
  // The opt-in limit covers static and dynamic shared memory together.
  const int optin = device_attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, device_);
  const int static_bytes = function_attribute(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, function_);
  if (bytes + static_bytes > optin) {
    throw Error(ErrorKind::kInfeasible,
                uri_ + " asks for " + std::to_string(bytes) + " bytes of dynamic shared memory (plus " +
                    std::to_string(static_bytes) + " static); device " + std::to_string(device_) +
                    " allows " + std::to_string(optin) + " per block");
  }
  CPGEN_CU_CHECK(cu::driver().cuFuncSetAttribute(
      function_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes));
  granted_dynamic_shared_.store(bytes, std::memory_order_release);
}

void LoadedKernel::launch_arguments(void** arguments, const LaunchShape& shape) const {
  for (int d = 0; d < 3; ++d) {
    if (shape.grid[d] == 0 || shape.block[d] == 0) {
      throw Error(ErrorKind::kInternal, "launch of " + uri_ + " with an empty grid or block (dimension " +
                                            std::to_string(d) + " is 0)");
    }
  }
  if (shape.dynamic_shared_bytes < 0) {
    throw Error(ErrorKind::kInternal, "launch of " + uri_ + " with negative dynamic shared memory");
  }
  use_primary_context(device_);
  reserve_dynamic_shared(shape.dynamic_shared_bytes);
  CPGEN_CU_CHECK(cu::driver().cuLaunchKernel(
      function_, shape.grid[0], shape.grid[1], shape.grid[2], shape.block[0], shape.block[1],
      shape.block[2], static_cast<unsigned>(shape.dynamic_shared_bytes), shape.stream, arguments, nullptr));
}

// The driver reads each argument through a non-const pointer: pass copies.
void LoadedKernel::launch(const RingFwdParams& params, const LaunchShape& shape) const {
  RingFwdParams copy = params;
  launch_argument(&copy, shape);
}

void LoadedKernel::launch_struct(const void* params, const LaunchShape& shape) const {
  // cuLaunchKernel reads the argument before it returns; it is never written.
  launch_argument(const_cast<void*>(params), shape);
}

void LoadedKernel::launch_struct(const void* params, void* pointer, const LaunchShape& shape) const {
  void* arguments[] = {const_cast<void*>(params), &pointer};
  launch_arguments(arguments, shape);
}

void LoadedKernel::launch(const RingBwdParams& params, const LaunchShape& shape) const {
  RingBwdParams copy = params;
  launch_argument(&copy, shape);
}

void LoadedKernel::launch(const RingBwdPreParams& params, const LaunchShape& shape) const {
  RingBwdPreParams copy = params;
  launch_argument(&copy, shape);
}

void LoadedKernel::launch(const RingBwdConvertParams& params, const LaunchShape& shape) const {
  RingBwdConvertParams copy = params;
  launch_argument(&copy, shape);
}

const LoadedKernel& load_kernel(const CompiledKernel& kernel, int device) {
  static std::mutex mutex;
  static std::map<std::pair<int, std::string>, std::unique_ptr<LoadedKernel>> loaded;
  const cu::DriverApi& api = cu::driver();
  use_primary_context(device);
  std::lock_guard<std::mutex> lock(mutex);
  auto& slot = loaded[{device, kernel.key}];
  if (!slot) {
    if (kernel.cubin.empty()) {
      throw Error(ErrorKind::kInternal, "load_kernel: " + kernel.uri + " has no cubin");
    }
    CUmodule module = nullptr;
    CUresult status = api.cuModuleLoadData(&module, kernel.cubin.data());
    if (status != CUDA_SUCCESS) {
      throw Error(ErrorKind::kCuda, "cuModuleLoadData of " + kernel.uri + " (" + kernel.arch +
                                        ") on device " + std::to_string(device) + " failed: " +
                                        cu::describe(status));
    }
    CUfunction function = nullptr;
    status = api.cuModuleGetFunction(&function, module, kernel.uri.c_str());
    if (status != CUDA_SUCCESS) {
      api.cuModuleUnload(module);
      throw Error(ErrorKind::kCuda, "cuModuleGetFunction(" + kernel.uri + ") on device " +
                                        std::to_string(device) + " failed: " + cu::describe(status));
    }
    slot = std::make_unique<LoadedKernel>(kernel.uri, device, module, function);
  }
  return *slot;
}

}  // namespace cpgen
