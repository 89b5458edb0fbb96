// Whole-problem runs of the emulated backend from host tensors: shard the inputs by the partition
// scheme (ranks may hold different row counts) in the problem's dtype and layout, poison the outputs (NaN), run the forward ring of KernelRingBackend
// (the object a GPU ring runs) on one EmulatedDevice, every rank on its own host thread over the
// CPU transport, and gather; then, when asked, the backward ring of the same backends on the
// forward's out and lse, with poisoned dq, dk, dv. Used by `cpgen verify --backend emulated` and the tests.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "cache/workload.h"
#include "cpgen/problem.h"
#include "generator/kernel_spec.h"
#include "runtime/jit/kernel_store.h"

namespace cpgen {

struct EmulatedRingResult {
  std::vector<float> out, lse;  // gathered over ranks, global position order
  std::vector<float> dq, dk, dv;  // the backward's, when it ran; global order
  long launches = 0;            // kernel launches the emulator ran (forward and backward)
  double launch_ms = 0;         // their wall time, summed over the rank threads
};

// The backward's kernels and input: a backward step spec per backward step type (the first is
// what ring step 0 runs), the preprocessing and conversion kernels, and dO as a full
// [batch, q_heads, seq, head_dim] tensor in global order. out and lse, when given (full tensors
// in global order, [batch, q_heads, seq, head_dim] and [batch, q_heads, seq]), stand in for the
// forward's: the forward ring does not run (per_step may then be empty) and the backward reads
// out rounded to the input dtype and lse as fp32, which tests the backward kernels on their own.
struct EmulatedBackward {
  std::vector<std::pair<StepType, KernelSpec>> steps;
  KernelSpec pre, convert;
  std::vector<float> dout;
  std::vector<float> out, lse;
};

// per_step: the forward kernel of each step type of the problem (the first is what ring step 0
// runs; types not listed run it). `arch` decides feasibility (the GPU whose shared memory the
// launches assume). q, k, v: full [batch, heads, seq, head_dim] tensors in global order. Throws
// what compiling, loading or the emulator throws, naming the kernel.
EmulatedRingResult run_emulated_ring(const Problem& problem,
                                     const std::vector<std::pair<StepType, KernelSpec>>& per_step,
                                     const std::string& arch, const std::vector<float>& q,
                                     const std::vector<float>& k, const std::vector<float>& v,
                                     KernelStore* store = default_kernel_store(),
                                     const EmulatedBackward* backward = nullptr);

}  // namespace cpgen
