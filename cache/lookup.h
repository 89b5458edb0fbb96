// Run-time selection of the kernel config for one workload. Order (first hit wins):
//   1. database, exact workload: the pinned winner, else the fastest valid record, made in an
//      environment matching this one;
//   2. database, nearest sequence bucket: the same workload at the closest local length
//      (distance in powers of two of the query length; ties go to the shorter bucket);
//   3. shipped pretuned caches: a measured entry for the exact workload, then the nearest
//      bucket (same device and code hash; NVRTC and driver may differ), then a pattern
//      entry (e.g. the default-heuristic cache);
//   4. the documented default, forward_default_for_arch (wgmma on sm_90a where it covers the
//      combination, else KernelSpec::default_for_arch), or backward_default_for_arch.
// A record or cache entry is only used if its kernel fits the workload (dtype, head dim, mask,
// group) and is feasible on the workload's arch. Records of another environment are never
// selected; the selection counts them so that `cpgen explain` can say why they were passed over.
//
// A masked workload (WorkloadKey::mask: a window, documents, a softcap) runs steps 1 and 2 for
// itself, so what `cpgen tune` timed for that mask wins; when the database has none, the whole
// order runs for its unmasked shape and the config found gets the mask's kernel flags. The
// reason says which of the two happened.
#pragma once

#include <optional>
#include <string>

#include "cache/database.h"
#include "cache/environment.h"
#include "cache/pretuned.h"
#include "cache/workload.h"
#include "cpgen/config_source.h"
#include "generator/kernel_spec.h"

namespace cpgen {

struct Selection {
  KernelSpec spec;
  ConfigSource source = ConfigSource::kDefault;
  std::string origin;                 // database path, cache file, or "KernelSpec::default_for"
  std::optional<WorkloadKey> matched; // the workload whose record was used
  std::optional<double> median_ms;
  int ignored_other_environment = 0;  // records passed over because their environment differs
  std::string reason;                 // one line for humans
};

// db may be null (no database). caches is usually shipped_caches().
Selection select_config(const WorkloadKey& w, Database* db, const Environment& env, const PretunedCaches& caches);

// Every step type of a problem with its selection, as a runtime needs them when it sets up a ring;
// step_type_at(problem, rank, step) says which one each ring step launches.
struct StepSelection {
  WorkloadKey workload;
  Selection selection;
};
std::vector<StepSelection> select_for_problem(const Problem& p, const DeviceClass& device, Database* db,
                                              const Environment& env, const PretunedCaches& caches);

}  // namespace cpgen
