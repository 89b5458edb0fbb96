// RAII streams and events of the driver API for the GPU ring (memory: runtime/cuda/device_buffer.h;
// contexts: use_primary_context in runtime/cuda/module.h).
#pragma once

#include <cuda.h>

namespace cpgen::gpu {

enum class StreamPriority {
  kDefault,
  // The context's greatest priority: the block scheduler starts its kernels' CTAs before those of
  // lower-priority streams still waiting for an SM (e.g. NCCL's exchange beside a step kernel).
  kHighest,
};

class Stream {
 public:
  // Non-blocking with respect to the legacy default stream.
  explicit Stream(StreamPriority priority = StreamPriority::kDefault);
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

// Whether work enqueued on `stream` now is being captured into a CUDA graph (cuStreamIsCapturing):
// such work must not allocate, create events or synchronize with the host.
bool is_capturing(CUstream stream);

// cuEventQuery of an event recorded outside any capture, from a thread that may itself be
// capturing. A query is one of the calls the capture modes forbid: from a thread whose own capture
// (global or thread-local mode) is active, or beside another thread's global-mode capture, it
// fails with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates the capture. So the query runs
// with this thread in the relaxed mode (cuThreadExchangeStreamCaptureMode) and the thread's mode
// is put back after it; an event recorded inside a capture still answers
// CUDA_ERROR_CAPTURED_EVENT. With a driver that lacks the exchange, a plain query.
CUresult query_event_outside_capture(CUevent event);

// Waits until the work on the legacy default stream is done. cuMemsetD8 and a pageable
// cuMemcpyHtoD run there and may return before their bytes land (CUDA driver API, "API
// synchronization behavior"), and cpgen's streams are non-blocking, so they do not wait for that
// stream: without this, a kernel on one of them could read a buffer before its upload or poison.
void finish_legacy_stream();

}  // namespace cpgen::gpu
