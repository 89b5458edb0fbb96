// Small RAII owners for driver-API objects used by the GPU ring: device memory, streams, events,
// and a scope that makes a device's primary context current (the context the CUDA runtime, NCCL
// and PyTorch share, so their pointers and streams are valid in ours).
#pragma once

#include <cuda.h>

#include <cstddef>
#include <utility>

namespace cpgen::gpu {

// Retains device `ordinal`'s primary context for the object's lifetime.
class PrimaryContext {
 public:
  explicit PrimaryContext(int ordinal);
  ~PrimaryContext();
  PrimaryContext(const PrimaryContext&) = delete;
  PrimaryContext& operator=(const PrimaryContext&) = delete;
  CUcontext get() const { return context_; }
  CUdevice device() const { return device_; }
  int ordinal() const { return ordinal_; }
  void make_current() const;  // on the calling thread

 private:
  int ordinal_ = 0;
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
};

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept { *this = std::move(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  void* data() const { return reinterpret_cast<void*>(pointer_); }
  CUdeviceptr address() const { return pointer_; }
  size_t bytes() const { return bytes_; }

 private:
  CUdeviceptr pointer_ = 0;
  size_t bytes_ = 0;
};

class Stream {
 public:
  Stream();  // non-blocking with respect to the legacy default stream
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  CUstream get() const { return stream_; }

 private:
  CUstream stream_ = nullptr;
};

class Event {
 public:
  explicit Event(bool timing = false);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  CUevent get() const { return event_; }
  void record(CUstream stream) const;

 private:
  CUevent event_ = nullptr;
};

// `waiter` runs nothing more until all work queued on `producer` so far has finished; the host
// does not block.
void stream_wait_stream(CUstream waiter, CUstream producer, const Event& via);

}  // namespace cpgen::gpu
