// Loading compiled kernels into the CUDA driver and launching them.
//
// A cubin is loaded at most once per process and device, on first use, into the device's primary
// context; the module stays loaded until the process exits (kernels are small, and unloading while
// another thread may launch would need reference counting for no gain). All functions are
// thread-safe and make the device's primary context current on the calling thread.
#pragma once

#include <cuda.h>

#include <atomic>
#include <mutex>
#include <string>

#include "runtime/jit/compiled_kernel.h"
#include "templates/params.cuh"
#include "templates/params_bwd.cuh"

namespace cpgen {

// Kernels may use 48 KB of dynamic shared memory without opting in; beyond that the function's
// CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES must be raised first.
inline constexpr int kDefaultDynamicSharedLimit = 48 * 1024;

struct LaunchShape {
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
  int dynamic_shared_bytes = 0;
  CUstream stream = nullptr;  // nullptr: the legacy default stream
};

// Puts the calling thread's current context back when it goes out of scope; RingAttention's
// public calls hold one. They make their device's primary context current for their own driver
// calls, while a caller (PyTorch, another library) takes its current device from the thread's
// context, so a ring on device 1 called from a thread working on device 0 must leave it on 0. A
// thread that had no current context, or a process with no driver, is left as it is.
class CallerContextGuard {
 public:
  CallerContextGuard() noexcept;
  ~CallerContextGuard();
  CallerContextGuard(const CallerContextGuard&) = delete;
  CallerContextGuard& operator=(const CallerContextGuard&) = delete;

 private:
  CUcontext saved_ = nullptr;
};

// Throws Error(kBadInput) naming `what` when an SM margin is negative or leaves none of the
// device's `sm_count` SMs.
void check_sm_margin(int sm_margin, int sm_count, const std::string& what);
// per_sm CTAs on each of `sm_count` SMs but `sm_margin`, which stay free for other kernels (NCCL's
// beside a persistent step); check_sm_margin first, naming `uri`.
int resident_ctas_beside(int per_sm, int sm_count, int sm_margin, const std::string& uri);
// The SMs of CUDA device `device` (its multiprocessor count).
int device_sm_count(int device);

class LoadedKernel {
 public:
  LoadedKernel(std::string uri, int device, CUmodule module, CUfunction function);
  LoadedKernel(const LoadedKernel&) = delete;
  LoadedKernel& operator=(const LoadedKernel&) = delete;

  const std::string& uri() const { return uri_; }
  int device() const { return device_; }
  CUfunction function() const { return function_; }
  int registers() const;           // as the driver reports them (CU_FUNC_ATTRIBUTE_NUM_REGS)
  int max_threads_per_block() const;

  // Makes `bytes` of dynamic shared memory launchable: raises the function's limit when `bytes`
  // is above 48 KB and above what was already granted. Throws Error(kInfeasible) naming the kernel
  // and the device limit when the device cannot give that much.
  void reserve_dynamic_shared(int bytes) const;
  // CTAs of `block_threads` threads and `dynamic_shared_bytes` (reserved first) the device keeps
  // resident at once on all its SMs but `sm_margin`: the occupancy calculator's CTAs per SM times
  // those SMs (resident_ctas_beside). What a persistent kernel is launched with
  // (runtime/backend/launch_grid.h). The occupancy is computed once per shape.
  int resident_ctas(int block_threads, int dynamic_shared_bytes, int sm_margin = 0) const;
  // The device's L2 cache in bytes (CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, read at load, not per
  // launch): what a persistent kernel's item order is sized to (runtime/backend/wgmma_params.h).
  long long l2_cache_bytes() const { return l2_cache_bytes_; }
  // Launches with `params` as the kernel's only argument (passed by value). Enqueue errors throw
  // Error(kCuda); errors inside the kernel surface at the next synchronization.
  void launch(const RingFwdParams& params, const LaunchShape& shape) const;
  // The same for the backward kernels (templates/step_bwd.cuh, templates/step_bwd_pre.cuh).
  void launch(const RingBwdParams& params, const LaunchShape& shape) const;
  void launch(const RingBwdPreParams& params, const LaunchShape& shape) const;
  void launch(const RingBwdConvertParams& params, const LaunchShape& shape) const;
  // The same for a params struct not listed above, at `params` (the driver copies as many bytes
  // as the kernel's parameter has): the sm_90a wgmma family's RingFwdWgmmaParams, whose header
  // needs the template include path this header's users may lack. That struct is the kernel's
  // __grid_constant__ parameter, so its tensor maps reach the TMA unit from parameter space.
  void launch_struct(const void* params, const LaunchShape& shape) const;
  // The same with a second parameter, a device pointer: a persistent wgmma kernel's work counter.
  void launch_struct(const void* params, void* pointer, const LaunchShape& shape) const;

 private:
  // Checks the shape and enqueues the launch with `arguments` (a copy of the params struct, then
  // any further parameter) as the kernel's parameters.
  void launch_arguments(void** arguments, const LaunchShape& shape) const;
  void launch_argument(void* argument, const LaunchShape& shape) const {
    void* arguments[] = {argument};
    launch_arguments(arguments, shape);
  }

  std::string uri_;
  int device_;
  CUmodule module_;
  CUfunction function_;
  mutable std::mutex shared_mutex_;
  mutable std::atomic<int> granted_dynamic_shared_{kDefaultDynamicSharedLimit};
  mutable std::mutex resident_mutex_;
  mutable int resident_threads_ = 0, resident_shared_ = -1, resident_per_sm_ = 0, resident_sm_count_ = 0;
  long long l2_cache_bytes_;
};

// The kernel's function on `device`, loading kernel.cubin on first use for that (device, key).
// Throws Error(kNoDevice) without a GPU and Error(kCuda) when the driver rejects the cubin (e.g.
// an sm_90a cubin on an sm_80 device).
const LoadedKernel& load_kernel(const CompiledKernel& kernel, int device = 0);

// The device's primary context, retained once per process, made current on the calling thread.
CUcontext use_primary_context(int device);

// "sm_80", "sm_86", "sm_89", "sm_90a", "sm_100", "sm_120": the arch to compile for so that a cubin
// loads on `device` (Hopper gets the arch-specific sm_90a target). Throws Error(kBadInput) for a device cpgen does not support.
std::string device_arch(int device);

}  // namespace cpgen
