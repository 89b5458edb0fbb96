// Causal masking by global sequence positions. A key is visible to a query when its position is
// not after the query's (k_pos <= q_pos). Position arrays are strictly increasing within a rank's
// local order (params.cuh), so a tile is bounded by its first and last entries and the tiles of
// a query block fall into three runs along the key axis: mask-free full tiles, then mixed tiles
// that need the per-element mask, then tiles whose every key is in the future (skipped).
#pragma once

#include "cpgen/platform.cuh"
#if defined(__CUDACC__)
#include "cpgen/global_access.cuh"
#endif

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

// The first index in [lo, hi) whose entry is > bound, else hi, by halving the range: the entries
// of [lo, hi) are non-decreasing and at(hi) is never read.
template <typename At>
CPGEN_HOST_DEVICE int first_above(const At& at, int lo, int hi, int bound) {
  while (lo < hi) {
    const int mid = lo + (hi - lo) / 2;
    if (at(mid) <= bound) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// How many leading entries of a non-decreasing array are <= bound (its upper bound), read through
// `at` (at(i): entry i). A plain binary search costs a dependent load per halving: 14 in a row
// for a 16K-key chunk, twice at the start of every forward CTA, with every warp waiting (about
// 2.7% of the wgmma kernel's PC samples at causal 16K on the H200, 2026-11-27). Ring chunks are
// not arbitrary, though: a rank's positions are one run of consecutive positions (contiguous),
// two equal runs (zigzag) or one stride (striped). So after the two ends, the search probes
// where the answer is if the run through the bound starts at the first entry, if it ends at the
// last, if the runs are the two halves, and if the stride is even, each probe inside the range
// the earlier ones left: a probe whose entries g - 1 and g bracket the bound is the answer, and
// one that misses narrows what the binary search then finishes. Such chunks take two to five
// rounds of loads, whatever their length; any other array (a zigzag-token chunk) is searched
// exactly too, at most four rounds later. Used for the block ranges of the causal forward and
// of the backward's blind queries; the key intervals' searches and the per-row ones inside the
// main loops stay plain binary searches (count_at_or_before, count_before: fewer registers).
template <typename At>
CPGEN_HOST_DEVICE int count_at_most(const At& at, int len, int bound) {
  if (len <= 0) return 0;
  const int first = at(0), last = at(len - 1);
  if (bound < first) return 0;
  if (bound >= last) return len;
  // From here len >= 2 and the answer lies in [lo, hi] = [1, len - 1].
  const int top = len - 1;
  int lo = 1, hi = top;
  for (int i = 0; i < 4 && lo < hi; ++i) {
    long long guess;
    if (i == 0) {
      guess = static_cast<long long>(bound) - first + 1;  // a run from the front
    } else if (i == 1) {
      guess = len - (static_cast<long long>(last) - bound);  // a run to the back
    } else if (i == 2) {
      guess = len / 2;  // two halves
    } else {
      // An even stride; in 32 bits (first <= bound < last, so both differences fit unsigned),
      // where a 64-bit division would be a call.
      const unsigned span = static_cast<unsigned>(last) - static_cast<unsigned>(first);
      const unsigned stride = span / static_cast<unsigned>(top);
      const unsigned offset = static_cast<unsigned>(bound) - static_cast<unsigned>(first);
      guess = stride > 1 ? offset / stride + 1LL : lo + (hi - lo) / 2;
    }
    const int probe = static_cast<int>(guess < lo ? lo : guess > hi ? hi : guess);
    // Both entries in one round of loads: the test of the hit needs both (a bitwise and, so that
    // the compiler does not sink the second load behind the first one's branch). below <= bound
    // means the answer is at least probe, else at most probe - 1; here <= bound at least probe + 1.
    const bool below_in = at(probe - 1) <= bound, here_out = at(probe) > bound;
    if (below_in & here_out) return probe;
    if (below_in) {
      lo = probe + 1;
    } else {
      hi = probe - 1;
    }
  }
  return first_above(at, lo, hi, bound);  // the answer is in [lo, hi]
}

// Entry i of an array (the accessor of the searches here). In a kernel every array searched is a
// global table of the launch (positions, key intervals), read through load_global: the same load
// on the GPU, checked by the emulator's sanitizer (bounds, alignment, never-written words); on the
// host a plain read.
struct ArrayAt {
  const int* values;
  CPGEN_HOST_DEVICE int operator()(int i) const {
#if defined(__CUDACC__)
    return load_global(values + i);
#else
    return values[i];
#endif
  }
};

// How many leading entries of the increasing array `positions` are <= bound, by plain binary
// search.
CPGEN_HOST_DEVICE int count_at_or_before(const int* positions, int len, int bound) {
  return first_above(ArrayAt{positions}, 0, len, bound);
}

// The same count over a whole chunk, once per block: from a query block's last query position,
// the keys that any row can see (the end of the non-skipped tiles), and from its first, the keys
// that every row sees (the end of the mask-free tiles).
CPGEN_HOST_DEVICE int count_at_or_before_in_runs(const int* positions, int len, int bound) {
  return count_at_most(ArrayAt{positions}, len, bound);
}

// The key tiles one query block runs: [0, full_tiles) without a mask, [full_tiles, tiles) with
// the mask (causal positions and the kv_len bound of a partial last tile); the rest are skipped.
struct TileRange {
  int full_tiles;
  int tiles;
};

// in_runs: search with count_at_or_before_in_runs (the kernel's traits say whether its registers
// afford it: kProbeKeyRuns), else by plain binary search; the same answer either way.
CPGEN_HOST_DEVICE int chunk_count_at_or_before(const int* positions, int len, int bound, bool in_runs) {
  return in_runs ? count_at_or_before_in_runs(positions, len, bound)
                 : count_at_or_before(positions, len, bound);
}

CPGEN_HOST_DEVICE TileRange key_tile_range(const int* kv_positions, int kv_len, int q_first_pos,
                                           int q_last_pos, int block_n, bool causal, bool in_runs = true) {
  if (!causal) return {kv_len / block_n, (kv_len + block_n - 1) / block_n};
  const int visible = chunk_count_at_or_before(kv_positions, kv_len, q_last_pos, in_runs);
  const int unmasked = chunk_count_at_or_before(kv_positions, kv_len, q_first_pos, in_runs);
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

// How many leading entries of the non-decreasing array `values` are < bound (lower bound): for
// integers, those <= bound - 1. The bounds are positions and interval ends, never below 0.
CPGEN_HOST_DEVICE int count_before(const int* values, int len, int bound) {
  return first_above(ArrayAt{values}, 0, len, bound - 1);
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
