#include "tuner/event_timing.h"

#include <memory>

#include "runtime/cuda/cuda_driver.h"
#include "runtime/cuda/gpu_stream.h"
#include "runtime/cuda/module.h"
#include "tuner/sample_stats.h"

namespace cpgen {

std::vector<double> time_launches_ms(CUstream stream, int warmup, int runs, const std::function<void(int)>& launch) {
  const cu::DriverApi& api = cu::driver();
  // All events exist before the first launch, so creating them is never timed.
  std::vector<std::unique_ptr<gpu::Event>> events;
  for (int i = 0; i < 2 * runs; ++i) events.push_back(std::make_unique<gpu::Event>(/*timing=*/true));
  for (int i = 0; i < warmup; ++i) launch(i);
  for (int i = 0; i < runs; ++i) {
    events[2 * i]->record(stream);
    launch(warmup + i);
    events[2 * i + 1]->record(stream);
  }
  CPGEN_CU_CHECK(api.cuStreamSynchronize(stream));
  std::vector<double> samples;
  for (int i = 0; i < runs; ++i) {
    float ms = 0;
    CPGEN_CU_CHECK(api.cuEventElapsedTime(&ms, events[2 * i]->get(), events[2 * i + 1]->get()));
    samples.push_back(ms);
  }
  return samples;
}

double time_checked_launch_ms(const KernelSpec& spec, const CompiledKernel& kernel, int device, CUstream stream,
                              const std::function<void()>& launch) {
  load_kernel(kernel, device).reserve_dynamic_shared(check_feasibility(spec, kernel.arch).shared_bytes);
  return time_launches_ms(stream, 0, 1, [&](int) { launch(); }).front();
}

std::vector<double> time_launches_ms(CUstream stream, int warmup, int runs, const RaceLimit& race,
                                     const std::function<void(int)>& launch, bool* stopped_early) {
  *stopped_early = false;
  if (!race.applies(runs)) return time_launches_ms(stream, warmup, runs, launch);
  std::vector<double> samples = time_launches_ms(stream, warmup, race.probe_runs, launch);
  if (median_of(samples) > race.above_ms) {
    *stopped_early = true;
    return samples;
  }
  const int done = warmup + race.probe_runs;
  for (double ms : time_launches_ms(stream, 0, runs - race.probe_runs, [&](int i) { launch(done + i); }))
    samples.push_back(ms);
  return samples;
}

TimingOutcome launch_failure(const Error& e, bool infeasible_too) {
  const bool cuda = e.kind() == ErrorKind::kCuda;
  if (!cuda && !(infeasible_too && e.kind() == ErrorKind::kInfeasible)) throw;
  if (cuda && cu::driver().cuCtxSynchronize() != CUDA_SUCCESS) throw;
  return {Disposition::kLaunchFailed, {}, std::string(e.what()).substr(0, 400)};
}

}  // namespace cpgen
