// The planner behind `cpgen plan`: for one problem and each partition scheme, how evenly the
// causal work spreads over the ranks, what the ring moves and holds, and whether moving the
// next K/V chunk hides behind computing on the current one. Forward pass only.
//
// Model (per rank r, ring of N ranks, local length L = seq_len / N, element size e = 2 bytes):
//   chunk bytes      C = 2 (K and V) * batch * kv_heads * L * head_dim * e
//   bytes_per_step   C: each rank sends the chunk it holds to rank + 1 (0 when N = 1)
//   bytes_total      N * (N - 1) * C: all ranks, the N - 1 transfers of a forward pass
//   ring_extra       2 * C per rank: the chunk being computed on and the one arriving
//   allgather_extra  (N - 1) * C per rank: every other rank's K/V, held at once
//   work             rank_work FLOPs (runtime/ring/schedule.h) with the default tile config of
//                    generator/kernel_spec.h for the head dim, dtype and GQA group; for a problem
//                    with documents, a window or a length some scheme cannot split evenly (the
//                    pair model, every scheme of the shape alike): 4 * head_dim * batch * q_heads
//                    FLOPs per (query, key) pair the mask model leaves visible, counted exactly
//                    per rank and step (TokenPlan::visible_pairs), and C from the largest rank
//   step compute     busiest rank's FLOPs / N at `tflops` (10^12 FLOP/s)
//   step comm        C at `link_gbps` (10^9 bytes/s, gigabytes not gigabits)
//   forward time     N * max(step compute, step comm): compute and transfer overlap per step
// The recommendation is the applicable scheme with the shortest predicted forward time; schemes
// within 1% of it count as tied, and ties go to zigzag for causal problems (then zigzag-token,
// striped, contiguous) and to contiguous otherwise. The time already folds in both imbalance and
// hiding: a scheme can look balanced (striped) while running every tile masked, so imbalance
// alone would recommend the slower one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cpgen/problem.h"
#include "generator/kernel_spec.h"
#include "runtime/ring/plan_tokens.h"
#include "runtime/ring/plan_work.h"
#include "runtime/ring/schedule.h"

namespace cpgen {

struct PlanRates {
  double link_gbps = 400;  // per-direction link bandwidth between ring neighbours, GB/s
  double tflops = 400;     // sustained attention throughput of one GPU, TFLOP/s
};
// Throws kBadInput unless both rates are finite and > 0.
void validate_rates(const PlanRates& rates);

struct SchemePlan {
  Scheme scheme = Scheme::kContiguous;
  bool applicable = false;
  std::string reason;                 // why not applicable (empty when applicable)
  TokenPlan tokens;                   // per-rank tokens and skipped steps, for every scheme
  bool pair_model = false;            // work counted as visible pairs, not tiles (ranks' tiles 0)
  std::vector<RankWork> ranks;        // per rank, all N steps
  int tile_coarsening = 1;            // > 1 only for enormous shapes (runtime/ring/plan_work.h)
  double busiest_rank_flops = 0;
  double mean_rank_flops = 0;
  double work_imbalance = 0;          // busiest / mean; 1 is perfect
  int64_t bytes_per_step = 0;
  double bytes_total = 0;  // up to 2^70 (1024 ranks of a 2^50-byte chunk): a double
  int64_t ring_extra_bytes = 0;
  int64_t allgather_extra_bytes = 0;
  double step_compute_s = 0;
  double step_comm_s = 0;
  double compute_comm_ratio = 0;      // +infinity when nothing travels (N = 1)
  bool comm_hidden = false;           // step compute >= step comm
  double forward_s = 0;
};

struct ShapePlan {
  Problem problem;
  KernelSpec tile;                    // the default config whose tiles the work is counted in
  std::vector<SchemePlan> schemes;    // contiguous, zigzag, zigzag-token, striped
  Scheme recommended = Scheme::kZigzag;
  std::string why;                    // one sentence
};

inline constexpr Scheme kPlannedSchemes[] = {Scheme::kContiguous, Scheme::kZigzag, Scheme::kZigzagToken,
                                         Scheme::kStriped};

// K and V of one rank's positions, in bytes (equal shards).
int64_t kv_chunk_bytes(const Problem& p);
// Whether a shape's work is counted as visible pairs (see the model above) for every scheme.
bool uses_pair_model(const Problem& p);
SchemePlan plan_scheme(const Problem& p, Scheme scheme, const KernelSpec& tile, const PlanRates& rates,
                       RankWorkCache* cache = nullptr);
// cache (optional) shares the per-rank work between problems that differ only in batch, heads or
// head dim (RankWorkCache): what makes a file of 10^5 shapes plan in seconds.
ShapePlan plan_shape(const Problem& p, const PlanRates& rates, RankWorkCache* cache = nullptr);

}  // namespace cpgen
