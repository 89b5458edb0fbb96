#include "tuner/candidates.h"

#include <algorithm>

#include "cpgen/error.h"

namespace cpgen {
namespace {

std::vector<KernelSpec> forward_space(const KernelSpec& base) {
  std::vector<KernelSpec> all = {base};
  for (int bm : kTuneBlockM)
    for (int bn : kTuneBlockN)
      for (int warps : kTuneWarps)
        for (int stages : kTuneStages) {
          // Each warp owns whole 16-row MMA tiles; other shapes are not kernels at all.
          if (bm % (16 * warps) != 0) continue;
          KernelSpec s = base;
          s.block_m = bm;
          s.block_n = bn;
          s.warps = warps;
          s.stages = stages;
          if (s != base) all.push_back(s);
        }
  return all;
}

// The backward grid, then any of KernelSpec::backward_candidates_for (the configs `cpgen compile
// --all --filter bwd` checks) that the grid lacks, so the tuner never searches less than that.
std::vector<KernelSpec> backward_space(const KernelSpec& base) {
  std::vector<KernelSpec> all = {base};
  auto add = [&](const KernelSpec& s) {
    if (std::find(all.begin(), all.end(), s) == all.end()) all.push_back(s);
  };
  for (int bm : kTuneBwdBlockM)
    for (int bn : kTuneBwdBlockN)
      for (int warps : kTuneBwdWarps)
        for (int stages : kTuneBwdStages) {
          KernelSpec s = base;
          s.block_m = bm;
          s.block_n = bn;
          s.warps = warps;
          s.stages = stages;
          add(s);
        }
  for (KernelSpec s : KernelSpec::backward_candidates_for(base.dtype, base.head_dim, base.causal, base.gqa_group)) {
    s.key_intervals = base.key_intervals;
    s.softcap = base.softcap;
    add(s);
  }
  return all;
}

}  // namespace

namespace {

KernelSpec unmasked_default(const WorkloadKey& w) {
  if (!is_backward(w.step)) return KernelSpec::default_for(w.dtype, w.head_dim, w.causal, w.gqa_group());
  try {
    return KernelSpec::backward_default_for_arch(w.dtype, w.head_dim, w.causal, w.gqa_group(), w.arch);
  } catch (const Error& e) {
    // No backward tile fits the arch: the plain default stands in, and the model prunes it with
    // its reason like any other candidate.
    if (e.kind() != ErrorKind::kInfeasible) throw;
    return KernelSpec::backward_default_for(w.dtype, w.head_dim, w.causal, w.gqa_group());
  }
}

}  // namespace

KernelSpec tuning_default(const WorkloadKey& w) {
  // A masked workload searches the same tiles with its mask's flags: every candidate is copied
  // from this base, so each one names the masked kernel the workload runs.
  KernelSpec base = unmasked_default(w);
  base.key_intervals = w.mask.key_intervals();
  base.softcap = w.mask.softcap;
  return base;
}

CandidateSet enumerate_candidates(const WorkloadKey& w, int max_candidates) {
  CandidateSet set;
  const KernelSpec base = tuning_default(w);
  const std::vector<KernelSpec> all = is_backward(w.step) ? backward_space(base) : forward_space(base);
  const int64_t packed_rows = w.q_len * w.gqa_group();
  for (const KernelSpec& s : all) {
    Feasibility f = check_feasibility(s, w.arch);
    std::string reason = f.reason;
    // A tile larger than the step itself only adds padding. The default stays, so that every
    // workload has at least one candidate.
    if (reason.empty() && s != base && s.block_n > w.kv_len) {
      reason = "block_n " + std::to_string(s.block_n) + " exceeds the step's " + std::to_string(w.kv_len) + " keys";
    }
    if (reason.empty() && s != base && s.block_m > packed_rows) {
      reason = "block_m " + std::to_string(s.block_m) + " exceeds the step's " + std::to_string(packed_rows) + " packed query rows";
    }
    if (reason.empty()) {
      set.viable.push_back(s);
    } else {
      set.pruned.push_back({s, reason});
    }
  }
  if (max_candidates > 0 && static_cast<int>(set.viable.size()) > max_candidates) set.viable.resize(max_candidates);
  return set;
}

}  // namespace cpgen
