// CPU checks of the causal tile logic (templates/mask.cuh) against brute force over the
// positions a rank really holds (contiguous, zigzag, striped and zigzag-token splits of a
// sequence).
#include "cpgen/mask.cuh"

#include "cpgen/layout.cuh"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <random>
#include <string>
#include <utility>
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

// Zigzag-token: one token per fold of N, at offset r in even folds and N - 1 - r in odd ones.
std::vector<int> zigzag_token_positions(int seq_len, int cp_size, int rank) {
  std::vector<int> out;
  for (int fold = 0; fold * cp_size < seq_len; ++fold) {
    const int p = fold * cp_size + (fold % 2 == 0 ? rank : cp_size - 1 - rank);
    if (p < seq_len) out.push_back(p);
  }
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
  EXPECT_EQ(count_at_or_before_in_runs(pos.data(), 0, 100), 0);
  EXPECT_EQ(count_at_or_before_in_runs(pos.data(), -3, 100), 0);
}

// The searches (the probing ones of the block ranges and the plain ones of the per-row ranges)
// against std::upper_bound / std::lower_bound on every kind of array they meet: a
// rank's positions under each scheme (whole chunks and the runs of a tile inside them), strictly
// increasing arrays with irregular gaps, non-decreasing ones with repeats (key intervals' ends),
// lengths 1 to a few hundred, every bound from below the first entry to past the last, and the
// int extremes.
TEST(Mask, CountsMatchTheStandardBoundsOnEveryKindOfArray) {
  std::mt19937 rng(7);
  std::vector<std::vector<int>> arrays;
  for (int n : {2, 4, 8})
    for (int r = 0; r < n; ++r) {
      arrays.push_back(zigzag_positions(16 * n * 3, n, r));
      arrays.push_back(striped_positions(16 * n * 3, n, r));
      arrays.push_back(contiguous_positions(16 * n * 3, n, r));
    }
  const std::vector<int> zigzag = zigzag_positions(512, 4, 1);
  for (int start : {0, 5, 60, 63, 64, 100})  // tiles of a chunk: one run, or the end of one and the start of the next
    arrays.emplace_back(zigzag.begin() + start,
                        zigzag.begin() + std::min<int>(start + 32, static_cast<int>(zigzag.size())));
  for (int len : {1, 2, 3, 5, 17, 128, 300}) {
    std::vector<int> increasing, repeating;
    int p = -40, q = -40;
    for (int i = 0; i < len; ++i) {
      p += 1 + static_cast<int>(rng() % 9);
      q += static_cast<int>(rng() % 3);
      increasing.push_back(p);
      repeating.push_back(q);
    }
    arrays.push_back(increasing);
    arrays.push_back(repeating);
  }
  arrays.push_back({std::numeric_limits<int>::min(), 0, std::numeric_limits<int>::max()});
  for (const std::vector<int>& a : arrays) {
    const int len = static_cast<int>(a.size());
    std::vector<int> bounds = {std::numeric_limits<int>::min(), std::numeric_limits<int>::min() + 1, -1, 0, 1,
                               std::numeric_limits<int>::max() - 1, std::numeric_limits<int>::max()};
    for (long long b = static_cast<long long>(a.front()) - 3; b <= a.back() + 3LL && bounds.size() < 5000; ++b)
      if (b >= std::numeric_limits<int>::min() && b <= std::numeric_limits<int>::max())
        bounds.push_back(static_cast<int>(b));
    for (int b : bounds) {
      const int above = static_cast<int>(std::upper_bound(a.begin(), a.end(), b) - a.begin());
      const int below = static_cast<int>(std::lower_bound(a.begin(), a.end(), b) - a.begin());
      ASSERT_EQ(count_at_or_before_in_runs(a.data(), len, b), above) << "bound " << b << ", length " << len;
      ASSERT_EQ(count_at_or_before(a.data(), len, b), above) << "bound " << b << ", length " << len;
      // count_before(b) is count_at_most(b - 1), which int cannot hold for the lowest bound (the
      // kernels' bounds are positions, never below 0; UBSan found this test asking for it).
      if (b == std::numeric_limits<int>::min()) continue;
      ASSERT_EQ(count_at_most(ArrayAt{a.data()}, len, b - 1), below) << "bound " << b << ", length " << len;
      ASSERT_EQ(count_before(a.data(), len, b), below) << "bound " << b << ", length " << len;
    }
  }
}

// The reason for the probes: a whole chunk of a contiguous, zigzag or striped rank, at 16K keys,
// is searched with its two ends and at most four probe pairs (a contiguous one with one pair)
// for every bound between its ends, where a binary search makes 14-15 dependent loads; an
// irregular array of the same length still falls back to the search (more loads), so the count
// below measures something.
TEST(Mask, RingChunksAreSearchedWithTheEndsAndAtMostFourProbes) {
  struct CountingAt {
    const int* values;
    int* loads;
    int operator()(int i) const {
      ++*loads;
      return values[i];
    }
  };
  const int seq = 16384 * 8;
  for (const auto& [scheme, positions] :
       std::vector<std::pair<const char*, std::vector<int>>>{{"contiguous", contiguous_positions(seq, 8, 3)},
                                                             {"zigzag", zigzag_positions(seq, 8, 2)},
                                                             {"striped", striped_positions(seq, 8, 5)}}) {
    const int len = static_cast<int>(positions.size());
    ASSERT_EQ(len, 16384);
    for (int bound = positions.front(); bound < positions.back(); bound += 7) {
      int loads = 0;
      const int count = count_at_most(CountingAt{positions.data(), &loads}, len, bound);
      ASSERT_EQ(count, std::upper_bound(positions.begin(), positions.end(), bound) - positions.begin());
      ASSERT_LE(loads, std::string(scheme) == "contiguous" ? 4 : 10) << scheme << ", bound " << bound;
    }
  }
  std::mt19937 rng(3);
  std::vector<int> irregular;
  for (int p = 0; static_cast<int>(irregular.size()) < 16384;)
    irregular.push_back(p += 1 + static_cast<int>(rng() % 5));
  int most = 0;
  for (int bound = irregular.front(); bound < irregular.back(); bound += 101) {
    int loads = 0;
    count_at_most(CountingAt{irregular.data(), &loads}, 16384, bound);
    most = std::max(most, loads);
  }
  EXPECT_GT(most, 10);
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
    // The runs' search (the wgmma family's) and the plain binary search (the mma.sync family's)
    // give the same tiles.
    const TileRange plain = key_tile_range(k_pos.data(), kv_len, q_pos[qf], q_pos[ql], block_n, causal, false);
    ASSERT_EQ(r.full_tiles, plain.full_tiles) << "block " << b;
    ASSERT_EQ(r.tiles, plain.tiles) << "block " << b;
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
              check_ranges(striped_positions(384, cp, q_rank), striped_positions(384, cp, k_rank), group, bm,
                           bn, true);
              check_ranges(zigzag_token_positions(384, cp, q_rank), zigzag_token_positions(384, cp, k_rank),
                           group, bm, bn, true);
            }
  for (int q_rank = 0; q_rank < 8; ++q_rank)  // strides that alternate on most ranks
    for (int k_rank = 0; k_rank < 8; ++k_rank)
      check_ranges(zigzag_token_positions(8 * 300, 8, q_rank), zigzag_token_positions(8 * 300, 8, k_rank), 1, 64,
                   64, true);
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
