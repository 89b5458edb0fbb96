// The tuning search space for one workload: every tile config the kernel template supports, with
// the documented default first. On sm_90a a forward workload also searches the wgmma family
// (ring_fwd_wgmma_ URIs: after the mma.sync default, before the rest of the mma.sync grid) where
// the family supports the workload's head dim, group and mask and can run its step type as
// timed. A forward workload searches the forward step's (BLOCK_M, BLOCK_N, warps, stages) and the
// wgmma family's (block_n, consumers, stages, launch, schedule); a backward workload (a "bwd-"
// step type) the backward step's, so a backward
// record always names a ring_bwd_ kernel. Candidates the feasibility model or the step's size rule
// out are returned separately with the reason, so the tuner records them as infeasible instead of
// spending NVRTC time on them.
#pragma once

#include <string>
#include <vector>

#include "cache/workload.h"
#include "generator/kernel_spec.h"

namespace cpgen {

// The forward axes searched (a subset of the supported values: 16-warp CTAs and 256-key tiles
// never fit the register and shared-memory budgets of the head dims cpgen serves).
inline constexpr int kTuneBlockM[] = {64, 128, 256};
inline constexpr int kTuneBlockN[] = {32, 64, 128};
inline constexpr int kTuneWarps[] = {4, 8};
inline constexpr int kTuneStages[] = {1, 2, 3};

// The sm_90a wgmma family's axes (generator/kernel_spec_wgmma.h): key tile, consumer warpgroups
// (block_m = 64 per consumer) and stages. Searched on sm_90a only, next to the mma.sync grid, for
// the workloads the family can run in the shape they are timed in (runtime/ring/kernel_support.h).
// Key tiles in search order: the default's 128, then 176 (FlashAttention-3's unmasked head dim
// 128 tile), then 64, then 80, searched at head dim 256 only: there 128 keys do not fit (S 64 +
// O 128 registers) and 80 is the widest tile that does, FlashAttention-3's choice (S 40 + O 128,
// and 2 stages of 80 x 256 K and V tiles in 227 KB); below it 128 fits and 80 has no reason.
inline constexpr int kTuneWgmmaHeadDim256BlockN = 80;
inline constexpr int kTuneWgmmaBlockN[] = {128, 176, 64, kTuneWgmmaHeadDim256BlockN};
// Consumers in search order, so a capped search (--max-candidates) drops the least likely first:
// two (the default's), three (FlashAttention-3's choice at head dim 64), then one, which lost to
// two wherever the first H200 tune timed both (2026-11-28: 1.25-1.34x slower at head dim 256).
inline constexpr int kTuneWgmmaConsumers[] = {2, 3, 1};
inline constexpr int kTuneWgmmaStages[] = {2, 3, 4};

// The backward axes: query tiles of the inner loop, key tiles per CTA, warps, Q/dO stages. Every
// supported backward query tile and stage count; 16-key CTAs are left out, since such a CTA reads
// every query tile of the step for as few keys as one warp owns. Warps run from 4 (as at head dim
// 64 by default) to 16 (as in backward_candidates_for); the feasibility model says which fit.
inline constexpr int kTuneBwdBlockM[] = {16, 32, 64, 128};
inline constexpr int kTuneBwdBlockN[] = {32, 64, 128};
inline constexpr int kTuneBwdWarps[] = {4, 8, 16};
inline constexpr int kTuneBwdStages[] = {1, 2};

struct PrunedCandidate {
  KernelSpec spec;
  std::string reason;  // one line: what does not fit
};

struct CandidateSet {
  std::vector<KernelSpec> viable;        // default first, then the search order
  std::vector<PrunedCandidate> pruned;   // infeasible before compiling
};

// The config a workload's candidates are verified against: the forward default
// (KernelSpec::default_for; on sm_90a the wgmma family's where forward_default_for_arch names
// it), or for a backward workload the backward default that fits the arch
// (KernelSpec::backward_default_for_arch; backward_default_for where none fits), with the
// workload mask's kernel flags (key intervals, softcap), which every candidate inherits.
KernelSpec tuning_default(const WorkloadKey& w);

// max_candidates > 0 keeps only that many viable candidates (the default always among them); the
// rest are dropped, not recorded, since nothing was learned about them.
CandidateSet enumerate_candidates(const WorkloadKey& w, int max_candidates = 0);

}  // namespace cpgen
