#include "runtime/backend/gpu_device.h"

#include <cstdint>

#include "cpgen/error.h"
#include "runtime/cuda/cuda_driver.h"
#include "runtime/cuda/device_buffer.h"

namespace cpgen::gpu {

GpuDevice::GpuDevice(int device, const StepKernel& kernel) : device_(device), kernel_(kernel) {}

DeviceAllocation GpuDevice::allocate(size_t bytes) {
  auto buffer = std::make_shared<DeviceBuffer>(device_, bytes);
  void* address = buffer->as<void>();
  // The allocation shares ownership of the DeviceBuffer, which frees the memory.
  return DeviceAllocation(std::shared_ptr<void>(buffer, address), bytes);
}

void GpuDevice::upload(void* dst, const void* host, size_t bytes) {
  CPGEN_CU_CHECK(cu::driver().cuMemcpyHtoD(reinterpret_cast<CUdeviceptr>(dst), host, bytes));
}

void GpuDevice::copy(void* dst, const void* src, size_t bytes) {
  CPGEN_CU_CHECK(cu::driver().cuMemcpyDtoDAsync(reinterpret_cast<CUdeviceptr>(dst),
                                                reinterpret_cast<CUdeviceptr>(src), bytes, stream_));
}

void GpuDevice::launch_forward(StepType step, const RingFwdParams& params) {
  kernel_.launch(params, step, stream_);
}

namespace {
[[noreturn]] void no_backward() {
  throw Error(ErrorKind::kBadInput,
              "the GPU backend has no backward step kernel yet; the backward ring runs on the CPU "
              "backend only (cpgen verify --backend cpu)");
}
}  // namespace

void GpuDevice::launch_backward_pre(const RingBwdPreParams&) { no_backward(); }
void GpuDevice::launch_backward(StepType, const RingBwdParams&) { no_backward(); }
void GpuDevice::launch_backward_convert(const RingBwdConvertParams&) { no_backward(); }

}  // namespace cpgen::gpu
