// The forward step kernel of one KernelSpec on one device: compiled (runtime/jit.h, through the
// kernel store), loaded once per process and device (runtime/module.h) with its dynamic shared
// memory reserved, and launched with RingFwdParams.
#pragma once

#include <cuda.h>

#include <string>

#include "generator/kernel_spec.h"
#include "runtime/module.h"
#include "templates/params.cuh"

namespace cpgen::gpu {

// Grid of a forward step launch (templates/step_fwd.cuh): x enumerates blocks of block_m packed
// query rows (q_len * G rows per kv head with GQA group G), y enumerates (batch, kv head).
struct StepGrid {
  unsigned x = 1, y = 1, z = 1;
};
StepGrid step_grid(const KernelSpec& spec, const RingFwdParams& params);

class StepKernel {
 public:
  // Throws kInfeasible / kCompile / kCuda naming the URI.
  StepKernel(const KernelSpec& spec, const std::string& arch, int device);
  // Checks the params against the spec (GQA group) and enqueues one launch.
  void launch(const RingFwdParams& params, CUstream stream) const;
  const KernelSpec& spec() const { return spec_; }
  const std::string& arch() const { return arch_; }

 private:
  KernelSpec spec_;
  std::string arch_;
  const LoadedKernel* kernel_ = nullptr;
  int shared_bytes_ = 0;
};

}  // namespace cpgen::gpu
