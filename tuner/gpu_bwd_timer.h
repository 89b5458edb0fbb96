// The GPU timing harness of backward step workloads (bwd-diagonal, ...), the counterpart of
// tuner/gpu_timer.h: one workload's inputs on a device (tuner/step_inputs_bwd.h), the reference
// config's dq, dk and dv checked against float64 on sampled rows, each candidate run on the same
// inputs with zeroed dq and poisoned dk/dv accumulators and every element of the three compared
// with the reference config's on the GPU (tuner/gpu_compare.h), then in a step type that
// accumulates (not bwd-diagonal), once the race has not cut it, run as that launch followed by an
// accumulating one, whose sums must be twice the reference config's, then timed with CUDA events
// over rotating input sets. GpuTimer
// hands backward workloads to it, so the tuner sees one timer.
#pragma once

#include <cuda.h>

#include <memory>
#include <string>
#include <vector>

#include "runtime/cuda/device_buffer.h"
#include "runtime/cuda/gpu_stream.h"
#include "templates/params_bwd.cuh"
#include "tuner/candidate_timer.h"
#include "tuner/gpu_compare.h"
#include "tuner/step_inputs_bwd.h"

namespace cpgen {

class GpuBackwardTimer : public CandidateTimer {
 public:
  explicit GpuBackwardTimer(int device = 0);
  ~GpuBackwardTimer() override;
  TimingOutcome begin_workload(const WorkloadKey& w, const KernelSpec& reference_spec, const CompiledKernel& reference) override;
  TimingOutcome measure(const KernelSpec& spec, const CompiledKernel& kernel, int warmup, int runs,
                        const RaceLimit& race) override;
  double useful_flops() const override { return useful_flops_; }
  void end_workload() override;

 private:
  struct InputSet {
    DeviceBuffer q, k, v, dout, lse, delta, dq_acc, dk_acc, dv_acc;
  };
  struct Gradients {
    std::vector<float> dq, dk, dv;
  };
  RingBwdParams params_for(const InputSet& set, bool accumulate_dkv) const;
  void launch(const KernelSpec& spec, const CompiledKernel& kernel, const RingBwdParams& params);
  // Set 0's accumulators as a chunk's first step finds them: dq_acc zeroed, dk_acc and dv_acc
  // poisoned (NaN: a word never written shows).
  void reset_set_zero();
  // One launch on set 0 as the chunk's first step: dq_acc zeroed, dk_acc and dv_acc poisoned;
  // its gradients stay in set 0's accumulators, and are downloaded into *out when out is given.
  TimingOutcome run_checked(const KernelSpec& spec, const CompiledKernel& kernel, Gradients* out);
  // The first element of the candidate's gradients in set 0 that disagrees with the reference
  // config's (`twice`: with twice them, set 0 holding two launches' sum), as kWrongResult naming
  // it and saying `after` how it was computed; kOk where every element agrees.
  TimingOutcome compare_with_reference(const KernelSpec& spec, bool twice = false, const std::string& after = "");
  // The reference config's gradients against float64 on sampled rows; kOk or kWrongResult.
  TimingOutcome check_against_float64(const KernelSpec& spec) const;

  int device_;
  std::unique_ptr<gpu::Stream> stream_;
  WorkloadKey workload_;
  BackwardStepInputs host_;
  DeviceBuffer q_positions_, kv_positions_;
  DeviceBuffer q_key_first_, q_key_last_;  // step_key_intervals; empty for an unmasked workload
  std::vector<InputSet> sets_;
  Gradients reference_;
  DeviceBuffer reference_dq_, reference_dk_, reference_dv_;  // device copies, for the candidates' check
  std::unique_ptr<GpuCompare> compare_;
  double useful_flops_ = 0;
};

}  // namespace cpgen
