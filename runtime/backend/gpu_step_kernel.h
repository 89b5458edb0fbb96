// The forward step kernel(s) of a ring on one device: each KernelSpec compiled (runtime/jit/jit.h,
// through the kernel store), loaded once per process and device (runtime/cuda/module.h) with its
// dynamic shared memory reserved, and launched with RingFwdParams. A ring may run a different
// spec per step type (cache/workload.h: the diagonal step, full steps, zigzag half steps), as the
// tuning database selects them; every spec reads and writes the same per-row fp32 running state,
// so steps of different tile configs merge into one result.
#pragma once

#include <cuda.h>

#include <array>
#include <string>
#include <utility>
#include <vector>

#include "cache/workload.h"
#include "generator/kernel_spec.h"
#include "runtime/backend/launch_grid.h"
#include "runtime/cuda/module.h"
#include "templates/params.cuh"
#include "templates/params_bwd.cuh"

namespace cpgen::gpu {

// One forward launch of `spec` (either family) on `stream`: grid from launch_grid.h, block of
// spec.threads(), `shared_bytes` of dynamic shared memory (already reserved on `kernel`), and the
// params as the kernel takes them: RingFwdParams for ring_fwd_, RingFwdWgmmaParams with the three
// tensor maps encoded by the driver for ring_fwd_wgmma_ (runtime/backend/wgmma_params.h). The ring
// (StepKernel) and the tuner's timer launch through here, so what is timed is what runs. Throws
// Error naming the URI (kBadInput: a tensor TMA cannot read; kCuda: a map or launch refused).
// work_counter: one unsigned of device memory that no launch on another stream uses at the same
// time; a persistent wgmma kernel takes its work items from it, zeroed here on `stream` first
// (templates/step_fwd_wgmma.cuh). Other kernels ignore it; a persistent one without it is kInternal.
// sm_margin: SMs a persistent launch leaves free (its grid covers the others; kBadInput when it
// leaves none); other launches ignore it.
void launch_forward_kernel(const KernelSpec& spec, const LoadedKernel& kernel, int shared_bytes,
                           const RingFwdParams& params, CUstream stream, unsigned* work_counter, int sm_margin = 0);

class StepKernel {
 public:
  // One spec for every step. Throws kInfeasible / kCompile / kCuda naming the URI.
  StepKernel(const KernelSpec& spec, const std::string& arch, int device);
  // A spec per step type; the first entry is the main one (what ring step 0 runs), and step
  // types not listed launch it. Equal specs are compiled and loaded once. sm_margin: SMs every
  // persistent launch leaves free (launch_forward_kernel).
  StepKernel(const std::vector<std::pair<StepType, KernelSpec>>& per_step, const std::string& arch, int device,
             int sm_margin = 0);
  // Checks the params against the spec (GQA group) and enqueues one launch of the main spec.
  void launch(const RingFwdParams& params, CUstream stream, unsigned* work_counter) const;
  // The same with the spec of step type `step`.
  void launch(const RingFwdParams& params, StepType step, CUstream stream, unsigned* work_counter) const;
  const KernelSpec& spec() const { return loaded_.front().spec; }
  const KernelSpec& spec(StepType step) const { return loaded_[index_of(step)].spec; }
  const std::string& arch() const { return arch_; }

 private:
  struct Loaded {
    KernelSpec spec;
    const LoadedKernel* kernel = nullptr;
    int shared_bytes = 0;
  };
  size_t add(const KernelSpec& spec, int device);
  size_t index_of(StepType step) const { return by_step_[static_cast<size_t>(step)]; }
  void launch_loaded(const Loaded& k, const RingFwdParams& params, CUstream stream, unsigned* work_counter) const;

  std::string arch_;
  int sm_margin_ = 0;
  std::vector<Loaded> loaded_;
  static_assert(static_cast<size_t>(StepType::kBwdZigzagQHalf) < 8, "by_step_ covers every step type");
  std::array<size_t, 8> by_step_{};  // StepType value (forward and backward) -> index into loaded_ (0: the main spec)
};

}  // namespace cpgen::gpu
