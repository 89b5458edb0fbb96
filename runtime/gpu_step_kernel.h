// The forward step kernel of one KernelSpec on one device, compiled (runtime/jit.h), loaded
// once per process and device (runtime/module.h), and launched with RingFwdParams.
#pragma once

#include <cuda.h>

#include <string>

#include "generator/kernel_spec.h"
#include "templates/params.cuh"

namespace cpgen::gpu {

// Grid of a forward step launch: one CTA per (block_m packed query rows, kv head, batch); with
// GQA group G a kv head's packed rows are q_len * G (params.cuh).
struct StepGrid {
  unsigned x = 1, y = 1, z = 1;
};
StepGrid step_grid(const KernelSpec& spec, const RingFwdParams& params);

class StepKernel {
 public:
  // Compiles (or reads from the kernel store) and loads the kernel on `device_ordinal`; throws
  // kInfeasible / kCompile / kCuda naming the URI.
  StepKernel(const KernelSpec& spec, const std::string& arch, int device_ordinal);
  // Checks the params against the spec (group, head counts) and enqueues one launch.
  void launch(const RingFwdParams& params, CUstream stream) const;
  const KernelSpec& spec() const { return spec_; }
  const std::string& arch() const { return arch_; }

 private:
  KernelSpec spec_;
  std::string arch_;
  CUfunction function_ = nullptr;
  int shared_bytes_ = 0;
};

// "sm_90a" for compute capability 9.0 (wgmma-capable), "sm_80" for 8.x, else kBadInput naming
// the device and the supported archs.
std::string arch_for_device(int device_ordinal);

}  // namespace cpgen::gpu
