// The KernelDevice of the emulated backend (runtime/backend/kernel_device.h): host memory, and
// every launch run to completion by the CUDA emulator before it returns, through the generated
// kernels compiled for the host (runtime/jit/host_jit.h) and loaded once (emulated_kernel.h). The
// grids, block sizes and dynamic shared sizes are the GPU's (launch_grid.h, check_feasibility), so
// KernelRingBackend drives it exactly as it drives a GpuDevice.
//
// One device may serve every rank of a ring, each rank on its own host thread: allocation and
// the kernels are thread-safe and the emulator's state is per thread.
//
// Every launch runs under the emulator's sanitizer (emulation/cuda_emulation.h) with the device's
// live allocations as the buffers global accesses must stay in; a finding fails the launch.
// Every allocation starts filled with all-ones bytes (a NaN in every dtype), and the sanitizer
// reports a kernel's read of a word still holding that fill (nothing wrote it: initcheck's
// uninitialized read) with the kernel line and the buffer.
// Each allocation is mapped between two inaccessible guard pages and ends where the second one
// starts, so a kernel's plain load or store past its end (or before its start) faults and fails
// the launch with the thread, block and address (emulated_fault.h). The start is aligned to the
// largest power of two up to 16 that divides the size, so the end meets the guard exactly and even
// one byte past it faults. Each buffer costs at least three pages of address space.
#pragma once

#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "generator/kernel_spec.h"
#include "runtime/backend/emulated_kernel.h"
#include "runtime/backend/kernel_device.h"
#include "runtime/jit/kernel_store.h"

namespace cpgen {

class EmulatedDevice final : public KernelDevice {
 public:
  // The resident CTAs an emulated persistent launch (KernelSpec::persistent) is given in place of
  // a GPU's one per SM: few enough that every CTA of a test-sized problem takes several query
  // blocks (its stage ring and Q barrier carried from one to the next), more than one so that the
  // blocks are shared out.
  static constexpr int kResidentCtas = 3;
  // The L2 cache a persistent launch's item order is sized to (layout.cuh, L2 sections) in place
  // of a GPU's tens of MB: small enough that a test-sized problem (a few pairs of a few hundred
  // keys) splits into sections of a pair or two.
  static constexpr long long kL2Bytes = 768 * 1024;

  // One kernel per step type it will be asked to launch: forward step types (kDiagonal ..
  // kZigzagQHalf) map to forward specs, backward ones (kBwd*) to backward step specs; the
  // preprocessing and conversion kernels are given apart. A step type not listed launches the
  // first spec of its direction. Each spec is checked for feasibility on `arch` (the shared memory
  // the GPU would grant) and compiled (or read from `store`) here, so launches never compile.
  // Throws kInfeasible / kCompile naming the URI.
  EmulatedDevice(const std::vector<std::pair<StepType, KernelSpec>>& per_step, const std::string& arch,
                 KernelStore* store = default_kernel_store());
  // The same plus the backward's one-warp-per-row kernels.
  EmulatedDevice(const std::vector<std::pair<StepType, KernelSpec>>& per_step, const KernelSpec& backward_pre,
                 const KernelSpec& backward_convert, const std::string& arch,
                 KernelStore* store = default_kernel_store());

  DeviceAllocation allocate(size_t bytes) override;
  void upload(void* dst, const void* host, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void zero(void* dst, size_t bytes) override;
  void launch_forward(StepType step, const RingFwdParams& params) override;
  void launch_backward_pre(const RingBwdPreParams& params) override;
  void launch_backward(StepType step, const RingBwdParams& params) override;
  void launch_backward_convert(const RingBwdConvertParams& params) override;
  bool forward_takes_query_view(StepType step) const override;

  // The spec step type `step` launches (throws kBadInput when the device has none for it).
  const KernelSpec& spec(StepType step) const;
  // How many launches ran (all threads), and their wall time summed over threads, for tests and
  // reports.
  long launches() const;
  double launch_ms() const;

  // Read counting, for tests of what a kernel skips: from this call on, the cp.async reads of the
  // live allocation that starts at `data` are counted per 16-byte chunk (cuda_emulation.h,
  // GlobalBuffer). take_reads returns the counts so far and zeroes them. Each allocation's
  // counters may be taken only while no launch that reads it runs. Throws kInternal when `data`
  // is not the start of a live allocation (or, for take_reads, not counted).
  void count_reads(const void* data);
  std::vector<unsigned> take_reads(const void* data);

 private:
  struct Loaded {
    KernelSpec spec;
    int shared_bytes = 0;
    std::unique_ptr<EmulatedKernel> kernel;
  };
  // Index into loaded_ of a kernel, compiling and loading it on first sight.
  int add(const KernelSpec& spec);
  const Loaded& for_step(StepType step) const;

  std::string arch_;
  KernelStore* store_;
  std::vector<Loaded> loaded_;
  static constexpr int kNone = -1;
  std::array<int, 8> by_step_;  // StepType value -> index into loaded_, kNone when absent
  int first_forward_ = kNone, first_backward_ = kNone, backward_pre_ = kNone, backward_convert_ = kNone;
  std::atomic<long> launches_{0};
  mutable std::mutex allocations_mutex_;
  std::map<const void*, size_t> allocations_;  // live allocations: address -> bytes
  std::map<const void*, std::vector<unsigned>> read_counts_;  // count_reads: address -> per chunk
  std::atomic<long long> launch_ns_{0};
  // Runs one launch of `k` and counts it.
  void run(const Loaded& k, EmulatedGrid grid, const void* params);
};

}  // namespace cpgen
