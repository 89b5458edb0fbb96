// The KernelDevice of one CUDA device (runtime/backend/kernel_device.h): memory from cuMemAlloc,
// copies and launches enqueued on the stream set by set_stream, step kernels from a StepKernel
// (runtime/backend/gpu_step_kernel.h), backward kernels from a BackwardKernels
// (runtime/backend/gpu_bwd_kernels.h) once set_backward gave one. It never waits on the host
// except in upload (set-up).
#pragma once

#include <cuda.h>

#include "runtime/backend/gpu_bwd_kernels.h"
#include "runtime/backend/gpu_step_kernel.h"
#include "runtime/backend/kernel_device.h"
#include "runtime/cuda/device_buffer.h"

namespace cpgen::gpu {

class GpuDevice final : public KernelDevice {
 public:
  // `kernel` must outlive the device. Uses device ordinal `device` (its primary context).
  GpuDevice(int device, const StepKernel& kernel);
  // The stream the following copies and launches are enqueued on.
  void set_stream(CUstream stream) { stream_ = stream; }
  CUstream stream() const { return stream_; }
  // The backward kernels (must outlive the device); until set, backward launches throw kInternal.
  void set_backward(const BackwardKernels* kernels) { backward_ = kernels; }
  int ordinal() const { return device_; }

  DeviceAllocation allocate(size_t bytes) override;
  void upload(void* dst, const void* host, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void zero(void* dst, size_t bytes) override;
  void launch_forward(StepType step, const RingFwdParams& params) override;
  void launch_backward_pre(const RingBwdPreParams& params) override;
  void launch_backward(StepType step, const RingBwdParams& params) override;
  void launch_backward_convert(const RingBwdConvertParams& params) override;
  bool forward_takes_query_view(StepType step) const override;

 private:
  int device_;
  const StepKernel& kernel_;
  CUstream stream_ = nullptr;
  DeviceBuffer work_counter_;  // a persistent step kernel's (launch_forward_kernel); launches are in stream order
  const BackwardKernels* backward_ = nullptr;

  const BackwardKernels& backward() const;
};

}  // namespace cpgen::gpu
