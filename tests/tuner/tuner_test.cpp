#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <signal.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <thread>

#include "cache/lookup.h"
#include "cache/records.h"
#include "generator/kernel_spec_wgmma.h"
#include "tuner/event_timing.h"
#include "../cache/cache_fixtures.h"
#include "../cache/child_processes.h"
#include "tuner/candidates.h"
#include "tuner/tuner.h"
#include "tuner_fakes.h"

namespace cpgen::testing {
namespace {

class TunerTest : public TempDirTest {};

Problem small_problem(int64_t seq_len = 4096, Scheme scheme = Scheme::kZigzag) {
  Problem p;
  p.name = "small";
  p.q_heads = 8;
  p.kv_heads = 2;
  p.head_dim = 128;
  p.seq_len = seq_len;
  p.cp_size = 2;
  p.causal = true;
  p.scheme = scheme;
  return p;
}

const DeviceClass kH200{"NVIDIA H200", "sm_90a", 132};

TuneOptions quiet_options() {
  TuneOptions o;
  o.quiet = true;
  o.jobs = 2;
  return o;
}

std::map<Disposition, int> dispositions(Database& db, const WorkloadKey& w) {
  std::map<Disposition, int> counts;
  for (const Record& r : records_for(db, w)) ++counts[r.disposition];
  return counts;
}

TEST_F(TunerTest, CompileOnlyRecordsEveryCandidateAsNotTimed) {
  Database db(path("t.db"));
  FakeCompiler compiler;
  // Two viable candidates of every workload of the problem (the half steps are the same size).
  const std::vector<KernelSpec> viable = enumerate_candidates(workloads_for(small_problem(), kH200)[0]).viable;
  ASSERT_GE(viable.size(), 3u);
  const KernelSpec bad = viable[1];
  const KernelSpec spilling = viable[2];
  compiler.fail = {bad.uri()};
  compiler.spill = {spilling.uri()};
  // The forward step types alone: the failing URIs are forward kernels (the backward ones have
  // their own test in tuner_backward_test.cpp).
  TuneOptions o = quiet_options();
  o.backward = false;
  Tuner tuner(db, o, compiler.fn(), nullptr, nullptr, test_env());
  TuneReport report = tuner.tune({small_problem()}, kH200);
  EXPECT_FALSE(report.timed);
  EXPECT_NE(report.notice.find("timing needs a GPU"), std::string::npos) << report.notice;
  ASSERT_EQ(report.workloads.size(), 3u);  // zigzag causal: diagonal and the two half steps
  for (const WorkloadResult& r : report.workloads) {
    const CandidateSet set = enumerate_candidates(r.workload);
    EXPECT_FALSE(r.winner);
    std::map<Disposition, int> counts = dispositions(db, r.workload);
    // Every candidate has exactly one record: nothing dropped, nothing invented.
    EXPECT_EQ(records_for(db, r.workload).size(), set.viable.size() + set.pruned.size());
    EXPECT_EQ(counts[Disposition::kCompileFailed], 1);
    EXPECT_EQ(counts[Disposition::kInfeasible], static_cast<int>(set.pruned.size()) + 1);  // + the spilling one
    EXPECT_EQ(counts[Disposition::kNotTimed], static_cast<int>(set.viable.size()) - 2);
    EXPECT_EQ(counts[Disposition::kOk], 0);
    for (const Record& rec : records_for(db, r.workload)) {
      if (rec.kernel_uri == spilling.uri()) EXPECT_NE(rec.detail.find("spill"), std::string::npos) << rec.detail;
      if (rec.kernel_uri == bad.uri()) EXPECT_EQ(rec.detail, "NVRTC could not compile " + bad.uri());
    }
  }
  // The three workloads share candidates: each kernel compiled once.
  std::set<std::string> distinct;
  for (const WorkloadResult& r : report.workloads)
    for (const KernelSpec& s : enumerate_candidates(r.workload).viable) distinct.insert(s.uri());
  EXPECT_EQ(compiler.calls.load(), static_cast<int>(distinct.size()));
}

TEST_F(TunerTest, FastestVerifiedCandidateWinsAndIsSelected) {
  Database db(path("t.db"));
  FakeCompiler compiler;
  FakeTimer timer;
  // The fastest config by the fake's formula is 64x32 with 4 warps and 1 stage; it gives a wrong
  // result, so it must not win even though it would be fastest.
  KernelSpec fastest = KernelSpec::default_for(Dtype::kBf16, 128, true, 4);
  fastest.block_m = 64;
  fastest.block_n = 32;
  fastest.stages = 1;
  timer.wrong = {fastest.uri()};
  Tuner tuner(db, quiet_options(), compiler.fn(), &timer, nullptr, test_env());
  TuneReport report = tuner.tune({small_problem(4096, Scheme::kContiguous)}, kH200);
  ASSERT_EQ(report.workloads.size(), 4u);  // diagonal and full, forward then backward
  const WorkloadResult& diag = report.workloads[0];
  ASSERT_EQ(diag.workload.step, StepType::kDiagonal);
  ASSERT_TRUE(diag.winner);
  EXPECT_NE(diag.winner->kernel_uri, fastest.uri());
  EXPECT_EQ(timer.measured.front(), tuning_default(diag.workload).uri()) << "the reference is timed first";
  // The winner is the minimum over the valid records, with 20 samples (5 when the race stopped
  // it after its probe, 1 at its checked launch, each saying so) and its median.
  double best = 1e9;
  std::string best_uri;
  for (const Record& r : records_for(db, diag.workload)) {
    if (r.kernel_uri == fastest.uri()) EXPECT_EQ(r.disposition, Disposition::kWrongResult);
    if (!r.valid()) continue;
    if (r.detail.find("timed no further") == std::string::npos) EXPECT_EQ(r.samples_ms.size(), 20u);
    else if (r.detail.find("after its checked launch") != std::string::npos) EXPECT_EQ(r.samples_ms.size(), 1u) << r.detail;
    else EXPECT_EQ(r.samples_ms.size(), 5u) << r.detail;
    EXPECT_TRUE(r.tflops.has_value());
    if (*r.median_ms < best) best = *r.median_ms, best_uri = r.kernel_uri;
  }
  EXPECT_EQ(diag.winner->kernel_uri, best_uri);
  auto pin = pinned_winner(db, diag.workload);
  ASSERT_TRUE(pin);
  EXPECT_EQ(pin->kernel_uri, best_uri);
  Selection s = select_config(diag.workload, &db, test_env(), PretunedCaches{});
  EXPECT_EQ(s.source, ConfigSource::kDatabaseExact);
  EXPECT_EQ(s.spec.uri(), best_uri);
}

// The race: once the reference is timed, a candidate whose first 5 runs' median is above 1.25x the
// best so far stops there, recorded as timed with those runs and why; one within the margin gets
// all 20. It never takes the win, and race_margin 0 times everything fully.
TEST_F(TunerTest, TheRaceStopsClearlySlowerCandidatesAfterTheirProbeRuns) {
  const KernelSpec reference = KernelSpec::default_for(Dtype::kBf16, 128, true, 4);
  for (double margin : {1.25, 0.0}) {
    Database db(path("race" + std::to_string(margin) + ".db"));
    FakeCompiler compiler;
    FakeTimer timer;
    // The reference takes 1 ms, candidates with 8 warps 2 ms (stopped), the others 1.2 ms (kept).
    timer.ms_of = [&](const KernelSpec& s) { return s == reference ? 1.0 : s.warps == 8 ? 2.0 : 1.2; };
    TuneOptions options = quiet_options();
    options.race_margin = margin;
    options.race_check_margin = 0;  // the probe alone (the cut at the checked launch: below)
    options.forward = true;
    options.backward = false;
    Tuner tuner(db, options, compiler.fn(), &timer, nullptr, test_env());
    TuneReport report = tuner.tune({small_problem(4096, Scheme::kContiguous)}, kH200);
    const WorkloadResult& diag = report.workloads.at(0);
    ASSERT_EQ(diag.workload.step, StepType::kDiagonal);
    ASSERT_TRUE(diag.winner);
    EXPECT_EQ(diag.winner->kernel_uri, reference.uri()) << "the slower candidates never win";
    int slow = 0, kept = 0;
    for (const Record& r : records_for(db, diag.workload)) {
      if (r.disposition != Disposition::kOk) continue;
      const KernelSpec spec = KernelSpec::parse(r.kernel_uri);
      if (margin > 0 && spec.warps == 8 && !(spec == reference)) {
        ++slow;
        EXPECT_EQ(r.samples_ms.size(), 5u) << r.kernel_uri;
        EXPECT_NE(r.detail.find("timed no further after 5 runs: their median is above 1.25 x the best so far, 1.00"),
                  std::string::npos) << r.detail;
        EXPECT_NEAR(*r.median_ms, 2.0, 0.01);
      } else {
        ++kept;
        EXPECT_EQ(r.samples_ms.size(), 20u) << r.kernel_uri;
        EXPECT_EQ(r.detail.find("timed no further"), std::string::npos) << r.detail;
      }
    }
    EXPECT_EQ(diag.stopped_early, slow);
    EXPECT_EQ(diag.timed, slow + kept);
    if (margin > 0) {
      EXPECT_GT(slow, 0) << "no 8-warp candidate in the workload";
      EXPECT_GT(kept, 1);
    }
    // The reference itself runs without a race.
    ASSERT_FALSE(timer.races.empty());
    EXPECT_EQ(timer.races.front().probe_runs, 0);
  }
}

// The warm-up by the checked launch's time: about 25 ms of launches, at least two (the checked
// launch may have run cold), at most the --warmup asked for; without a checked time, all of them.
TEST(WarmupLaunches, AboutTwentyFiveMillisecondsOfWorkAtLeastTwoAtMostAsked) {
  EXPECT_EQ(warmup_launches(5, 0.1), 5);   // short launches: every one asked for
  EXPECT_EQ(warmup_launches(5, 6.0), 5);   // ceil(25 / 6) = 5
  EXPECT_EQ(warmup_launches(5, 10.0), 3);  // ceil(2.5)
  EXPECT_EQ(warmup_launches(5, 14.0), 2);  // a 32K step on an H200
  EXPECT_EQ(warmup_launches(5, 55.0), 2);
  EXPECT_EQ(warmup_launches(5, 1e9), 2);
  EXPECT_EQ(warmup_launches(1, 55.0), 1);  // never more than asked
  EXPECT_EQ(warmup_launches(2, 1.0), 2);
  EXPECT_EQ(warmup_launches(5, 0), 5);     // no checked time
  EXPECT_EQ(warmup_launches(5, std::nan("")), 5);
  EXPECT_EQ(warmup_launches(0, 14.0), 0);
}

// A candidate's failed launch: infeasible where the caller allows it becomes kLaunchFailed with
// the first 400 characters of the error; any other kind is rethrown as it was. (A CUDA error
// also asks the context whether it survived, which needs a GPU.)
TEST(LaunchFailure, OnlyTheFailuresOfOneCandidateAreRecorded) {
  auto outcome = [](const Error& error, bool infeasible_too) {
    try {
      throw error;
    } catch (const Error& e) {
      return launch_failure(e, infeasible_too);
    }
  };
  const TimingOutcome t = outcome(Error(ErrorKind::kInfeasible, std::string(500, 'x')), true);
  EXPECT_EQ(t.disposition, Disposition::kLaunchFailed);
  EXPECT_EQ(t.detail, std::string(400, 'x'));
  EXPECT_TRUE(t.samples_ms.empty());
  try {
    outcome(Error(ErrorKind::kInfeasible, "too big"), false);
    ADD_FAILURE() << "an infeasible launch was recorded where the caller does not allow it";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInfeasible);
    EXPECT_STREQ(e.what(), "too big");
  }
  try {
    outcome(Error(ErrorKind::kInternal, "a bug"), true);
    ADD_FAILURE() << "an internal error was recorded as a launch failure";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInternal);
  }
}

// Later workloads of a tune time their candidates in the order an earlier one finished them: the
// fastest candidate, last in the diagonal step's list, comes right after the reference in the
// half steps, where every other candidate then stops at its checked launch (1.5x the best); on
// the diagonal step, found last, it let every other one run in full. Every candidate is timed in
// both.
TEST_F(TunerTest, LaterWorkloadsTimeTheEarlierFastestFirst) {
  // 1 ms, and 0.9 ms: below the cut's floor, whose bar (1.5 ms) still stops the others.
  for (const double fast_ms : {1.0, 0.9}) {
  SCOPED_TRACE("fast " + std::to_string(fast_ms) + " ms");
  Database db(path("order" + std::to_string(fast_ms) + ".db"));
  FakeCompiler compiler;
  FakeTimer timer;
  const Problem problem = small_problem(4096, Scheme::kZigzag);
  const std::vector<WorkloadKey> forward = workloads_for(problem, kH200);
  ASSERT_EQ(forward.size(), 3u);  // diagonal, kv-half, q-half
  const std::vector<KernelSpec> viable = enumerate_candidates(forward[0]).viable;
  ASSERT_GT(viable.size(), 3u);
  const KernelSpec fast = viable.back();
  const std::string reference_uri = tuning_default(forward[0]).uri();
  ASSERT_NE(fast.uri(), reference_uri);
  // The reference 2 ms, the fast one 1 or 0.9 ms, the others 2.4 ms: within both race cuts of the
  // reference (2.5 and 3 ms), beyond the check cut of the fast one (1.5 ms).
  timer.ms_of = [&](const KernelSpec& s) { return s.uri() == reference_uri ? 2.0 : s == fast ? fast_ms : 2.4; };
  TuneOptions o = quiet_options();
  o.backward = false;
  Tuner tuner(db, o, compiler.fn(), &timer, nullptr, test_env());
  const TuneReport report = tuner.tune({problem}, kH200);
  ASSERT_EQ(report.workloads.size(), 3u);
  size_t start = 0;
  for (size_t i = 0; i < 3; ++i) {
    const WorkloadResult& r = report.workloads[i];
    SCOPED_TRACE(r.workload.describe());
    ASSERT_TRUE(r.winner);
    EXPECT_EQ(r.winner->kernel_uri, fast.uri());
    ASSERT_EQ(r.timed, static_cast<int>(viable.size()));  // every candidate timed
    ASSERT_LE(start + 2, timer.measured.size());
    EXPECT_EQ(timer.measured[start], reference_uri);
    if (i == 0) {
      EXPECT_EQ(timer.measured[start + r.timed - 1], fast.uri()) << "the diagonal step found it last";
      EXPECT_EQ(r.stopped_early, 0);
    } else {
      EXPECT_EQ(timer.measured[start + 1], fast.uri()) << "the earlier fastest comes right after the reference";
      EXPECT_EQ(r.stopped_early, r.timed - 2) << "every other candidate stops early";
      int at_check = 0;
      for (const Record& record : records_for(db, r.workload))
        if (record.disposition == Disposition::kOk && record.samples_ms.size() == 1) ++at_check;
      EXPECT_EQ(at_check, r.timed - 2) << "every other candidate stops at its checked launch";
    }
    start += static_cast<size_t>(r.timed);
  }
  }
}

// The race's first cut: a candidate whose checked launch took more than 1.5x the best so far, or
// 1.5x 1 ms where the best is faster, is recorded with that launch alone and why, never warmed up
// or probed; one below the cut goes on to the probe race (1.25x); with the cut at 0 the checked
// launch decides nothing.
TEST_F(TunerTest, TheRaceStopsACandidateAtItsCheckedLaunchOnceTheBestTakesAMillisecond) {
  const KernelSpec reference = KernelSpec::default_for(Dtype::kBf16, 128, true, 4);
  struct Case {
    double reference_ms, check_margin;
    bool cut;  // whether the 8-warp candidates stop at their checked launch
  };
  // 0.9 ms: the 8-warp candidates (1.8 ms) pass the floor's bar of 1.5 ms; 0.6 ms: theirs (1.2 ms)
  // do not.
  for (const Case c : {Case{1.0, 1.5, true}, Case{0.9, 1.5, true}, Case{0.6, 1.5, false}, Case{1.0, 0.0, false}}) {
    SCOPED_TRACE("reference " + std::to_string(c.reference_ms) + " ms, cut " + std::to_string(c.check_margin));
    Database db(path("cut" + std::to_string(c.reference_ms) + std::to_string(c.check_margin) + ".db"));
    FakeCompiler compiler;
    FakeTimer timer;
    // 8 warps: 2x the reference (cut at the checked launch, else stopped by the probe); 1.3x: the
    // checked launch passes the cut, the probe stops it; the others 1.1x (timed fully).
    timer.ms_of = [&](const KernelSpec& s) {
      return c.reference_ms * (s == reference ? 1.0 : s.warps == 8 ? 2.0 : s.stages == 3 ? 1.3 : 1.1);
    };
    TuneOptions options = quiet_options();
    options.race_check_margin = c.check_margin;
    options.forward = true;
    options.backward = false;
    Tuner tuner(db, options, compiler.fn(), &timer, nullptr, test_env());
    const TuneReport report = tuner.tune({small_problem(4096, Scheme::kContiguous)}, kH200);
    const WorkloadResult& diag = report.workloads.at(0);
    ASSERT_TRUE(diag.winner);
    EXPECT_EQ(diag.winner->kernel_uri, reference.uri());
    int at_check = 0, probed = 0, full = 0;
    for (const Record& r : records_for(db, diag.workload)) {
      if (r.disposition != Disposition::kOk) continue;
      const KernelSpec spec = KernelSpec::parse(r.kernel_uri);
      if (spec == reference) {
        EXPECT_EQ(r.samples_ms.size(), 20u);
      } else if (spec.warps == 8 && c.cut) {
        ++at_check;
        ASSERT_EQ(r.samples_ms.size(), 1u) << r.kernel_uri;
        EXPECT_NEAR(*r.median_ms, 2.0 * c.reference_ms, 1e-9);
        char want[200];
        if (c.reference_ms >= 1.0)
          std::snprintf(want, sizeof want,
                        "timed no further after its checked launch and one more: %.4g ms at best, above 1.5 x the best so far, %.4g ms",
                        2.0 * c.reference_ms, *diag.winner->median_ms);
        else
          std::snprintf(want, sizeof want,
                        "timed no further after its checked launch and one more: %.4g ms at best, above 1.5 x 1 ms (the "
                        "cut's floor; the best so far %.4g ms)",
                        2.0 * c.reference_ms, *diag.winner->median_ms);
        EXPECT_EQ(r.detail, want);
      } else if (spec.warps == 8 || spec.stages == 3) {
        ++probed;
        EXPECT_EQ(r.samples_ms.size(), 5u) << r.kernel_uri;
        EXPECT_NE(r.detail.find("timed no further after 5 runs"), std::string::npos) << r.detail;
      } else {
        ++full;
        EXPECT_EQ(r.samples_ms.size(), 20u) << r.kernel_uri;
      }
    }
    EXPECT_EQ(at_check > 0, c.cut);
    EXPECT_GT(probed, 0);
    EXPECT_GT(full, 0);
    EXPECT_EQ(diag.stopped_early, at_check + probed);
    // The reference runs with no race at all; every later candidate gets the cut where it applies.
    ASSERT_GT(timer.races.size(), 1u);
    EXPECT_EQ(timer.races.front().check_above_ms, 0.0);
    // (the last call is the last workload's, against that workload's best, floored at 1 ms)
    const double last_best = *report.workloads.back().winner->median_ms;
    EXPECT_NEAR(timer.races.back().check_above_ms, c.check_margin > 0 ? 1.5 * std::max(last_best, 1.0) : 0.0, 1e-9);
  }
}

// The cut at the checked launch stops a candidate only when a second launch confirms it: a cold
// first launch (clocks still rising, caches empty) twice the reference's time does not keep a
// candidate that is faster when warm from being timed and winning.
TEST_F(TunerTest, AColdCheckedLaunchAloneStopsNoCandidate) {
  const KernelSpec reference = KernelSpec::default_for(Dtype::kBf16, 128, true, 4);
  Database db(path("cold.db"));
  FakeCompiler compiler;
  FakeTimer timer;
  // The reference 2 ms (above the cut's 1 ms floor). 8 warps: warm 0.9x the reference, its checked
  // launch cold at 2x. 3 stages: 2x both ways.
  timer.ms_of = [&](const KernelSpec& s) { return s == reference ? 2.0 : s.warps == 8 ? 1.8 : s.stages == 3 ? 4.0 : 2.2; };
  timer.check_of = [&](const KernelSpec& s) { return s == reference ? 2.0 : s.warps == 8 ? 4.0 : timer.ms_of(s); };
  TuneOptions options = quiet_options();
  options.forward = true;
  options.backward = false;
  Tuner tuner(db, options, compiler.fn(), &timer, nullptr, test_env());
  const WorkloadResult diag = tuner.tune({small_problem(4096, Scheme::kContiguous)}, kH200).workloads.at(0);
  ASSERT_TRUE(diag.winner);
  EXPECT_EQ(KernelSpec::parse(diag.winner->kernel_uri).warps, 8) << diag.winner->kernel_uri;
  int cold = 0, cut = 0;
  for (const Record& r : records_for(db, diag.workload)) {
    if (r.disposition != Disposition::kOk) continue;
    const KernelSpec spec = KernelSpec::parse(r.kernel_uri);
    if (spec.warps == 8) {
      ++cold;
      EXPECT_EQ(r.samples_ms.size(), 20u) << r.kernel_uri;
    } else if (spec.stages == 3 && r.samples_ms.size() == 1) {
      ++cut;
      EXPECT_NEAR(*r.median_ms, 4.0, 1e-9) << r.kernel_uri;
    }
  }
  EXPECT_GT(cold, 0);
  EXPECT_GT(cut, 0);
}

// Issue 13: on sm_90a the wgmma candidates go through the same steps as the mma.sync ones: without
// a GPU they are compiled and recorded not-timed; with one they are verified and timed, and the
// faster family wins the record that selection then takes.
TEST_F(TunerTest, WgmmaCandidatesAreCompiledRecordedAndWinWhenFaster) {
  auto is_wgmma = [](const std::string& uri) { return uri.rfind("ring_fwd_wgmma_", 0) == 0; };
  TuneOptions o = quiet_options();
  o.backward = false;
  {
    Database db(path("compile.db"));
    FakeCompiler compiler;
    Tuner tuner(db, o, compiler.fn(), nullptr, nullptr, test_env());
    const TuneReport report = tuner.tune({small_problem(4096, Scheme::kContiguous)}, kH200);
    ASSERT_FALSE(report.workloads.empty());
    int wgmma_not_timed = 0;
    for (const Record& r : records_for(db, report.workloads[0].workload))
      if (is_wgmma(r.kernel_uri)) {
        EXPECT_TRUE(r.disposition == Disposition::kNotTimed || r.disposition == Disposition::kInfeasible)
            << r.kernel_uri << " " << disposition_name(r.disposition);
        wgmma_not_timed += r.disposition == Disposition::kNotTimed;
      }
    EXPECT_GE(wgmma_not_timed, 8) << "the wgmma candidates are compiled and recorded untimed";
  }
  Database db(path("timed.db"));
  FakeCompiler compiler;
  FakeTimer timer;
  timer.ms_of = [&](const KernelSpec& spec) { return is_wgmma(spec.uri()) ? 0.5 + 0.01 * spec.stages : 1.0; };
  Tuner tuner(db, o, compiler.fn(), &timer, nullptr, test_env());
  const TuneReport report = tuner.tune({small_problem(4096, Scheme::kContiguous)}, kH200);
  const WorkloadResult& diag = report.workloads[0];
  ASSERT_TRUE(diag.winner);
  EXPECT_TRUE(is_wgmma(diag.winner->kernel_uri)) << diag.winner->kernel_uri;
  // bf16 hd128 GQA 4 on sm_90a: the documented default, the reference, is the wgmma family's.
  EXPECT_EQ(timer.reference_uri, forward_default_for_arch(Dtype::kBf16, 128, true, 4, "sm_90a").uri())
      << "the documented default is the reference";
  const Selection s = select_config(diag.workload, &db, test_env(), PretunedCaches{});
  EXPECT_EQ(s.spec.uri(), diag.winner->kernel_uri);
  EXPECT_EQ(s.spec.kind, KernelKind::kForwardWgmma);
}

// Each workload's seconds say where its time went: the timer's preparation (inputs, reference
// check) as setup, its candidate runs as timing, and none of it counted twice.
TEST_F(TunerTest, EachWorkloadSaysWhereItsTimeWent) {
  Database db(path("t.db"));
  FakeCompiler compiler;
  FakeTimer timer;
  timer.setup_wait = std::chrono::milliseconds(50);
  timer.measure_wait = std::chrono::milliseconds(50);
  TuneOptions o = quiet_options();
  o.max_candidates = 10;
  Tuner tuner(db, o, compiler.fn(), &timer, nullptr, test_env());
  const TuneReport report = tuner.tune({small_problem(4096, Scheme::kStriped)}, kH200);
  ASSERT_EQ(report.workloads.size(), 2u);  // diagonal and bwd-diagonal
  double sum = 0;
  for (const WorkloadResult& r : report.workloads) {
    ASSERT_GE(r.timed, 5) << r.workload.describe();
    EXPECT_GE(r.setup_s, 0.05) << r.workload.describe();
    // Five or more candidates of 50 ms each: counted in setup, it would pass 0.25 s.
    EXPECT_LT(r.setup_s, 0.05 + 0.2) << "the candidates' time is not setup: " << r.workload.describe();
    EXPECT_GE(r.timing_s, 0.05 * r.timed) << r.workload.describe();
    // Of the timing: the timer's calls (50 ms each) and the records' commits, apart and within it.
    EXPECT_GE(r.measure_s, 0.05 * r.timed) << r.workload.describe();
    EXPECT_GT(r.store_s, 0) << r.workload.describe();
    EXPECT_LE(r.measure_s + r.store_s, r.timing_s) << "the two are apart: " << r.workload.describe();
    EXPECT_GE(r.compile_s, 0) << r.workload.describe();
    sum += r.compile_s + r.setup_s + r.timing_s;
  }
  EXPECT_LE(sum, report.seconds);
}

TEST_F(TunerTest, BrokenReferenceMeansNoWinner) {
  Database db(path("t.db"));
  FakeCompiler compiler;
  FakeTimer timer;
  timer.reference_broken = true;
  Tuner tuner(db, quiet_options(), compiler.fn(), &timer, nullptr, test_env());
  TuneReport report = tuner.tune({small_problem(4096, Scheme::kStriped)}, kH200);
  ASSERT_EQ(report.workloads.size(), 2u);  // diagonal and bwd-diagonal
  EXPECT_TRUE(timer.measured.empty());
  for (const WorkloadResult& r : report.workloads) {
    EXPECT_FALSE(r.winner) << r.workload.describe();
    std::map<Disposition, int> counts = dispositions(db, r.workload);
    EXPECT_EQ(counts[Disposition::kWrongResult], 1) << r.workload.describe();
    EXPECT_EQ(counts[Disposition::kOk], 0) << r.workload.describe();
  }
}

TEST_F(TunerTest, SpentBudgetLeavesTheRestNotTimed) {
  Database db(path("t.db"));
  FakeCompiler compiler;
  FakeTimer timer;
  TuneOptions o = quiet_options();
  o.budget_s = 1e-9;  // spent before the first timing: only the reference is timed
  Tuner tuner(db, o, compiler.fn(), &timer, nullptr, test_env());
  TuneReport report = tuner.tune({small_problem(4096, Scheme::kStriped)}, kH200);
  ASSERT_EQ(report.workloads.size(), 2u);  // diagonal and bwd-diagonal: one reference each
  ASSERT_EQ(timer.measured.size(), 2u);
  for (const WorkloadResult& r : report.workloads) {
    ASSERT_TRUE(r.winner) << r.workload.describe();
    EXPECT_EQ(r.winner->kernel_uri, tuning_default(r.workload).uri());
    EXPECT_GT(dispositions(db, r.workload)[Disposition::kNotTimed], 10) << r.workload.describe();
  }
  EXPECT_EQ(report.workloads[0].winner->kernel_uri, forward_default_for_arch(Dtype::kBf16, 128, true, 4, "sm_90a").uri());
}

// A re-tune whose budget is spent before the earlier winner comes up times the reference only: the
// earlier, faster winner keeps its pin (its record stands); before, the reference took it. A
// re-tune that measures the earlier winner again decides afresh.
TEST_F(TunerTest, AReTuneThatDidNotMeasureTheWinnerKeepsItsFasterPin) {
  Database db(path("t.db"));
  FakeCompiler compiler;
  FakeTimer timer;
  const Problem problem = small_problem(4096, Scheme::kStriped);
  const TuneReport first = Tuner(db, quiet_options(), compiler.fn(), &timer, nullptr, test_env()).tune({problem}, kH200);
  ASSERT_FALSE(first.workloads.empty());
  const WorkloadResult& before = first.workloads[0];
  ASSERT_TRUE(before.winner);
  const std::string reference = tuning_default(before.workload).uri();
  ASSERT_NE(before.winner->kernel_uri, reference) << "the test needs a winner other than the reference";

  TuneOptions budget = quiet_options();
  budget.budget_s = 1e-9;  // only the reference is timed
  const TuneReport again = Tuner(db, budget, compiler.fn(), &timer, nullptr, test_env()).tune({problem}, kH200);
  EXPECT_NE(again.workloads[0].note.find("the pinned " + before.winner->kernel_uri), std::string::npos)
      << again.workloads[0].note;
  ASSERT_TRUE(again.workloads[0].winner);
  EXPECT_EQ(again.workloads[0].winner->kernel_uri, before.winner->kernel_uri) << "the report names what runs";
  std::optional<PinnedWinner> pin = pinned_winner(db, before.workload);
  ASSERT_TRUE(pin);
  EXPECT_EQ(pin->kernel_uri, before.winner->kernel_uri);
  EXPECT_EQ(select_config(before.workload, &db, test_env(), PretunedCaches{}).spec.uri(), before.winner->kernel_uri);

  // Measured again and now slower than the reference: the new best takes the pin.
  timer.ms_of = [&](const KernelSpec& s) { return s.uri() == reference ? 0.5 : 2.0; };
  Tuner(db, quiet_options(), compiler.fn(), &timer, nullptr, test_env()).tune({problem}, kH200);
  pin = pinned_winner(db, before.workload);
  ASSERT_TRUE(pin);
  EXPECT_EQ(pin->kernel_uri, reference);
}

// N ranks as threads: broadcast hands rank 0's bytes to everyone.
class ThreadRanks {
 public:
  explicit ThreadRanks(int size) : size_(size) {}
  class Member : public RankGroup {
   public:
    Member(ThreadRanks* group, int rank) : group_(group), rank_(rank) {}
    int rank() const override { return rank_; }
    int size() const override { return group_->size_; }
    std::string broadcast_from_root(const std::string& bytes) override {
      std::unique_lock<std::mutex> lock(group_->mutex_);
      if (rank_ == 0) {
        group_->payload_ = bytes;
        ++group_->generation_;
        group_->cv_.notify_all();
        return bytes;
      }
      // Broadcast k (1-based) is ready once rank 0 has made generation_ reach k.
      group_->cv_.wait(lock, [&] { return group_->generation_ > seen_; });
      seen_ = group_->generation_;
      return group_->payload_;
    }

   private:
    ThreadRanks* group_;
    int rank_;
    int seen_ = 0;
  };

 private:
  int size_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::string payload_;
  int generation_ = 0;
};

// Runs one tune per rank on threads: rank r tunes problem_of(r) with env_of(r) and a fake timer
// that timer_of(r) sets up. Returns each rank's report, error ("" where it succeeded), timer and
// database.
struct RankRun {
  std::vector<TuneReport> reports;
  std::vector<std::string> errors;
  std::vector<std::unique_ptr<FakeTimer>> timers;
  std::vector<std::unique_ptr<Database>> dbs;
};
RankRun tune_on_thread_ranks(const std::function<std::string(int)>& db_path, int ranks,
                             const std::function<Problem(int)>& problem_of,
                             const std::function<Environment(int)>& env_of,
                             const std::function<void(int, FakeTimer&)>& timer_of,
                             const TuneOptions& options = quiet_options()) {
  ThreadRanks group(ranks);
  RankRun run;
  run.reports.resize(ranks);
  run.errors.resize(ranks);
  for (int r = 0; r < ranks; ++r) {
    run.dbs.push_back(std::make_unique<Database>(db_path(r)));
    run.timers.push_back(std::make_unique<FakeTimer>());
    timer_of(r, *run.timers[r]);
  }
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      try {
        ThreadRanks::Member member(&group, r);
        FakeCompiler compiler;
        Tuner tuner(*run.dbs[r], options, compiler.fn(), run.timers[r].get(), &member, env_of(r));
        run.reports[r] = tuner.tune({problem_of(r)}, kH200);
      } catch (const std::exception& e) {
        run.errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return run;
}

TEST_F(TunerTest, RanksAdoptRankZerosWinners) {
  constexpr int kRanks = 3;
  const RankRun run = tune_on_thread_ranks(
      [&](int r) { return path("rank" + std::to_string(r) + ".db"); }, kRanks,
      [](int) { return small_problem(4096, Scheme::kContiguous); }, [](int) { return test_env(); },
      [](int r, FakeTimer& t) {
        // Each rank's GPU would rank the candidates differently; only rank 0's view may count.
        t.ms_of = [r](const KernelSpec& s) {
          return r == 0 ? 1.0 + s.stages + 0.001 * s.block_m : 10.0 - s.stages - 0.001 * s.block_n;
        };
      });
  for (int r = 0; r < kRanks; ++r) ASSERT_EQ(run.errors[r], "") << "rank " << r;
  EXPECT_TRUE(run.timers[1]->measured.empty()) << "only rank 0 times";
  for (size_t i = 0; i < run.reports[0].workloads.size(); ++i) {
    ASSERT_TRUE(run.reports[0].workloads[i].winner);
    const std::string chosen = run.reports[0].workloads[i].winner->kernel_uri;
    for (int r = 0; r < kRanks; ++r) {
      ASSERT_TRUE(run.reports[r].workloads[i].winner) << "rank " << r;
      EXPECT_EQ(run.reports[r].workloads[i].winner->kernel_uri, chosen) << "rank " << r;
      Selection s = select_config(run.reports[r].workloads[i].workload, run.dbs[r].get(), test_env(), PretunedCaches{});
      EXPECT_EQ(s.spec.uri(), chosen) << "rank " << r << " would run another kernel";
    }
  }
}

// The rule of AReTuneThatDidNotMeasureTheWinnerKeepsItsFasterPin holds for a multi-rank tune too:
// rank 0 timed only the reference (a spent budget), its earlier faster pin stands, and every rank
// adopts that. Before, rank 0 broadcast the default and every rank pinned it over the faster one.
TEST_F(TunerTest, AMultiRankReTuneThatDidNotMeasureTheWinnerKeepsItsFasterPin) {
  const Problem problem = small_problem(4096, Scheme::kStriped);
  std::string earlier;
  WorkloadKey workload;
  {
    Database db(path("rank0.db"));
    FakeCompiler compiler;
    FakeTimer timer;
    const TuneReport first = Tuner(db, quiet_options(), compiler.fn(), &timer, nullptr, test_env()).tune({problem}, kH200);
    ASSERT_FALSE(first.workloads.empty());
    ASSERT_TRUE(first.workloads[0].winner);
    earlier = first.workloads[0].winner->kernel_uri;
    workload = first.workloads[0].workload;
    ASSERT_NE(earlier, tuning_default(workload).uri()) << "the test needs a winner other than the reference";
  }
  TuneOptions budget = quiet_options();
  budget.budget_s = 1e-9;  // only the reference is timed
  const RankRun run = tune_on_thread_ranks(
      [&](int r) { return path("rank" + std::to_string(r) + ".db"); }, 2, [&](int) { return problem; },
      [](int) { return test_env(); }, [](int, FakeTimer&) {}, budget);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(run.errors[r], "") << "rank " << r;
    ASSERT_TRUE(run.reports[r].workloads[0].winner) << "rank " << r;
    EXPECT_EQ(run.reports[r].workloads[0].winner->kernel_uri, earlier) << "rank " << r;
    EXPECT_EQ(select_config(workload, run.dbs[r].get(), test_env(), PretunedCaches{}).spec.uri(), earlier) << "rank " << r;
  }
  EXPECT_NE(run.reports[0].workloads[0].note.find("the pinned " + earlier), std::string::npos)
      << run.reports[0].workloads[0].note;
}

// A pin made in another environment names its record's environment, which the lookup passes over
// here: where this environment's record of that kernel stands (not measured again, faster than
// this tune's best), it is pinned again as this environment's, so the pin and the report's winner
// agree. Before, the report said the pin stayed while the pin still named the other environment.
TEST_F(TunerTest, AnEarlierWinnerThatStandsIsPinnedAsThisEnvironmentsRecord) {
  Database db(path("t.db"));
  FakeCompiler compiler;
  FakeTimer timer;
  const Problem problem = small_problem(4096, Scheme::kStriped);
  const Environment here = test_env("12.8"), other = test_env();
  const TuneReport first = Tuner(db, quiet_options(), compiler.fn(), &timer, nullptr, here).tune({problem}, kH200);
  ASSERT_TRUE(first.workloads[0].winner);
  const std::string winner = first.workloads[0].winner->kernel_uri;
  const WorkloadKey workload = first.workloads[0].workload;
  ASSERT_NE(winner, tuning_default(workload).uri());
  Tuner(db, quiet_options(), compiler.fn(), &timer, nullptr, other).tune({problem}, kH200);
  ASSERT_EQ(pinned_winner(db, workload)->env_key, other.for_kernel(winner).key()) << "the other environment's pin";
  TuneOptions budget = quiet_options();
  budget.budget_s = 1e-9;
  const TuneReport again = Tuner(db, budget, compiler.fn(), &timer, nullptr, here).tune({problem}, kH200);
  ASSERT_TRUE(again.workloads[0].winner);
  EXPECT_EQ(again.workloads[0].winner->kernel_uri, winner);
  const std::optional<PinnedWinner> pin = pinned_winner(db, workload);
  ASSERT_TRUE(pin);
  EXPECT_EQ(pin->kernel_uri, winner);
  EXPECT_EQ(pin->env_key, here.for_kernel(winner).key());
}

// The Tuner refuses what `cpgen tune` refuses (check_tune_options), for frameworks that build one:
// a race margin in (0, 1) would stop a candidate faster than the best so far, never to win.
TEST_F(TunerTest, TheTunerRefusesOptionsTheCommandLineRefuses) {
  Database db(path("t.db"));
  FakeCompiler compiler;
  FakeTimer timer;
  const std::pair<const char*, std::function<void(TuneOptions&)>> cases[] = {
      {"--race-margin 0.9 is not allowed", [](TuneOptions& o) { o.race_margin = 0.9; }},
      {"--check-race-margin 0.5 is not allowed", [](TuneOptions& o) { o.race_check_margin = 0.5; }},
      {"--budget-s must be >= 0", [](TuneOptions& o) { o.budget_s = -1; }},
      {"--max-candidates must be >= 0", [](TuneOptions& o) { o.max_candidates = -3; }},
  };
  for (const auto& [message, change] : cases) {
    TuneOptions o = quiet_options();
    change(o);
    try {
      Tuner(db, o, compiler.fn(), &timer, nullptr, test_env());
      ADD_FAILURE() << "accepted: " << message;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kBadInput) << e.what();
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  }
}

// A rank whose driver (or NVRTC, GPU, kernel code) differs from rank 0's would pass over rank 0's
// records when it selects (they count only where they were made) and run other kernels without a
// word: it fails instead, naming both environments, after the last collective (rank 0 finishes).
TEST_F(TunerTest, ARankInAnotherEnvironmentThanRankZeroFailsNamingBoth) {
  const RankRun run = tune_on_thread_ranks(
      [&](int r) { return path("env" + std::to_string(r) + ".db"); }, 2, [](int) { return small_problem(); },
      [](int r) { return r == 0 ? test_env() : test_env("12.8"); }, [](int, FakeTimer&) {});
  EXPECT_EQ(run.errors[0], "");
  EXPECT_NE(run.errors[1].find("rank 1 runs it in"), std::string::npos) << run.errors[1];
  EXPECT_NE(run.errors[1].find("driver 12.8"), std::string::npos) << run.errors[1];
  EXPECT_NE(run.errors[1].find("tune each kind of node apart"), std::string::npos) << run.errors[1];
  for (const WorkloadKey& w : all_workloads(*run.dbs[1]))
    EXPECT_FALSE(pinned_winner(*run.dbs[1], w)) << "rank 1 adopted a winner for " << w.describe();
}

// Ranks that tune other shapes fail even where rank 0 found no winner to compare (its reference
// failed), where the ranks' workloads were compared only through rank 0's winners.
TEST_F(TunerTest, RanksTuningOtherShapesFailEvenWhereRankZeroFoundNoWinner) {
  const RankRun run = tune_on_thread_ranks(
      [&](int r) { return path("shape" + std::to_string(r) + ".db"); }, 2,
      [](int r) { return small_problem(r == 0 ? 4096 : 2048); }, [](int) { return test_env(); },
      [](int r, FakeTimer& t) { t.reference_broken = r == 0; });
  EXPECT_EQ(run.errors[0], "");
  EXPECT_NE(run.errors[1].find("rank 0 tuned"), std::string::npos) << run.errors[1];
  EXPECT_NE(run.errors[1].find("give every rank the same shapes file"), std::string::npos) << run.errors[1];
}

// What one process of the multi-process tests runs: its own connection to the database at db_path
// and a one-job tune of `problems` with fake compiles and `timer`.
void tune_alone(const std::string& db_path, FakeTimer& timer, const std::vector<Problem>& problems) {
  Database db(db_path);
  FakeCompiler compiler;
  TuneOptions o = quiet_options();
  o.jobs = 1;
  Tuner tuner(db, o, compiler.fn(), &timer, nullptr, test_env());
  tuner.tune(problems, kH200);
}

TEST_F(TunerTest, FourProcessesTuningIntoOneDatabase) {
  const std::string db_path = path("shared.db");
  constexpr int kProcesses = 4;
  ASSERT_NO_FATAL_FAILURE(run_child_processes(kProcesses, "tuner process", [&](int p) {
    FakeTimer timer;
    // Two processes tune the same shape, two their own: shared identities and distinct ones.
    tune_alone(db_path, timer, {small_problem(p < 2 ? 4096 : 4096 * (p + 1), Scheme::kContiguous)});
  }));
  Database db(db_path);
  EXPECT_EQ(db.integrity_check(), std::vector<std::string>{"ok"});
  for (int64_t seq : {4096, 4096 * 3, 4096 * 4}) {
    for (const WorkloadKey& w : workloads_for(small_problem(seq, Scheme::kContiguous), kH200)) {
      const CandidateSet set = enumerate_candidates(w);
      std::vector<Record> records = records_for(db, w);
      EXPECT_EQ(records.size(), set.viable.size() + set.pruned.size()) << w.describe();
      EXPECT_TRUE(pinned_winner(db, w)) << w.describe();
    }
  }
}

}  // namespace
}  // namespace cpgen::testing

namespace cpgen::testing {
namespace {

// A FakeTimer that takes a little while per candidate, so a tune is still running when killed.
class SlowTimer : public FakeTimer {
 public:
  TimingOutcome measure(const KernelSpec& spec, const CompiledKernel& kernel, int warmup, int runs,
                        const RaceLimit& race) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return FakeTimer::measure(spec, kernel, warmup, runs, race);
  }
};

int64_t ok_records(Database& db) {
  Statement count = db.prepare("SELECT count(*) FROM records WHERE disposition = 'ok'");
  count.step();
  return count.column_int(0);
}

TEST_F(TunerTest, SigkillInTheMiddleOfATuneKeepsEveryCommittedRecord) {
  const std::string db_path = path("killed.db");
  { Database create(db_path); }
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    try {
      SlowTimer timer;
      std::vector<Problem> problems;
      for (int i = 1; i <= 8; ++i) problems.push_back(small_problem(4096 * i, Scheme::kContiguous));
      tune_alone(db_path, timer, problems);
    } catch (...) {
      _exit(2);
    }
    _exit(0);
  }
  // Watch from another connection until a good number of timings are committed, then kill.
  Database watcher(db_path);
  int64_t seen = 0;
  for (int i = 0; i < 2000 && seen < 40; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    seen = ok_records(watcher);
  }
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the tune finished before it could be killed; status " << status;
  ASSERT_GE(seen, 40);
  Database after(db_path);
  EXPECT_TRUE(after.moved_aside_to().empty());
  EXPECT_EQ(after.integrity_check(), std::vector<std::string>{"ok"});
  EXPECT_GE(ok_records(after), seen) << "a record committed before the kill is gone";
}

}  // namespace
}  // namespace cpgen::testing
