// CPU checks of the causal tile logic (templates/mask.cuh) against brute force over the
// positions a rank really holds (contiguous and zigzag splits of a sequence).
#include "cpgen/mask.cuh"

#include "cpgen/layout.cuh"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace cpgen::device {
namespace {

// Global positions of rank `rank` under zigzag: chunk r then chunk 2N-1-r of 2N equal chunks.
std::vector<int> zigzag_positions(int seq_len, int cp_size, int rank) {
  const int chunk = seq_len / (2 * cp_size);
  std::vector<int> out;
  for (int c : {rank, 2 * cp_size - 1 - rank})
    for (int i = 0; i < chunk; ++i) out.push_back(c * chunk + i);
  return out;
}

// Striped: rank r holds positions r, r + N, r + 2N, ...
std::vector<int> striped_positions(int seq_len, int cp_size, int rank) {
  std::vector<int> out;
  for (int p = rank; p < seq_len; p += cp_size) out.push_back(p);
  return out;
}

std::vector<int> contiguous_positions(int seq_len, int cp_size, int rank) {
  const int n = seq_len / cp_size;
  std::vector<int> out;
  for (int i = 0; i < n; ++i) out.push_back(rank * n + i);
  return out;
}

TEST(Mask, ClassifyTileBoundaries) {
  EXPECT_EQ(classify_tile(10, 20, 21, 30, true), TileClass::kSkip);    // every key after every query
  EXPECT_EQ(classify_tile(10, 20, 20, 30, true), TileClass::kMasked);  // key 20 visible to query 20
  EXPECT_EQ(classify_tile(10, 20, 0, 10, true), TileClass::kFull);     // every key at or before 10
  EXPECT_EQ(classify_tile(10, 20, 0, 11, true), TileClass::kMasked);   // key 11 hidden from query 10
  EXPECT_EQ(classify_tile(10, 20, 100, 200, false), TileClass::kFull);
  EXPECT_TRUE(key_visible(5, 5, true));
  EXPECT_FALSE(key_visible(5, 6, true));
  EXPECT_TRUE(key_visible(5, 6, false));
}

TEST(Mask, CountAtOrBeforeMatchesLinearScan) {
  std::vector<int> pos = zigzag_positions(64, 4, 1);  // 8..15, 48..55
  for (int bound = -1; bound < 70; ++bound) {
    int expected = 0;
    for (int p : pos) expected += p <= bound;
    EXPECT_EQ(count_at_or_before(pos.data(), static_cast<int>(pos.size()), bound), expected) << bound;
  }
  EXPECT_EQ(count_at_or_before(pos.data(), 0, 100), 0);
  EXPECT_EQ(count_at_or_before(pos.data(), -3, 100), 0);  // an empty range past kv_len
}

// For every query block and key tile: tiles before full_tiles need no mask for any row, tiles at
// or past `tiles` are invisible to every row, and every tile with a visible key is run.
void check_ranges(const std::vector<int>& q_pos, const std::vector<int>& k_pos, int group,
                  int block_m, int block_n, bool causal) {
  const int q_len = static_cast<int>(q_pos.size()), kv_len = static_cast<int>(k_pos.size());
  const int blocks = (q_len * group + block_m - 1) / block_m;
  for (int b = 0; b < blocks; ++b) {
    const int qf = b * block_m / group;
    const int ql = std::min(((b + 1) * block_m - 1) / group, q_len - 1);
    TileRange r = key_tile_range(k_pos.data(), kv_len, q_pos[qf], q_pos[ql], block_n, causal);
    const int key_tiles = (kv_len + block_n - 1) / block_n;
    ASSERT_LE(r.full_tiles, r.tiles);
    ASSERT_LE(r.tiles, key_tiles);
    for (int t = 0; t < key_tiles; ++t) {
      bool all_visible = (t + 1) * block_n <= kv_len, any_visible = false;
      for (int q = qf; q <= ql; ++q)
        for (int k = t * block_n; k < std::min((t + 1) * block_n, kv_len); ++k) {
          const bool v = key_visible(q_pos[q], k_pos[k], causal);
          all_visible = all_visible && v;
          any_visible = any_visible || v;
        }
      if (t < r.full_tiles) EXPECT_TRUE(all_visible) << "block " << b << " tile " << t;
      if (t >= r.tiles) EXPECT_FALSE(any_visible) << "block " << b << " tile " << t;
      if (any_visible) EXPECT_LT(t, r.tiles) << "block " << b << " tile " << t;
      if (all_visible) EXPECT_LT(t, r.tiles);
    }
  }
}

TEST(Mask, TileRangesAgreeWithBruteForceOverRingSteps) {
  for (int cp : {1, 2, 4})
    for (int q_rank = 0; q_rank < cp; ++q_rank)
      for (int k_rank = 0; k_rank < cp; ++k_rank)
        for (int group : {1, 4})
          for (int bm : {32, 64, 128})
            for (int bn : {32, 64}) {
              check_ranges(zigzag_positions(384, cp, q_rank), zigzag_positions(384, cp, k_rank), group,
                           bm, bn, true);
              check_ranges(contiguous_positions(200, cp == 4 ? 2 : cp, q_rank % (cp == 4 ? 2 : cp)),
                           contiguous_positions(200, cp == 4 ? 2 : cp, k_rank % (cp == 4 ? 2 : cp)),
                           group, bm, bn, true);
              check_ranges(zigzag_positions(96, cp, q_rank), zigzag_positions(96, cp, k_rank), group, bm,
                           bn, false);
            }
}

// The forward kernels take their query blocks in heavy_first_block order (layout.cuh): every block
// exactly once, and under a causal mask never a block with more key tiles after one with fewer,
// for every (query rank, key rank) step of every scheme. With the plain order (block x runs block
// x) the last check fails on every causal diagonal.
TEST(Mask, QueryBlocksLaunchLongestFirstUnderACausalMask) {
  using Positions = std::vector<int> (*)(int, int, int);
  const Positions schemes[] = {contiguous_positions, zigzag_positions, striped_positions};
  for (Positions positions : schemes)
    for (int cp : {1, 2, 4})
      for (int q_rank = 0; q_rank < cp; ++q_rank)
        for (int k_rank = 0; k_rank < cp; ++k_rank)
          for (int group : {1, 4})
            for (int bm : {64, 128}) {
              const std::vector<int> q_pos = positions(1024, cp, q_rank), k_pos = positions(1000, cp, k_rank);
              const int q_len = static_cast<int>(q_pos.size()), kv_len = static_cast<int>(k_pos.size());
              const int blocks = (q_len * group + bm - 1) / bm;
              std::vector<int> runs(blocks, 0);
              int previous_tiles = kv_len;  // no block runs more tiles than the chunk has
              for (int x = 0; x < blocks; ++x) {
                const int b = heavy_first_block(x, blocks);
                ASSERT_GE(b, 0);
                ASSERT_LT(b, blocks);
                ++runs[b];
                const int qf = block_first_query(b, bm, group), ql = block_last_query(b, bm, group, q_len);
                const int tiles = key_tile_range(k_pos.data(), kv_len, q_pos[qf], q_pos[ql], 64, true).tiles;
                EXPECT_LE(tiles, previous_tiles) << "launch " << x << " (block " << b << ") of " << blocks
                                                 << ", ranks " << q_rank << "/" << k_rank << " of " << cp;
                previous_tiles = tiles;
              }
              for (int b = 0; b < blocks; ++b) ASSERT_EQ(runs[b], 1) << "block " << b;
            }
}

// A persistent launch's work items (layout.cuh persistent_item): every (query block, batch, kv
// head) exactly once over blocks x pairs items; the pairs in sections of section_pairs consecutive
// ones (the last may hold fewer), a section's items all before the next's; and under a causal mask
// a section's items in order never go from fewer key tiles to more, across its pairs too, so the
// CTAs' round-robin shares differ by at most one block's tiles. In pair-major order (a pair's
// blocks together) the order check fails for sections of more than one pair.
TEST(Mask, PersistentItemsCoverEveryBlockOnceInSectionsLongestFirstAcrossASectionsPairs) {
  for (int section_pairs : {1, 2, 4, 1000})
    for (int cp : {1, 2, 4})
      for (int q_rank = 0; q_rank < cp; ++q_rank)
        for (int batch : {1, 3})
          for (int kv_heads : {1, 2, 5}) {
            const int group = 2, bm = 128;
            const std::vector<int> q_pos = zigzag_positions(1024, cp, q_rank), k_pos = zigzag_positions(1024, cp, 0);
            const int q_len = static_cast<int>(q_pos.size()), kv_len = static_cast<int>(k_pos.size());
            const int blocks = (q_len * group + bm - 1) / bm;
            const long long pairs = static_cast<long long>(batch) * kv_heads;
            const long long items = blocks * pairs;
            const long long per_section = std::min<long long>(section_pairs, pairs);
            std::vector<int> runs(static_cast<size_t>(items), 0);
            int previous_tiles = kv_len;
            long long section = 0;
            for (long long i = 0; i < items; ++i) {
              const PersistentItem at = persistent_item(i, blocks, batch, kv_heads, section_pairs);
              ASSERT_GE(at.m_block, 0);
              ASSERT_LT(at.m_block, blocks);
              ASSERT_GE(at.batch, 0);
              ASSERT_LT(at.batch, batch);
              ASSERT_GE(at.kv_head, 0);
              ASSERT_LT(at.kv_head, kv_heads);
              const long long pair = static_cast<long long>(at.batch) * kv_heads + at.kv_head;
              ++runs[static_cast<size_t>(pair * blocks + at.m_block)];
              // Sections come in order: the pair is in the current one or opens the next.
              if (pair / per_section != section) {
                ASSERT_EQ(pair / per_section, section + 1) << "item " << i << ", sections of " << section_pairs;
                section = pair / per_section;
                previous_tiles = kv_len;
              }
              const int qf = block_first_query(at.m_block, bm, group);
              const int ql = block_last_query(at.m_block, bm, group, q_len);
              const int tiles = key_tile_range(k_pos.data(), kv_len, q_pos[qf], q_pos[ql], 64, true).tiles;
              EXPECT_LE(tiles, previous_tiles) << "item " << i << " of " << items << ", rank " << q_rank << " of " << cp
                                               << ", sections of " << section_pairs;
              previous_tiles = tiles;
            }
            for (int r : runs) ASSERT_EQ(r, 1);
          }
  EXPECT_EQ(persistent_ctas(1000, 132), 132);
  EXPECT_EQ(persistent_ctas(7, 132), 7);
}

}  // namespace
}  // namespace cpgen::device
