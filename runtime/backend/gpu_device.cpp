#include "runtime/backend/gpu_device.h"

#include <cstdint>

#include "cpgen/error.h"
#include "runtime/cuda/cuda_driver.h"
#include "runtime/cuda/device_buffer.h"
#include "runtime/cuda/gpu_stream.h"
#include "runtime/ring/kernel_support.h"

namespace cpgen::gpu {

GpuDevice::GpuDevice(int device, const StepKernel& kernel)
    : device_(device), kernel_(kernel), work_counter_(device, sizeof(unsigned)) {}

DeviceAllocation GpuDevice::allocate(size_t bytes) {
  auto buffer = std::make_shared<DeviceBuffer>(device_, bytes);
  void* address = buffer->as<void>();
  // The allocation shares ownership of the DeviceBuffer, which frees the memory.
  return DeviceAllocation(std::shared_ptr<void>(buffer, address), bytes);
}

void GpuDevice::upload(void* dst, const void* host, size_t bytes) {
  CPGEN_CU_CHECK(cu::driver().cuMemcpyHtoD(reinterpret_cast<CUdeviceptr>(dst), host, bytes));
  gpu::finish_legacy_stream();  // landed before any kernel on a non-blocking stream reads it
}

void GpuDevice::copy(void* dst, const void* src, size_t bytes) {
  CPGEN_CU_CHECK(cu::driver().cuMemcpyDtoDAsync(reinterpret_cast<CUdeviceptr>(dst),
                                                reinterpret_cast<CUdeviceptr>(src), bytes, stream_));
}

void GpuDevice::zero(void* dst, size_t bytes) {
  CPGEN_CU_CHECK(cu::driver().cuMemsetD8Async(reinterpret_cast<CUdeviceptr>(dst), 0, bytes, stream_));
}

void GpuDevice::launch_forward(StepType step, const RingFwdParams& params) {
  kernel_.launch(params, step, stream_, work_counter_.as<unsigned>());
}

bool GpuDevice::forward_takes_query_view(StepType step) const {
  return kernel_family_abilities(kernel_.spec(step).kind).query_view;
}

const BackwardKernels& GpuDevice::backward() const {
  if (!backward_)
    throw Error(ErrorKind::kInternal, "GpuDevice: a backward launch before the backward kernels were loaded");
  return *backward_;
}

void GpuDevice::launch_backward_pre(const RingBwdPreParams& params) { backward().launch_pre(params, stream_); }

void GpuDevice::launch_backward(StepType step, const RingBwdParams& params) {
  backward().launch(params, step, stream_);
}

void GpuDevice::launch_backward_convert(const RingBwdConvertParams& params) {
  backward().launch_convert(params, stream_);
}

}  // namespace cpgen::gpu
