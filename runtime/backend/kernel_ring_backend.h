// The ring backend of one rank that runs generated kernels on a KernelDevice
// (runtime/backend/kernel_device.h): owns the two K/V slots that travel around the ring and the
// fp32 running state on the device, fills the kernel params of each step and launches them. The
// same code drives a GPU (GpuDevice) and the CPU emulator, so what the emulator checks is what the
// GPU runs.
#pragma once

#include <vector>

#include "cpgen/problem.h"
#include "runtime/backend/kernel_device.h"
#include "runtime/ring/ring_driver.h"

namespace cpgen {

// Global positions of every rank's local rows as int32 in device memory ([cp_size][local_len]):
// a step reads its query positions from its own row and its key positions from the row of the
// rank the chunk started on, so positions never travel. One table serves every rank of a device.
class RingPositions {
 public:
  RingPositions(const Problem& problem, KernelDevice& device);
  const int* rank_positions(int rank) const;

 private:
  int64_t local_len_;
  DeviceAllocation table_;
};

// The caller's tensors for one ring call (contiguous, layout in cpgen/ring_attention.h), as
// device pointers of the KernelDevice.
struct ShardTensors {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* out = nullptr;
  float* lse = nullptr;
};

class KernelRingBackend final : public RingBackend {
 public:
  // `device` and `positions` must outlive the backend.
  KernelRingBackend(const Problem& problem, int rank, KernelDevice& device, const RingPositions& positions);
  // Before each ring run: the tensors (checked: non-null, aligned as the kernels load them).
  void bind(const ShardTensors& tensors);

  std::vector<BufferView> kv_buffers(int slot) override;
  std::vector<BufferView> dkv_buffers(int slot) override;
  void forward_begin() override;
  void forward_step(const RingStep& step) override;
  void backward_begin() override;
  void backward_step(const RingStep& step) override;
  void accumulate_dkv(int slot, bool is_first) override;
  void backward_end(int slot) override;

  // The params of one forward step (exposed for tests of the strides and pointers).
  RingFwdParams step_params(const RingStep& step) const;

 private:
  Problem problem_;
  int rank_;
  KernelDevice& device_;
  const RingPositions& positions_;
  size_t kv_bytes_;  // one of K or V: batch * kv_heads * local_len * head_dim * dtype bytes
  DeviceAllocation k_slots_[2], v_slots_[2];
  DeviceAllocation o_state_, m_state_, l_state_;
  ShardTensors tensors_;
};

}  // namespace cpgen
