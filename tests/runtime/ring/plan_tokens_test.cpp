// The planner's token counts and mask-skipped steps for packed and masked problems, against the
// partition itself and a brute-force visibility check.
#include "runtime/ring/plan_tokens.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "runtime/core/attention_shape.h"
#include "runtime/ring/partition.h"
#include "runtime/ring/plan.h"
#include "runtime/ring/schedule.h"

namespace cpgen {
namespace {

Problem packed(std::vector<int64_t> documents, int64_t cp_size) {
  Problem p;
  p.name = "packed";
  p.q_heads = 8;
  p.kv_heads = 2;
  p.head_dim = 64;
  p.cp_size = cp_size;
  p.seq_len = 0;
  for (int64_t d : documents) p.seq_len += d;
  p.documents = std::move(documents);
  return p;
}

// Visible pairs the slow way: every (query, key) pair of every (rank, step).
std::vector<std::vector<int64_t>> brute_force_pairs(const Problem& p, Scheme scheme) {
  const AttentionShape shape = attention_shape_of(p);
  const int n = static_cast<int>(p.cp_size);
  std::vector<std::vector<int64_t>> pairs(n, std::vector<int64_t>(n, 0));
  for (int r = 0; r < n; ++r)
    for (int s = 0; s < n; ++s)
      for (int64_t q : partition_positions(scheme, p.seq_len, n, r, p.documents))
        for (int64_t k : partition_positions(scheme, p.seq_len, n, kv_source_rank(r, s, n), p.documents))
          pairs[r][s] += key_visible(shape, q, k) ? 1 : 0;
  return pairs;
}

int64_t brute_force_skipped(const Problem& p, Scheme scheme) {
  int64_t skipped = 0;
  for (const auto& steps : brute_force_pairs(p, scheme))
    for (int64_t pairs : steps) skipped += pairs == 0 ? 1 : 0;
  return skipped;
}

TEST(PlanTokens, CountsMatchThePartitionAndSkipsMatchBruteForce) {
  for (const auto& docs : std::vector<std::vector<int64_t>>{{37, 91, 1, 99}, {70, 0, 58}, {229}, {5, 1, 0, 3}})
    for (int64_t n : {1, 2, 3, 5, 8})
      for (Scheme scheme : {Scheme::kContiguous, Scheme::kZigzag, Scheme::kZigzagToken, Scheme::kStriped})
        for (int64_t left : {-1, 4}) {
          Problem p = packed(docs, n);
          p.window_left = left;
          const TokenPlan plan = plan_tokens(p, scheme);
          SCOPED_TRACE(std::string(scheme_name(scheme)) + " N=" + std::to_string(n) + " seq_len " +
                       std::to_string(p.seq_len) + " left " + std::to_string(left));
          ASSERT_EQ(plan.rank_tokens.size(), static_cast<size_t>(n));
          for (int r = 0; r < n; ++r)
            EXPECT_EQ(plan.rank_tokens[r],
                      static_cast<int64_t>(partition_positions(scheme, p.seq_len, static_cast<int>(n), r, docs).size()));
          EXPECT_EQ(plan.ring_steps, n * n);
          EXPECT_EQ(plan.skipped_steps, brute_force_skipped(p, scheme));
          EXPECT_EQ(plan.visible_pairs, brute_force_pairs(p, scheme));
        }
}

// The closed form for plain causal and full problems agrees with brute force at every small length
// (lengths that do not divide, ranks left empty) and every scheme it covers.
TEST(PlanTokens, ClosedFormSkipsAgreeWithBruteForce) {
  int closed = 0;
  for (Scheme scheme : {Scheme::kContiguous, Scheme::kZigzag, Scheme::kStriped, Scheme::kZigzagToken})
    for (int64_t n : {1, 2, 3, 5, 8})
      for (int64_t len = 1; len <= 41; ++len)
        for (bool causal : {true, false}) {
          Problem p = packed({len}, n);
          p.causal = causal;
          const int64_t expected = brute_force_skipped(p, scheme);
          EXPECT_EQ(plan_tokens(p, scheme, false).skipped_steps, expected)
              << scheme_name(scheme) << " n " << n << " len " << len << " causal " << causal;
          EXPECT_EQ(count_skipped_steps(p, scheme), expected);
          closed += plan_counts_steps_in_closed_form(p, scheme) ? 1 : 0;
        }
  EXPECT_GT(closed, 0);
  // A long plain causal problem is counted too (closed form: no length limit).
  Problem big = packed({kMaxSkipCountTokens * 4}, 8);
  big.causal = true;
  EXPECT_EQ(plan_tokens(big, Scheme::kContiguous, false).skipped_steps, 8 * 7 / 2);
  EXPECT_EQ(plan_tokens(big, Scheme::kZigzag, false).skipped_steps, 0);
  // A causal window's right side alone is plain causal: counted in closed form too (it was "not
  // counted" past the pair-by-pair limit).
  big.window_right = 0;
  EXPECT_TRUE(plan_counts_steps_in_closed_form(big, Scheme::kContiguous));
  EXPECT_EQ(plan_tokens(big, Scheme::kContiguous, false).skipped_steps, 8 * 7 / 2);
}

// Two-sided windows without causality, and a causal window, counted pair by pair.
TEST(PlanTokens, VisiblePairsOfTwoSidedWindowsMatchBruteForce) {
  for (bool causal : {false, true})
    for (Scheme scheme : {Scheme::kContiguous, Scheme::kZigzag, Scheme::kStriped}) {
      Problem p = packed({50, 3, 44}, 3);
      p.causal = causal;
      p.window_left = 5;
      p.window_right = causal ? -1 : 7;
      SCOPED_TRACE(std::string(scheme_name(scheme)) + (causal ? " causal" : " full"));
      EXPECT_EQ(plan_tokens(p, scheme).visible_pairs, brute_force_pairs(p, scheme));
    }
}

TEST(PlanTokens, ContiguousCausalSkipsEveryFutureChunk) {
  Problem p = packed({64}, 4);
  const TokenPlan plan = plan_tokens(p, Scheme::kContiguous);
  EXPECT_EQ(plan.skipped_steps, 6);  // rank r skips the chunks of the N - 1 - r ranks after it
  EXPECT_DOUBLE_EQ(plan.token_imbalance, 1.0);
  // Many one-token documents all land on rank 0 under contiguous: the imbalance shows it.
  const TokenPlan ones = plan_tokens(packed({1, 1, 1, 1, 1, 1, 1, 1}, 4), Scheme::kContiguous);
  EXPECT_EQ(ones.rank_tokens, (std::vector<int64_t>{8, 0, 0, 0}));
  EXPECT_DOUBLE_EQ(ones.token_imbalance, 4.0);
}

// A packed shape's work is its visible pairs: 4 * head_dim * batch * q_heads FLOPs each, summed
// per rank over the steps, every scheme planned the same way.
TEST(PlanTokens, PlanOfAPackedShapeCountsTheVisiblePairsAsWork) {
  const Problem p = packed({1, 1, 1, 1, 1, 1, 1, 1, 100}, 4);
  // Compute-bound rates, so the busiest rank's work decides the time.
  const ShapePlan plan = plan_shape(p, PlanRates{1e9, 1e-3});
  ASSERT_EQ(plan.schemes.size(), 4u);
  for (const SchemePlan& s : plan.schemes) {
    SCOPED_TRACE(scheme_name(s.scheme));
    EXPECT_TRUE(s.applicable) << s.reason;
    EXPECT_TRUE(s.pair_model);
    ASSERT_EQ(s.ranks.size(), 4u);
    const auto pairs = brute_force_pairs(p, s.scheme);
    double busiest = 0;
    for (int r = 0; r < 4; ++r) {
      int64_t total = 0;
      for (int64_t x : pairs[r]) total += x;
      EXPECT_DOUBLE_EQ(s.ranks[r].flops, 4.0 * 64 * 1 * 8 * static_cast<double>(total)) << "rank " << r;
      busiest = std::max(busiest, s.ranks[r].flops);
    }
    EXPECT_DOUBLE_EQ(s.busiest_rank_flops, busiest);
  }
  // Contiguous puts the eight one-token documents and the first causal quarter of the long one on
  // rank 0 and the last quarter (the most pairs) on rank 3: the most imbalanced.
  EXPECT_NE(plan.recommended, Scheme::kContiguous);
  EXPECT_NE(plan.why.find("visible-pair imbalance"), std::string::npos) << plan.why;
}

}  // namespace
}  // namespace cpgen
