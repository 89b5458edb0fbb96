// What a ring backend that runs generated kernels needs from the machine they run on: memory,
// ordered copies, and launches of the generated kernels with their params. The GPU implements it
// with the CUDA driver API on a stream (runtime/backend/gpu_device.h); the emulated backend with
// host memory and kernels executed by the CPU emulator (issue 12). KernelRingBackend
// (runtime/backend/kernel_ring_backend.h) holds the ring logic once for both, so the emulator
// checks the exact launches, pointers and strides the GPU gets.
//
// Ordering: every call is ordered after the calls made before it on the same device object (a GPU
// device enqueues on its current stream; the emulated device runs the work before returning).
// Pointers are the device's own (device addresses on a GPU).
#pragma once

#include <cstddef>
#include <memory>

#include "cache/workload.h"
#include "templates/params.cuh"
#include "templates/params_bwd.cuh"

namespace cpgen {

// An owned allocation of a KernelDevice; freed when the last copy is destroyed. The device must
// outlive its allocations.
class DeviceAllocation {
 public:
  DeviceAllocation() = default;
  DeviceAllocation(std::shared_ptr<void> memory, size_t bytes) : memory_(std::move(memory)), bytes_(bytes) {}
  void* data() const { return memory_.get(); }
  template <typename T>
  T* as() const { return static_cast<T*>(memory_.get()); }
  size_t bytes() const { return bytes_; }

 private:
  std::shared_ptr<void> memory_;
  size_t bytes_ = 0;
};

class KernelDevice {
 public:
  virtual ~KernelDevice() = default;

  // `bytes` of device memory, contents undefined. Throws Error (kCuda, kInternal) on failure.
  virtual DeviceAllocation allocate(size_t bytes) = 0;
  // Synchronous upload from host memory (set-up only: position tables).
  virtual void upload(void* dst, const void* host, size_t bytes) = 0;
  // Device-to-device copy, ordered like a launch.
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  // Sets `bytes` bytes at `dst` to zero, ordered like a launch.
  virtual void zero(void* dst, size_t bytes) = 0;

  // Launches of the generated kernels. Each step type runs the spec selected for it (forward:
  // StepType::kDiagonal..kZigzagQHalf; backward: kBwd*). Throws Error naming the kernel's URI
  // when a launch cannot be made.
  virtual void launch_forward(StepType step, const RingFwdParams& params) = 0;
  virtual void launch_backward_pre(const RingBwdPreParams& params) = 0;
  virtual void launch_backward(StepType step, const RingBwdParams& params) = 0;
  virtual void launch_backward_convert(const RingBwdConvertParams& params) = 0;

  // Whether the forward kernel of step type `step` may be launched over a view of the queries
  // (RingFwdParams::state_len > q_len; runtime/ring/kernel_support.h, KernelFamilyAbilities). When
  // not, the ring launches that step over every local row instead.
  virtual bool forward_takes_query_view(StepType step) const {
    (void)step;
    return true;
  }
};

}  // namespace cpgen
