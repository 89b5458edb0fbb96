// The tuner: for every workload of every problem (the forward ring's step types and the backward
// ring's, as TuneOptions chooses), enumerate candidates, prune them with the feasibility model, compile the rest in parallel (pruning spills), and on a GPU verify each
// against a reference config and time it; every attempt becomes a record, and the fastest valid
// one is pinned as the workload's winner. Without a GPU it stops after compiling and records the
// compiled candidates as not-timed.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "cache/database.h"
#include "cache/environment.h"
#include "cache/records.h"
#include "cpgen/problem.h"
#include "tuner/candidate_timer.h"
#include "tuner/compile_pool.h"
#include "tuner/rank_group.h"

namespace cpgen {

struct TuneOptions {
  std::string arch;          // empty: the device's arch, else sm_90a
  int jobs = 0;              // parallel compiles; 0: one per hardware thread
  int max_candidates = 0;    // 0: all viable candidates per workload
  double budget_s = 0;       // 0: no limit; otherwise stop timing new candidates after this long
  int warmup = 5;            // at most; fewer for long launches (candidate_timer.h, warmup_launches)
  int runs = 20;             // timed launches per candidate (the median is recorded)
  // The race: once a workload has a fully timed best, a candidate whose first race_runs timed
  // launches have a median above race_margin times the best's is timed no further (its record
  // keeps those runs and says so). 0: every candidate gets all its runs.
  double race_margin = 1.25;
  int race_runs = 5;
  // The race's first cut: a candidate whose checked launch alone (the one compared with the
  // reference, timed with events) took more than race_check_margin times the best so far, or
  // times race_check_min_ms where the best is faster, and a second such launch too
  // (CandidateTimer's confirmed_stop_at_check: the first may run cold), is timed no further: no
  // warmup, no probe (its record keeps the faster of the two as its one sample and says so). That
  // launch moves no more memory than a timed one (a first and last step: no state read), so it
  // does not make a candidate look slower than it is; below the floor a first launch's fixed
  // costs could (the floor used to switch the cut off below it, which, once later workloads time
  // the earlier winner first, left every loser of a sub-millisecond winner running in full). 0: no
  // such cut. At 32K a
  // loser's warmup and probe took 10 launches of 20-55 ms each (the H200 forward tune of
  // 2026-11-28: 311 of 393 timed candidates were 1.5x the best or slower).
  double race_check_margin = 1.5;
  double race_check_min_ms = 1.0;
  bool quiet = false;        // no progress on stderr
  bool forward = true;       // tune the forward step types (diagonal, full, zigzag halves)
  bool backward = true;      // tune the backward step types (bwd-diagonal, ...)
};

// Throws Error(kBadInput) naming the option (its command-line flag) for the first value a tune
// cannot run with: budget_s or max_candidates below 0, a race margin in (0, 1) (it would stop a
// candidate faster than the best so far, which then never wins), fewer than 20 runs, no warmup,
// no direction. The Tuner's constructor calls it; `cpgen tune` calls it before reading anything.
void check_tune_options(const TuneOptions& options);

// "forward" or "backward": which ring a workload's step type belongs to, as progress lines and
// `cpgen tune --json` name it.
const char* direction_name(const WorkloadKey& w);

// The workloads a tune covers for one problem: the forward ones (workloads_for), then the backward
// ones (the same shapes under backward_step_types_for), as `options` selects.
std::vector<WorkloadKey> tuned_workloads(const Problem& p, const DeviceClass& device, const TuneOptions& options);

struct WorkloadResult {
  WorkloadKey workload;
  int pruned = 0;            // infeasible before compiling
  int compiled = 0;
  int compile_failed = 0;    // compile errors and spills
  int timed = 0;             // records with disposition ok
  int stopped_early = 0;     // of them, timed no further by the race (TuneOptions::race_margin)
  int rejected = 0;          // wrong result or launch failure
  int not_timed = 0;
  std::optional<Record> winner;
  std::string note;          // e.g. why nothing was timed
  // Where the workload's time went: compiling its candidates (those not compiled for an earlier
  // workload of the tune), preparing the inputs and checking the reference against float64
  // (CandidateTimer::begin_workload), and checking and timing the candidates (measure). Of
  // timing_s, measure_s went to the timer's calls (the GPU's launches and the checks) and store_s
  // to writing each candidate's record into the database (one commit each).
  double compile_s = 0, setup_s = 0, timing_s = 0;
  double measure_s = 0, store_s = 0;
};

struct TuneReport {
  std::vector<WorkloadResult> workloads;
  bool timed = false;        // a GPU timed candidates
  double seconds = 0;
  std::string notice;        // a plain sentence for the user, e.g. that timing needs a GPU
};

class Tuner {
 public:
  // compile: empty means compile_kernel through the default kernel store. timer: null means no
  // timing (compile only). ranks: null means a single process.
  Tuner(Database& db, TuneOptions options, CompileFn compile = {}, CandidateTimer* timer = nullptr,
        RankGroup* ranks = nullptr, Environment env = current_environment());
  TuneReport tune(const std::vector<Problem>& problems, const DeviceClass& device);

 private:
  WorkloadResult tune_workload(const WorkloadKey& w, double started_s);
  void store(const Record& r);
  Record base_record(const WorkloadKey& w, const KernelSpec& spec) const;
  // The record of w's pinned kernel where this tune did not measure it and it is valid here and
  // faster than winner_ms (then the pin stays); nullopt otherwise.
  std::optional<Record> earlier_pin_stands(const WorkloadKey& w, const std::set<std::string>& measured,
                                           double winner_ms);

  Database& db_;
  TuneOptions options_;
  CompileFn compile_;
  CandidateTimer* timer_;
  RankGroup* ranks_;
  Environment env_;
  std::map<std::string, CompileOutcome> compiled_;  // by URI; the arch is fixed per tune
  // By URI: its median over the winner's in the last workload that timed it, the order in which
  // later workloads time their candidates (tune_workload).
  std::map<std::string, double> earlier_ratio_;
};

// A GPU timer on `device` when one is present, else null.
std::unique_ptr<CandidateTimer> make_gpu_timer_if_present(int device = 0);

}  // namespace cpgen
