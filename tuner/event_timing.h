// Timing of kernel launches with CUDA events, shared by the forward and backward GPU timers.
#pragma once

#include <cuda.h>

#include <functional>
#include <vector>

#include "cpgen/error.h"
#include "generator/kernel_spec.h"
#include "runtime/jit/compiled_kernel.h"
#include "tuner/candidate_timer.h"

namespace cpgen {

// Enqueues `warmup` untimed launches, then `runs` launches each between two timing events, on
// `stream`, and waits for them. launch(i) enqueues launch number i (0 .. warmup + runs - 1), so a
// caller can rotate input sets by i. Returns the timed launches' milliseconds in run order.
// Throws Error(kCuda) as the driver calls do.
std::vector<double> time_launches_ms(CUstream stream, int warmup, int runs, const std::function<void(int)>& launch);

// A candidate's checked launch: loads `kernel` on `device` and reserves its shared memory, then
// enqueues launch() between two timing events on `stream`, waits for it, and returns its
// milliseconds; loaded first, so that the interval holds the launch and not the module's load.
double time_checked_launch_ms(const KernelSpec& spec, const CompiledKernel& kernel, int device, CUstream stream,
                              const std::function<void()>& launch);

// The same under the tuner's race: the first race.probe_runs launches are timed and, when their
// median is above race.above_ms, returned alone with *stopped_early set; else the rest follow
// (launch numbers continue) and all `runs` samples are returned.
std::vector<double> time_launches_ms(CUstream stream, int warmup, int runs, const RaceLimit& race,
                                     const std::function<void(int)>& launch, bool* stopped_early);

// What a candidate's failed launch becomes, called from the handler of `e`: kLaunchFailed with
// the error's first 400 characters for a kCuda error (and kInfeasible where `infeasible_too`)
// after which the current context still works (a launch the driver refused for its resources).
// Anything else is rethrown, also a CUDA error the context did not survive: a fault on the GPU
// (an illegal address, say) is sticky, every later call of the process fails, and recording it
// would file that failure against every candidate after this one, replacing their records.
TimingOutcome launch_failure(const Error& e, bool infeasible_too);

}  // namespace cpgen
