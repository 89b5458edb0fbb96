#include "runtime/cuda/device_buffer.h"

#include <string>
#include <utility>

#include "cpgen/error.h"
#include "runtime/cuda/cuda_driver.h"
#include "runtime/cuda/gpu_stream.h"
#include "runtime/cuda/module.h"

namespace cpgen {
namespace {

void check_range(size_t requested, size_t available, const char* what) {
  if (requested > available) {
    throw Error(ErrorKind::kInternal, std::string("DeviceBuffer::") + what + " of " +
                                          std::to_string(requested) + " bytes past a buffer of " +
                                          std::to_string(available));
  }
}

}  // namespace

DeviceBuffer::DeviceBuffer(int device, size_t bytes) : device_(device), bytes_(bytes) {
  use_primary_context(device);
  // A zero-byte request still gets a distinct valid address, so kernels may take it.
  CPGEN_CU_CHECK(cu::driver().cuMemAlloc(&address_, bytes > 0 ? bytes : 1));
}

DeviceBuffer::~DeviceBuffer() { release(); }

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : device_(other.device_), address_(std::exchange(other.address_, 0)),
      bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    release();
    device_ = other.device_;
    address_ = std::exchange(other.address_, 0);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void DeviceBuffer::release() noexcept {
  if (address_ == 0) return;
  // A destructor must not throw; a failing free during unwinding has nowhere to be reported.
  try {
    use_primary_context(device_);
    cu::driver().cuMemFree(address_);
  } catch (...) {
  }
  address_ = 0;
}

void DeviceBuffer::upload(const void* host, size_t bytes) {
  check_range(bytes, bytes_, "upload");
  if (bytes == 0) return;
  use_primary_context(device_);
  CPGEN_CU_CHECK(cu::driver().cuMemcpyHtoD(address_, host, bytes));
  gpu::finish_legacy_stream();  // the DMA from the staging copy may still be under way
}

void DeviceBuffer::download(void* host, size_t bytes, size_t offset) const {
  check_range(offset + bytes, bytes_, "download");
  if (bytes == 0) return;
  use_primary_context(device_);
  CPGEN_CU_CHECK(cu::driver().cuMemcpyDtoH(host, address_ + offset, bytes));
}

DeviceBuffer DeviceBuffer::copy() const {
  DeviceBuffer to(device_, bytes_);
  if (bytes_ == 0) return to;
  CPGEN_CU_CHECK(cu::driver().cuMemcpyDtoD(to.address_, address_, bytes_));
  gpu::finish_legacy_stream();  // a device-to-device copy returns before it is done
  return to;
}

void DeviceBuffer::fill_bytes(uint8_t value) {
  if (bytes_ == 0) return;
  use_primary_context(device_);
  CPGEN_CU_CHECK(cu::driver().cuMemsetD8(address_, value, bytes_));
  gpu::finish_legacy_stream();  // a device memset returns before it is done
}

}  // namespace cpgen
