#include "runtime/ring/partition.h"

#include <algorithm>
#include <string>

#include "cpgen/error.h"

namespace cpgen {
namespace {

// The number seq_len must be a multiple of: zigzag cuts the sequence into 2N chunks; the other
// schemes hand out one position per rank per group of N.
int64_t split_unit(Scheme scheme, int cp_size) {
  switch (scheme) {
    case Scheme::kContiguous:
    case Scheme::kZigzagToken:
    case Scheme::kStriped: return cp_size;
    case Scheme::kZigzag: return 2 * static_cast<int64_t>(cp_size);
  }
  throw Error(ErrorKind::kInternal, "partition: unknown scheme value " +
                                        std::to_string(static_cast<int>(scheme)));
}

void check_rank(int rank, int cp_size) {
  if (rank < 0 || rank >= cp_size)
    throw_bad_input("partition: rank " + std::to_string(rank) + " is outside [0, " +
                    std::to_string(cp_size) + ")");
}

template <typename T>
void check_full_size(const std::vector<T>& full, int64_t batch, int64_t heads, int64_t seq_len,
                     int64_t dim) {
  if (batch < 0 || heads < 0 || dim < 0)
    throw_bad_input("scatter_shard: batch, heads and dim must be non-negative");
  if (static_cast<int64_t>(full.size()) != batch * heads * seq_len * dim)
    throw_bad_input("scatter_shard: tensor has " + std::to_string(full.size()) +
                    " elements; [batch, heads, seq, dim] = [" + std::to_string(batch) + ", " +
                    std::to_string(heads) + ", " + std::to_string(seq_len) + ", " +
                    std::to_string(dim) + "] needs " +
                    std::to_string(batch * heads * seq_len * dim));
}

// Chunk `chunk` of `chunks` over a document of `length` tokens starting at `start`: sizes
// length / chunks, the first length % chunks of them one token longer.
void append_chunk(int64_t start, int64_t length, int64_t chunks, int64_t chunk,
                  std::vector<int64_t>& positions) {
  const int64_t first = chunk_first_offset(length, chunks, chunk), past = chunk_first_offset(length, chunks, chunk + 1);
  for (int64_t i = first; i < past; ++i) positions.push_back(start + i);
}

// The positions of one document that `rank` holds, appended in increasing order.
void append_document(Scheme scheme, int64_t start, int64_t length, int64_t n, int64_t rank,
                     std::vector<int64_t>& positions) {
  switch (scheme) {
    case Scheme::kContiguous: append_chunk(start, length, n, rank, positions); return;
    case Scheme::kZigzag:
      // Chunk r pairs with chunk 2N-1-r so every rank gets the same causal work.
      append_chunk(start, length, 2 * n, rank, positions);
      append_chunk(start, length, 2 * n, 2 * n - 1 - rank, positions);
      return;
    case Scheme::kZigzagToken:
      // Fold f covers tokens [f*N, (f+1)*N); even folds go forward, odd folds backward, so rank
      // r takes the token at offset r in even folds and N-1-r in odd ones: one per fold. A short
      // last fold of m tokens keeps its offsets, so only the ranks whose offset is below m get one.
      for (int64_t fold = 0; fold * n < length; ++fold) {
        const int64_t offset = fold % 2 == 0 ? rank : n - 1 - rank;
        if (fold * n + offset < length) positions.push_back(start + fold * n + offset);
      }
      return;
    case Scheme::kStriped:
      for (int64_t i = rank; i < length; i += n) positions.push_back(start + i);
      return;
  }
  throw Error(ErrorKind::kInternal, "partition: unknown scheme value " +
                                        std::to_string(static_cast<int>(scheme)));
}

// The document lengths to partition: `documents`, or the whole sequence as one.
std::vector<int64_t> document_lengths(int64_t seq_len, const std::vector<int64_t>& documents) {
  if (seq_len < 0) throw_bad_input("partition: seq_len must be >= 0; got " + std::to_string(seq_len));
  if (documents.empty()) return {seq_len};
  int64_t total = 0;
  for (size_t i = 0; i < documents.size(); ++i) {
    if (documents[i] < 0)
      throw_bad_input("partition: documents[" + std::to_string(i) + "] is " +
                      std::to_string(documents[i]) + "; a length must be >= 0");
    total += documents[i];
  }
  if (total != seq_len)
    throw_bad_input("partition: documents sum to " + std::to_string(total) + "; seq_len is " +
                    std::to_string(seq_len));
  return documents;
}

template <typename T>
std::vector<T> scatter_impl(const std::vector<T>& full, int64_t batch, int64_t heads,
                            int64_t seq_len, int64_t dim, Scheme scheme, int cp_size, int rank,
                            const std::vector<int64_t>& documents) {
  check_full_size(full, batch, heads, seq_len, dim);
  const std::vector<int64_t> positions =
      partition_positions(scheme, seq_len, cp_size, rank, documents);
  const int64_t local_len = static_cast<int64_t>(positions.size());
  std::vector<T> shard(static_cast<size_t>(batch * heads * local_len * dim));
  for (int64_t bh = 0; bh < batch * heads; ++bh)
    for (int64_t i = 0; i < local_len; ++i) {
      const T* src = full.data() + (bh * seq_len + positions[i]) * dim;
      T* dst = shard.data() + (bh * local_len + i) * dim;
      for (int64_t d = 0; d < dim; ++d) dst[d] = src[d];
    }
  return shard;
}

template <typename T>
std::vector<T> gather_impl(const std::vector<std::vector<T>>& shards, int64_t batch,
                           int64_t heads, int64_t seq_len, int64_t dim, Scheme scheme,
                           int cp_size, const std::vector<int64_t>& documents) {
  if (static_cast<int64_t>(shards.size()) != cp_size)
    throw_bad_input("gather_shards: got " + std::to_string(shards.size()) + " shards for " +
                    std::to_string(cp_size) + " ranks");
  std::vector<T> full(static_cast<size_t>(batch * heads * seq_len * dim));
  for (int rank = 0; rank < cp_size; ++rank) {
    const std::vector<T>& shard = shards[rank];
    const std::vector<int64_t> positions =
        partition_positions(scheme, seq_len, cp_size, rank, documents);
    const int64_t local_len = static_cast<int64_t>(positions.size());
    if (static_cast<int64_t>(shard.size()) != batch * heads * local_len * dim)
      throw_bad_input("gather_shards: shard of rank " + std::to_string(rank) + " has " +
                      std::to_string(shard.size()) + " elements; expected " +
                      std::to_string(batch * heads * local_len * dim));
    for (int64_t bh = 0; bh < batch * heads; ++bh)
      for (int64_t i = 0; i < local_len; ++i) {
        const T* src = shard.data() + (bh * local_len + i) * dim;
        T* dst = full.data() + (bh * seq_len + positions[i]) * dim;
        for (int64_t d = 0; d < dim; ++d) dst[d] = src[d];
      }
  }
  return full;
}

}  // namespace

void check_partitionable(Scheme scheme, int64_t seq_len, int cp_size) {
  const std::string name(scheme_name(scheme));
  if (cp_size < 1)
    throw_bad_input(name + " needs cp_size >= 1; got " + std::to_string(cp_size));
  const int64_t unit = split_unit(scheme, cp_size);
  const std::string unit_text = scheme == Scheme::kZigzag ? "2*cp_size" : "cp_size";
  if (seq_len <= 0 || seq_len % unit != 0)
    throw_bad_input(name + " needs seq_len divisible by " + unit_text + " (" +
                    std::to_string(unit) + "); got " + std::to_string(seq_len));
}

std::vector<int64_t> partition_positions(Scheme scheme, int64_t seq_len, int cp_size, int rank,
                                         const std::vector<int64_t>& documents) {
  if (cp_size < 1)
    throw_bad_input(std::string(scheme_name(scheme)) + " needs cp_size >= 1; got " +
                    std::to_string(cp_size));
  check_rank(rank, cp_size);
  std::vector<int64_t> positions;
  positions.reserve(static_cast<size_t>(seq_len / cp_size + 1));
  int64_t start = 0;
  for (int64_t length : document_lengths(seq_len, documents)) {
    append_document(scheme, start, length, cp_size, rank, positions);
    start += length;
  }
  return positions;
}

std::vector<std::vector<int64_t>> partition_positions_all(Scheme scheme, int64_t seq_len, int cp_size,
                                                          const std::vector<int64_t>& documents) {
  const std::vector<int64_t> rows = partition_rows_all(scheme, seq_len, cp_size, documents);
  std::vector<std::vector<int64_t>> positions(static_cast<size_t>(cp_size));
  for (int r = 0; r < cp_size; ++r) positions[static_cast<size_t>(r)].reserve(static_cast<size_t>(rows[static_cast<size_t>(r)]));
  // Offsets in increasing order reach each rank's positions in the order append_document lists them.
  int64_t start = 0;
  for (int64_t length : document_lengths(seq_len, documents)) {
    for (int64_t offset = 0; offset < length; ++offset)
      positions[static_cast<size_t>(document_offset_owner(scheme, length, cp_size, offset))].push_back(start + offset);
    start += length;
  }
  return positions;
}

int64_t partition_rows(Scheme scheme, int64_t seq_len, int cp_size, int rank, const std::vector<int64_t>& documents) {
  if (cp_size < 1)
    throw_bad_input(std::string(scheme_name(scheme)) + " needs cp_size >= 1; got " + std::to_string(cp_size));
  check_rank(rank, cp_size);
  return partition_rows_all(scheme, seq_len, cp_size, documents)[static_cast<size_t>(rank)];
}

std::vector<int64_t> partition_rows_all(Scheme scheme, int64_t seq_len, int cp_size,
                                        const std::vector<int64_t>& documents) {
  // Each document's rows per rank are the rows among its whole length: O(documents + cp_size).
  RankRowCounts rows(scheme, cp_size);
  for (int64_t length : document_lengths(seq_len, documents)) rows.add_prefix(length, length, 1);
  return rows.counts();
}

PositionOwner position_owner(Scheme scheme, int64_t seq_len, int cp_size, int64_t position) {
  check_partitionable(scheme, seq_len, cp_size);
  if (position < 0 || position >= seq_len)
    throw_bad_input("position_owner: position " + std::to_string(position) +
                    " is outside [0, " + std::to_string(seq_len) + ")");
  const int64_t n = cp_size;
  switch (scheme) {
    case Scheme::kContiguous: {
      const int64_t local_len = seq_len / n;
      return {static_cast<int>(position / local_len), position % local_len};
    }
    case Scheme::kZigzag: {
      const int64_t chunk_len = seq_len / (2 * n);
      const int64_t chunk = position / chunk_len;
      if (chunk < n) return {static_cast<int>(chunk), position % chunk_len};
      return {static_cast<int>(2 * n - 1 - chunk), chunk_len + position % chunk_len};
    }
    case Scheme::kZigzagToken: {
      const int64_t fold = position / n, offset = position % n;
      return {static_cast<int>(fold % 2 == 0 ? offset : n - 1 - offset), fold};
    }
    case Scheme::kStriped:
      return {static_cast<int>(position % n), position / n};
  }
  throw Error(ErrorKind::kInternal, "position_owner: unknown scheme value");
}

std::vector<double> scatter_shard(const std::vector<double>& full, int64_t batch, int64_t heads,
                                  int64_t seq_len, int64_t dim, Scheme scheme, int cp_size,
                                  int rank, const std::vector<int64_t>& documents) {
  return scatter_impl(full, batch, heads, seq_len, dim, scheme, cp_size, rank, documents);
}
std::vector<float> scatter_shard(const std::vector<float>& full, int64_t batch, int64_t heads,
                                 int64_t seq_len, int64_t dim, Scheme scheme, int cp_size,
                                 int rank, const std::vector<int64_t>& documents) {
  return scatter_impl(full, batch, heads, seq_len, dim, scheme, cp_size, rank, documents);
}
std::vector<double> gather_shards(const std::vector<std::vector<double>>& shards, int64_t batch,
                                  int64_t heads, int64_t seq_len, int64_t dim, Scheme scheme,
                                  int cp_size, const std::vector<int64_t>& documents) {
  return gather_impl(shards, batch, heads, seq_len, dim, scheme, cp_size, documents);
}
std::vector<float> gather_shards(const std::vector<std::vector<float>>& shards, int64_t batch,
                                 int64_t heads, int64_t seq_len, int64_t dim, Scheme scheme,
                                 int cp_size, const std::vector<int64_t>& documents) {
  return gather_impl(shards, batch, heads, seq_len, dim, scheme, cp_size, documents);
}

}  // namespace cpgen
