// Partition schemes: which global sequence positions each context-parallel rank holds, and
// moving [batch, heads, seq, dim] tensors between the full sequence and per-rank shards.
//
// Every scheme gives every rank seq_len / cp_size positions, in strictly increasing order (the
// step kernels rely on that to bound a tile by its first and last position). See docs/design.md,
// "The ring schedule", and tests/data/vectors/partitions.json for the reference layouts.
#pragma once

#include <cstdint>
#include <vector>

#include "cpgen/types.h"

namespace cpgen {

// Throws Error(kBadInput) naming the scheme's requirement when seq_len cannot be split over
// cp_size ranks (e.g. "zigzag needs seq_len divisible by 2*cp_size (16); got 100").
void check_partitionable(Scheme scheme, int64_t seq_len, int cp_size);

// The global positions rank `rank` holds, in its local order.
std::vector<int64_t> partition_positions(Scheme scheme, int64_t seq_len, int cp_size, int rank);

// Inverse of partition_positions: which rank holds `position` and at which local index.
struct PositionOwner {
  int rank;
  int64_t local_index;
};
PositionOwner position_owner(Scheme scheme, int64_t seq_len, int cp_size, int64_t position);

// Row-major [batch, heads, seq_len, dim] -> rank's [batch, heads, seq_len / cp_size, dim]
// (dim = 1 for per-row tensors such as the LSE).
std::vector<double> scatter_shard(const std::vector<double>& full, int64_t batch, int64_t heads,
                                  int64_t seq_len, int64_t dim, Scheme scheme, int cp_size,
                                  int rank);
std::vector<float> scatter_shard(const std::vector<float>& full, int64_t batch, int64_t heads,
                                 int64_t seq_len, int64_t dim, Scheme scheme, int cp_size,
                                 int rank);

// Inverse of scatter_shard: shards[r] is rank r's shard; returns the full tensor.
std::vector<double> gather_shards(const std::vector<std::vector<double>>& shards, int64_t batch,
                                  int64_t heads, int64_t seq_len, int64_t dim, Scheme scheme,
                                  int cp_size);
std::vector<float> gather_shards(const std::vector<std::vector<float>>& shards, int64_t batch,
                                 int64_t heads, int64_t seq_len, int64_t dim, Scheme scheme,
                                 int cp_size);

}  // namespace cpgen
