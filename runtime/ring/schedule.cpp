#include "runtime/ring/schedule.h"

#include <algorithm>
#include <string>

#include "cpgen/error.h"
#include "runtime/ring/kernel_support.h"
#include "runtime/ring/partition.h"

namespace cpgen {

int kv_source_rank(int rank, int step, int cp_size) {
  if (cp_size < 1) throw_bad_input("kv_source_rank: cp_size must be >= 1; got " +
                                   std::to_string(cp_size));
  return ((rank - step) % cp_size + cp_size) % cp_size;
}

TileWork classify_tile(int64_t q_first, int64_t q_last, int64_t k_first, int64_t k_last,
                       bool causal) {
  if (!causal) return TileWork::kFull;
  if (k_first > q_last) return TileWork::kSkip;
  if (k_last <= q_first) return TileWork::kFull;
  return TileWork::kMasked;
}

std::vector<RankWork> rank_work(const Problem& p, int block_m, int block_n) {
  if (block_m < 1 || block_n < 1)
    throw_bad_input("rank_work: block_m and block_n must be >= 1; got " +
                    std::to_string(block_m) + " and " + std::to_string(block_n));
  if (p.kv_heads < 1 || p.q_heads < 1 || p.q_heads % p.kv_heads != 0)
    throw_bad_input("rank_work: q_heads (" + std::to_string(p.q_heads) +
                    ") must be a positive multiple of kv_heads (" + std::to_string(p.kv_heads) +
                    ")");
  const int cp_size = static_cast<int>(p.cp_size);
  check_partitionable(p.scheme, p.seq_len, cp_size);
  const int64_t group = p.gqa_group();
  const int64_t local_len = p.seq_len / cp_size;
  const int64_t packed_rows = local_len * group;
  // Every tile runs once per (batch, kv head) CTA grid slice.
  const double ctas = static_cast<double>(p.batch * p.kv_heads);

  // One document (one listed is the same), equal shards, no window: a packed or windowed problem
  // is planned by its visible pairs instead (plan.cpp uses_pair_model), never by this tile count.
  if (kernel_needs_key_intervals(p))
    throw Error(ErrorKind::kInternal, "rank_work: documents and windows are counted by visible pairs");
  const std::vector<std::vector<int64_t>> positions =
      partition_positions_all(p.scheme, p.seq_len, cp_size, p.documents);

  std::vector<RankWork> work(cp_size);
  for (int rank = 0; rank < cp_size; ++rank) {
    const std::vector<int64_t>& q_pos = positions[rank];
    RankWork& w = work[rank];
    for (int step = 0; step < cp_size; ++step) {
      const std::vector<int64_t>& k_pos = positions[kv_source_rank(rank, step, cp_size)];
      for (int64_t row0 = 0; row0 < packed_rows; row0 += block_m) {
        const int64_t rows = std::min<int64_t>(block_m, packed_rows - row0);
        const int64_t q_first = q_pos[row0 / group];
        const int64_t q_last = q_pos[(row0 + rows - 1) / group];
        for (int64_t col0 = 0; col0 < local_len; col0 += block_n) {
          const int64_t cols = std::min<int64_t>(block_n, local_len - col0);
          const TileWork kind =
              classify_tile(q_first, q_last, k_pos[col0], k_pos[col0 + cols - 1], p.causal);
          const int64_t count = p.batch * p.kv_heads;
          switch (kind) {
            case TileWork::kSkip: w.skipped_tiles += count; continue;
            case TileWork::kFull: w.full_tiles += count; break;
            case TileWork::kMasked: w.masked_tiles += count; break;
          }
          // rows packed rows of one kv head are rows / G query rows of each of its G heads, so
          // this equals 4 * (rows / G) * cols * head_dim * batch * q_heads.
          w.flops += 4.0 * static_cast<double>(rows) * static_cast<double>(cols) *
                     static_cast<double>(p.head_dim) * ctas;
        }
      }
    }
  }
  return work;
}

}  // namespace cpgen
