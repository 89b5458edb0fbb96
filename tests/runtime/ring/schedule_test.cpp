// The ring schedule: chunk ownership per step, tile classification and per-rank work.
#include "runtime/ring/schedule.h"

#include <gtest/gtest.h>

#include "cpgen/error.h"
#include "runtime/ring/partition.h"
#include "test_util.h"

namespace cpgen {
namespace {

TEST(Schedule, KvSourceRankFollowsTheRing) {
  EXPECT_EQ(kv_source_rank(0, 0, 1), 0);
  for (int n : {1, 2, 3, 4, 8}) {
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(kv_source_rank(r, 0, n), r);
      std::vector<int> seen(n, 0);
      for (int s = 0; s < n; ++s) {
        const int src = kv_source_rank(r, s, n);
        ++seen[src];
        // What rank r holds at step s+1 is what rank r-1 held at step s (chunks move to r+1).
        if (s + 1 < n) EXPECT_EQ(kv_source_rank(r, s + 1, n), kv_source_rank((r - 1 + n) % n, s, n));
      }
      for (int c : seen) EXPECT_EQ(c, 1) << "rank " << r << " must see every chunk once";
    }
  }
  EXPECT_EQ(kv_source_rank(0, 1, 4), 3);
  EXPECT_EQ(kv_source_rank(2, 3, 4), 3);
}

TEST(Schedule, ClassifyTile) {
  EXPECT_EQ(classify_tile(10, 20, 21, 30, true), TileWork::kSkip);
  EXPECT_EQ(classify_tile(10, 20, 0, 10, true), TileWork::kFull);
  EXPECT_EQ(classify_tile(10, 20, 0, 11, true), TileWork::kMasked);
  EXPECT_EQ(classify_tile(10, 20, 20, 30, true), TileWork::kMasked);
  EXPECT_EQ(classify_tile(10, 20, 21, 30, false), TileWork::kFull);
  // Zigzag-like tiles that jump: bounds still decide (positions increase within a tile).
  EXPECT_EQ(classify_tile(0, 15, 2, 13, true), TileWork::kMasked);
}

// Brute force over elements: a tile pair is skipped when no (query, key) pair in it has
// key <= query, full when every pair does, masked otherwise.
TEST(Schedule, RankWorkMatchesBruteForce) {
  for (Scheme scheme : {Scheme::kContiguous, Scheme::kZigzag, Scheme::kZigzagToken,
                        Scheme::kStriped}) {
    for (auto [rows_per_tile, block_n] : {std::pair{1, 1}, std::pair{2, 4}, std::pair{3, 5}}) {
      const Problem p = testing::ring_problem(scheme, 48, 3, true);
      const int64_t g = p.gqa_group();
      const auto work = rank_work(p, static_cast<int>(rows_per_tile * g), block_n);
      ASSERT_EQ(work.size(), 3u);
      const int64_t ctas = p.batch * p.kv_heads;
      for (int r = 0; r < 3; ++r) {
        const auto q_pos = partition_positions(scheme, 48, 3, r, {});
        RankWork expected;
        for (int s = 0; s < 3; ++s) {
          const auto k_pos = partition_positions(scheme, 48, 3, kv_source_rank(r, s, 3), {});
          for (size_t q0 = 0; q0 < q_pos.size(); q0 += rows_per_tile)
            for (size_t k0 = 0; k0 < k_pos.size(); k0 += block_n) {
              const size_t q1 = std::min(q_pos.size(), q0 + rows_per_tile);
              const size_t k1 = std::min(k_pos.size(), k0 + block_n);
              int64_t visible = 0;
              for (size_t i = q0; i < q1; ++i)
                for (size_t j = k0; j < k1; ++j) visible += k_pos[j] <= q_pos[i];
              const int64_t pairs = static_cast<int64_t>((q1 - q0) * (k1 - k0));
              if (visible == 0) {
                expected.skipped_tiles += ctas;
                continue;
              }
              (visible == pairs ? expected.full_tiles : expected.masked_tiles) += ctas;
              expected.flops += 4.0 * pairs * p.head_dim * p.batch * p.q_heads;
            }
        }
        EXPECT_EQ(work[r].full_tiles, expected.full_tiles)
            << scheme_name(scheme) << " rank " << r << " tile " << rows_per_tile << "x" << block_n;
        EXPECT_EQ(work[r].masked_tiles, expected.masked_tiles) << scheme_name(scheme);
        EXPECT_EQ(work[r].skipped_tiles, expected.skipped_tiles) << scheme_name(scheme);
        EXPECT_DOUBLE_EQ(work[r].flops, expected.flops) << scheme_name(scheme);
      }
    }
  }
}

// At one query and one key per tile, the computed work is exactly the causal pairs.
TEST(Schedule, ElementTilesCountCausalPairs) {
  const Problem p = testing::ring_problem(Scheme::kZigzag, 64, 4, true);
  const auto work = rank_work(p, static_cast<int>(p.gqa_group()), 1);
  double total = 0;
  for (const RankWork& w : work) {
    total += w.flops;
    EXPECT_EQ(w.masked_tiles, 0);
  }
  EXPECT_DOUBLE_EQ(total, 4.0 * (64 * 65 / 2) * p.head_dim * p.batch * p.q_heads);
}

TEST(Schedule, FullAttentionWorkIsUniform) {
  const Problem p = testing::ring_problem(Scheme::kContiguous, 256, 4, false);
  for (const RankWork& w : rank_work(p, 64, 32)) {
    EXPECT_DOUBLE_EQ(w.flops, 4.0 * 64 * 256 * p.head_dim * p.batch * p.q_heads);
    EXPECT_EQ(w.masked_tiles, 0);
    EXPECT_EQ(w.skipped_tiles, 0);
    // 64 local queries * G=2 packed rows / 64 = 2 q tiles; 64 keys / 32 = 2 k tiles; 4 steps.
    EXPECT_EQ(w.full_tiles, 2 * 2 * 4 * p.batch * p.kv_heads);
  }
}

TEST(Schedule, ZigzagBalancesCausalWorkAndContiguousDoesNot) {
  const auto zigzag = rank_work(testing::ring_problem(Scheme::kZigzag, 1024, 4, true), 32, 32);
  for (const RankWork& w : zigzag) EXPECT_DOUBLE_EQ(w.flops, zigzag[0].flops);
  const auto contiguous = rank_work(testing::ring_problem(Scheme::kContiguous, 1024, 4, true), 32, 32);
  EXPECT_LT(contiguous[0].flops, contiguous[1].flops);
  EXPECT_LT(contiguous[2].flops, contiguous[3].flops);
  EXPECT_EQ(contiguous[0].skipped_tiles > 0, true);
}

TEST(Schedule, RankWorkRejectsBadInput) {
  EXPECT_THROW(rank_work(testing::ring_problem(Scheme::kZigzag, 100, 8, true), 64, 64), Error);
  EXPECT_THROW(rank_work(testing::ring_problem(Scheme::kZigzag, 128, 2, true), 0, 64), Error);
  EXPECT_THROW(rank_work(testing::ring_problem(Scheme::kZigzag, 128, 2, true, 3, 2), 64, 64), Error);
}

}  // namespace
}  // namespace cpgen
