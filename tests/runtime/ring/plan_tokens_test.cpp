// The planner's token counts and mask-skipped steps for packed and masked problems, against the
// partition itself and a brute-force visibility check.
#include "runtime/ring/plan_tokens.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

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

// At the largest ring (1024 ranks) over four 1M-token documents the counts are exact: under
// contiguous each rank holds one 1024-token block of every document, so rank r's queries see all of
// an earlier rank's blocks, the causal half of their own and nothing later; under striped each
// rank's row adds up to the keys its queries see. (Counting visited each query once per step before:
// 40 s for this plan.)
TEST(PlanTokens, AThousandRanksOverFourMillionTokensAreCountedExactly) {
  const int64_t n = 1024, length = int64_t{1} << 20, block = length / n;
  Problem p = packed({length, length, length, length}, n);
  const TokenPlan contiguous = plan_tokens(p, Scheme::kContiguous);
  ASSERT_EQ(contiguous.visible_pairs.size(), static_cast<size_t>(n));
  EXPECT_EQ(contiguous.skipped_steps, n * (n - 1) / 2);
  int64_t wrong = 0;
  for (int r = 0; r < n; ++r)
    for (int step = 0; step < n; ++step) {
      const int s = kv_source_rank(r, step, static_cast<int>(n));
      const int64_t expected = 4 * (s < r ? block * block : s == r ? block * (block + 1) / 2 : 0);
      wrong += contiguous.visible_pairs[r][step] != expected ? 1 : 0;
    }
  EXPECT_EQ(wrong, 0);
  const TokenPlan striped = plan_tokens(p, Scheme::kStriped);
  EXPECT_EQ(striped.skipped_steps, 0);
  for (int r : {0, 1, 511, 1023}) {
    int64_t row = 0, seen = 0;
    for (int64_t pairs : striped.visible_pairs[r]) row += pairs;
    for (int64_t q : partition_positions(Scheme::kStriped, p.seq_len, static_cast<int>(n), r, p.documents))
      seen += q % length + 1;  // causal within its document
    EXPECT_EQ(row, seen) << "rank " << r;
  }
}

// At the limit a masked problem is counted: two documents of 2^25 tokens over two contiguous ranks,
// where rank 0 (the first half of each) never sees rank 1's keys (the second halves).
TEST(PlanTokens, AMaskedProblemAtTheLimitIsCounted) {
  const Problem p = packed({kMaxSkipCountTokens / 2, kMaxSkipCountTokens / 2}, 2);
  EXPECT_EQ(plan_tokens(p, Scheme::kContiguous, false).skipped_steps, 1);
}

// Past the limit a masked problem's pairs and skipped steps are not counted, and plan says why.
TEST(PlanTokens, AMaskedProblemPastTheLimitIsNotCounted) {
  Problem p = packed({kMaxSkipCountTokens, 1}, 4);
  const TokenPlan plan = plan_tokens(p, Scheme::kZigzag);
  EXPECT_EQ(plan.skipped_steps, -1);
  EXPECT_TRUE(plan.visible_pairs.empty());
  EXPECT_EQ(plan.rank_tokens.size(), 4u);
  const ShapePlan shape = plan_shape(p, PlanRates{400, 400});
  for (const SchemePlan& s : shape.schemes) {
    EXPECT_FALSE(s.applicable) << scheme_name(s.scheme);
    EXPECT_NE(s.reason.find("not counted"), std::string::npos) << s.reason;
  }
}

// Drawn small problems, every scheme: documents (some empty) or none (the whole sequence, where a
// full mask's keys are unbounded), causal or not, windows on either side or none, rings of up to
// 24 ranks, more ranks than tokens.
TEST(PlanTokens, DrawnMaskedProblemsMatchBruteForce) {
  std::mt19937 draw(20261129);
  auto below = [&](int64_t bound) { return static_cast<int64_t>(draw() % static_cast<uint32_t>(bound)); };
  for (int i = 0; i < 200; ++i) {
    std::vector<int64_t> docs;
    for (int64_t d = 0, count = 1 + below(4); d < count; ++d) docs.push_back(below(4) == 0 ? 0 : 1 + below(60));
    if (std::accumulate(docs.begin(), docs.end(), int64_t{0}) == 0) docs.push_back(7);
    Problem p = packed(docs, below(4) == 0 ? 10 + below(15) : 1 + below(9));
    if (below(4) == 0) p.documents.clear();  // one document of the same length, unlisted
    p.causal = below(2) == 0;
    p.window_left = below(3) == 0 ? -1 : below(20);
    p.window_right = p.causal || below(3) == 0 ? -1 : below(20);
    for (Scheme scheme : {Scheme::kContiguous, Scheme::kZigzag, Scheme::kZigzagToken, Scheme::kStriped}) {
      SCOPED_TRACE("draw " + std::to_string(i) + " " + std::string(scheme_name(scheme)));
      const TokenPlan plan = plan_tokens(p, scheme);
      EXPECT_EQ(plan.visible_pairs, brute_force_pairs(p, scheme));
      EXPECT_EQ(plan.skipped_steps, brute_force_skipped(p, scheme));
    }
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
