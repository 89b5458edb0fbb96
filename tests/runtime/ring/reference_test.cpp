// The float64 reference attention against the independent vectors, and small cases by hand.
#include "runtime/ring/reference.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numeric>

#include "cpgen/error.h"
#include "runtime/ring/partition.h"
#include "runtime/ring/vectors.h"
#include "test_util.h"

namespace cpgen {
namespace {

std::vector<int64_t> iota_positions(int64_t n) {
  std::vector<int64_t> p(n);
  std::iota(p.begin(), p.end(), 0);
  return p;
}

class ReferenceVectors : public ::testing::TestWithParam<std::string> {};

TEST_P(ReferenceVectors, MatchesForwardAndBackward) {
  const AttentionVectors vec = load_attention_vectors(GetParam());
  const auto positions = iota_positions(vec.seq_len);
  const ReferenceForward fwd =
      reference_forward(vec.shape, vec.q, vec.k, vec.v, positions, positions);
  EXPECT_LT(relative_error(fwd.out, vec.out), 1e-9) << vec.name << " out";
  EXPECT_LT(relative_error(fwd.lse, vec.lse), 1e-9) << vec.name << " lse";
  // Backward from our own forward, so both halves are checked end to end.
  const ReferenceGrads grads = reference_backward(vec.shape, vec.q, vec.k, vec.v, fwd.out,
                                                  vec.dout, fwd.lse, positions, positions);
  EXPECT_LT(relative_error(grads.dq, vec.dq), 1e-9) << vec.name << " dq";
  EXPECT_LT(relative_error(grads.dk, vec.dk), 1e-9) << vec.name << " dk";
  EXPECT_LT(relative_error(grads.dv, vec.dv), 1e-9) << vec.name << " dv";
  // The check is not vacuous: a perturbed output is far outside the bound.
  std::vector<double> perturbed = fwd.out;
  perturbed[perturbed.size() / 2] += 1e-3;
  EXPECT_GT(relative_error(perturbed, vec.out), 1e-9);
}

INSTANTIATE_TEST_SUITE_P(Cases, ReferenceVectors, ::testing::ValuesIn(testing::vector_files()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return testing::vector_case_name(info.param);
                         });

// Position arrays let the reference compute a shard: rank r's queries (zigzag, out of order in
// the global sequence) against every key give exactly rank r's rows of the full answer.
TEST(Reference, ShardOfQueriesGivesTheSameRows) {
  const AttentionVectors vec =
      load_attention_vectors(testing::vectors_dir() + "/mha_window16_hd64_s64.json");
  const AttentionShape& s = vec.shape;
  const auto all = iota_positions(vec.seq_len);
  const ReferenceForward full = reference_forward(s, vec.q, vec.k, vec.v, all, all);
  for (int r = 0; r < 4; ++r) {
    const auto q_pos = partition_positions(Scheme::kZigzag, vec.seq_len, 4, r, {});
    const auto q = scatter_shard(vec.q, s.batch, s.q_heads, vec.seq_len, s.head_dim,
                                 Scheme::kZigzag, 4, r, {});
    const ReferenceForward part = reference_forward(s, q, vec.k, vec.v, q_pos, all);
    EXPECT_EQ(part.out, scatter_shard(full.out, s.batch, s.q_heads, vec.seq_len, s.head_dim,
                                      Scheme::kZigzag, 4, r, {}));
    EXPECT_EQ(part.lse, scatter_shard(full.lse, s.batch, s.q_heads, vec.seq_len, 1,
                                      Scheme::kZigzag, 4, r, {}));
  }
}

AttentionShape tiny_shape() {
  AttentionShape s;
  s.batch = 1;
  s.q_heads = 2;
  s.kv_heads = 1;
  s.head_dim = 2;
  s.scale = 0.5;
  s.causal = true;
  return s;
}

TEST(Reference, SingleVisibleKeyCopiesItsValue) {
  const AttentionShape s = tiny_shape();
  // Two query heads sharing one kv head; query at position 0 sees only key 0.
  const std::vector<double> q = {1, 2, 3, 4}, k = {0.5, -1, 7, 7}, v = {10, 20, 30, 40};
  const auto fwd = reference_forward(s, q, k, v, {0}, {0, 1});
  EXPECT_DOUBLE_EQ(fwd.out[0], 10);
  EXPECT_DOUBLE_EQ(fwd.out[1], 20);
  EXPECT_DOUBLE_EQ(fwd.out[3], 20);
  EXPECT_DOUBLE_EQ(fwd.lse[0], 0.5 * (1 * 0.5 + 2 * -1));
  EXPECT_DOUBLE_EQ(fwd.lse[1], 0.5 * (3 * 0.5 + 4 * -1));
}

TEST(Reference, TwoKeysGiveTheSoftmaxAverage) {
  AttentionShape s = tiny_shape();
  s.q_heads = 1;
  s.causal = false;
  const std::vector<double> q = {1, 0}, k = {2, 0, 0, 0}, v = {1, 0, 0, 1};
  const auto fwd = reference_forward(s, q, k, v, {0}, {0, 1});
  // Scores 1 and 0: weights e/(e+1) and 1/(e+1).
  const double e = std::exp(1.0);
  EXPECT_NEAR(fwd.out[0], e / (e + 1), 1e-15);
  EXPECT_NEAR(fwd.out[1], 1 / (e + 1), 1e-15);
  EXPECT_NEAR(fwd.lse[0], std::log(e + 1), 1e-15);
}

TEST(Reference, RowWithoutKeysIsZeroWithMinusInfinityLse) {
  const AttentionShape s = tiny_shape();
  const std::vector<double> q = {1, 2, 3, 4}, k = {1, 1}, v = {5, 6};
  // Query position 3 against key position 4 (future): nothing visible.
  const auto fwd = reference_forward(s, q, k, v, {3}, {4});
  EXPECT_EQ(fwd.out, std::vector<double>(4, 0.0));
  EXPECT_EQ(fwd.lse[0], -std::numeric_limits<double>::infinity());
  const auto grads = reference_backward(s, q, k, v, fwd.out, {1, 1, 1, 1}, fwd.lse, {3}, {4});
  for (double g : grads.dq) EXPECT_EQ(g, 0);
  for (double g : grads.dk) EXPECT_EQ(g, 0);
}

TEST(Reference, WindowMasksKeysTooFarBehind) {
  AttentionShape s = tiny_shape();
  s.q_heads = 1;
  s.window_left = 1;
  const std::vector<double> q = {1, 0}, k = {5, 0, 1, 0, 1, 0}, v = {100, 100, 1, 2, 3, 4};
  // Query at 2 sees keys 1 and 2 (2 - 0 > window_left masks key 0); equal scores average them.
  const auto fwd = reference_forward(s, q, k, v, {2}, {0, 1, 2});
  EXPECT_NEAR(fwd.out[0], 2, 1e-12);
  EXPECT_NEAR(fwd.out[1], 3, 1e-12);
}

// Gradients against central finite differences of loss = sum(out * dout) on a small GQA case.
TEST(Reference, BackwardMatchesFiniteDifferences) {
  AttentionShape s = tiny_shape();
  s.head_dim = 3;
  s.scale = 0.7;
  const std::vector<int64_t> pos = {0, 1, 2, 3};
  std::vector<double> q(2 * 4 * 3), k(4 * 3), v(4 * 3), dout(2 * 4 * 3);
  for (size_t i = 0; i < q.size(); ++i) q[i] = std::sin(1.3 * i + 0.2);
  for (size_t i = 0; i < k.size(); ++i) k[i] = std::cos(0.7 * i - 0.4);
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(2.1 * i + 1.0);
  for (size_t i = 0; i < dout.size(); ++i) dout[i] = std::cos(0.9 * i + 0.3);
  const auto loss = [&](const std::vector<double>& qq, const std::vector<double>& kk,
                        const std::vector<double>& vv) {
    const auto f = reference_forward(s, qq, kk, vv, pos, pos);
    return std::inner_product(f.out.begin(), f.out.end(), dout.begin(), 0.0);
  };
  const auto fwd = reference_forward(s, q, k, v, pos, pos);
  const auto g = reference_backward(s, q, k, v, fwd.out, dout, fwd.lse, pos, pos);
  const double h = 1e-6;
  const auto check = [&](std::vector<double>& x, const std::vector<double>& grad, const char* n) {
    for (size_t i = 0; i < x.size(); ++i) {
      const double saved = x[i];
      x[i] = saved + h;
      const double up = loss(q, k, v);
      x[i] = saved - h;
      const double down = loss(q, k, v);
      x[i] = saved;
      EXPECT_NEAR(grad[i], (up - down) / (2 * h), 1e-7) << n << "[" << i << "]";
    }
  };
  check(q, g.dq, "dq");
  check(k, g.dk, "dk");
  check(v, g.dv, "dv");
}

TEST(Reference, RejectsInconsistentSizes) {
  const AttentionShape s = tiny_shape();
  EXPECT_THROW(reference_forward(s, {1, 2, 3}, {1, 1}, {1, 1}, {0}, {0}), Error);
  AttentionShape bad = s;
  bad.kv_heads = 3;
  EXPECT_THROW(reference_forward(bad, {1, 2, 3, 4}, {1, 1}, {1, 1}, {0}, {0}), Error);
}

}  // namespace
}  // namespace cpgen

namespace cpgen {
namespace {

// The softcap's tanh factor and the document / window mask in the gradients: central finite
// differences on a case with every feature at once, including a one-token and an empty document.
TEST(Reference, MaskedSoftcappedBackwardMatchesFiniteDifferences) {
  AttentionShape s;
  s.batch = 1;
  s.q_heads = 2;
  s.kv_heads = 1;
  s.head_dim = 3;
  s.scale = 0.9;
  s.causal = false;
  s.window_left = 2;
  s.window_right = 1;
  s.softcap = 1.5;
  s.cu_seqlens = cu_seqlens_of({4, 0, 1, 3});
  const std::vector<int64_t> pos = {0, 1, 2, 3, 4, 5, 6, 7};
  std::vector<double> q(2 * 8 * 3), k(8 * 3), v(8 * 3), dout(2 * 8 * 3);
  for (size_t i = 0; i < q.size(); ++i) q[i] = 1.5 * std::sin(1.3 * i + 0.2);
  for (size_t i = 0; i < k.size(); ++i) k[i] = 1.5 * std::cos(0.7 * i - 0.4);
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(2.1 * i + 1.0);
  for (size_t i = 0; i < dout.size(); ++i) dout[i] = std::cos(0.9 * i + 0.3);
  const auto loss = [&]() {
    const auto f = reference_forward(s, q, k, v, pos, pos);
    return std::inner_product(f.out.begin(), f.out.end(), dout.begin(), 0.0);
  };
  const auto fwd = reference_forward(s, q, k, v, pos, pos);
  // The one-token document at position 4 sees only itself: its output is its own value row.
  for (int64_t d = 0; d < 3; ++d) EXPECT_NEAR(fwd.out[4 * 3 + d], v[4 * 3 + d], 1e-12);
  const auto g = reference_backward(s, q, k, v, fwd.out, dout, fwd.lse, pos, pos);
  const double h = 1e-6;
  double largest_dq = 0;
  const auto check = [&](std::vector<double>& x, const std::vector<double>& grad, const char* n) {
    for (size_t i = 0; i < x.size(); ++i) {
      const double saved = x[i];
      x[i] = saved + h;
      const double up = loss();
      x[i] = saved - h;
      const double down = loss();
      x[i] = saved;
      EXPECT_NEAR(grad[i], (up - down) / (2 * h), 1e-7) << n << "[" << i << "]";
    }
  };
  for (double x : g.dq) largest_dq = std::max(largest_dq, std::abs(x));
  EXPECT_GT(largest_dq, 1e-3);  // the check is not vacuous (1e-7 is below 1e-4 of the largest)
  check(q, g.dq, "dq");
  check(k, g.dk, "dk");
  check(v, g.dv, "dv");
  // Without the tanh factor the gradients would differ: the softcap is really in them.
  AttentionShape uncapped = s;
  uncapped.softcap = 0;
  const auto g0 = reference_backward(uncapped, q, k, v, fwd.out, dout, fwd.lse, pos, pos);
  EXPECT_GT(relative_error(g0.dq, g.dq), 1e-3);
}

TEST(Reference, RejectsBadMaskFieldsByName) {
  AttentionShape s;
  s.q_heads = s.kv_heads = 1;
  s.head_dim = 2;
  s.scale = 1;
  s.window_left = -2;
  EXPECT_THROW(
      {
        try {
          check_attention_shape(s);
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("window_left"), std::string::npos) << e.what();
          throw;
        }
      },
      Error);
  s.window_left = -1;
  s.softcap = -1;
  EXPECT_THROW(check_attention_shape(s), Error);
  s.softcap = 0;
  s.cu_seqlens = {0, 5, 3};
  EXPECT_THROW(check_attention_shape(s), Error);
}

}  // namespace
}  // namespace cpgen
