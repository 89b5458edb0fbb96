// Which step kernel each (forward or backward) step type of a ring runs, through the tuning-database lookup of
// cache/lookup.h: the user's database (opened read-only: selecting never creates, repairs or
// migrates a file), then the shipped pretuned caches, then the documented default. RingAttention
// and `cpgen explain` both call select_ring_kernels, so they give the same answer for a problem.
// Needs no GPU: without one the device class is gpu "none" on the given (or fallback) arch.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cache/environment.h"
#include "cache/lookup.h"
#include "cache/pretuned.h"
#include "cpgen/problem.h"

namespace cpgen {

struct RingKernelSelection {
  DeviceClass device;        // what the workloads are keyed by (device_class_for)
  Environment environment;   // what database rows must match (current_environment)
  std::string database_path; // the file looked at; empty when no path could be resolved
  bool database_used = false;
  std::string database_note; // when not used: why ("no file", "unreadable: ..."), one line
  // One per step type of the problem, in step_types_for order: steps[0] is what ring step 0 runs.
  std::vector<StepSelection> steps;
  // The backward ring's, one per backward_step_types_for entry (bwd-diagonal, ...), through the
  // same lookup: a tuned backward record where one exists, else the backward default.
  std::vector<StepSelection> backward_steps;

  // Forward or backward; throws kInternal for a type in neither list.
  const StepSelection& for_step(StepType step) const;
  // "PATH", or "PATH (absent)" / "PATH (unreadable: ...)" / "none (...)" when it was not read.
  std::string database_text() const;
};

// What selection reads besides the problem (the device class, the environment, the database and
// the caches), gathered once so that selecting for many problems (`cpgen explain --shapes` with
// thousands of shapes) opens the database once instead of once per problem.
class RingKernelSelector {
 public:
  // Opens database_path (see select_ring_kernels) read-only; a missing or unreadable file is
  // noted, warned about, and selection goes on without it.
  RingKernelSelector(const std::string& database_path, const std::string& arch = "", int device = 0,
                     const PretunedCaches& caches = shipped_caches());
  // Uses a database the caller opened (null: none; then database_note says why, e.g. "absent").
  RingKernelSelector(Database* db, const std::string& database_path, const std::string& database_note,
                     const std::string& arch = "", int device = 0, const PretunedCaches& caches = shipped_caches());
  ~RingKernelSelector();
  RingKernelSelector(const RingKernelSelector&) = delete;
  RingKernelSelector& operator=(const RingKernelSelector&) = delete;

  // Every step type's selection from one snapshot of the database (read again where a writer
  // changed the file meanwhile); a read that fails even so (a damaged row) is noted and warned
  // about like an open that fails, and the selection goes on without the database.
  RingKernelSelection select(const Problem& problem) const;
  // Selects from here on as on another device: `gpu_name` with `sm_count` SMs (`cpgen explain
  // --gpu` on a machine without that GPU, e.g. a login node asking what a shipped cache gives its
  // job). Workloads are keyed by that device and shipped cache entries timed on it answer;
  // database records still count only where they were made (this machine's NVRTC and driver).
  void assume_device(const std::string& gpu_name, int sm_count);

 private:
  friend RingKernelSelection select_ring_kernels(const Problem&, const std::string&, const std::string&, int,
                                                 const PretunedCaches&);
  // select() after problem.validate(): select_ring_kernels validates before it opens the database.
  RingKernelSelection select_validated(const Problem& problem) const;

  mutable RingKernelSelection base_;  // device, environment and database fields; no steps
  std::unique_ptr<Database> own_db_;
  // Null once a read failed (select): the file is not read again by this selector, whose later
  // selections say why (base_'s note), warned about once.
  mutable Database* db_ = nullptr;
  const PretunedCaches& caches_;
};

// database_path: the caller's (RingOptions, --db), else the default resolve_db_path() gives
// ($CPGEN_DB, $XDG_CACHE_HOME/cpgen/cpgen.db, ~/.cache/cpgen/cpgen.db). A missing or unreadable
// database falls back to the caches and the default, and each step's reason says why. arch: the
// kernel target; empty: device `device`'s (kFallbackArch without a GPU).
RingKernelSelection select_ring_kernels(const Problem& problem, const std::string& database_path,
                                        const std::string& arch = "", int device = 0,
                                        const PretunedCaches& caches = shipped_caches());

// For a ring whose exchange runs kernels of its own beside the step (NCCL's send and receive): each
// forward step selected as a persistent launch runs as the plain launch of the same tiles, and its
// reason says so. A persistent grid holds one CTA on every SM for the whole step and hands each
// its query blocks in a fixed order, so an exchange kernel that takes SMs first delays the CTAs it
// displaces by the whole transfer, and one that comes second waits for the step's end; a plain
// launch's CTAs retire as they finish and leave room either way. (A reasoned precaution: no
// multi-GPU ring has timed either; the tuner times a step alone, where the persistent launch won
// by 1-8% on the H200.) The loopback ring exchanges with copies, which take no SMs.
void use_plain_launches_beside_exchange_kernels(RingKernelSelection& selection);

// The SM margin of a ring (RingOptions::sm_margin): `option` where it is >= 0, else
// $CPGEN_SM_MARGIN where set (kBadInput naming it when it is not a whole number >= 0), else -1.
int ring_sm_margin(int option);
// What a ring whose exchange runs kernels (NCCL) does with its selection: with no margin (-1),
// use_plain_launches_beside_exchange_kernels; with one, its persistent steps stay persistent and
// their reasons say how many SMs they leave to the exchange.
void place_beside_exchange_kernels(RingKernelSelection& selection, int sm_margin);
}  // namespace cpgen
