// A device allocation owned by one object, for tests and tools: allocate on a device, upload,
// download, fill. Poisoning fills every byte with 0xFF, which reads as NaN in fp32, fp16 and
// bf16, so an element a kernel failed to write is caught by the comparison.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace cpgen {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(int device, size_t bytes);  // uninitialized; throws Error(kCuda/kNoDevice)
  template <typename T>
  static DeviceBuffer from_host(int device, const std::vector<T>& values) {
    DeviceBuffer buffer(device, values.size() * sizeof(T));
    buffer.upload(values.data(), buffer.bytes());
    return buffer;
  }
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  CUdeviceptr address() const { return address_; }
  template <typename T>
  T* as() const { return reinterpret_cast<T*>(static_cast<uintptr_t>(address_)); }
  size_t bytes() const { return bytes_; }
  int device() const { return device_; }

  // Synchronous copies of `bytes` from the start of the buffer; throw kInternal past its end.
  // upload and fill_bytes return once their bytes are in place (they wait for the legacy stream
  // they run on), so work on any stream enqueued after them sees the bytes. download does not wait
  // for other streams: synchronize the work that wrote the buffer first.
  void upload(const void* host, size_t bytes);
  // download: from byte `offset` on (0: the start).
  void download(void* host, size_t bytes, size_t offset = 0) const;
  void fill_bytes(uint8_t value);
  void poison() { fill_bytes(0xFF); }
  // A new buffer on the same device holding these bytes (a device-to-device copy, in place when
  // this returns, as upload's).
  DeviceBuffer copy() const;

  // Element i of the buffer as an array of T (one small download, as download).
  template <typename T>
  T element(size_t i) const {
    T value{};
    download(&value, sizeof value, i * sizeof value);
    return value;
  }

  template <typename T>
  std::vector<T> download_as() const {
    std::vector<T> values(bytes_ / sizeof(T));
    download(values.data(), values.size() * sizeof(T));
    return values;
  }

 private:
  void release() noexcept;
  int device_ = -1;
  CUdeviceptr address_ = 0;
  size_t bytes_ = 0;
};

}  // namespace cpgen
