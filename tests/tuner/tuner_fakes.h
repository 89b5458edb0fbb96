// Deterministic stand-ins for NVRTC and the GPU, so the tuner's logic (records, pruning,
// verification gate, winners, budgets, rank agreement) is tested on a CPU in milliseconds.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "cpgen/error.h"
#include "tuner/candidate_timer.h"
#include "tuner/compile_pool.h"
#include "tuner/sample_stats.h"

namespace cpgen::testing {

// Compiles everything except the URIs in `fail` (compile error) and `spill` (ptxas spills).
struct FakeCompiler {
  std::set<std::string> fail, spill;
  std::atomic<int> calls{0};
  CompileFn fn() {
    return [this](const KernelSpec& spec, std::string_view arch) {
      ++calls;
      const std::string uri = spec.uri();
      if (fail.count(uri)) throw Error(ErrorKind::kCompile, "NVRTC could not compile " + uri + "\nlog line");
      CompiledKernel k;
      k.uri = uri;
      k.arch = std::string(arch);
      k.key = uri + "@" + k.arch;
      k.cubin = "cubin of " + uri;
      k.stats.registers = 128;
      k.stats.spill_bytes = spill.count(uri) ? 64 : 0;
      return k;
    };
  }
};

// Times each kernel as ms_of(spec) (plus a small deterministic jitter), and reports the URIs in
// `wrong` as wrong results.
class FakeTimer : public CandidateTimer {
 public:
  std::function<double(const KernelSpec&)> ms_of = [](const KernelSpec& s) {
    return 1.0 + 0.001 * s.block_m + 0.002 * s.block_n + 0.01 * s.stages + 0.1 * s.warps;
  };
  // The checked launch's time (a cold first launch); unset: ms_of. A second, confirming launch
  // takes ms_of.
  std::function<double(const KernelSpec&)> check_of;
  std::set<std::string> wrong;
  bool reference_broken = false;
  std::vector<std::string> measured;  // URIs in the order they were measured
  std::string reference_uri;
  // Wall time each call spends, as a real timer's host and device work would.
  std::chrono::milliseconds setup_wait{0}, measure_wait{0};

  TimingOutcome begin_workload(const WorkloadKey&, const KernelSpec& spec, const CompiledKernel&) override {
    std::this_thread::sleep_for(setup_wait);
    reference_uri = spec.uri();
    if (reference_broken) return {Disposition::kWrongResult, {}, "out[b0 h0 row 0 d0] = 7, float64 reference 0.5"};
    return {Disposition::kOk, {}, ""};
  }
  std::vector<RaceLimit> races;       // the race each measure call got, in the same order
  TimingOutcome measure(const KernelSpec& spec, const CompiledKernel&, int, int runs, const RaceLimit& race) override {
    std::this_thread::sleep_for(measure_wait);
    measured.push_back(spec.uri());
    races.push_back(race);
    if (wrong.count(spec.uri())) return {Disposition::kWrongResult, {}, spec.uri() + " out[b0 h1 row 3 d5] = 1, reference config 0.25"};
    // The checked launch takes check_of(spec) (by default ms_of), and the race may end it there as
    // the GPU timers do (tuner/gpu_timer.cpp).
    const double check_ms = check_of ? check_of(spec) : ms_of(spec);
    if (auto stop = confirmed_stop_at_check(race, check_ms, [&] { return ms_of(spec); })) return *stop;
    TimingOutcome t{Disposition::kOk, {}, ""};
    t.check_ms = check_ms;
    for (int i = 0; i < runs; ++i) {
      t.samples_ms.push_back(ms_of(spec) * (1.0 + 0.001 * ((i * 7) % 5)));
      // The race as the GPU timers run it (tuner/event_timing.cpp): the probe's median decides.
      if (race.applies(runs) && i + 1 == race.probe_runs && median_of(t.samples_ms) > race.above_ms) {
        t.stopped_early = true;
        break;
      }
    }
    return t;
  }
  double useful_flops() const override { return 1e12; }
  void end_workload() override {}
};

}  // namespace cpgen::testing
