#include "runtime/ring/plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "cpgen/error.h"
#include "runtime/ring/kernel_support.h"
#include "runtime/ring/partition.h"
#include "runtime/ring/plan_work.h"
#include "runtime/ring/shapes.h"

namespace cpgen {
namespace {

// Lower is preferred among schemes whose predicted time ties.
int tie_rank(Scheme scheme, bool causal) {
  if (!causal) return scheme == Scheme::kContiguous ? 0 : 1 + static_cast<int>(scheme);
  switch (scheme) {
    case Scheme::kZigzag: return 0;
    case Scheme::kZigzagToken: return 1;
    case Scheme::kStriped: return 2;
    case Scheme::kContiguous: return 3;
  }
  return 4;
}

constexpr double kTieTolerance = 0.01;

}  // namespace

void validate_rates(const PlanRates& rates) {
  if (!std::isfinite(rates.link_gbps) || !(rates.link_gbps > 0)) {
    throw_bad_input("--link-gbps must be a finite number > 0 (GB/s, 10^9 bytes per second); got " +
                    std::to_string(rates.link_gbps));
  }
  if (!std::isfinite(rates.tflops) || !(rates.tflops > 0)) {
    throw_bad_input("--tflops must be a finite number > 0 (10^12 FLOP/s); got " + std::to_string(rates.tflops));
  }
}

int64_t kv_chunk_bytes(const Problem& p) {
  return 2 * p.batch * p.kv_heads * p.local_seq_len() * p.head_dim * dtype_bytes(p.dtype);
}

bool uses_pair_model(const Problem& p) {
  if (kernel_needs_key_intervals(p)) return true;  // documents or a window
  for (Scheme scheme : kPlannedSchemes) {
    try {
      check_partitionable(scheme, p.seq_len, static_cast<int>(p.cp_size));
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kBadInput) throw;
      return true;
    }
  }
  return false;
}

SchemePlan plan_scheme(const Problem& problem, Scheme scheme, const KernelSpec& tile, const PlanRates& rates,
                       RankWorkCache* cache) {
  SchemePlan plan;
  plan.scheme = scheme;
  Problem p = problem;
  p.scheme = scheme;
  plan.pair_model = uses_pair_model(p);
  plan.tokens = plan_tokens(p, scheme, plan.pair_model);
  if (plan.pair_model) {
    if (plan.tokens.visible_pairs.empty()) {
      plan.reason = "documents, windows or unequal shards over " + std::to_string(kMaxSkipCountTokens) +
                    " tokens: visible pairs not counted (tokens only)";
      return plan;
    }
    // Useful work only: 4 FLOPs per head_dim element of each visible (query, key) pair (QK^T and
    // PV, a multiply-add each), for every batch entry and query head.
    const double per_pair = 4.0 * static_cast<double>(p.head_dim * p.batch * p.q_heads);
    for (const std::vector<int64_t>& steps : plan.tokens.visible_pairs) {
      RankWork w;
      for (int64_t pairs : steps) w.flops += per_pair * static_cast<double>(pairs);
      plan.ranks.push_back(w);
    }
  } else {
    const PlannedWork work =
        cache ? cache->get(p, tile.block_m, tile.block_n) : planned_rank_work(p, tile.block_m, tile.block_n);
    plan.ranks = work.ranks;
    plan.tile_coarsening = work.coarsening;
  }
  plan.applicable = true;

  double total = 0;
  for (const RankWork& w : plan.ranks) {
    plan.busiest_rank_flops = std::max(plan.busiest_rank_flops, w.flops);
    total += w.flops;
  }
  const double n = static_cast<double>(p.cp_size);
  plan.mean_rank_flops = total / n;
  plan.work_imbalance = plan.mean_rank_flops > 0 ? plan.busiest_rank_flops / plan.mean_rank_flops : 1.0;

  // Unequal shards exchange whole slots of the largest chunk (runtime/backend/kernel_ring_backend.h).
  // validate_problem bounds batch * heads * seq_len * head_dim by 2^48, so C <= 2^50 (the largest
  // chunk can hold nearly the whole sequence: documents) and (N - 1) * C <= 2^60 in int64; the
  // total, up to N times more, is a double.
  const int64_t most_tokens = *std::max_element(plan.tokens.rank_tokens.begin(), plan.tokens.rank_tokens.end());
  const int64_t chunk = 2 * p.batch * p.kv_heads * most_tokens * p.head_dim * dtype_bytes(p.dtype);
  const int64_t transfers = p.cp_size - 1;
  plan.bytes_per_step = transfers > 0 ? chunk : 0;
  plan.bytes_total = static_cast<double>(p.cp_size) * static_cast<double>(transfers * chunk);
  plan.ring_extra_bytes = transfers > 0 ? 2 * chunk : 0;
  plan.allgather_extra_bytes = transfers * chunk;

  plan.step_compute_s = plan.busiest_rank_flops / n / (rates.tflops * 1e12);
  plan.step_comm_s = static_cast<double>(plan.bytes_per_step) / (rates.link_gbps * 1e9);
  plan.compute_comm_ratio = plan.step_comm_s > 0 ? plan.step_compute_s / plan.step_comm_s
                                                 : std::numeric_limits<double>::infinity();
  plan.comm_hidden = plan.step_compute_s >= plan.step_comm_s;
  plan.forward_s = n * std::max(plan.step_compute_s, plan.step_comm_s);
  return plan;
}

ShapePlan plan_shape(const Problem& problem, const PlanRates& rates, RankWorkCache* cache) {
  validate_rates(rates);
  validate_problem(problem, problem.name);
  ShapePlan shape;
  shape.problem = problem;
  // The mma.sync family's documented tiles, named as the kernel that runs the mask (_ivl, _cap).
  shape.tile = family_default_spec(problem, "mma.sync", problem.name);
  for (Scheme scheme : kPlannedSchemes) shape.schemes.push_back(plan_scheme(problem, scheme, shape.tile, rates, cache));

  double fastest = std::numeric_limits<double>::infinity();
  for (const SchemePlan& s : shape.schemes) {
    if (s.applicable) fastest = std::min(fastest, s.forward_s);
  }
  // validate_problem proved the problem's own scheme applicable, so a choice always exists.
  const SchemePlan* best = nullptr;
  for (const SchemePlan& s : shape.schemes) {
    if (!s.applicable || s.forward_s > fastest * (1 + kTieTolerance)) continue;
    if (!best || tie_rank(s.scheme, problem.causal) < tie_rank(best->scheme, problem.causal)) best = &s;
  }
  if (!best) {
    // Too large to count the visible pairs: fewest tokens on the busiest rank, ties as above.
    for (const SchemePlan& s : shape.schemes)
      if (!best || s.tokens.token_imbalance < best->tokens.token_imbalance - 1e-12 ||
          (s.tokens.token_imbalance <= best->tokens.token_imbalance + 1e-12 &&
           tie_rank(s.scheme, problem.causal) < tie_rank(best->scheme, problem.causal)))
        best = &s;
    shape.recommended = best->scheme;
    char text[256];
    if (best->tokens.skipped_steps >= 0)
      std::snprintf(text, sizeof text, "lowest token imbalance (%.3f) with %lld of %lld ring steps skipped by the mask; "
                    "too large to count its visible pairs", best->tokens.token_imbalance,
                    static_cast<long long>(best->tokens.skipped_steps), static_cast<long long>(best->tokens.ring_steps));
    else
      std::snprintf(text, sizeof text, "lowest token imbalance (%.3f); too large to count its visible pairs or the "
                    "ring steps its mask skips", best->tokens.token_imbalance);
    shape.why = text;
    return shape;
  }
  shape.recommended = best->scheme;

  char text[256];
  std::snprintf(text, sizeof text, "shortest predicted forward time (%.3g ms, %s imbalance %.3f); %s",
                best->forward_s * 1e3, best->pair_model ? "visible-pair" : "work", best->work_imbalance,
                problem.cp_size == 1 ? "one rank: nothing travels"
                : best->comm_hidden ? "K/V transfer hides behind compute"
                                    : "K/V transfer does NOT hide behind compute at these rates");
  shape.why = text;
  return shape;
}

}  // namespace cpgen
