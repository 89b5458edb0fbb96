// What the tuner asks of a timing backend: prepare a workload's inputs and trust a reference
// config, then for each candidate check its output against the reference and time it. The GPU
// implementation (tuner/gpu_timer.h) uses CUDA events; tests substitute a deterministic fake.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "cache/records.h"
#include "cache/workload.h"
#include "generator/kernel_spec.h"
#include "runtime/jit/compiled_kernel.h"

namespace cpgen {

struct TimingOutcome {
  Disposition disposition = Disposition::kNotTimed;  // kOk, kWrongResult, kLaunchFailed
  std::vector<double> samples_ms;                    // every timed run, in run order
  std::string detail;                                // why not ok (element, expected, actual)
  bool stopped_early = false;                        // the race ended it (RaceLimit): the probe runs only
  double check_ms = 0;                               // the checked launch alone, event-timed
  bool stopped_after_check = false;                  // the race ended it at that launch (check_above_ms)
};

// The tuner's race: a candidate whose first `probe_runs` timed launches have a median above
// `above_ms` is timed no further. probe_runs 0 (or not below the runs asked for): no race. Before
// that, a candidate whose checked launch alone took more than `check_above_ms` (0: no such cut)
// is timed no further either: no warmup, no probe.
struct RaceLimit {
  int probe_runs = 0;
  double above_ms = 0;
  double check_above_ms = 0;
  bool applies(int runs) const { return probe_runs > 0 && probe_runs < runs; }
  bool stops_at_check(double check_ms) const { return check_above_ms > 0 && check_ms > check_above_ms; }
};

// The outcome of a candidate the race stops at its checked launch: that launch's time as its one
// sample.
inline TimingOutcome stopped_after_check(double check_ms) {
  TimingOutcome t{Disposition::kOk, {check_ms}, ""};
  t.stopped_early = t.stopped_after_check = true;
  t.check_ms = check_ms;
  return t;
}

// The race's cut at the checked launch, confirmed before it stops a candidate. That launch is the
// first of a freshly loaded kernel, after the host compared the previous candidate's output with
// the GPU idle: its instruction caches are empty and the clocks may still be rising. So a
// candidate above the cut is launched once more the same way (relaunch_ms: that launch, timed)
// and stopped only if this one is above the cut too; its sample is the faster of the two. nullopt:
// not stopped, time it.
inline std::optional<TimingOutcome> confirmed_stop_at_check(const RaceLimit& race, double check_ms,
                                                            const std::function<double()>& relaunch_ms) {
  if (!race.stops_at_check(check_ms)) return std::nullopt;
  const double again = relaunch_ms();
  if (!race.stops_at_check(again)) return std::nullopt;
  TimingOutcome t = stopped_after_check(std::min(check_ms, again));
  t.check_ms = check_ms;
  return t;
}

// How many of up to `warmup` launches a candidate warms up with before it is timed: enough for
// about kWarmupMs of its GPU work by its checked launch's time, at least two, at most `warmup`
// (no checked time: `warmup`). By then the candidate has run once or more (its check, a forward's
// merge check, the race's relaunch), so its code is loaded and the clocks are up; five more
// launches of a 32K step (14-55 ms each on an H200) cost a workload of 24 candidates 2-6 s. The
// checked launch was the kernel's first, maybe cold and slower than the rest: hence two, not one.
inline constexpr double kWarmupMs = 25;
inline int warmup_launches(int warmup, double check_ms) {
  if (warmup <= 0) return 0;
  if (!(check_ms > 0)) return warmup;
  const double wanted = std::max(2.0, std::ceil(kWarmupMs / check_ms));
  return wanted >= warmup ? warmup : static_cast<int>(wanted);
}

class CandidateTimer {
 public:
  virtual ~CandidateTimer() = default;
  // Allocates and fills the workload's inputs and runs `reference`, checking a sample of its
  // output rows against a float64 CPU computation. Returns the failure (kWrongResult,
  // kLaunchFailed) when the reference itself cannot be trusted, else kOk.
  virtual TimingOutcome begin_workload(const WorkloadKey& w, const KernelSpec& reference_spec,
                                       const CompiledKernel& reference) = 0;
  // Runs the candidate once on poisoned outputs (timed with events: TimingOutcome::check_ms) and
  // compares every element with the reference's output; only if it agrees, and that launch took
  // no more than race.check_above_ms, warms up and times `runs` launches on rotating inputs, or
  // fewer when `race` stops it (TimingOutcome::stopped_early).
  virtual TimingOutcome measure(const KernelSpec& spec, const CompiledKernel& kernel, int warmup, int runs,
                                const RaceLimit& race) = 0;
  // The FLOPs of one launch that do useful work (visible query-key pairs), for TFLOP/s.
  virtual double useful_flops() const = 0;
  virtual void end_workload() = 0;
};

}  // namespace cpgen
