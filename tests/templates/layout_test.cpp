// CPU checks of the step kernel's index math (templates/layout.cuh): the swizzle, the per-lane
// ldmatrix addresses and the MMA fragment ownership they must produce, and packed GQA rows.
// ldmatrix is emulated from its PTX definition, so a wrong lane mapping fails here, not only on a
// GPU.
#include "cpgen/layout.cuh"

#include <gtest/gtest.h>

#include <array>
#include <set>
#include <vector>

namespace cpgen::device {
namespace {

constexpr int kHeadDims[] = {64, 96, 128, 256};

// A logical [rows][head_dim] tile whose element (r, c) is r * 1000 + c, stored swizzled.
struct SharedTile {
  int rows, head_dim;
  std::vector<int> words;  // one entry per 16-bit element
  SharedTile(int rows_, int head_dim_) : rows(rows_), head_dim(head_dim_), words(rows_ * head_dim_, -1) {
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < head_dim; ++c) words[swizzled_offset(r, c, head_dim)] = r * 1000 + c;
  }
  // The 8 elements of the 16-byte chunk at `byte_offset`.
  std::array<int, 8> chunk(int byte_offset) const {
    EXPECT_EQ(byte_offset % 16, 0);
    std::array<int, 8> out{};
    for (int i = 0; i < 8; ++i) out[i] = words.at(byte_offset / 2 + i);
    return out;
  }
};

// ldmatrix.x4 per the PTX ISA: lanes 8i..8i+7 give the row addresses of matrix i; register i of
// lane l holds elements 2(l%4), 2(l%4)+1 of row l/4 of matrix i (.trans: element l/4 of rows
// 2(l%4) and 2(l%4)+1). Each register is returned as its (lo, hi) pair of element values.
using Fragment = std::array<std::array<std::pair<int, int>, 4>, 32>;
Fragment ldmatrix_x4(const SharedTile& tile, const std::array<int, 32>& addresses, bool trans) {
  Fragment out{};
  for (int lane = 0; lane < 32; ++lane)
    for (int i = 0; i < 4; ++i) {
      if (!trans) {
        auto row = tile.chunk(addresses[8 * i + lane / 4]);
        out[lane][i] = {row[2 * (lane % 4)], row[2 * (lane % 4) + 1]};
      } else {
        auto row0 = tile.chunk(addresses[8 * i + 2 * (lane % 4)]);
        auto row1 = tile.chunk(addresses[8 * i + 2 * (lane % 4) + 1]);
        out[lane][i] = {row0[lane / 4], row1[lane / 4]};
      }
    }
  return out;
}

std::pair<int, int> element_pair(int row, int col) { return {row * 1000 + col, row * 1000 + col + 1}; }
std::pair<int, int> column_pair(int row, int col) { return {row * 1000 + col, (row + 1) * 1000 + col}; }

TEST(Swizzle, IsABijectionWithinEveryRow) {
  for (int hd : kHeadDims) {
    const int chunks = hd / 8;
    for (int row = 0; row < 64; ++row) {
      std::set<int> seen;
      for (int c = 0; c < chunks; ++c) {
        const int s = swizzle_chunk(row, c, chunks);
        EXPECT_GE(s, 0);
        EXPECT_LT(s, chunks) << "hd " << hd << " row " << row << " chunk " << c;
        seen.insert(s);
      }
      EXPECT_EQ(static_cast<int>(seen.size()), chunks) << "hd " << hd << " row " << row;
    }
    SharedTile tile(64, hd);  // every slot written exactly once
    for (int w : tile.words) EXPECT_GE(w, 0) << "hd " << hd;
  }
}

TEST(Swizzle, EightConsecutiveRowsOfOneChunkHitDistinctBanks) {
  // One ldmatrix phase reads the same logical chunk of 8 consecutive rows (rows 16 i + 0..7 or
  // 8..15): the 8 physical 16-byte chunks must cover all 32 banks (distinct address / 16 mod 8).
  for (int hd : kHeadDims)
    for (int first = 0; first < 64; first += 8)
      for (int c = 0; c < hd / 8; ++c) {
        std::set<int> bank_groups;
        for (int r = first; r < first + 8; ++r) bank_groups.insert((swizzled_offset(r, c * 8, hd) * 2 / 16) % 8);
        EXPECT_EQ(bank_groups.size(), 8u) << "hd " << hd << " rows " << first << "+ chunk " << c;
      }
}

TEST(Fragments, AccumulatorOwnershipCoversTheTileOnce) {
  std::set<std::pair<int, int>> cells;
  for (int lane = 0; lane < 32; ++lane)
    for (int e = 0; e < 4; ++e) cells.insert({acc_row(lane, e), acc_col(lane, e)});
  EXPECT_EQ(cells.size(), 16u * 8u);
  for (auto [r, c] : cells) {
    EXPECT_LT(r, 16);
    EXPECT_LT(c, 8);
  }
}

// The A operand (Q) as step_fwd.cuh addresses it: row warp_row0 + mt * 16 + ldmatrix_a_row, k-step
// kk through step_offset_bytes. Expected: mma.m16n8k16 A registers a0..a3 = (row g, k 2t),
// (row g+8, k 2t), (row g, k 2t+8), (row g+8, k 2t+8), with g = lane/4, t = lane%4.
TEST(Fragments, QOperandAddressesYieldTheMmaAFragment) {
  for (int hd : kHeadDims) {
    SharedTile tile(128, hd);
    for (int warp_row0 : {0, 16, 32, 96})
      for (int mt = 0; mt < 2; ++mt)
        for (int kk = 0; kk < hd / 16; ++kk) {
          std::array<int, 32> addr{};
          for (int lane = 0; lane < 32; ++lane) {
            const int q_row = warp_row0 + ldmatrix_a_row(lane);
            const int q_chunk = lane_chunk_bytes(q_row, ldmatrix_a_col(lane), hd);
            const int q_lane = swizzled_offset(q_row, ldmatrix_a_col(lane), hd) * 2;
            addr[lane] = step_offset_bytes(q_lane, q_chunk, kk, hd) + mt * 16 * hd * 2;
          }
          Fragment f = ldmatrix_x4(tile, addr, false);
          for (int lane = 0; lane < 32; ++lane) {
            const int g = lane / 4, t = lane % 4, row = warp_row0 + mt * 16 + g, k = kk * 16 + 2 * t;
            ASSERT_EQ(f[lane][0], element_pair(row, k)) << "hd " << hd << " lane " << lane;
            ASSERT_EQ(f[lane][1], element_pair(row + 8, k)) << "hd " << hd << " lane " << lane;
            ASSERT_EQ(f[lane][2], element_pair(row, k + 8)) << "hd " << hd << " lane " << lane;
            ASSERT_EQ(f[lane][3], element_pair(row + 8, k + 8)) << "hd " << hd << " lane " << lane;
          }
        }
  }
}

// The B operand of S = Q K^T from K[key][dim]: registers (b0, b1) of key n8-tile 0, then of tile 1,
// with b0 = (k 2t, 2t+1; n g) and b1 = (k 2t+8, 2t+9; n g), k running over head dim.
TEST(Fragments, KOperandAddressesYieldTheMmaBFragment) {
  for (int hd : kHeadDims) {
    SharedTile tile(64, hd);
    for (int jp = 0; jp < 4; ++jp)
      for (int kk = 0; kk < hd / 16; ++kk) {
        std::array<int, 32> addr{};
        for (int lane = 0; lane < 32; ++lane) {
          const int k_chunk = lane_chunk_bytes(ldmatrix_b_row(lane), ldmatrix_b_col(lane), hd);
          const int k_lane = swizzled_offset(ldmatrix_b_row(lane), ldmatrix_b_col(lane), hd) * 2;
          addr[lane] = step_offset_bytes(k_lane, k_chunk, kk, hd) + jp * 16 * hd * 2;
        }
        Fragment f = ldmatrix_x4(tile, addr, false);
        for (int lane = 0; lane < 32; ++lane) {
          const int g = lane / 4, t = lane % 4, key = jp * 16 + g, k = kk * 16 + 2 * t;
          ASSERT_EQ(f[lane][0], element_pair(key, k)) << "hd " << hd << " lane " << lane;
          ASSERT_EQ(f[lane][1], element_pair(key, k + 8)) << "hd " << hd << " lane " << lane;
          ASSERT_EQ(f[lane][2], element_pair(key + 8, k)) << "hd " << hd << " lane " << lane;
          ASSERT_EQ(f[lane][3], element_pair(key + 8, k + 8)) << "hd " << hd << " lane " << lane;
        }
      }
  }
}

// The B operand of O += P V from V[key][dim] read transposed: (b0, b1) of dim n8-tile 0 then 1,
// with b0 = (keys 2t, 2t+1; dim g), b1 = (keys 2t+8, 2t+9; dim g).
TEST(Fragments, VOperandAddressesYieldTheTransposedMmaBFragment) {
  for (int hd : kHeadDims) {
    SharedTile tile(64, hd);
    for (int kk = 0; kk < 4; ++kk)
      for (int dp = 0; dp < hd / 16; ++dp) {
        std::array<int, 32> addr{};
        for (int lane = 0; lane < 32; ++lane) {
          const int v_chunk = lane_chunk_bytes(ldmatrix_bt_row(lane), ldmatrix_bt_col(lane), hd);
          const int v_lane = swizzled_offset(ldmatrix_bt_row(lane), ldmatrix_bt_col(lane), hd) * 2;
          addr[lane] = kk * 16 * hd * 2 + step_offset_bytes(v_lane, v_chunk, dp, hd);
        }
        Fragment f = ldmatrix_x4(tile, addr, true);
        for (int lane = 0; lane < 32; ++lane) {
          const int g = lane / 4, t = lane % 4, key = kk * 16 + 2 * t, dim = dp * 16 + g;
          ASSERT_EQ(f[lane][0], column_pair(key, dim)) << "hd " << hd << " lane " << lane;
          ASSERT_EQ(f[lane][1], column_pair(key + 8, dim)) << "hd " << hd << " lane " << lane;
          ASSERT_EQ(f[lane][2], column_pair(key, dim + 8)) << "hd " << hd << " lane " << lane;
          ASSERT_EQ(f[lane][3], column_pair(key + 8, dim + 8)) << "hd " << hd << " lane " << lane;
        }
      }
  }
}

// The backward reads dO and Q (for dV and dK) and K (for dQ) transposed at column blocks that are
// multiples of 16 (a warp's head-dim slice plus 16 dp; a dQ item's col0 plus 16 np, step_bwd.cuh):
// the lane's column-0 offset with its chunk bits XOR-ed by the block's bytes
// (chunk_xor_offset_bytes), plus 16 rows per k-step. The same fragment as the V operand above.
TEST(Fragments, TransposedBOperandAtAnyColumnBlockByChunkXor) {
  for (int hd : kHeadDims) {
    SharedTile tile(64, hd);
    for (int block = 0; block < hd; block += 16)
      for (int kk = 0; kk < 4; ++kk) {
        std::array<int, 32> addr{};
        for (int lane = 0; lane < 32; ++lane) {
          const int chunk = lane_chunk_bytes(ldmatrix_bt_row(lane), ldmatrix_bt_col(lane), hd);
          const int lane0 = swizzled_offset(ldmatrix_bt_row(lane), ldmatrix_bt_col(lane), hd) * 2;
          addr[lane] = chunk_xor_offset_bytes(lane0, chunk, block * 2, hd) + kk * 16 * hd * 2;
        }
        Fragment f = ldmatrix_x4(tile, addr, true);
        for (int lane = 0; lane < 32; ++lane) {
          const int g = lane / 4, t = lane % 4, key = kk * 16 + 2 * t, dim = block + g;
          ASSERT_EQ(f[lane][0], column_pair(key, dim)) << "hd " << hd << " block " << block << " lane " << lane;
          ASSERT_EQ(f[lane][1], column_pair(key + 8, dim)) << "hd " << hd << " block " << block << " lane " << lane;
          ASSERT_EQ(f[lane][2], column_pair(key, dim + 8)) << "hd " << hd << " block " << block << " lane " << lane;
          ASSERT_EQ(f[lane][3], column_pair(key + 8, dim + 8)) << "hd " << hd << " block " << block << " lane " << lane;
        }
      }
  }
}

// P V reuses the S accumulators of key n8-tiles 2kk and 2kk+1 as the A fragment of k-step kk
// (step_fwd.cuh packs registers (0,1), (2,3) of tile 2kk, then of tile 2kk+1).
TEST(Fragments, ScoreAccumulatorsAreTheAFragmentOfPV) {
  for (int lane = 0; lane < 32; ++lane)
    for (int kk = 0; kk < 4; ++kk)
      for (int reg = 0; reg < 4; ++reg) {
        const int tile = 2 * kk + reg / 2, e = 2 * (reg % 2);
        const int g = lane / 4, t = lane % 4;
        EXPECT_EQ(acc_row(lane, e), g + 8 * (reg % 2));
        EXPECT_EQ(tile * 8 + acc_col(lane, e), kk * 16 + 2 * t + 8 * (reg / 2));
        EXPECT_EQ(acc_col(lane, e + 1), acc_col(lane, e) + 1);
      }
}

// The running state is [batch][q_heads][pitch] rows (the kernels' o, m, l, lse, delta and dq):
// state_row walks a plain 3-d array in that order; pitch 0 from state_len means q_len.
TEST(StateRows, IndexABatchHeadPitchArray) {
  EXPECT_EQ(state_pitch(0, 37), 37);
  EXPECT_EQ(state_pitch(96, 37), 96);
  constexpr int kBatch = 3, kHeads = 5, kPitch = 7;
  int state[kBatch][kHeads][kPitch];
  for (int b = 0; b < kBatch; ++b)
    for (int h = 0; h < kHeads; ++h)
      for (int q = 0; q < kPitch; ++q)
        EXPECT_EQ(&state[b][h][q] - &state[0][0][0], state_row(b, kHeads, h, kPitch, q));
  // 64-bit: a state past 2^31 rows.
  EXPECT_EQ(state_row(40000, 64, 63, 1 << 20, 5), (40000LL * 64 + 63) * (1LL << 20) + 5);
}

TEST(PackedRows, RoundTripAndBlockBounds) {
  for (int group : {1, 2, 4, 8, 16}) {
    for (int p = 0; p < 1000; ++p) {
      PackedRow r = unpack_row(p, group);
      EXPECT_LT(r.head_in_group, group);
      EXPECT_EQ(pack_row(r.head_in_group, r.query_index, group), p);
    }
    for (int block_m : {32, 64, 128})
      for (int q_len : {1, 5, 64, 100}) {
        const int blocks = (q_len * group + block_m - 1) / block_m;
        for (int b = 0; b < blocks; ++b) {
          int lo = 1 << 30, hi = -1;
          for (int p = b * block_m; p < (b + 1) * block_m && p < q_len * group; ++p) {
            lo = std::min(lo, unpack_row(p, group).query_index);
            hi = std::max(hi, unpack_row(p, group).query_index);
          }
          EXPECT_EQ(block_first_query(b, block_m, group), lo);
          EXPECT_EQ(block_last_query(b, block_m, group, q_len), hi);
        }
      }
  }
}

// Every pair is served by exactly one block, y and z stay within the limit, and the blocks past
// the last pair are fewer than z (the fold spreads y evenly).
TEST(FoldPairs, EveryPairOnceWithinTheLimit) {
  for (unsigned max_y : {1u, 2u, 3u, 7u, 64u})
    for (long long count = 1; count <= 200; ++count) {
      const FoldedPairs f = fold_pairs(count, max_y);
      ASSERT_GE(f.y, 1u);
      ASSERT_LE(f.y, max_y) << count;
      const long long blocks = static_cast<long long>(f.y) * f.z;
      ASSERT_GE(blocks, count);
      ASSERT_LT(blocks - count, static_cast<long long>(f.z)) << count << " pairs, max_y " << max_y;
      std::vector<int> served(static_cast<size_t>(blocks), 0);
      for (unsigned z = 0; z < f.z; ++z)
        for (unsigned y = 0; y < f.y; ++y) ++served.at(static_cast<size_t>(unfold_pair(y, z, f.y)));
      for (long long i = 0; i < blocks; ++i) ASSERT_EQ(served[static_cast<size_t>(i)], 1) << i;
    }
}

// The hardware limit: up to 65535 pairs need no fold; a training job's 8192 sequences x 16 kv
// heads and the validated maximum (2^31 - 1 pairs) fold into grid.z.
TEST(FoldPairs, RealGridLimits) {
  EXPECT_EQ(fold_pairs(65535).y, 65535u);
  EXPECT_EQ(fold_pairs(65535).z, 1u);
  EXPECT_EQ(fold_pairs(65536).z, 2u);
  EXPECT_EQ(fold_pairs(65536).y, 32768u);
  const FoldedPairs job = fold_pairs(8192LL * 16);
  EXPECT_EQ(job.z, 3u);
  EXPECT_LE(job.y, kMaxGridYZ);
  EXPECT_GE(static_cast<long long>(job.y) * job.z, 8192LL * 16);
  const long long most = (1LL << 31) - 1;
  const FoldedPairs big = fold_pairs(most);
  EXPECT_LE(big.y, kMaxGridYZ);
  EXPECT_LE(big.z, kMaxGridYZ);
  EXPECT_GE(static_cast<long long>(big.y) * big.z, most);
  EXPECT_EQ(unfold_pair(big.y - 1, big.z - 1, big.y), static_cast<long long>(big.y) * big.z - 1);
}

// The launchers' grid: (kv heads, batch) where both fit, so every block is one pair and decodes
// without a division; past the limit, the fold. Either way unfold_batch_head of every block inside
// the pairs gives the pair's (batch, kv head), also where a fold happens to make grid.y the head
// count (its shortcut then still holds) and where it does not (it divides).
TEST(PairGrid, EveryBlockDecodesToItsBatchAndHead) {
  int shortcut_folds = 0;
  for (unsigned max_y : {2u, 3u, 5u, 64u})
    for (int batch = 1; batch <= 12; ++batch)
      for (int kv_heads = 1; kv_heads <= 12; ++kv_heads) {
        const FoldedPairs g = pair_grid(batch, kv_heads, max_y);
        const long long pairs = static_cast<long long>(batch) * kv_heads;
        ASSERT_LE(g.y, max_y);
        ASSERT_GE(static_cast<long long>(g.y) * g.z, pairs);
        if (static_cast<unsigned>(batch) <= max_y && static_cast<unsigned>(kv_heads) <= max_y) {
          EXPECT_EQ(g.y, static_cast<unsigned>(kv_heads));
          EXPECT_EQ(g.z, static_cast<unsigned>(batch));
        } else {
          shortcut_folds += g.y == static_cast<unsigned>(kv_heads);
        }
        std::vector<int> served(static_cast<size_t>(pairs), 0);
        for (unsigned z = 0; z < g.z; ++z)
          for (unsigned y = 0; y < g.y; ++y) {
            const long long pair = unfold_pair(y, z, g.y);
            if (pair >= pairs) continue;  // the kernels return before decoding
            const BatchHead at = unfold_batch_head(y, z, g.y, kv_heads);
            ASSERT_EQ(at.batch, pair / kv_heads) << batch << " x " << kv_heads << ", block " << y << ", " << z;
            ASSERT_EQ(at.kv_head, pair % kv_heads) << batch << " x " << kv_heads << ", block " << y << ", " << z;
            ++served[static_cast<size_t>(pair)];
          }
        for (int n : served) ASSERT_EQ(n, 1);
      }
  EXPECT_GT(shortcut_folds, 0) << "no fold gave grid.y == kv_heads: the shortcut's other case went unchecked";
  // The real limits: 8192 sequences x 16 kv heads is (16, 8192); a batch past 65535 folds.
  EXPECT_EQ(pair_grid(8192, 16).y, 16u);
  EXPECT_EQ(pair_grid(8192, 16).z, 8192u);
  EXPECT_LE(pair_grid(70000, 2).z, kMaxGridYZ);
  EXPECT_LE(pair_grid(70000, 2).y, kMaxGridYZ);
}

}  // namespace
}  // namespace cpgen::device
