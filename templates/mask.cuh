// Causal masking by global sequence positions. A key is visible to a query when its position is
// not after the query's (k_pos <= q_pos). Position arrays are strictly increasing within a rank's
// local order (params.cuh), so a tile is bounded by its first and last entries and the tiles of
// a query block fall into three runs along the key axis: mask-free full tiles, then mixed tiles
// that need the per-element mask, then tiles whose every key is in the future (skipped).
#pragma once

#include "cpgen/platform.cuh"

namespace cpgen {
namespace device {

enum class TileClass { kSkip, kFull, kMasked };

// q_first <= q_last are the positions of the block's first and last query rows, k_first <=
// k_last those of the tile's first and last keys.
CPGEN_HOST_DEVICE TileClass classify_tile(int q_first, int q_last, int k_first, int k_last,
                                          bool causal) {
  if (!causal) return TileClass::kFull;
  if (k_first > q_last) return TileClass::kSkip;   // every key after every query
  if (k_last <= q_first) return TileClass::kFull;  // every key at or before every query
  return TileClass::kMasked;
}

CPGEN_HOST_DEVICE bool key_visible(int q_pos, int k_pos, bool causal) {
  return !causal || k_pos <= q_pos;
}

// How many leading entries of the increasing array `positions` are <= bound (upper bound by
// binary search). For a block of queries this gives, from its last query position, the keys that
// any row can see (the end of the non-skipped tiles), and from its first query position, the keys
// that every row sees (the end of the mask-free tiles).
CPGEN_HOST_DEVICE int count_at_or_before(const int* positions, int len, int bound) {
  int lo = 0, hi = len;
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (positions[mid] <= bound) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// The key tiles one query block runs: [0, full_tiles) without a mask, [full_tiles, tiles) with
// the mask (causal positions and the kv_len bound of a partial last tile); the rest are skipped.
struct TileRange {
  int full_tiles;
  int tiles;
};

CPGEN_HOST_DEVICE TileRange key_tile_range(const int* kv_positions, int kv_len, int q_first_pos,
                                           int q_last_pos, int block_n, bool causal) {
  const int visible = causal ? count_at_or_before(kv_positions, kv_len, q_last_pos) : kv_len;
  const int unmasked = causal ? count_at_or_before(kv_positions, kv_len, q_first_pos) : kv_len;
  return {unmasked / block_n, (visible + block_n - 1) / block_n};
}


// ---- Key intervals (kernels specialized on kKeyIntervals) ------------------------------------
// Local query i sees the keys with positions in [first[i], last[i]] (params.cuh). Both arrays are
// non-decreasing along the queries and key positions increase along the chunk, so for a block of
// queries [qa, qb] the keys any row sees are the index range
//   [count_before(kv, first[qa]), count_at_or_before(kv, last[qb]))
// and the keys every row sees are
//   [count_before(kv, first[qb]), count_at_or_before(kv, last[qa]))   (empty when it inverts).
// For a block of keys [ka, kb] (positions), the queries that see some key are
//   [count_before(last, kv[ka]), count_at_or_before(first, kv[kb]))
// and those that see all of them
//   [count_before(last, kv[kb]), count_at_or_before(first, kv[ka])).

// How many leading entries of the non-decreasing array `values` are < bound (lower bound).
CPGEN_HOST_DEVICE int count_before(const int* values, int len, int bound) {
  int lo = 0, hi = len;
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (values[mid] < bound) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// A half-open index range [begin, end); empty when begin >= end.
struct IndexSpan {
  int begin;
  int end;
};

// The key tiles of one query block under key intervals: tiles [begin, end) hold every key some row
// sees (the rest are skipped: never loaded); tiles [full_begin, full_end), a sub-range, hold only
// keys every row sees and run without a mask; a partial last tile (past kv_len) is never full.
// When no row sees any key, begin == end; when no tile is full, full_begin == full_end == begin.
struct IntervalTiles {
  int begin;
  int full_begin;
  int full_end;
  int end;
};

// first_of_first, last_of_first: the interval of the block's first query; first_of_last,
// last_of_last: that of its last query.
CPGEN_HOST_DEVICE IntervalTiles interval_key_tiles(const int* kv_positions, int kv_len,
                                                   int first_of_first, int last_of_first,
                                                   int first_of_last, int last_of_last, int block_n) {
  const int seen_begin = count_before(kv_positions, kv_len, first_of_first);
  const int seen_end = count_at_or_before(kv_positions, kv_len, last_of_last);
  IntervalTiles t{0, 0, 0, 0};
  if (seen_begin >= seen_end) return t;
  t.begin = seen_begin / block_n;
  t.end = (seen_end + block_n - 1) / block_n;
  const int all_begin = count_before(kv_positions, kv_len, first_of_last);
  const int all_end = count_at_or_before(kv_positions, kv_len, last_of_first);
  const int full_begin = (all_begin + block_n - 1) / block_n;
  const int full_end = all_end / block_n;  // a partial last tile stays masked (kv_len bound)
  if (all_begin < all_end && full_begin < full_end) {
    t.full_begin = full_begin;
    t.full_end = full_end;
  } else {
    t.full_begin = t.full_end = t.begin;
  }
  return t;
}

// The queries (local indices) that see some key of a key block whose first and last keys sit at
// positions k_first_pos <= k_last_pos (`seen`), and those that see all of them (`all`, a
// sub-range, possibly empty).
struct IntervalQueries {
  IndexSpan seen;
  IndexSpan all;
};
CPGEN_HOST_DEVICE IntervalQueries interval_queries(const int* q_key_first, const int* q_key_last,
                                                   int q_len, int k_first_pos, int k_last_pos) {
  IntervalQueries q;
  q.seen = {count_before(q_key_last, q_len, k_first_pos),
            count_at_or_before(q_key_first, q_len, k_last_pos)};
  q.all = {count_before(q_key_last, q_len, k_last_pos),
           count_at_or_before(q_key_first, q_len, k_first_pos)};
  return q;
}

// Whether a query with key interval [first, last] sees the key at k_pos.
CPGEN_HOST_DEVICE bool key_in_interval(int first, int last, int k_pos) {
  return first <= k_pos && k_pos <= last;
}

}  // namespace device
}  // namespace cpgen
