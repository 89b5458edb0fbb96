// Partition schemes: which global sequence positions each context-parallel rank holds, and
// moving [batch, heads, seq, dim] tensors between the full sequence and per-rank shards.
//
// Every scheme partitions each document of the packed sequence on its own (no documents: the
// whole sequence is one) and hands every rank its positions in strictly increasing order (the
// step kernels rely on that to bound a tile by its first and last position). A document of
// length L is cut into K chunks (contiguous: K = N, zigzag: K = 2N) whose sizes differ by at
// most one token, the first L mod K chunks one longer; striped and zigzag-token deal single
// tokens, so a length that does not divide leaves the last fold short. Nothing is rounded and
// nothing padded: when lengths do not divide, ranks hold different token counts. Where every
// length divides, every rank holds seq_len / cp_size positions, as the step kernels need
// (check_partitionable). See docs/design.md, "The ring schedule", and
// tests/data/vectors/partitions.json for the reference layouts.
#pragma once

#include <cstdint>
#include <vector>

#include "cpgen/types.h"
#include "runtime/ring/rank_counts.h"

namespace cpgen {

// Throws Error(kBadInput) naming the scheme's requirement when seq_len cannot be split over
// cp_size ranks into equal shards (e.g. "zigzag needs seq_len divisible by 2*cp_size (16); got
// 100"): what the GPU step kernels need today. The partition functions below take any length.
void check_partitionable(Scheme scheme, int64_t seq_len, int cp_size);

// The global positions rank `rank` holds, in its local order. `documents` are the lengths of the
// packed documents (they must sum to seq_len); empty means one document of seq_len. Every function
// here takes them without a default: a problem's documents left out split its tensors as one
// document, silently (the NCCL verify rank and verify --random once did).
std::vector<int64_t> partition_positions(Scheme scheme, int64_t seq_len, int cp_size, int rank,
                                         const std::vector<int64_t>& documents);

// partition_positions of every rank, [cp_size], in one pass over the positions: O(seq_len +
// documents + cp_size) where asking each rank walks every document for each.
std::vector<std::vector<int64_t>> partition_positions_all(Scheme scheme, int64_t seq_len, int cp_size,
                                                          const std::vector<int64_t>& documents);

// partition_positions(...).size(), counted per document without listing the positions (a
// 2^30-token sequence on one rank listed 8 GB to count them): partition_rows_all's entry.
int64_t partition_rows(Scheme scheme, int64_t seq_len, int cp_size, int rank,
                       const std::vector<int64_t>& documents);

// partition_rows of every rank, [cp_size], in one pass over the documents: O(documents + cp_size)
// where asking each rank is O(documents x cp_size) (2^20 documents over 1024 ranks took 25 s).
std::vector<int64_t> partition_rows_all(Scheme scheme, int64_t seq_len, int cp_size,
                                        const std::vector<int64_t>& documents);

// Inverse of partition_positions: which rank holds `position` and at which local index.
struct PositionOwner {
  int rank;
  int64_t local_index;
};
// Only for equal shards (check_partitionable), one document.
PositionOwner position_owner(Scheme scheme, int64_t seq_len, int cp_size, int64_t position);

// Row-major [batch, heads, seq_len, dim] -> rank's [batch, heads, local_len, dim] with local_len
// the count of the rank's positions (dim = 1 for per-row tensors such as the LSE).
std::vector<double> scatter_shard(const std::vector<double>& full, int64_t batch, int64_t heads,
                                  int64_t seq_len, int64_t dim, Scheme scheme, int cp_size,
                                  int rank, const std::vector<int64_t>& documents);
std::vector<float> scatter_shard(const std::vector<float>& full, int64_t batch, int64_t heads,
                                 int64_t seq_len, int64_t dim, Scheme scheme, int cp_size,
                                 int rank, const std::vector<int64_t>& documents);

// Inverse of scatter_shard: shards[r] is rank r's shard; returns the full tensor.
std::vector<double> gather_shards(const std::vector<std::vector<double>>& shards, int64_t batch,
                                  int64_t heads, int64_t seq_len, int64_t dim, Scheme scheme,
                                  int cp_size, const std::vector<int64_t>& documents);
std::vector<float> gather_shards(const std::vector<std::vector<float>>& shards, int64_t batch,
                                 int64_t heads, int64_t seq_len, int64_t dim, Scheme scheme,
                                 int cp_size, const std::vector<int64_t>& documents);

}  // namespace cpgen
