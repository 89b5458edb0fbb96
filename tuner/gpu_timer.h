// The GPU timing harness: one workload's inputs on a device, the reference config checked against
// float64, each candidate checked against the reference on poisoned outputs (on the GPU,
// tuner/gpu_compare.h), then timed with CUDA
// events one launch at a time after a warm-up, rotating through enough input sets that the L2
// cache never holds the previous launch's data (so small tiles are not flattered by warm L2).
// Backward workloads (bwd- step types) go to GpuBackwardTimer (tuner/gpu_bwd_timer.h), so the
// tuner times both directions through one timer.
#pragma once

#include <cuda.h>

#include <memory>
#include <vector>

#include "runtime/cuda/device_buffer.h"
#include "runtime/cuda/gpu_stream.h"
#include "templates/params.cuh"
#include "tuner/candidate_timer.h"
#include "tuner/gpu_bwd_timer.h"
#include "tuner/gpu_compare.h"
#include "tuner/step_inputs.h"

namespace cpgen {

class GpuTimer : public CandidateTimer {
 public:
  explicit GpuTimer(int device = 0);
  ~GpuTimer() override;
  TimingOutcome begin_workload(const WorkloadKey& w, const KernelSpec& reference_spec, const CompiledKernel& reference) override;
  TimingOutcome measure(const KernelSpec& spec, const CompiledKernel& kernel, int warmup, int runs,
                        const RaceLimit& race) override;
  double useful_flops() const override { return backward_active_ ? backward_->useful_flops() : useful_flops_; }
  void end_workload() override;

  // Tolerances of one output against float64 (the reference check); a candidate against the
  // reference config gets twice these, since both carry their own rounding.
  static double output_tolerance(Dtype dtype);
  static double lse_tolerance(double lse);  // kLseAbsolute + kLseRelative |lse|
  // got within lse_tolerance(want) of want; equal infinities agree (a row that sees no key of the
  // step has lse -inf), a NaN never does: compare.cuh's lses_agree, the candidates' rule.
  static bool lse_agrees(double got, double want);
  static constexpr double kLseAbsolute = 1e-3, kLseRelative = 1e-5;

 private:
  struct InputSet {
    DeviceBuffer q, k, v, out, lse, o_state, m_state, l_state;
  };
  RingFwdParams params_for(const InputSet& set, bool first, bool last) const;
  // Runs once as a whole single step (first and last) on set 0 with poisoned out and lse, timed
  // (TimingOutcome::check_ms); its out and lse stay in set 0. measure() then also checks the merge
  // paths: three steps over the same keys.
  TimingOutcome run_checked(const KernelSpec& spec, const CompiledKernel& kernel);
  // Poisons set 0's out, lse and fp32 state (NaN: a word never written shows).
  void poison_set_zero();
  // Set 0's out against the reference config's and its lse against `lse_want` (on the device, and
  // its host copy for the message), on the GPU (GpuCompare); kWrongResult naming the first
  // disagreeing element, `after` saying how it was computed and `lse_want_is` what `lse_want` is
  // of the reference config's (" (its lse + ln 3)", or "" for its lse).
  TimingOutcome compare_to_reference(const KernelSpec& spec, const DeviceBuffer& lse_want,
                                     const std::vector<float>& lse_want_host, const std::string& after,
                                     const std::string& lse_want_is);
  void launch(const KernelSpec& spec, const CompiledKernel& kernel, const RingFwdParams& params);

  int device_;
  std::unique_ptr<gpu::Stream> stream_;
  DeviceBuffer work_counter_;  // a persistent candidate's (gpu::launch_forward_kernel), in stream order
  WorkloadKey workload_;
  StepPositions positions_;
  AttentionShape mask_;  // forward_timing_mask of the workload
  DeviceBuffer q_positions_, kv_positions_;
  DeviceBuffer q_key_first_, q_key_last_;  // step_key_intervals; empty for an unmasked workload
  std::vector<InputSet> sets_;
  std::vector<double> host_k_, host_v_;  // set 0's keys and values, for the float64 reference
  std::vector<uint16_t> reference_out_;  // the reference config's out and lse, on the host for the
  std::vector<float> reference_lse_;     // float64 check and the messages, and on the device for
  DeviceBuffer reference_out_dev_, reference_lse_dev_;  // the candidates' check
  std::vector<float> reference_lse_merged_;  // reference_lse_ + ln 3: three steps over the same keys
  DeviceBuffer reference_lse_merged_dev_;
  std::unique_ptr<GpuCompare> compare_;  // made on the first forward workload
  double useful_flops_ = 0;
  std::unique_ptr<GpuBackwardTimer> backward_;  // made on the first backward workload
  bool backward_active_ = false;                // the current workload is a backward one
};

}  // namespace cpgen
