// The GPU backend of the ring driver (runtime/ring/ring_driver.h) for one rank: owns the two K/V
// slots that travel around the ring and the fp32 running state, fills RingFwdParams for each step
// and enqueues the step kernel on the rank's compute stream. It never waits on the host.
#pragma once

#include <cuda.h>

#include <vector>

#include "cpgen/problem.h"
#include "runtime/cuda/device_buffer.h"
#include "runtime/cuda/gpu_stream.h"
#include "runtime/backend/gpu_step_kernel.h"
#include "runtime/ring/ring_driver.h"

namespace cpgen::gpu {

// Global positions of every rank's local rows as int32 on the device ([cp_size][local_len]):
// a step reads its query positions from its own row and its key positions from the row of the
// rank the chunk started on, so positions never travel.
class DevicePositions {
 public:
  DevicePositions(const Problem& problem, int device);
  const int* rank_positions(int rank) const;

 private:
  int64_t local_len_;
  DeviceBuffer table_;
};

// The caller's tensors for one forward (contiguous, layout in cpgen/ring_attention.h).
struct ShardTensors {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* out = nullptr;
  float* lse = nullptr;
};

class GpuRingBackend final : public RingBackend {
 public:
  GpuRingBackend(const Problem& problem, int rank, int device, const StepKernel& kernel,
                 const DevicePositions& positions);
  // Before each ring run: the tensors and the stream to compute on.
  void bind(const ShardTensors& tensors, CUstream stream);

  std::vector<BufferView> kv_buffers(int slot) override;
  std::vector<BufferView> dkv_buffers(int slot) override;
  void forward_begin() override;
  void forward_step(const RingStep& step) override;
  void backward_begin() override;
  void backward_step(const RingStep& step) override;
  void accumulate_dkv(int slot, bool is_first) override;
  void backward_end(int slot) override;

  // The params of one step (exposed for tests of the strides and pointers).
  RingFwdParams step_params(const RingStep& step) const;

 private:
  Problem problem_;
  int rank_;
  const StepKernel& kernel_;
  const DevicePositions& positions_;
  size_t kv_bytes_;     // one of K or V: batch * kv_heads * local_len * head_dim * 2
  DeviceBuffer k_slots_[2], v_slots_[2];
  DeviceBuffer o_state_, m_state_, l_state_;
  ShardTensors tensors_;
  CUstream stream_ = nullptr;
};

}  // namespace cpgen::gpu
