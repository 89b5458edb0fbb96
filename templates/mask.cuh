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

}  // namespace device
}  // namespace cpgen
