// CPU checks of the key-interval tile and query-block logic (templates/mask.cuh) against brute
// force over the positions ranks really hold: packed documents of uneven lengths split by every
// scheme, with sliding windows on either side, causal or not.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "cpgen/mask.cuh"
#include "runtime/core/attention_shape.h"
#include "runtime/ring/partition.h"

namespace cpgen::device {
namespace {

std::vector<int> to_int(const std::vector<int64_t>& v) { return {v.begin(), v.end()}; }

struct Intervals {
  std::vector<int> first, last;
};
Intervals intervals_of(const AttentionShape& shape, const std::vector<int>& q_pos) {
  Intervals iv;
  for (int p : q_pos) {
    const KeyInterval k = visible_keys(shape, p);
    iv.first.push_back(static_cast<int>(k.first));
    iv.last.push_back(static_cast<int>(std::min<int64_t>(k.last, 1 << 30)));
  }
  return iv;
}

TEST(MaskIntervals, CountBeforeMatchesLinearScan) {
  const std::vector<int> v = {2, 2, 5, 9, 9, 9, 14};
  for (int bound = 0; bound < 16; ++bound) {
    int expected = 0;
    for (int x : v) expected += x < bound;
    EXPECT_EQ(count_before(v.data(), static_cast<int>(v.size()), bound), expected) << bound;
  }
  EXPECT_EQ(count_before(v.data(), 0, 100), 0);
}

// Every query block against every key tile, and every key block against every query. The block
// rules bound a block by its first and last rows, so they are exact for the bounding interval and
// conservative inside it: a row set whose intervals leave a gap (a zigzag block spanning its two
// halves, a window across a document boundary) may run a tile none of them sees, masked.
void check_step(const AttentionShape& shape, const std::vector<int>& q_pos, const std::vector<int>& k_pos,
                int group, int block_m, int block_n) {
  const Intervals iv = intervals_of(shape, q_pos);
  const int q_len = static_cast<int>(q_pos.size()), kv_len = static_cast<int>(k_pos.size());
  if (q_len == 0 || kv_len == 0) return;
  const int blocks = (q_len * group + block_m - 1) / block_m;
  const int key_tiles = (kv_len + block_n - 1) / block_n;
  for (int b = 0; b < blocks; ++b) {
    const int qa = b * block_m / group;
    const int qb = std::min(((b + 1) * block_m - 1) / group, q_len - 1);
    const IntervalTiles t = interval_key_tiles(k_pos.data(), kv_len, iv.first[qa], iv.last[qa],
                                               iv.first[qb], iv.last[qb], block_n);
    ASSERT_LE(t.begin, t.full_begin);
    ASSERT_LE(t.full_begin, t.full_end);
    ASSERT_LE(t.full_end, t.end);
    ASSERT_LE(t.end, key_tiles);
    for (int tile = 0; tile < key_tiles; ++tile) {
      bool all = (tile + 1) * block_n <= kv_len, any = false;
      for (int q = qa; q <= qb; ++q)
        for (int k = tile * block_n; k < std::min((tile + 1) * block_n, kv_len); ++k) {
          const bool v = key_in_interval(iv.first[q], iv.last[q], k_pos[k]);
          ASSERT_EQ(v, key_visible(shape, q_pos[q], k_pos[k]));
          all = all && v;
          any = any || v;
        }
      const bool run = tile >= t.begin && tile < t.end;
      const bool unmasked = tile >= t.full_begin && tile < t.full_end;
      // Never skip a seen tile; skip every tile outside the block's bounding interval (a tile
      // inside it whose keys fall in a gap between rows' intervals may still run, masked).
      const bool outside = k_pos[std::min((tile + 1) * block_n, kv_len) - 1] < iv.first[qa] ||
                           k_pos[tile * block_n] > iv.last[qb];
      if (any) EXPECT_TRUE(run) << "block " << b << " tile " << tile;
      if (outside) EXPECT_FALSE(run) << "block " << b << " tile " << tile;
      if (unmasked) EXPECT_TRUE(all) << "block " << b << " tile " << tile;
    }
  }
  // Key blocks of block_n keys (the backward's KV-outer loop).
  for (int kb = 0; kb < key_tiles; ++kb) {
    const int ka = kb * block_n, kz = std::min(ka + block_n, kv_len) - 1;
    const IntervalQueries qs = interval_queries(iv.first.data(), iv.last.data(), q_len, k_pos[ka], k_pos[kz]);
    for (int q = 0; q < q_len; ++q) {
      bool any = false, all = true;
      for (int k = ka; k <= kz; ++k) {
        const bool v = key_visible(shape, q_pos[q], k_pos[k]);
        any = any || v;
        all = all && v;
      }
      const bool seen = q >= qs.seen.begin && q < qs.seen.end;
      const bool outside = iv.last[q] < k_pos[ka] || iv.first[q] > k_pos[kz];
      if (any) EXPECT_TRUE(seen) << "key block " << kb << " query " << q;
      if (outside) EXPECT_FALSE(seen) << "key block " << kb << " query " << q;
      if (q >= qs.all.begin && q < qs.all.end) EXPECT_TRUE(all) << "key block " << kb << " query " << q;
    }
  }
}

TEST(MaskIntervals, TilesAndQueryBlocksAgreeWithBruteForceOverPackedRings) {
  const std::vector<int64_t> documents = {37, 1, 0, 90, 5, 61};  // 194 tokens, divides no 2N
  struct Mask {
    bool causal;
    int64_t left, right;
    bool docs;
  };
  const Mask masks[] = {{true, -1, -1, true},  {true, 24, -1, true}, {false, 16, 8, true},
                        {false, -1, -1, true}, {true, 40, -1, false}, {false, 3, 70, false}};
  for (const Mask& m : masks) {
    AttentionShape shape;
    shape.causal = m.causal;
    shape.window_left = m.left;
    shape.window_right = m.right;
    if (m.docs) shape.cu_seqlens = cu_seqlens_of(documents);
    for (Scheme scheme : {Scheme::kZigzag, Scheme::kContiguous, Scheme::kStriped})
      for (int cp : {1, 3})
        for (int qr = 0; qr < cp; ++qr)
          for (int kr = 0; kr < cp; ++kr) {
            const auto q_pos = to_int(partition_positions(scheme, 194, cp, qr, documents));
            const auto k_pos = to_int(partition_positions(scheme, 194, cp, kr, documents));
            for (int group : {1, 4})
              for (int bm : {16, 64})
                for (int bn : {16, 32}) check_step(shape, q_pos, k_pos, group, bm, bn);
          }
  }
}

}  // namespace
}  // namespace cpgen::device
