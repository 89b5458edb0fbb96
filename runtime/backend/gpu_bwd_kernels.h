// The backward kernels of a ring on one device: the preprocessing kernel, one backward step
// kernel per backward step type (as the tuning database selects them, like StepKernel for the
// forward) and the conversion kernel, each compiled through the kernel store and loaded once per
// process and device. Launch shapes: step_bwd_grid and row_grid (runtime/backend/gpu_step_kernel.h).
#pragma once

#include <cuda.h>

#include <string>
#include <utility>
#include <vector>

#include "cache/workload.h"
#include "generator/kernel_spec.h"
#include "runtime/cuda/module.h"
#include "templates/params_bwd.cuh"

namespace cpgen::gpu {

// Which spec runs where: the backward step specs by backward step type (the first is what ring
// step 0 runs, and types not listed launch it), the preprocessing and the conversion kernel.
struct BackwardSpecs {
  std::vector<std::pair<StepType, KernelSpec>> steps;
  KernelSpec pre;
  KernelSpec convert;
};

class BackwardKernels {
 public:
  // Throws kInfeasible / kCompile / kCuda naming the URI, kInternal for a spec of the wrong kind
  // or a step entry that is not a backward step type.
  BackwardKernels(const BackwardSpecs& specs, const std::string& arch, int device);

  void launch_pre(const RingBwdPreParams& params, CUstream stream) const;
  // Checks the params against the spec of `step` (GQA group) and enqueues one launch.
  void launch(const RingBwdParams& params, StepType step, CUstream stream) const;
  void launch_convert(const RingBwdConvertParams& params, CUstream stream) const;

  const KernelSpec& spec(StepType step) const { return loaded_[index_of(step)].spec; }
  const KernelSpec& pre_spec() const { return loaded_[pre_].spec; }
  const KernelSpec& convert_spec() const { return loaded_[convert_].spec; }

 private:
  struct Loaded {
    KernelSpec spec;
    const LoadedKernel* kernel = nullptr;
    int shared_bytes = 0;
  };
  size_t add(const KernelSpec& spec, int device);
  size_t index_of(StepType step) const;
  LaunchShape shape_of(const Loaded& k, unsigned grid_x, unsigned grid_y, unsigned grid_z, CUstream stream) const;

  std::string arch_;
  std::vector<Loaded> loaded_;
  std::vector<std::pair<StepType, size_t>> by_step_;  // backward step type -> index into loaded_
  size_t pre_ = 0, convert_ = 0;
};

}  // namespace cpgen::gpu
