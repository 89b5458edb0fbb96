// The ring schedule: which K/V chunk a rank holds at each step, which (query tile, key tile)
// pairs of a step do work, and how much. The ring driver and the planner both use this one
// schedule, so what is planned is what runs.
#pragma once

#include <cstdint>
#include <vector>

#include "cpgen/problem.h"

namespace cpgen {

// K/V chunks travel to rank + 1 after every step, so at step s rank r holds the chunk that
// started on rank (r - s) mod cp_size. Step 0 is the rank's own chunk.
int kv_source_rank(int rank, int step, int cp_size);

// What a causal (query tile, key tile) pair needs, from the tiles' first and last global
// positions (positions increase within a tile):
//   kSkip:   every key is after every query (k_first > q_last): nothing to compute.
//   kFull:   every key is at or before every query (k_last <= q_first), or not causal: no mask.
//   kMasked: the tile straddles the diagonal and needs the per-element mask.
enum class TileWork { kSkip, kFull, kMasked };
TileWork classify_tile(int64_t q_first, int64_t q_last, int64_t k_first, int64_t k_last,
                       bool causal);

// Per rank, over all cp_size ring steps, the (query tile, key tile) pairs the forward step kernel
// runs or skips. Query tiles are block_m packed rows (params.cuh: with GQA group G, packed row p
// is local query p / G), key tiles are block_n keys; both are counted once per (batch, kv head),
// i.e. per CTA that runs them. flops counts every computed tile pair in full (a masked tile
// computes its masked elements too): 4 * rows * cols * head_dim (QK^T and PV, 2 flops per
// multiply-add), times batch * q_heads, rows being query rows per head.
struct RankWork {
  double flops = 0;
  int64_t full_tiles = 0, masked_tiles = 0, skipped_tiles = 0;
};
std::vector<RankWork> rank_work(const Problem& p, int block_m, int block_n);

}  // namespace cpgen
