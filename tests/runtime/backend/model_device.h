// A KernelDevice for CPU tests of KernelRingBackend: host memory, and each backward kernel run as
// a float64 implementation of the semantics params_bwd.cuh documents (fp32 accumulators stored
// as fp32, exactly as the kernels keep them), for the step kernel of a spec that is causal or
// not, reads the key intervals or not, and applies the softcap or not. It records every launch and checks that every
// pointer a launch gets lies, with the extent the params describe, inside memory this device (or
// a device sharing its registry) allocated: what a GPU would fault on, or silently corrupt,
// fails here instead.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cpgen/types.h"
#include "runtime/backend/kernel_device.h"

namespace cpgen::test {

// Every byte of a fresh ModelMemory allocation (see ModelMemory::allocate).
constexpr unsigned char kPoisonByte = 0xFF;
// The offset of the first 4-byte word of [p, p + bytes) that is still all kPoisonByte, or `bytes`
// when there is none: a word nothing wrote. No value the ring moves is all ones (a NaN in fp32,
// two NaNs in fp16 and bf16), so a word that is means the memory was never written.
size_t first_unwritten_word(const void* p, size_t bytes);

// Allocations shared by the devices of one ring (the position table is allocated on one of them
// and read by every rank's launches). Thread-safe: ring_backward runs ranks on threads.
class ModelMemory {
 public:
  DeviceAllocation allocate(size_t bytes);
  // Whether [p, p + bytes) lies inside one live allocation.
  bool contains(const void* p, size_t bytes) const;

 private:
  mutable std::mutex mutex_;
  std::map<const char*, size_t> blocks_;  // start -> bytes
};

struct ModelLaunch {
  std::string kind;                 // "pre", "step", "convert"
  StepType step = StepType::kBwdFull;
  RingBwdPreParams pre{};
  RingBwdParams bwd{};
  RingBwdConvertParams convert{};
};

class ModelDevice final : public KernelDevice {
 public:
  // key_intervals: the step kernel masks by params.q_key_first / q_key_last (causal then plays no
  // part); softcap: by params.softcap (generator/kernel_spec.h's flags of the same names).
  ModelDevice(std::shared_ptr<ModelMemory> memory, Dtype dtype, int head_dim, bool causal,
              bool key_intervals = false, bool softcap = false)
      : memory_(std::move(memory)),
        dtype_(dtype),
        head_dim_(head_dim),
        causal_(causal),
        key_intervals_(key_intervals),
        softcap_(softcap) {}

  DeviceAllocation allocate(size_t bytes) override { return memory_->allocate(bytes); }
  void upload(void* dst, const void* host, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void zero(void* dst, size_t bytes) override;
  void launch_forward(StepType step, const RingFwdParams& params) override;
  void launch_backward_pre(const RingBwdPreParams& params) override;
  void launch_backward(StepType step, const RingBwdParams& params) override;
  void launch_backward_convert(const RingBwdConvertParams& params) override;

  const std::vector<ModelLaunch>& launches() const { return launches_; }
  int copies() const { return copies_; }

 private:
  double load(const void* base, int64_t index) const;
  void require(const void* p, size_t bytes, const std::string& what) const;

  std::shared_ptr<ModelMemory> memory_;
  Dtype dtype_;
  int head_dim_;
  bool causal_;
  bool key_intervals_;
  bool softcap_;
  std::vector<ModelLaunch> launches_;
  int copies_ = 0;
};

}  // namespace cpgen::test
