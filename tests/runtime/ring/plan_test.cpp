#include "runtime/ring/plan.h"

#include <gtest/gtest.h>

#include <algorithm>

#include <chrono>
#include <cmath>
#include <limits>
#include <tuple>
#include <vector>

#include "cpgen/error.h"
#include "runtime/ring/partition.h"
#include "runtime/core/problem_limits.h"
#include "runtime/ring/plan_work.h"
#include "runtime/ring/schedule.h"
#include "test_util.h"

namespace cpgen {
namespace {

using testing::partitionable;

Problem make_problem(int64_t seq_len, int64_t cp_size, bool causal, Scheme scheme, int64_t q_heads = 32,
                     int64_t kv_heads = 8, int64_t head_dim = 128) {
  Problem p;
  p.name = "test";
  p.batch = 1;
  p.q_heads = q_heads;
  p.kv_heads = kv_heads;
  p.head_dim = head_dim;
  p.seq_len = seq_len;
  p.cp_size = cp_size;
  p.causal = causal;
  p.scheme = scheme;
  return p;
}

const SchemePlan& scheme_plan(const ShapePlan& shape, Scheme scheme) {
  for (const SchemePlan& s : shape.schemes) {
    if (s.scheme == scheme) return s;
  }
  throw std::runtime_error("scheme missing from plan");
}

TEST(PlanWork, LocalPositionMatchesPartitionPositions) {
  int checked = 0;
  for (Scheme scheme : kPlannedSchemes) {
    for (int64_t seq_len : {16, 48, 96, 240}) {
      for (int cp : {1, 2, 3, 4, 8}) {
        if (!partitionable(scheme, seq_len, cp)) continue;
        for (int rank = 0; rank < cp; ++rank) {
          const auto positions = partition_positions(scheme, seq_len, cp, rank, {});
          for (size_t i = 0; i < positions.size(); ++i) {
            ASSERT_EQ(local_position(scheme, seq_len, cp, rank, static_cast<int64_t>(i)), positions[i])
                << scheme_name(scheme) << " seq " << seq_len << " cp " << cp << " rank " << rank << " index " << i;
            ++checked;
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 1000);
}

// The planner's fast count must be the schedule's count, tile for tile.
TEST(PlanWork, CountedRankWorkEqualsRankWork) {
  struct Tile { int rows, cols; };
  int cases = 0;
  for (Scheme scheme : kPlannedSchemes) {
    for (bool causal : {true, false}) {
      for (int cp : {1, 2, 3, 4}) {
        for (int64_t seq_len : {48, 96, 192}) {
          if (!partitionable(scheme, seq_len, cp)) continue;
          for (auto [q_heads, kv_heads] : {std::pair{2, 2}, std::pair{4, 2}, std::pair{8, 2}}) {
            for (Tile tile : {Tile{1, 1}, Tile{2, 4}, Tile{3, 5}, Tile{8, 16}, Tile{64, 32}, Tile{128, 64}}) {
              Problem p = make_problem(seq_len, cp, causal, scheme, q_heads, kv_heads, 64);
              p.batch = 3;
              const auto expected = rank_work(p, tile.rows, tile.cols);
              const auto counted = counted_rank_work(p, tile.rows, tile.cols);
              ASSERT_EQ(counted.size(), expected.size());
              for (size_t r = 0; r < counted.size(); ++r) {
                SCOPED_TRACE(std::string(scheme_name(scheme)) + (causal ? " causal" : " full") + " cp " +
                             std::to_string(cp) + " seq " + std::to_string(seq_len) + " group " +
                             std::to_string(q_heads / kv_heads) + " tile " + std::to_string(tile.rows) + "x" +
                             std::to_string(tile.cols) + " rank " + std::to_string(r));
                EXPECT_EQ(counted[r].full_tiles, expected[r].full_tiles);
                EXPECT_EQ(counted[r].masked_tiles, expected[r].masked_tiles);
                EXPECT_EQ(counted[r].skipped_tiles, expected[r].skipped_tiles);
                EXPECT_DOUBLE_EQ(counted[r].flops, expected[r].flops);
              }
              ++cases;
            }
          }
        }
      }
    }
  }
  EXPECT_GT(cases, 500);
}

TEST(PlanWork, UsesRankWorkForTinyShapesAndCountsTheRest) {
  const Problem small = make_problem(2048, 8, true, Scheme::kZigzag);  // 2^11 tile pairs
  const PlannedWork direct = planned_rank_work(small, 128, 64);
  EXPECT_TRUE(direct.used_rank_work);
  EXPECT_EQ(direct.coarsening, 1);
  EXPECT_FALSE(planned_rank_work(make_problem(32768, 8, true, Scheme::kZigzag), 128, 64).used_rank_work);
}

// A shared count scaled to batch, heads and head dim equals the direct count exactly.
TEST(PlanWork, RankWorkCacheEqualsDirectCounts) {
  RankWorkCache cache;
  for (Scheme scheme : {Scheme::kContiguous, Scheme::kZigzag, Scheme::kZigzagToken, Scheme::kStriped}) {
    for (bool causal : {true, false}) {
      for (const auto& [q_heads, kv_heads, head_dim, batch] :
           std::vector<std::tuple<int, int, int, int>>{{32, 8, 128, 1}, {8, 2, 64, 3}, {64, 16, 256, 2}, {4, 1, 96, 5}}) {
        for (int64_t seq_len : {int64_t{4096}, int64_t{65536}, int64_t{1} << 20}) {
          Problem p = make_problem(seq_len, 8, causal, scheme, q_heads, kv_heads, head_dim);
          p.batch = batch;
          const PlannedWork direct = planned_rank_work(p, 128, 64);
          const PlannedWork shared = cache.get(p, 128, 64);
          ASSERT_EQ(direct.ranks.size(), shared.ranks.size());
          EXPECT_EQ(direct.coarsening, shared.coarsening);
          for (size_t r = 0; r < direct.ranks.size(); ++r) {
            SCOPED_TRACE(std::string(scheme_name(scheme)) + " seq " + std::to_string(seq_len) + " rank " + std::to_string(r));
            EXPECT_EQ(direct.ranks[r].full_tiles, shared.ranks[r].full_tiles);
            EXPECT_EQ(direct.ranks[r].masked_tiles, shared.ranks[r].masked_tiles);
            EXPECT_EQ(direct.ranks[r].skipped_tiles, shared.ranks[r].skipped_tiles);
            EXPECT_DOUBLE_EQ(direct.ranks[r].flops, shared.ranks[r].flops);
          }
        }
      }
    }
  }
  // The four (heads, head dim, batch) combinations share one count per (scheme, mask, length).
  EXPECT_EQ(cache.size(), 4u * 2u * 3u);
}

TEST(PlanWork, CountsHugeShapes) {
  const Problem million = make_problem(1 << 20, 32, true, Scheme::kZigzag);
  const PlannedWork counted = planned_rank_work(million, 128, 64);
  EXPECT_FALSE(counted.used_rank_work);
  EXPECT_EQ(counted.coarsening, 1);

  // The largest sequence a shapes file admits, with the most ranks and the largest GQA group:
  // bounded time and memory (rank_work would need 16 GiB of positions and 2^50 tile visits).
  const auto start = std::chrono::steady_clock::now();
  const Problem giant = make_problem(kMaxSeqLen, 1024, true, Scheme::kZigzag, 16, 1, 64);  // 2^30
  const PlannedWork coarse = planned_rank_work(giant, 128, 64);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GT(coarse.coarsening, 1);
  EXPECT_LT(seconds, 20.0);
  ASSERT_EQ(coarse.ranks.size(), 1024u);
  double total = 0;
  for (const RankWork& w : coarse.ranks) total += w.flops;
  // Coarse query tiles widen the masked band, so the count errs high, never low.
  const double seq = static_cast<double>(kMaxSeqLen);
  const double causal_flops = 4.0 * (seq * (seq + 1) / 2) * 64 * 16;
  EXPECT_GE(total, causal_flops);
  EXPECT_LT(total, causal_flops * 1.1);
}

TEST(Plan, ZigzagBalancesACausalShapeAtCp8AndContiguousDoesNot) {
  // llama3-8b at 128K over 8 ranks.
  const ShapePlan shape = plan_shape(make_problem(131072, 8, true, Scheme::kZigzag), PlanRates{});
  ASSERT_EQ(shape.schemes.size(), 4u);
  const SchemePlan& zigzag = scheme_plan(shape, Scheme::kZigzag);
  const SchemePlan& contiguous = scheme_plan(shape, Scheme::kContiguous);
  ASSERT_TRUE(zigzag.applicable);
  ASSERT_TRUE(contiguous.applicable);
  EXPECT_LE(zigzag.work_imbalance, 1.05);
  EXPECT_GE(zigzag.work_imbalance, 1.0);
  // Rank r of a contiguous split does r full chunks and half a diagonal chunk: max 7.5, mean 4.
  EXPECT_GT(contiguous.work_imbalance, 1.5);
  EXPECT_NEAR(contiguous.work_imbalance, 7.5 / 4, 0.02);
  EXPECT_EQ(shape.recommended, Scheme::kZigzag);
  // Every scheme does the whole causal triangle in total, up to masked diagonal tiles.
  const double causal_flops = 4.0 * (131072.0 * 131073 / 2) * 128 * 32;
  EXPECT_NEAR(zigzag.mean_rank_flops * 8 / causal_flops, 1.0, 0.01);
  EXPECT_EQ(shape.tile.uri(), "ring_fwd_bf16_hd128_causal_gqa4_bm128_bn64_w4_s2");
  // A masked shape's tiles are named by the kernel that runs it, specialized on the mask (it
  // named the unmasked one).
  Problem masked = make_problem(131072, 8, true, Scheme::kZigzag);
  masked.softcap = 30;
  masked.window_left = 4096;
  EXPECT_EQ(plan_shape(masked, PlanRates{}).tile.uri(), "ring_fwd_bf16_hd128_causal_ivl_cap_gqa4_bm128_bn64_w4_s2");
}

TEST(Plan, BytesMatchAHandComputation) {
  const PlanRates rates{400, 400};
  const ShapePlan shape = plan_shape(make_problem(131072, 8, true, Scheme::kZigzag), rates);
  const SchemePlan& s = scheme_plan(shape, Scheme::kZigzag);
  // K and V of 16384 local positions, 8 kv heads, head dim 128, 2 bytes: 2 * 8 * 16384 * 128 * 2.
  const int64_t chunk = 67108864;  // 64 MiB
  EXPECT_EQ(kv_chunk_bytes(shape.problem), chunk);
  EXPECT_EQ(s.bytes_per_step, chunk);
  EXPECT_EQ(s.bytes_total, 8 * 7 * chunk);           // 8 ranks, 7 transfers each
  EXPECT_EQ(s.bytes_total, int64_t{3758096384});
  EXPECT_EQ(s.ring_extra_bytes, 2 * chunk);          // 128 MiB
  EXPECT_EQ(s.allgather_extra_bytes, 7 * chunk);     // 448 MiB
  // 64 MiB at 400 GB/s is 167.77 us; the busiest rank's step is 1/8 of its FLOPs at 400 TFLOP/s.
  EXPECT_NEAR(s.step_comm_s, 67108864.0 / 400e9, 1e-12);
  EXPECT_NEAR(s.step_compute_s, s.busiest_rank_flops / 8 / 400e12, 1e-12);
  EXPECT_NEAR(s.compute_comm_ratio, s.step_compute_s / s.step_comm_s, 1e-9);
  EXPECT_TRUE(s.comm_hidden);
  EXPECT_NEAR(s.forward_s, 8 * s.step_compute_s, 1e-12);
  // Same bytes for every scheme: the chunk size does not depend on which positions it holds.
  for (const SchemePlan& other : shape.schemes) EXPECT_EQ(other.bytes_per_step, chunk);

  // batch and dtype size scale the chunk; GQA only through kv_heads.
  Problem batched = make_problem(4096, 4, true, Scheme::kZigzag, 16, 2, 64);
  batched.batch = 3;
  batched.dtype = Dtype::kFp16;
  EXPECT_EQ(kv_chunk_bytes(batched), 2 * 3 * 2 * 1024 * 64 * 2);
}

// The largest chunk can hold nearly the whole sequence (one-token documents give rank 0 every
// token): 1024 ranks x 1023 transfers of a 2^50-byte chunk is 2^70 bytes in all, past int64 (it
// wrapped to a negative count).
TEST(Plan, TheTotalBytesOfTheLargestProblemDoNotWrap) {
  Problem p = make_problem(16384, 1024, true, Scheme::kZigzag, 1024, 1024, 256);
  p.batch = 65536;
  p.documents.assign(16384, 1);
  const ShapePlan shape = plan_shape(p, PlanRates{400, 400});
  for (const SchemePlan& s : shape.schemes) {
    if (!s.applicable) continue;
    EXPECT_GT(s.bytes_per_step, 0) << scheme_name(s.scheme);
    EXPECT_DOUBLE_EQ(s.bytes_total, 1024.0 * 1023.0 * static_cast<double>(s.bytes_per_step)) << scheme_name(s.scheme);
  }
}

// One listed document is the whole sequence: planned as the shape without the list (it reached
// the tile count, which refused any documents).
TEST(Plan, OneListedDocumentPlansAsNoDocuments) {
  const Problem plain = make_problem(4096, 4, true, Scheme::kZigzag);
  Problem listed = plain;
  listed.documents = {4096};
  const ShapePlan a = plan_shape(plain, PlanRates{400, 400}), b = plan_shape(listed, PlanRates{400, 400});
  ASSERT_EQ(a.schemes.size(), b.schemes.size());
  for (size_t i = 0; i < a.schemes.size(); ++i) {
    EXPECT_TRUE(b.schemes[i].applicable) << scheme_name(b.schemes[i].scheme);
    EXPECT_DOUBLE_EQ(a.schemes[i].busiest_rank_flops, b.schemes[i].busiest_rank_flops) << scheme_name(a.schemes[i].scheme);
    EXPECT_EQ(a.schemes[i].tokens.skipped_steps, b.schemes[i].tokens.skipped_steps) << scheme_name(a.schemes[i].scheme);
  }
  EXPECT_EQ(a.recommended, b.recommended);
}

// A sequence too long to count its visible pairs still counts the ring steps its causal mask
// skips, in closed form (the plan's reason said "-1 of 9 ring steps skipped").
TEST(Plan, ALongUnevenCausalShapeCountsItsSkippedStepsInClosedForm) {
  const ShapePlan shape = plan_shape(make_problem(3 * kMaxSkipCountTokens + 3, 3, true, Scheme::kZigzag), PlanRates{400, 400});
  EXPECT_EQ(shape.why.find("-1"), std::string::npos) << shape.why;
  EXPECT_NE(shape.why.find(" of 9 ring steps skipped by the mask"), std::string::npos) << shape.why;
  for (const SchemePlan& s : shape.schemes) EXPECT_GE(s.tokens.skipped_steps, 0) << scheme_name(s.scheme);
}

TEST(Plan, NonCausalShapesAreBalancedEverywhereAndPreferContiguous) {
  const ShapePlan shape = plan_shape(make_problem(76800, 8, false, Scheme::kContiguous, 24, 24), PlanRates{});
  for (const SchemePlan& s : shape.schemes) {
    ASSERT_TRUE(s.applicable) << scheme_name(s.scheme);
    EXPECT_DOUBLE_EQ(s.work_imbalance, 1.0) << scheme_name(s.scheme);
    EXPECT_EQ(s.ranks[0].skipped_tiles, 0);
  }
  EXPECT_EQ(shape.recommended, Scheme::kContiguous);
}

// Issue 11: a length some scheme cannot split evenly runs anyway (ranks hold different counts),
// so every scheme of the shape is planned by its visible pairs, and the K/V step moves the
// largest rank's chunk.
TEST(Plan, ALengthThatDoesNotDivideIsPlannedByVisiblePairs) {
  // 12 positions over 4 ranks: zigzag cuts 8 chunks of 2 and 1 (ranks hold 3 each, causal pairs
  // differ); 13 gives ranks of 4, 3, 3, 3 under contiguous.
  for (int64_t seq : {12, 13}) {
    const ShapePlan shape = plan_shape(make_problem(seq, 4, true, Scheme::kContiguous, 8, 8, 64), PlanRates{});
    for (const SchemePlan& s : shape.schemes) {
      SCOPED_TRACE(std::string(scheme_name(s.scheme)) + " seq " + std::to_string(seq));
      EXPECT_TRUE(s.applicable) << s.reason;
      EXPECT_TRUE(s.pair_model);
      int64_t pairs = 0;
      for (const auto& steps : s.tokens.visible_pairs)
        for (int64_t x : steps) pairs += x;
      EXPECT_EQ(pairs, seq * (seq + 1) / 2) << "every scheme sees each causal pair once";
      const int64_t most = *std::max_element(s.tokens.rank_tokens.begin(), s.tokens.rank_tokens.end());
      EXPECT_EQ(s.bytes_per_step, 2 * 8 * most * 64 * 2);
    }
  }
}

TEST(Plan, OneRankMovesNothing) {
  const ShapePlan shape = plan_shape(make_problem(8192, 1, true, Scheme::kZigzag), PlanRates{});
  for (const SchemePlan& s : shape.schemes) {
    EXPECT_EQ(s.bytes_per_step, 0);
    EXPECT_EQ(s.bytes_total, 0);
    EXPECT_EQ(s.ring_extra_bytes, 0);
    EXPECT_EQ(s.allgather_extra_bytes, 0);
    EXPECT_TRUE(std::isinf(s.compute_comm_ratio));
    EXPECT_TRUE(s.comm_hidden);
    EXPECT_DOUBLE_EQ(s.work_imbalance, 1.0);
  }
  EXPECT_EQ(shape.recommended, Scheme::kZigzag);
}

TEST(Plan, SaysWhenTheTransferDoesNotHide) {
  // A 1 GB/s link: every scheme waits on the link, so all tie and zigzag wins the tie.
  const ShapePlan shape = plan_shape(make_problem(32768, 8, true, Scheme::kZigzag), PlanRates{1, 400});
  for (const SchemePlan& s : shape.schemes) {
    EXPECT_FALSE(s.comm_hidden) << scheme_name(s.scheme);
    EXPECT_LT(s.compute_comm_ratio, 1.0);
  }
  EXPECT_EQ(shape.recommended, Scheme::kZigzag);
  EXPECT_NE(shape.why.find("does NOT hide"), std::string::npos) << shape.why;
}

TEST(Plan, RejectsRatesThatAreNotPositiveAndFinite) {
  const Problem p = make_problem(4096, 4, true, Scheme::kZigzag);
  for (double bad : {0.0, -1.0, std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN()}) {
    EXPECT_THROW(plan_shape(p, PlanRates{bad, 400}), Error);
    EXPECT_THROW(plan_shape(p, PlanRates{400, bad}), Error);
  }
}

}  // namespace
}  // namespace cpgen
