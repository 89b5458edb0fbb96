// The planner's token counts and mask-skipped steps for packed and masked problems, against the
// partition itself and a brute-force visibility check.
#include "runtime/ring/plan_tokens.h"

#include <gtest/gtest.h>

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

// Skipped steps the slow way: every (query, key) pair of every (rank, step).
int64_t brute_force_skipped(const Problem& p, Scheme scheme) {
  const AttentionShape shape = attention_shape_of(p);
  const int n = static_cast<int>(p.cp_size);
  int64_t skipped = 0;
  for (int r = 0; r < n; ++r)
    for (int s = 0; s < n; ++s) {
      bool any = false;
      for (int64_t q : partition_positions(scheme, p.seq_len, n, r, p.documents))
        for (int64_t k : partition_positions(scheme, p.seq_len, n, kv_source_rank(r, s, n), p.documents))
          any = any || key_visible(shape, q, k);
      skipped += any ? 0 : 1;
    }
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
          EXPECT_EQ(plan_tokens(p, scheme).skipped_steps, expected)
              << scheme_name(scheme) << " n " << n << " len " << len << " causal " << causal;
          closed += plan_counts_steps_in_closed_form(p, scheme) ? 1 : 0;
        }
  EXPECT_GT(closed, 0);
  // A long plain causal problem is counted too (closed form: no length limit).
  Problem big = packed({kMaxSkipCountTokens * 4}, 8);
  big.causal = true;
  EXPECT_EQ(plan_tokens(big, Scheme::kContiguous).skipped_steps, 8 * 7 / 2);
  EXPECT_EQ(plan_tokens(big, Scheme::kZigzag).skipped_steps, 0);
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

TEST(PlanTokens, PlanOfAPackedShapeRecommendsTheLeastImbalancedScheme) {
  const ShapePlan plan = plan_shape(packed({1, 1, 1, 1, 1, 1, 1, 1, 100}, 4), PlanRates{});
  ASSERT_EQ(plan.schemes.size(), 4u);
  for (const SchemePlan& s : plan.schemes) {
    EXPECT_FALSE(s.applicable) << "no FLOP model for packed documents yet";
    EXPECT_EQ(s.tokens.rank_tokens.size(), 4u);
  }
  EXPECT_NE(plan.recommended, Scheme::kContiguous);
  EXPECT_NE(plan.why.find("token imbalance"), std::string::npos) << plan.why;
}

}  // namespace
}  // namespace cpgen
