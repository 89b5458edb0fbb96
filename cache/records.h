// Records: one row per attempted candidate of a workload in one environment, and the winner
// pinned per workload. Storing a record whose identity (workload, kernel URI, environment)
// already exists keeps the better of the two: a valid timing beats any failure, a faster valid
// timing beats a slower one, and between two failures the newer attempt is kept.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cache/database.h"
#include "cache/environment.h"
#include "cache/workload.h"

namespace cpgen {

enum class Disposition { kOk, kInfeasible, kCompileFailed, kWrongResult, kLaunchFailed, kNotTimed };
std::string_view disposition_name(Disposition d);  // "ok", "compile-failed", ...
Disposition parse_disposition(std::string_view name);

struct Record {
  WorkloadKey workload;
  std::string kernel_uri;
  Disposition disposition = Disposition::kNotTimed;
  std::optional<double> median_ms;   // set for kOk
  std::optional<double> spread_ms;   // interquartile range of the samples
  std::vector<double> samples_ms;    // every timed run
  std::optional<double> tflops;
  std::optional<int> registers;      // from the ptxas report
  std::optional<int> spill_bytes;
  Environment env;
  std::string source = "measured";   // "measured", "imported:<file>", "rank0-broadcast", "default-heuristic"
  std::string detail;                // why it failed or was not timed; empty for ok
  int64_t created_at = 0;            // unix seconds

  bool valid() const { return disposition == Disposition::kOk && median_ms.has_value(); }
};

// True when `candidate` should replace `existing` of the same identity.
bool better_record(const Record& candidate, const Record& existing);

enum class StoreResult { kAdded, kReplaced, kKept };

// Workload row id, created when missing. Call inside a transaction.
int64_t ensure_workload(Database& db, const WorkloadKey& w);
// Stores r under the keep-the-better rule. Call inside a transaction.
StoreResult store_record(Database& db, const Record& r);
// Convenience: store_record in its own transaction.
StoreResult put_record(Database& db, const Record& r);
// A record `cpgen tune` made just now, in its own transaction. Where it carries a result (ok,
// wrong-result, launch-failed) it replaces the record of the same identity whatever that one
// says, and a failing one also unpins its kernel where the workload's winner is that kernel in
// that environment: a kernel that fails today must not be kept, nor run, on an older ok record
// (store_record kept the valid one). Other dispositions (not-timed, infeasible,
// compile-failed) say nothing new of how the kernel runs and go through store_record.
StoreResult put_measured_record(Database& db, const Record& r);

std::vector<Record> records_for(Database& db, const WorkloadKey& w);
std::vector<Record> all_records(Database& db);
std::vector<WorkloadKey> all_workloads(Database& db);
// Workloads equal to w in every field except the local lengths (the bucket fallback's pool).
std::vector<WorkloadKey> sibling_workloads(Database& db, const WorkloadKey& w);

struct PinnedWinner {
  std::string kernel_uri;
  double median_ms = 0;
  std::string env_key;       // Environment::key() of the winning record
  std::string decided_by;    // "tune", "tune-rank0", "import"
};
std::optional<PinnedWinner> pinned_winner(Database& db, const WorkloadKey& w);
// Pins the winner. Call inside a transaction.
void pin_winner(Database& db, const WorkloadKey& w, const PinnedWinner& winner);
// Removes w's pinned winner, if any. Call inside a transaction.
void unpin_winner(Database& db, const WorkloadKey& w);

// The record of w to run in environment env: the pinned winner where it matches env, else the
// fastest valid record that does; also counts the records passed over because their environment
// differs. A pinned winner timed in this very setup whose kernel's code has changed since (only
// the code hash differs) retires w's other records with it: they lost to a kernel that is no
// longer here, so the fastest of them need not beat the default (winner_changed; none chosen).
struct BestRecord {
  std::optional<Record> record;
  int other_environment = 0;
  bool winner_changed = false;
};
BestRecord best_record(Database& db, const WorkloadKey& w, const Environment& env);

int64_t now_unix_seconds();

}  // namespace cpgen
