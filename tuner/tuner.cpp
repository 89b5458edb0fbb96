#include "tuner/tuner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "cache/exchange.h"
#include "cpgen/error.h"
#include "runtime/jit/jit.h"
#include "tuner/candidates.h"
#include "tuner/progress.h"
#include "tuner/sample_stats.h"

namespace cpgen {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

const char* direction_name(const WorkloadKey& w) { return is_backward(w.step) ? "backward" : "forward"; }

std::vector<WorkloadKey> tuned_workloads(const Problem& p, const DeviceClass& device, const TuneOptions& options) {
  // A masked problem's workloads carry its mask, so its timings are filed apart from the
  // unmasked shape's and its candidates are the masked kernels (tuner/candidates.h).
  std::vector<WorkloadKey> out;
  if (options.forward) out = workloads_for(p, device);
  if (options.backward) {
    for (StepType step : backward_step_types_for(p)) out.push_back(workload_for(p, step, device));
  }
  return out;
}

void check_tune_options(const TuneOptions& o) {
  if (!(o.budget_s >= 0) || !std::isfinite(o.budget_s)) throw_bad_input("tune: --budget-s must be >= 0 (0: no limit)");
  if (o.max_candidates < 0) throw_bad_input("tune: --max-candidates must be >= 0 (0: all)");
  const auto check_margin = [](const char* flag, double value, const char* zero_means) {
    if (value == 0 || (value >= 1 && std::isfinite(value))) return;
    char text[32];
    std::snprintf(text, sizeof text, "%g", value);
    throw_bad_input(std::string("tune: ") + flag + " " + text + " is not allowed; allowed: 0 (" + zero_means + ") or >= 1");
  };
  check_margin("--race-margin", o.race_margin, "no race");
  check_margin("--check-race-margin", o.race_check_margin, "no such cut");
  if (o.runs < 20) throw_bad_input("tune: --runs " + std::to_string(o.runs) + " is too few; at least 20 timed runs per candidate");
  if (o.warmup < 1) throw_bad_input("tune: --warmup must be at least 1");
  if (!o.forward && !o.backward) throw_bad_input("tune: neither the forward nor the backward is selected; nothing to tune");
}

Tuner::Tuner(Database& db, TuneOptions options, CompileFn compile, CandidateTimer* timer, RankGroup* ranks, Environment env)
    : db_(db), options_(std::move(options)), compile_(std::move(compile)), timer_(timer), ranks_(ranks), env_(std::move(env)) {
  if (!compile_) {
    compile_ = [](const KernelSpec& spec, std::string_view arch) { return compile_kernel(spec, arch); };
  }
  check_tune_options(options_);
}

std::optional<Record> Tuner::earlier_pin_stands(const WorkloadKey& w, const std::set<std::string>& measured,
                                                double winner_ms) {
  // A tune that left the pinned kernel out (--max-candidates, or --budget-s spent) has not
  // measured it again: its valid record of this environment still stands, and where it is faster
  // than this tune's best, its pin does too (re-tuning with a budget replaced it with the default).
  const std::optional<PinnedWinner> pin = pinned_winner(db_, w);
  if (!pin || measured.contains(pin->kernel_uri)) return std::nullopt;
  for (const Record& r : records_for(db_, w))
    if (r.kernel_uri == pin->kernel_uri && r.valid() && r.env.matches(env_.for_kernel(r.kernel_uri)) &&
        *r.median_ms < winner_ms)
      return r;
  return std::nullopt;
}

Record Tuner::base_record(const WorkloadKey& w, const KernelSpec& spec) const {
  Record r;
  r.workload = w;
  r.kernel_uri = spec.uri();
  r.env = env_.for_kernel(r.kernel_uri);
  r.created_at = now_unix_seconds();
  r.source = ranks_ && ranks_->size() > 1 ? "measured-rank" + std::to_string(ranks_->rank()) : "measured";
  return r;
}

void Tuner::store(const Record& r) { put_measured_record(db_, r); }

TuneReport Tuner::tune(const std::vector<Problem>& problems, const DeviceClass& device) {
  const double started = now_s();
  TuneReport report;
  std::vector<WorkloadKey> workloads;
  for (const Problem& p : problems) {
    for (const WorkloadKey& w : tuned_workloads(p, device, options_)) {
      if (std::find(workloads.begin(), workloads.end(), w) == workloads.end()) workloads.push_back(w);
    }
  }
  const bool root = !ranks_ || ranks_->rank() == 0;
  report.timed = timer_ && root;
  for (const WorkloadKey& w : workloads) report.workloads.push_back(tune_workload(w, started));

  if (ranks_ && ranks_->size() > 1) {
    // Rank 0's workloads and decisions, one entry per workload (winner null where it found no
    // valid candidate). It is the last collective, so a rank that cannot adopt them says why and
    // fails after it, leaving no rank waiting.
    nlohmann::json decisions = nlohmann::json::array();
    if (root) {
      for (const WorkloadResult& r : report.workloads)
        decisions.push_back({{"workload", r.workload.to_json()},
                             {"winner", r.winner ? record_to_json(*r.winner, true) : nlohmann::json(nullptr)}});
    }
    const nlohmann::json agreed = nlohmann::json::parse(ranks_->broadcast_from_root(root ? decisions.dump() : std::string()));
    const std::string rank = "rank " + std::to_string(ranks_->rank());
    if (!agreed.is_array() || agreed.size() != report.workloads.size()) {
      throw_bad_input("tune: rank 0 tuned " + std::to_string(agreed.size()) + " workloads and " + rank + " " +
                      std::to_string(report.workloads.size()) + "; give every rank the same shapes file and GPU type");
    }
    std::vector<std::optional<Record>> winners;
    for (size_t i = 0; i < agreed.size(); ++i) {
      const WorkloadResult& result = report.workloads[i];
      const WorkloadKey theirs = WorkloadKey::from_json(agreed[i].at("workload"));
      if (!(theirs == result.workload)) {
        throw_bad_input("tune: rank 0 tuned " + theirs.describe() + " where " + rank + " has " + result.workload.describe() +
                        "; give every rank the same shapes file and GPU type");
      }
      if (agreed[i].at("winner").is_null()) {
        winners.emplace_back();
        continue;
      }
      Record winner = record_from_json(agreed[i].at("winner"), "rank 0 broadcast");
      // A record counts only in the environment it was made in (cache/records.h best_record): one
      // this rank's lookup would pass over leaves it running another kernel than rank 0.
      const Environment here = env_.for_kernel(winner.kernel_uri);
      if (!winner.env.matches(here)) {
        throw_bad_input("tune: rank 0 timed " + winner.kernel_uri + " in " + winner.env.key() + ", and " + rank +
                        " runs it in " + here.key() + ", where that timing does not count (this rank would run " +
                        "another kernel); tune each kind of node apart");
      }
      if (!root) winner.source = "rank0-broadcast";
      winners.push_back(std::move(winner));
    }
    for (size_t i = 0; i < winners.size(); ++i) {
      WorkloadResult& result = report.workloads[i];
      result.winner = winners[i];
      if (!winners[i]) continue;
      const Record& winner = *winners[i];
      db_.transaction([&] {
        store_record(db_, winner);
        pin_winner(db_, winner.workload, {winner.kernel_uri, *winner.median_ms, winner.env.key(), "tune-rank0"});
      });
    }
  }
  report.seconds = now_s() - started;
  if (!timer_) {
    report.notice = "no GPU: every candidate was compiled and pruned and recorded as not-timed; timing needs a GPU (run cpgen tune on the GPU type that will run the job)";
  } else if (!root) {
    report.notice = "rank " + std::to_string(ranks_->rank()) + ": compiled every candidate; rank 0 timed them and its winners were adopted";
  }
  return report;
}

WorkloadResult Tuner::tune_workload(const WorkloadKey& w, double started_s) {
  WorkloadResult result;
  result.workload = w;
  const CandidateSet set = enumerate_candidates(w, options_.max_candidates);
  // The feasibility model's rejections are records too: the next tune, and `db show`, see why.
  db_.transaction([&] {
    for (const PrunedCandidate& p : set.pruned) {
      Record r = base_record(w, p.spec);
      r.disposition = Disposition::kInfeasible;
      r.detail = p.reason;
      store_record(db_, r);
    }
  });
  result.pruned = static_cast<int>(set.pruned.size());

  // e.g. "compile backward bwd-diagonal q2048": the direction first, so a reader of the progress
  // lines sees which ring the kernels belong to.
  const std::string what = std::string(direction_name(w)) + " " + std::string(step_type_name(w.step)) + " q" + std::to_string(w.q_len);
  const std::string label = "compile " + what;
  // Workloads of one problem share their candidates: each kernel is compiled once per tune.
  std::vector<KernelSpec> fresh;
  for (const KernelSpec& s : set.viable) {
    if (!compiled_.count(s.uri())) fresh.push_back(s);
  }
  const double compile_started = now_s();
  std::vector<CompileOutcome> fresh_outcomes = compile_candidates(fresh, w.arch, compile_, options_.jobs, options_.quiet, label);
  result.compile_s = now_s() - compile_started;
  for (CompileOutcome& o : fresh_outcomes) compiled_.emplace(o.spec.uri(), std::move(o));
  std::vector<CompileOutcome> outcomes;
  for (const KernelSpec& s : set.viable) outcomes.push_back(compiled_.at(s.uri()));
  std::vector<const CompileOutcome*> compiled;
  std::vector<Record> failures;
  for (const CompileOutcome& o : outcomes) {
    if (o.kernel) {
      compiled.push_back(&o);
      continue;
    }
    Record r = base_record(w, o.spec);
    r.disposition = o.disposition;
    r.detail = o.detail;
    failures.push_back(std::move(r));
  }
  // The transaction body may run again after a busy retry, so it only writes.
  db_.transaction([&] {
    for (const Record& r : failures) store_record(db_, r);
  });
  result.compile_failed = static_cast<int>(failures.size());
  result.compiled = static_cast<int>(compiled.size());

  auto not_timed = [&](const CompileOutcome& o, const std::string& why) {
    Record r = base_record(w, o.spec);
    r.disposition = Disposition::kNotTimed;
    r.registers = o.kernel->stats.registers;
    r.spill_bytes = o.kernel->stats.spill_bytes;
    r.detail = why;
    store(r);
    ++result.not_timed;
  };
  const bool root = !ranks_ || ranks_->rank() == 0;
  if (!timer_ || !root || compiled.empty()) {
    const std::string why = !timer_ ? "compiled; timing needs a GPU" : !root ? "compiled; rank 0 times" : "";
    for (const CompileOutcome* o : compiled) not_timed(*o, why);
    result.note = compiled.empty() ? "no candidate compiled" : why;
    return result;
  }

  // The reference config: the documented default of the workload's direction when it compiled,
  // else the first that did.
  const KernelSpec default_spec = tuning_default(w);
  auto ref_it = std::find_if(compiled.begin(), compiled.end(), [&](const CompileOutcome* o) { return o->spec == default_spec; });
  const CompileOutcome* reference = ref_it != compiled.end() ? *ref_it : compiled.front();
  TimingOutcome ref_check;
  const double setup_started = now_s();
  try {
    ref_check = timer_->begin_workload(w, reference->spec, *reference->kernel);
    result.setup_s = now_s() - setup_started;
  } catch (const Error& e) {
    // The workload's inputs do not fit, or the device failed: this workload stays untimed and
    // the tune goes on with the next.
    if (e.kind() != ErrorKind::kCuda && e.kind() != ErrorKind::kNoDevice) throw;
    const std::string why = std::string("not timed: preparing the inputs failed: ") + e.what();
    for (const CompileOutcome* o : compiled) not_timed(*o, why.substr(0, 400));
    result.note = why;
    timer_->end_workload();
    return result;
  }
  if (ref_check.disposition != Disposition::kOk) {
    Record r = base_record(w, reference->spec);
    r.disposition = ref_check.disposition;
    r.detail = "reference config failed its float64 check: " + ref_check.detail;
    store(r);
    ++result.rejected;
    for (const CompileOutcome* o : compiled) {
      if (o != reference) not_timed(*o, "not timed: the reference config " + reference->spec.uri() + " failed its float64 check");
    }
    result.note = "reference config failed";
    timer_->end_workload();
    return result;
  }

  const double timing_started = now_s();
  Progress progress("time " + what, compiled.size(), options_.quiet);
  // The candidates an earlier workload of the tune timed go in the order they finished there,
  // fastest first (workloads of one problem, and problems of one kind, share their candidates and
  // mostly their ranking): the race's bar is then the likely winner's from the first candidates
  // on, and the slower ones stop at their checked launch or probe instead of running in full
  // before the winner is found. The others follow in their own order. Every candidate is still
  // timed; only the order changes.
  std::stable_sort(compiled.begin(), compiled.end(), [&](const CompileOutcome* a, const CompileOutcome* b) {
    const auto ra = earlier_ratio_.find(a->spec.uri()), rb = earlier_ratio_.find(b->spec.uri());
    const double x = ra == earlier_ratio_.end() ? HUGE_VAL : ra->second;
    const double y = rb == earlier_ratio_.end() ? HUGE_VAL : rb->second;
    return x < y;
  });
  // The reference goes first, so the default is always timed even when the budget runs out.
  std::stable_partition(compiled.begin(), compiled.end(), [&](const CompileOutcome* o) { return o == reference; });
  std::map<std::string, double> medians;  // this workload's, for the next one's order
  std::set<std::string> measured;         // every candidate the timer ran here, timed or rejected
  for (const CompileOutcome* o : compiled) {
    if (options_.budget_s > 0 && now_s() - started_s > options_.budget_s && o != reference) {
      not_timed(*o, "not timed: the --budget-s of " + std::to_string(options_.budget_s) + " s ran out");
      progress.advance("budget spent");
      continue;
    }
    RaceLimit race;
    if (options_.race_margin > 0 && result.winner && o != reference)
      race = {options_.race_runs, options_.race_margin * *result.winner->median_ms};
    // The check cut's bar: race_check_margin times the best, or times race_check_min_ms where the
    // best is faster (a first launch's fixed costs weigh on short launches).
    if (options_.race_check_margin > 0 && result.winner && o != reference)
      race.check_above_ms =
          options_.race_check_margin * std::max(*result.winner->median_ms, options_.race_check_min_ms);
    const double measure_started = now_s();
    TimingOutcome t = timer_->measure(o->spec, *o->kernel, options_.warmup, options_.runs, race);
    measured.insert(o->spec.uri());
    result.measure_s += now_s() - measure_started;
    Record r = base_record(w, o->spec);
    r.disposition = t.disposition;
    r.detail = t.detail;
    r.registers = o->kernel->stats.registers;
    r.spill_bytes = o->kernel->stats.spill_bytes;
    if (t.disposition == Disposition::kOk) {
      const size_t expected = t.stopped_after_check ? 1
                              : t.stopped_early     ? static_cast<size_t>(race.probe_runs)
                                                    : static_cast<size_t>(options_.runs);
      if (t.samples_ms.size() != expected)
        throw Error(ErrorKind::kInternal, "timer returned " + std::to_string(t.samples_ms.size()) + " samples for " +
                                              o->spec.uri() + ", not " + std::to_string(expected));
      auto [median, iqr] = median_and_iqr(t.samples_ms);
      medians[o->spec.uri()] = median;
      r.median_ms = median;
      r.spread_ms = iqr;
      r.samples_ms = t.samples_ms;
      r.tflops = timer_->useful_flops() / (median * 1e-3) / 1e12;
      ++result.timed;
      if (t.stopped_early) {
        ++result.stopped_early;
        char why[200];
        if (t.stopped_after_check && *result.winner->median_ms >= options_.race_check_min_ms)
          std::snprintf(why, sizeof why,
                        "timed no further after its checked launch and one more: %.4g ms at best, above %.3g x the best so far, %.4g ms",
                        median, options_.race_check_margin, *result.winner->median_ms);
        else if (t.stopped_after_check)
          std::snprintf(why, sizeof why,
                        "timed no further after its checked launch and one more: %.4g ms at best, above %.3g x %.4g ms "
                        "(the cut's floor; the best so far %.4g ms)",
                        median, options_.race_check_margin, options_.race_check_min_ms, *result.winner->median_ms);
        else
          std::snprintf(why, sizeof why, "timed no further after %zu runs: their median is above %.3g x the best so far, %.4g ms",
                        t.samples_ms.size(), options_.race_margin, *result.winner->median_ms);
        r.detail = why;
      } else if (!result.winner || median < *result.winner->median_ms) {
        result.winner = r;
      }
    } else {
      ++result.rejected;
    }
    const double store_started = now_s();
    store(r);  // each timing commits on its own: a killed tune keeps everything measured so far
    result.store_s += now_s() - store_started;
    progress.advance(result.winner ? "best " + result.winner->kernel_uri : "");
  }
  progress.finish();
  result.timing_s = now_s() - timing_started;
  // The order for the next workloads: each timed candidate's median over this winner's; one not
  // timed here (rejected, or past the budget) goes after them.
  for (const CompileOutcome* o : compiled) {
    const auto m = medians.find(o->spec.uri());
    if (m != medians.end() && result.winner)
      earlier_ratio_[o->spec.uri()] = m->second / *result.winner->median_ms;
    else
      earlier_ratio_.erase(o->spec.uri());
  }
  timer_->end_workload();
  if (result.winner) {
    // A multi-rank tune pins on every rank after rank 0's broadcast (tune), of what rank 0 decided
    // here: an earlier pin that stands is its winner too.
    const bool pin_here = !ranks_ || ranks_->size() == 1;
    db_.transaction([&] {
      if (std::optional<Record> stands = earlier_pin_stands(w, measured, *result.winner->median_ms)) {
        char note[300];
        std::snprintf(note, sizeof note, "the pinned %s (%.4g ms, not measured by this tune) stays the winner",
                      stands->kernel_uri.c_str(), *stands->median_ms);
        result.note = note;
        // Pinned again as this environment's record: a pin made in another environment (the
        // pin names one) is passed over by the lookup, which would run another kernel than the
        // one this note names.
        if (pin_here) pin_winner(db_, w, {stands->kernel_uri, *stands->median_ms, stands->env.key(), "tune"});
        result.winner = std::move(stands);  // what the runtime runs, in the report too
      } else if (pin_here) {
        pin_winner(db_, w, {result.winner->kernel_uri, *result.winner->median_ms, result.winner->env.key(), "tune"});
      }
    });
  }
  return result;
}

}  // namespace cpgen
