// Random problems checked on sampled rows: the inputs, the positions, the sampled float64
// reference against the full one, and that a wrong result is caught.
#include "runtime/ring/sampled_check.h"

#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <set>

#include "cpgen/error.h"
#include "runtime/core/attention_shape.h"
#include "runtime/ring/partition.h"
#include "runtime/ring/reference.h"

namespace cpgen {
namespace {

Problem small_problem(bool causal) {
  Problem p;
  p.name = "small";
  p.batch = 2;
  p.q_heads = 4;
  p.kv_heads = 2;
  p.head_dim = 64;
  p.seq_len = 40;
  p.cp_size = 2;
  p.causal = causal;
  p.scheme = causal ? Scheme::kZigzag : Scheme::kContiguous;
  return p;
}

std::vector<int64_t> all_positions(int64_t n) {
  std::vector<int64_t> positions;
  for (int64_t i = 0; i < n; ++i) positions.push_back(i);
  return positions;
}

TEST(SampledCheck, RandomInputsAreHalfExactDeterministicAndSeeded) {
  const Problem p = small_problem(true);
  const AttentionVectors a = random_vectors(p, 5), b = random_vectors(p, 5), c = random_vectors(p, 6);
  EXPECT_EQ(a.q, b.q);
  EXPECT_EQ(a.dout, b.dout);
  EXPECT_NE(a.q, c.q);
  EXPECT_NE(a.q, a.k) << "each tensor has its own stream";
  ASSERT_EQ(a.q.size(), 2u * 4 * 40 * 64);
  ASSERT_EQ(a.k.size(), 2u * 2 * 40 * 64);
  std::set<double> distinct;
  for (const auto* t : {&a.q, &a.k, &a.v, &a.dout})
    for (double x : *t) {
      EXPECT_EQ(x * 32, std::round(x * 32)) << x << " is not a multiple of 1/32";
      EXPECT_LE(std::abs(x), 4.0);
      distinct.insert(x);
    }
  EXPECT_GT(distinct.size(), 200u) << "values cover the range";
  EXPECT_DOUBLE_EQ(a.shape.scale, 1 / std::sqrt(64.0));
}

// The vectors of a masked problem carry its mask (window, softcap, documents): copied field by
// field, random_vectors left it out, and verify --shape checked masked shapes unmasked.
TEST(SampledCheck, RandomVectorsCarryTheProblemsMask) {
  Problem p = small_problem(true);
  p.window_left = 7;
  p.window_right = 3;
  p.softcap = 15;
  p.documents = {10, 0, 30};
  const AttentionVectors v = random_vectors(p, 5);
  const AttentionShape want = attention_shape_of(p);
  EXPECT_EQ(v.shape.window_left, 7);
  EXPECT_EQ(v.shape.window_right, 3);
  EXPECT_DOUBLE_EQ(v.shape.softcap, 15);
  EXPECT_EQ(v.shape.cu_seqlens, (std::vector<int64_t>{0, 10, 10, 40}));
  EXPECT_EQ(v.shape.cu_seqlens, want.cu_seqlens);
  EXPECT_DOUBLE_EQ(v.shape.scale, want.scale);
  EXPECT_EQ(v.shape.group(), 2);
  EXPECT_EQ(v.seq_len, 40);
}

TEST(SampledCheck, PositionsIncludeEveryShardsEndsAndSpread) {
  const int64_t n = 4096;
  const std::vector<int64_t> positions = sample_positions(Scheme::kZigzag, n, 8, 64, {});
  EXPECT_LE(positions.size(), 64u);
  EXPECT_GE(positions.size(), 60u);
  EXPECT_TRUE(std::is_sorted(positions.begin(), positions.end()));
  const std::set<int64_t> set(positions.begin(), positions.end());
  EXPECT_EQ(set.size(), positions.size());
  for (int r = 0; r < 8; ++r) {
    const auto shard = partition_positions(Scheme::kZigzag, n, 8, r, {});
    EXPECT_TRUE(set.count(shard.front())) << "rank " << r;
    EXPECT_TRUE(set.count(shard.back())) << "rank " << r;
  }
  EXPECT_TRUE(set.count(0));
  EXPECT_TRUE(set.count(n - 1));
  // Spread: no gap wider than a few times the mean spacing.
  for (size_t i = 1; i < positions.size(); ++i) EXPECT_LT(positions[i] - positions[i - 1], 3 * n / 64);
  EXPECT_EQ(sample_positions(Scheme::kStriped, 30, 3, 64, {}), all_positions(30));
}

// With documents the shard ends are those of the split the ring runs (each document on its own),
// and a rank that holds no token is passed over (its shard's front was read: an empty vector).
TEST(SampledCheck, PositionsFollowTheDocumentsSplitAndSkipEmptyRanks) {
  const std::vector<int64_t> documents = {20, 44};
  const std::vector<int64_t> positions = sample_positions(Scheme::kZigzag, 64, 2, 8, documents);
  for (int r = 0; r < 2; ++r) {
    const std::vector<int64_t> shard = partition_positions(Scheme::kZigzag, 64, 2, r, documents);
    EXPECT_TRUE(std::binary_search(positions.begin(), positions.end(), shard.front())) << r;
    EXPECT_TRUE(std::binary_search(positions.begin(), positions.end(), shard.back())) << r;
  }
  // Twenty documents of three tokens over four contiguous ranks: rank 3 holds none.
  const std::vector<int64_t> threes(20, 3);
  ASSERT_TRUE(partition_positions(Scheme::kContiguous, 60, 4, 3, threes).empty());
  const std::vector<int64_t> sampled = sample_positions(Scheme::kContiguous, 60, 4, 10, threes);
  EXPECT_GE(sampled.size(), 10u);
  EXPECT_TRUE(std::is_sorted(sampled.begin(), sampled.end()));
  EXPECT_EQ(sampled.front(), 0);
  EXPECT_EQ(sampled.back(), 59);
}

TEST(SampledCheck, SampledReferenceIsTheFullReferenceAtThosePositions) {
  for (bool causal : {true, false}) {
    const AttentionVectors in = random_vectors(small_problem(causal), 3);
    const std::vector<int64_t> positions = {0, 7, 19, 20, 39};
    const SampledReference ref = sampled_reference(in, positions, /*with_grads=*/true);
    const auto all = all_positions(in.seq_len);
    const ReferenceForward fwd = reference_forward(in.shape, in.q, in.k, in.v, all, all);
    const ReferenceGrads grads =
        reference_backward(in.shape, in.q, in.k, in.v, fwd.out, in.dout, fwd.lse, all, all);
    const int64_t d = 64, n = 40, samples = 5;
    for (int64_t row = 0; row < 8; ++row)
      for (int64_t t = 0; t < samples; ++t) {
        EXPECT_NEAR(ref.lse[row * samples + t], fwd.lse[row * n + positions[t]], 1e-12);
        for (int64_t c = 0; c < d; ++c) {
          EXPECT_NEAR(ref.out[(row * samples + t) * d + c], fwd.out[(row * n + positions[t]) * d + c], 1e-12);
          EXPECT_NEAR(ref.dq[(row * samples + t) * d + c], grads.dq[(row * n + positions[t]) * d + c], 1e-10);
        }
      }
    for (int64_t row = 0; row < 4; ++row)
      for (int64_t t = 0; t < samples; ++t)
        for (int64_t c = 0; c < d; ++c) {
          EXPECT_NEAR(ref.dk[(row * samples + t) * d + c], grads.dk[(row * n + positions[t]) * d + c], 1e-10);
          EXPECT_NEAR(ref.dv[(row * samples + t) * d + c], grads.dv[(row * n + positions[t]) * d + c], 1e-10);
        }
  }
}

TEST(SampledCheck, ErrorsSeeAPerturbedSampledRowAndIgnoreOthers) {
  const AttentionVectors in = random_vectors(small_problem(true), 1);
  const std::vector<int64_t> positions = {0, 13, 39};
  const SampledReference ref = sampled_reference(in, positions, /*with_grads=*/false);
  const auto all = all_positions(in.seq_len);
  const ReferenceForward fwd = reference_forward(in.shape, in.q, in.k, in.v, all, all);
  std::vector<float> out(fwd.out.begin(), fwd.out.end()), lse(fwd.lse.begin(), fwd.lse.end());
  EXPECT_LT(sampled_relative_error(ref, "out", out), 1e-6);
  EXPECT_LT(sampled_max_abs_error(ref, "lse", lse), 1e-5);

  // Row 5 (batch 1, head 1), position 13 is sampled: a change of 0.5 there is seen.
  std::vector<float> bad = out;
  bad[(5 * 40 + 13) * 64 + 3] += 0.5f;
  EXPECT_GT(sampled_relative_error(ref, "out", bad), 1e-3);
  EXPECT_NEAR(sampled_max_abs_error(ref, "out", bad), 0.5, 1e-5);
  // Position 14 is not sampled: the same change there is invisible to the sampled check.
  bad = out;
  bad[(5 * 40 + 14) * 64 + 3] += 0.5f;
  EXPECT_LT(sampled_relative_error(ref, "out", bad), 1e-6);
  // NaN fails any bound.
  std::vector<float> nan_lse = lse;
  nan_lse[2 * 40 + 39] = NAN;
  EXPECT_TRUE(std::isnan(sampled_max_abs_error(ref, "lse", nan_lse)));
  EXPECT_TRUE(std::isnan(sampled_relative_error(ref, "lse", nan_lse)));
  // Gradients were not computed, and sizes must match.
  EXPECT_THROW(sampled_relative_error(ref, "dq", out), Error);
  EXPECT_THROW(sampled_relative_error(ref, "out", lse), Error);
}

}  // namespace
}  // namespace cpgen
