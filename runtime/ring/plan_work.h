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
#include <map>
#include <tuple>
#include <vector>

#include "cpgen/problem.h"
#include "runtime/ring/schedule.h"

namespace cpgen {

inline constexpr int64_t kPlanQueryTileVisits = int64_t{1} << 24;
// Below this many tile pairs (and positions), the planner calls rank_work itself. Above it the
// counted form is cheaper by about block_n / log(key tiles): at 2^22 pairs rank_work took ~1 ms a
// shape, which made a 120k-shape file take minutes.
inline constexpr int64_t kRankWorkTilePairs = int64_t{1} << 14;

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

// planned_rank_work shared between problems. The tile counts depend on batch and kv_heads only
// through the factor batch * kv_heads (every CTA of the grid runs the same tiles), and the FLOPs
// through batch * kv_heads * head_dim; the rest (scheme, seq_len, cp_size, GQA group, mask and
// tile) is the key. A large shapes file repeats those keys across models and batch sizes, so
// each is counted once and scaled. The counts are integers, and the FLOPs sums of integers, so a
// scaled result equals a direct one exactly while a rank's FLOPs stay below 2^53 (~9e15), and to
// rounding beyond. Not thread-safe.
class RankWorkCache {
 public:
  PlannedWork get(const Problem& p, int block_m, int block_n);
  size_t size() const { return unit_work_.size(); }

 private:
  using Key = std::tuple<int, int64_t, int64_t, int64_t, bool, int, int>;
  std::map<Key, PlannedWork> unit_work_;  // for batch 1, one kv head, head_dim 1
};

}  // namespace cpgen
