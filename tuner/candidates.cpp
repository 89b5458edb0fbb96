#include "tuner/candidates.h"

#include <algorithm>
#include <iterator>

#include "cpgen/error.h"
#include "generator/kernel_spec_wgmma.h"
#include "runtime/ring/kernel_support.h"

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

// `spec` with the mask features workload `w` needs (key intervals, softcap): every candidate of a
// masked workload names the masked kernel the workload runs.
KernelSpec with_mask_of(KernelSpec spec, const WorkloadKey& w) {
  spec.key_intervals = w.mask.key_intervals();
  spec.softcap = w.mask.softcap;
  return spec;
}

bool supported_by(int value, const auto& table) { return std::find(std::begin(table), std::end(table), value) != std::end(table); }

// The wgmma candidates of a forward workload (the default first and its persistent launch second,
// then the tuning axes, each two-consumer config also with ping-pong, and the default's ping-pong
// schedule in the persistent launch), or none where the family cannot run it as the tuner
// times it: another arch, a head dim or group it lacks, or an ability it lacks
// (KernelFamilyAbilities: a mask feature, or launching over a zigzag query-half step's view of
// half the queries, as the tuner times that step). Today it has every ability.
std::vector<KernelSpec> wgmma_space(const WorkloadKey& w) {
  const KernelFamilyAbilities a = kernel_family_abilities(KernelKind::kForwardWgmma);
  if (w.arch != kWgmmaArch || is_backward(w.step)) return {};
  if (!supported_by(w.head_dim, kSupportedWgmmaHeadDims) || !supported_by(w.gqa_group(), kSupportedWgmmaGqaGroups))
    return {};
  if ((w.mask.key_intervals() && !a.key_intervals) || (w.mask.softcap && !a.softcap)) return {};
  if (w.step == StepType::kZigzagQHalf && !a.query_view) return {};
  std::vector<KernelSpec> all;
  const KernelSpec base = with_mask_of(wgmma_default_for(w.dtype, w.head_dim, w.causal, w.gqa_group()), w);
  all.push_back(base);
  KernelSpec persistent = base;
  persistent.persistent = true;
  all.push_back(persistent);
  for (int consumers : kTuneWgmmaConsumers)
    for (int bn : kTuneWgmmaBlockN)
      for (int stages : kTuneWgmmaStages) {
        if (bn == kTuneWgmmaHeadDim256BlockN && w.head_dim != 256) continue;
        KernelSpec s = base;
        s.block_m = 64 * consumers;
        s.warps = 4 * (1 + consumers);
        s.block_n = bn;
        s.stages = stages;
        if (s != base) all.push_back(s);
        // Two consumer warpgroups also run in the ping-pong schedule, a candidate like any other
        // until a GPU has measured it against the plain one.
        if (consumers == 2) {
          s.pingpong = true;
          all.push_back(s);
        }
      }
  persistent.pingpong = true;
  all.push_back(persistent);
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

// The mma.sync family's default, from which forward_space grows its tiles.
KernelSpec mma_sync_default(const WorkloadKey& w) {
  return KernelSpec::default_for(w.dtype, w.head_dim, w.causal, w.gqa_group());
}

KernelSpec unmasked_default(const WorkloadKey& w) {
  // Where the wgmma family is the documented default (sm_90a, generator/kernel_spec_wgmma.h), it
  // is the reference the other candidates are checked against, and the one a short search keeps.
  if (!is_backward(w.step) && wgmma_is_default(w.dtype, w.head_dim, w.gqa_group(), w.arch))
    return wgmma_default_for(w.dtype, w.head_dim, w.causal, w.gqa_group());
  if (!is_backward(w.step)) return mma_sync_default(w);
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
  // from this base.
  return with_mask_of(unmasked_default(w), w);
}

CandidateSet enumerate_candidates(const WorkloadKey& w, int max_candidates) {
  CandidateSet set;
  const KernelSpec base = tuning_default(w);
  std::vector<KernelSpec> all;
  if (is_backward(w.step)) {
    all = backward_space(base);
  } else {
    all = {base};
    const auto add = [&](const KernelSpec& s) {
      if (std::find(all.begin(), all.end(), s) == all.end()) all.push_back(s);
    };
    // The mma.sync grid, grown from that family's own default (its first entry).
    const std::vector<KernelSpec> grid = forward_space(with_mask_of(mma_sync_default(w), w));
    // Where the wgmma family can run the workload, its candidates come before the mma.sync tiles
    // but after that family's default, so a short search (--max-candidates) times both defaults
    // and every wgmma config: in the first forward tune on a GPU (H200, 2026-11-28, every
    // workload of examples/shapes) each wgmma candidate timed beat each mma.sync one of the same
    // workload, by 1.36x at least, while with the wgmma tiles after the grid a 24-candidate
    // search timed only the wgmma default and its persistent launch.
    const std::vector<KernelSpec> wgmma = wgmma_space(w);
    if (!wgmma.empty()) add(grid.front());
    for (const KernelSpec& s : wgmma) add(s);
    for (const KernelSpec& s : grid) add(s);
  }
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
