// Per-rank forward work for the planner, for any shape a shapes file admits.
//
// rank_work (runtime/ring/schedule.h) visits every (query tile, key tile) pair and materialises every
// rank's positions: seq_len^2 * G / (block_m * block_n) visits and 8 * seq_len bytes. That is
// instant at 128K tokens but hours and gigabytes at 2^31. planned_rank_work gives the same
// counts without either cost: within one (rank, step) the key tiles' first and last positions
// increase with the tile index, so the skipped tiles are a suffix and the unmasked tiles a prefix
// of the key tiles, found by binary search, and positions come from closed forms per scheme.
// That is one visit per query tile and step: N * seq_len * G / block_m in all. When even that
// exceeds kPlanQueryTileVisits, block_m alone is multiplied by a power of two (coarsening) until
// it fits. A wider query tile only widens the band of masked tiles along the diagonal, so the
// coarse count overstates causal work by about one query tile's span per chunk: negligible while
// a query tile is a small part of a rank's chunk (tens of millions of tokens), and reported.
#pragma once

#include <cstdint>
#include <vector>

#include "cpgen/problem.h"
#include "runtime/ring/schedule.h"

namespace cpgen {

inline constexpr int64_t kPlanQueryTileVisits = int64_t{1} << 24;
// Below this many tile pairs (and positions), the planner calls rank_work itself.
inline constexpr int64_t kRankWorkTilePairs = int64_t{1} << 22;

// The global position of local index `index` on `rank` (equals partition_positions(...)[index]);
// the problem must be partitionable.
int64_t local_position(Scheme scheme, int64_t seq_len, int cp_size, int rank, int64_t index);

// The same result as rank_work(p, block_m, block_n), by binary search over key tiles.
std::vector<RankWork> counted_rank_work(const Problem& p, int block_m, int block_n);

struct PlannedWork {
  std::vector<RankWork> ranks;
  int coarsening = 1;      // query tiles of block_m * coarsening packed rows were counted
  bool used_rank_work = false;
};
// rank_work when it is cheap, counted_rank_work otherwise (coarsened when it must be).
PlannedWork planned_rank_work(const Problem& p, int block_m, int block_n);

}  // namespace cpgen
