#include "runtime/ring/partition.h"

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

template <typename T>
std::vector<T> scatter_impl(const std::vector<T>& full, int64_t batch, int64_t heads,
                            int64_t seq_len, int64_t dim, Scheme scheme, int cp_size, int rank) {
  check_partitionable(scheme, seq_len, cp_size);
  check_full_size(full, batch, heads, seq_len, dim);
  const std::vector<int64_t> positions = partition_positions(scheme, seq_len, cp_size, rank);
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
                           int cp_size) {
  check_partitionable(scheme, seq_len, cp_size);
  if (static_cast<int64_t>(shards.size()) != cp_size)
    throw_bad_input("gather_shards: got " + std::to_string(shards.size()) + " shards for " +
                    std::to_string(cp_size) + " ranks");
  const int64_t local_len = seq_len / cp_size;
  std::vector<T> full(static_cast<size_t>(batch * heads * seq_len * dim));
  for (int rank = 0; rank < cp_size; ++rank) {
    const std::vector<T>& shard = shards[rank];
    if (static_cast<int64_t>(shard.size()) != batch * heads * local_len * dim)
      throw_bad_input("gather_shards: shard of rank " + std::to_string(rank) + " has " +
                      std::to_string(shard.size()) + " elements; expected " +
                      std::to_string(batch * heads * local_len * dim));
    const std::vector<int64_t> positions = partition_positions(scheme, seq_len, cp_size, rank);
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

std::vector<int64_t> partition_positions(Scheme scheme, int64_t seq_len, int cp_size, int rank) {
  check_partitionable(scheme, seq_len, cp_size);
  check_rank(rank, cp_size);
  const int64_t n = cp_size;
  const int64_t local_len = seq_len / n;
  std::vector<int64_t> positions;
  positions.reserve(static_cast<size_t>(local_len));
  switch (scheme) {
    case Scheme::kContiguous:
      for (int64_t i = 0; i < local_len; ++i) positions.push_back(rank * local_len + i);
      break;
    case Scheme::kZigzag: {
      // Chunk r pairs with chunk 2N-1-r so every rank gets the same causal work.
      const int64_t chunk = seq_len / (2 * n);
      for (int64_t i = 0; i < chunk; ++i) positions.push_back(rank * chunk + i);
      for (int64_t i = 0; i < chunk; ++i) positions.push_back((2 * n - 1 - rank) * chunk + i);
      break;
    }
    case Scheme::kZigzagToken:
      // Fold f covers tokens [f*N, (f+1)*N); even folds go forward, odd folds backward, so rank
      // r takes the token at offset r in even folds and N-1-r in odd ones: one per fold.
      for (int64_t fold = 0; fold < local_len; ++fold)
        positions.push_back(fold * n + (fold % 2 == 0 ? rank : n - 1 - rank));
      break;
    case Scheme::kStriped:
      for (int64_t i = 0; i < local_len; ++i) positions.push_back(rank + i * n);
      break;
  }
  return positions;
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
                                  int rank) {
  return scatter_impl(full, batch, heads, seq_len, dim, scheme, cp_size, rank);
}
std::vector<float> scatter_shard(const std::vector<float>& full, int64_t batch, int64_t heads,
                                 int64_t seq_len, int64_t dim, Scheme scheme, int cp_size,
                                 int rank) {
  return scatter_impl(full, batch, heads, seq_len, dim, scheme, cp_size, rank);
}
std::vector<double> gather_shards(const std::vector<std::vector<double>>& shards, int64_t batch,
                                  int64_t heads, int64_t seq_len, int64_t dim, Scheme scheme,
                                  int cp_size) {
  return gather_impl(shards, batch, heads, seq_len, dim, scheme, cp_size);
}
std::vector<float> gather_shards(const std::vector<std::vector<float>>& shards, int64_t batch,
                                 int64_t heads, int64_t seq_len, int64_t dim, Scheme scheme,
                                 int cp_size) {
  return gather_impl(shards, batch, heads, seq_len, dim, scheme, cp_size);
}

}  // namespace cpgen
