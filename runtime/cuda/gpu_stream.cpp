#include "runtime/cuda/gpu_stream.h"

#include "runtime/cuda/cuda_driver.h"

namespace cpgen::gpu {

Stream::Stream(StreamPriority priority) {
  const cu::DriverApi& api = cu::driver();
  if (priority == StreamPriority::kHighest && api.cuCtxGetStreamPriorityRange && api.cuStreamCreateWithPriority) {
    int least = 0, greatest = 0;  // numerically, greatest priority is the lowest number
    CPGEN_CU_CHECK(api.cuCtxGetStreamPriorityRange(&least, &greatest));
    CPGEN_CU_CHECK(api.cuStreamCreateWithPriority(&stream_, CU_STREAM_NON_BLOCKING, greatest));
    return;
  }
  CPGEN_CU_CHECK(api.cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING));
}

Stream::~Stream() {
  if (stream_) cu::driver().cuStreamDestroy(stream_);
}

Event::Event(bool timing) {
  CPGEN_CU_CHECK(cu::driver().cuEventCreate(&event_, timing ? CU_EVENT_DEFAULT : CU_EVENT_DISABLE_TIMING));
}

Event::~Event() {
  // Destroying an event with work still pending is allowed: the driver frees it on completion.
  if (event_) cu::driver().cuEventDestroy(event_);
}

void Event::record(CUstream stream) const { CPGEN_CU_CHECK(cu::driver().cuEventRecord(event_, stream)); }

bool is_capturing(CUstream stream) {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  CPGEN_CU_CHECK(cu::driver().cuStreamIsCapturing(stream, &status));
  // An invalidated capture still counts: enqueueing more work would only hide why it failed.
  return status != CU_STREAM_CAPTURE_STATUS_NONE;
}

CUresult query_event_outside_capture(CUevent event) {
  const cu::DriverApi& api = cu::driver();
  if (!api.cuThreadExchangeStreamCaptureMode) return api.cuEventQuery(event);
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  CPGEN_CU_CHECK(api.cuThreadExchangeStreamCaptureMode(&mode));  // `mode` now holds the thread's
  const CUresult status = api.cuEventQuery(event);
  CPGEN_CU_CHECK(api.cuThreadExchangeStreamCaptureMode(&mode));  // and the thread has it back
  return status;
}

void finish_legacy_stream() { CPGEN_CU_CHECK(cu::driver().cuStreamSynchronize(CU_STREAM_LEGACY)); }

}  // namespace cpgen::gpu
