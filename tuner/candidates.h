// The tuning search space for one workload: every (BLOCK_M, BLOCK_N, warps, stages) the kernel
// template supports, with the documented default first. Candidates the feasibility model or the
// step's size rule out are returned separately with the reason, so the tuner records them as
// infeasible instead of spending NVRTC time on them.
#pragma once

#include <string>
#include <vector>

#include "cache/workload.h"
#include "generator/kernel_spec.h"

namespace cpgen {

// The axes searched (a subset of the supported values: 16-warp CTAs and 256-key tiles never fit
// the register and shared-memory budgets of the head dims cpgen serves).
inline constexpr int kTuneBlockM[] = {64, 128, 256};
inline constexpr int kTuneBlockN[] = {32, 64, 128};
inline constexpr int kTuneWarps[] = {4, 8};
inline constexpr int kTuneStages[] = {1, 2, 3};

struct PrunedCandidate {
  KernelSpec spec;
  std::string reason;  // one line: what does not fit
};

struct CandidateSet {
  std::vector<KernelSpec> viable;        // default first, then the search order
  std::vector<PrunedCandidate> pruned;   // infeasible before compiling
};

// max_candidates > 0 keeps only that many viable candidates (the default always among them); the
// rest are dropped, not recorded, since nothing was learned about them.
CandidateSet enumerate_candidates(const WorkloadKey& w, int max_candidates = 0);

}  // namespace cpgen
