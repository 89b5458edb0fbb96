#include "runtime/ring/plan_work.h"

#include <algorithm>
#include <string>

#include "cpgen/error.h"
#include "runtime/ring/partition.h"

namespace cpgen {
namespace {

// First index in [0, count) where `past(index)` holds, for a predicate that is false then true.
template <typename Predicate>
int64_t first_where(int64_t count, Predicate past) {
  int64_t lo = 0, hi = count;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (past(mid)) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

// First index in [from, count) where `past` holds, knowing it fails below `from`. Gallops, so a
// boundary that moved d places costs O(log d) evaluations instead of O(log count).
template <typename Predicate>
int64_t advance_to(int64_t from, int64_t count, Predicate past) {
  int64_t lo = from, stride = 1;
  while (lo < count) {
    const int64_t probe = std::min(count - 1, lo + stride - 1);
    if (past(probe)) return lo + first_where(probe - lo + 1, [&](int64_t t) { return past(lo + t); });
    lo = probe + 1;
    stride *= 2;
  }
  return count;
}

void check_tiles(const Problem& p, int block_m, int block_n) {
  if (block_m < 1 || block_n < 1) {
    throw_bad_input("planned work: block_m and block_n must be >= 1; got " + std::to_string(block_m) +
                    " and " + std::to_string(block_n));
  }
  if (p.kv_heads < 1 || p.q_heads < 1 || p.q_heads % p.kv_heads != 0) {
    throw_bad_input("planned work: q_heads (" + std::to_string(p.q_heads) +
                    ") must be a positive multiple of kv_heads (" + std::to_string(p.kv_heads) + ")");
  }
  check_partitionable(p.scheme, p.seq_len, static_cast<int>(p.cp_size));
}

}  // namespace

int64_t local_position(Scheme scheme, int64_t seq_len, int cp_size, int rank, int64_t index) {
  const int64_t n = cp_size;
  const int64_t local_len = seq_len / n;
  switch (scheme) {
    case Scheme::kContiguous: return rank * local_len + index;
    case Scheme::kZigzag: {
      // Chunk `rank` first, then its mirror chunk 2N-1-rank.
      const int64_t chunk = local_len / 2;
      return index < chunk ? rank * chunk + index : (2 * n - 1 - rank) * chunk + (index - chunk);
    }
    case Scheme::kZigzagToken:
      // Local index i is fold i: offset rank in even folds, N-1-rank in odd ones.
      return index * n + (index % 2 == 0 ? rank : n - 1 - rank);
    case Scheme::kStriped: return rank + index * n;
  }
  throw Error(ErrorKind::kInternal, "local_position: unknown scheme value");
}

std::vector<RankWork> counted_rank_work(const Problem& p, int block_m, int block_n) {
  check_tiles(p, block_m, block_n);
  const int cp_size = static_cast<int>(p.cp_size);
  const int64_t n = cp_size;
  const int64_t group = p.gqa_group();
  const int64_t local_len = p.seq_len / cp_size;
  const int64_t half = local_len / 2;
  const int64_t packed_rows = local_len * group;
  const int64_t key_tiles = (local_len + block_n - 1) / block_n;
  const int64_t ctas = p.batch * p.kv_heads;
  // local_position with the divisions hoisted out: this runs ~2 log(key tiles) times per visit.
  auto position = [&](int64_t rank, int64_t index) -> int64_t {
    switch (p.scheme) {
      case Scheme::kContiguous: return rank * local_len + index;
      case Scheme::kZigzag: return index < half ? rank * half + index : (2 * n - 1 - rank) * half + (index - half);
      case Scheme::kZigzagToken: return index * n + ((index & 1) == 0 ? rank : n - 1 - rank);
      case Scheme::kStriped: return rank + index * n;
    }
    return 0;
  };

  std::vector<RankWork> work(cp_size);
  for (int rank = 0; rank < cp_size; ++rank) {
    RankWork& w = work[rank];
    for (int step = 0; step < cp_size; ++step) {
      const int source = kv_source_rank(rank, step, cp_size);
      auto key_first = [&](int64_t tile) { return position(source, tile * block_n); };
      auto key_last = [&](int64_t tile) {
        return position(source, std::min<int64_t>(tile * block_n + block_n, local_len) - 1);
      };
      // q_first and q_last only grow with the query tile, so both boundaries only move right:
      // each search starts where the previous query tile's ended.
      int64_t computed = 0, unmasked = 0;
      for (int64_t row0 = 0; row0 < packed_rows; row0 += block_m) {
        // Packed row r is query r / G of the kv head's group (templates/params.cuh).
        const int64_t rows = std::min<int64_t>(block_m, packed_rows - row0);
        const int64_t q_first = position(rank, row0 / group);
        const int64_t q_last = position(rank, (row0 + rows - 1) / group);
        if (p.causal) {
          // classify_tile: skip when k_first > q_last (a suffix, as k_first grows with the tile),
          // full when k_last <= q_first (a prefix); the tiles between need the mask.
          computed = advance_to(computed, key_tiles, [&](int64_t t) { return key_first(t) > q_last; });
          unmasked = advance_to(unmasked, key_tiles, [&](int64_t t) { return key_last(t) > q_first; });
        } else {
          computed = unmasked = key_tiles;
        }
        w.skipped_tiles += (key_tiles - computed) * ctas;
        w.full_tiles += unmasked * ctas;
        w.masked_tiles += (computed - unmasked) * ctas;
        // Only the last key tile can be short, so the computed keys are min(computed * bn, L).
        const int64_t keys = std::min<int64_t>(computed * block_n, local_len);
        w.flops += 4.0 * static_cast<double>(rows) * static_cast<double>(keys) *
                   static_cast<double>(p.head_dim) * static_cast<double>(ctas);
      }
    }
  }
  return work;
}

PlannedWork planned_rank_work(const Problem& p, int block_m, int block_n) {
  check_tiles(p, block_m, block_n);
  PlannedWork planned;
  const double seq = static_cast<double>(p.seq_len);
  const double pairs = seq * seq * static_cast<double>(p.gqa_group()) / (double(block_m) * double(block_n));
  if (pairs <= static_cast<double>(kRankWorkTilePairs)) {
    planned.ranks = rank_work(p, block_m, block_n);
    planned.used_rank_work = true;
    return planned;
  }
  // Every rank visits every one of its query tiles once per step: N * seq_len * G / block_m.
  auto visits = [&](int coarsening) {
    return static_cast<double>(p.cp_size) * seq * static_cast<double>(p.gqa_group()) /
           (static_cast<double>(block_m) * coarsening);
  };
  while (visits(planned.coarsening) > static_cast<double>(kPlanQueryTileVisits)) planned.coarsening *= 2;
  planned.ranks = counted_rank_work(p, block_m * planned.coarsening, block_n);
  return planned;
}

PlannedWork RankWorkCache::get(const Problem& p, int block_m, int block_n) {
  const Key key{static_cast<int>(p.scheme), p.seq_len, p.cp_size, p.gqa_group(), p.causal, block_m, block_n};
  auto it = unit_work_.find(key);
  if (it == unit_work_.end()) {
    Problem unit = p;
    unit.batch = 1;
    unit.kv_heads = 1;
    unit.q_heads = p.gqa_group();
    unit.head_dim = 1;
    it = unit_work_.emplace(key, planned_rank_work(unit, block_m, block_n)).first;
  }
  PlannedWork scaled = it->second;
  const int64_t ctas = p.batch * p.kv_heads;
  const double flops_scale = static_cast<double>(ctas) * static_cast<double>(p.head_dim);
  for (RankWork& w : scaled.ranks) {
    w.full_tiles *= ctas;
    w.masked_tiles *= ctas;
    w.skipped_tiles *= ctas;
    w.flops *= flops_scale;
  }
  return scaled;
}

}  // namespace cpgen
