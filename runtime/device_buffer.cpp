#include "runtime/device_buffer.h"

#include <string>

#include "cpgen/error.h"
#include "runtime/cuda_driver.h"

namespace cpgen::gpu {
namespace {

[[noreturn]] void throw_bad_input_device(int ordinal, int count) {
  throw_bad_input("CUDA device " + std::to_string(ordinal) + " does not exist; this machine has " +
                  std::to_string(count) + " (ordinals 0.." + std::to_string(count - 1) + ")");
}

}  // namespace

PrimaryContext::PrimaryContext(int ordinal) : ordinal_(ordinal) {
  const cu::DriverApi& api = cu::driver();
  int count = 0;
  CPGEN_CU_CHECK(api.cuDeviceGetCount(&count));
  if (ordinal < 0 || ordinal >= count)
    throw_bad_input_device(ordinal, count);
  CPGEN_CU_CHECK(api.cuDeviceGet(&device_, ordinal));
  CPGEN_CU_CHECK(api.cuDevicePrimaryCtxRetain(&context_, device_));
  make_current();
}

PrimaryContext::~PrimaryContext() {
  if (context_) cu::driver().cuDevicePrimaryCtxRelease(device_);
}

void PrimaryContext::make_current() const { CPGEN_CU_CHECK(cu::driver().cuCtxSetCurrent(context_)); }

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes > 0) CPGEN_CU_CHECK(cu::driver().cuMemAlloc(&pointer_, bytes));
}

DeviceBuffer::~DeviceBuffer() {
  if (pointer_) cu::driver().cuMemFree(pointer_);
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (pointer_) cu::driver().cuMemFree(pointer_);
    pointer_ = std::exchange(other.pointer_, 0);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

Stream::Stream() { CPGEN_CU_CHECK(cu::driver().cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING)); }

Stream::~Stream() {
  if (stream_) cu::driver().cuStreamDestroy(stream_);
}

Event::Event(bool timing) {
  CPGEN_CU_CHECK(cu::driver().cuEventCreate(&event_, timing ? CU_EVENT_DEFAULT : CU_EVENT_DISABLE_TIMING));
}

Event::~Event() {
  if (event_) cu::driver().cuEventDestroy(event_);
}

void Event::record(CUstream stream) const { CPGEN_CU_CHECK(cu::driver().cuEventRecord(event_, stream)); }

void stream_wait_stream(CUstream waiter, CUstream producer, const Event& via) {
  via.record(producer);
  CPGEN_CU_CHECK(cu::driver().cuStreamWaitEvent(waiter, via.get(), 0));
}

}  // namespace cpgen::gpu
