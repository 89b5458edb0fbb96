// The host side of tuning a backward step: its inputs, launch params, float64 row gradients
// (against the project's own float64 backward, runtime/ring/reference.h) and the tolerances that
// accept or reject a candidate.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "../cache/cache_fixtures.h"
#include "runtime/ring/reference.h"
#include "tuner/step_inputs_bwd.h"

namespace cpgen::testing {
namespace {

WorkloadKey small_backward(StepType step, int q_heads = 4, int kv_heads = 2, int64_t len = 48) {
  WorkloadKey w = test_workload(len, step);
  w.head_dim = 64;
  w.q_heads = q_heads;
  w.kv_heads = kv_heads;
  w.batch = 2;
  w.q_len = w.kv_len = len;
  return w;
}

// The backward timer uploads grid_bits of the seed's tensors kInputQ, kInputK, kInputV and
// kInputDout, and checks against these host tensors: they must be the same draws.
TEST(StepInputsBwd, HostTensorsAreTheTimingSeedsDraws) {
  const WorkloadKey w = small_backward(StepType::kBwdDiagonal);
  const BackwardStepInputs in = backward_step_inputs(w, 7);
  EXPECT_EQ(in.q, grid_values(7, kInputQ, in.q.size()));
  EXPECT_EQ(in.k, grid_values(7, kInputK, in.k.size()));
  EXPECT_EQ(in.v, grid_values(7, kInputV, in.v.size()));
  EXPECT_EQ(in.dout, grid_values(7, kInputDout, in.dout.size()));
  EXPECT_EQ(in.out, grid_values(7, kInputOut, in.out.size()));
}

TEST(StepInputsBwd, InputsAreExactDeterministicAndPlausible) {
  const WorkloadKey w = small_backward(StepType::kBwdDiagonal);
  const BackwardStepInputs a = backward_step_inputs(w, 7), b = backward_step_inputs(w, 7);
  EXPECT_EQ(a.q, b.q);
  EXPECT_EQ(a.dout, b.dout);
  EXPECT_NE(a.q, backward_step_inputs(w, 8).q) << "the seed must matter";
  const size_t rows = static_cast<size_t>(w.batch) * w.q_heads * w.q_len;
  ASSERT_EQ(a.q.size(), rows * w.head_dim);
  ASSERT_EQ(a.k.size(), static_cast<size_t>(w.batch) * w.kv_heads * w.kv_len * w.head_dim);
  ASSERT_EQ(a.lse.size(), rows);
  for (const std::vector<double>* t : {&a.q, &a.k, &a.v, &a.dout, &a.out})
    for (double x : *t) ASSERT_EQ(decode_16(encode_exact(x, w.dtype), w.dtype), x);
  EXPECT_DOUBLE_EQ(a.scale, 1.0 / 8.0);
  for (size_t r = 0; r < rows; ++r) {
    // lse = ln(visible keys): the diagonal step's first query sees one key, so lse 0 there.
    const int64_t i = static_cast<int64_t>(r % w.q_len);
    int64_t visible = 0;
    for (int kv : a.positions.kv) visible += kv <= a.positions.q[i];
    EXPECT_FLOAT_EQ(a.lse[r], static_cast<float>(std::log(static_cast<double>(visible)))) << r;
    double delta = 0;
    for (int d = 0; d < w.head_dim; ++d) delta += a.dout[r * w.head_dim + d] * a.out[r * w.head_dim + d];
    EXPECT_EQ(a.delta[r], static_cast<float>(delta)) << r;
  }
  EXPECT_EQ(a.lse[0], 0.0f);
}

TEST(StepInputsBwd, ParamsDescribeTheContiguousLayouts) {
  WorkloadKey w = small_backward(StepType::kBwdZigzagQHalf, 8, 2);
  w.q_len = 24;
  BackwardStepBuffers buffers;
  float acc[3];
  int positions[2];
  buffers.dq_acc = &acc[0];
  buffers.dk_acc = &acc[1];
  buffers.dv_acc = &acc[2];
  buffers.q_positions = &positions[0];
  buffers.kv_positions = &positions[1];
  const RingBwdParams first = backward_step_params(w, buffers, false);
  const RingBwdParams later = backward_step_params(w, buffers, true);
  EXPECT_EQ(first.accumulate_dkv, 0);
  EXPECT_EQ(later.accumulate_dkv, 1);
  EXPECT_EQ(first.dq_acc, &acc[0]);
  EXPECT_EQ(first.dv_acc, &acc[2]);
  EXPECT_EQ(first.kv_positions, &positions[1]);
  EXPECT_EQ(first.q_len, 24);
  EXPECT_EQ(first.kv_len, 48);
  EXPECT_EQ(first.q_heads, 8);
  EXPECT_EQ(first.kv_heads, 2);
  EXPECT_EQ(first.q_row_stride, 64);
  EXPECT_EQ(first.dout_head_stride, 24 * 64);
  EXPECT_EQ(first.q_batch_stride, 8 * 24 * 64);
  EXPECT_EQ(first.k_head_stride, 48 * 64);
  EXPECT_EQ(first.v_batch_stride, 2 * 48 * 64);
  EXPECT_FLOAT_EQ(first.scale, 0.125f);
  EXPECT_FLOAT_EQ(first.scale_log2, static_cast<float>(0.125 * M_LOG2E));
}

std::vector<int64_t> widen(const std::vector<int>& v) { return {v.begin(), v.end()}; }

// Every row of reference_dq_row and reference_dkv_row against reference_backward, which derives
// its own delta from out in float64 (ours is rounded to fp32 as the kernel's input, hence 1e-6).
void expect_rows_match_reference_backward(const WorkloadKey& w) {
  const BackwardStepInputs in = backward_step_inputs(w, 11);
  AttentionShape shape;
  shape.batch = w.batch;
  shape.q_heads = w.q_heads;
  shape.kv_heads = w.kv_heads;
  shape.head_dim = w.head_dim;
  shape.scale = in.scale;
  shape.causal = w.causal;
  const std::vector<double> lse(in.lse.begin(), in.lse.end());
  const ReferenceGrads want = reference_backward(shape, in.q, in.k, in.v, in.out, in.dout, lse, widen(in.positions.q),
                                                 widen(in.positions.kv));
  const int hd = w.head_dim;
  auto expect_row = [&](const GradientRow& got, const std::vector<double>& full, size_t row, const char* what) {
    for (int d = 0; d < hd; ++d) {
      EXPECT_NEAR(got.value[d], full[row * hd + d], 1e-6 * (got.magnitude[d] + 1e-12)) << what << " row " << row << " d" << d;
      EXPECT_GE(got.magnitude[d], std::abs(got.value[d]) * (1 - 1e-12)) << what << " row " << row << " d" << d;
    }
  };
  int nonzero = 0;
  for (int b = 0; b < w.batch; ++b) {
    for (int h = 0; h < w.q_heads; ++h)
      for (int64_t i = 0; i < w.q_len; ++i) {
        const GradientRow dq = reference_dq_row(in, b, h, i);
        expect_row(dq, want.dq, (static_cast<size_t>(b) * w.q_heads + h) * w.q_len + i, "dq");
        nonzero += dq.magnitude[0] > 0;
      }
    for (int kvh = 0; kvh < w.kv_heads; ++kvh)
      for (int64_t j = 0; j < w.kv_len; ++j) {
        GradientRow dk, dv;
        reference_dkv_row(in, b, kvh, j, &dk, &dv);
        const size_t row = (static_cast<size_t>(b) * w.kv_heads + kvh) * w.kv_len + j;
        expect_row(dk, want.dk, row, "dk");
        expect_row(dv, want.dv, row, "dv");
      }
  }
  EXPECT_GT(nonzero, 0) << "the check must not pass on all-zero gradients";
}

TEST(StepInputsBwd, RowGradientsMatchTheFloat64BackwardOnAMaskedGqaStep) {
  expect_rows_match_reference_backward(small_backward(StepType::kBwdDiagonal, 4, 2));
}

TEST(StepInputsBwd, RowGradientsMatchTheFloat64BackwardOnAFullStep) {
  WorkloadKey w = small_backward(StepType::kBwdFull, 2, 2, 40);
  w.causal = false;
  expect_rows_match_reference_backward(w);
}

TEST(StepInputsBwd, ARowWithNoVisibleKeyHasZeroGradients) {
  BackwardStepInputs in = backward_step_inputs(small_backward(StepType::kBwdDiagonal, 2, 2), 3);
  in.lse[5] = -std::numeric_limits<float>::infinity();
  const GradientRow dq = reference_dq_row(in, 0, 0, 5);
  for (int d = 0; d < 64; ++d) EXPECT_EQ(dq.value[d], 0.0);
}

TEST(StepInputsBwd, TolerancesFollowTheDtype) {
  EXPECT_DOUBLE_EQ(gradient_tolerance(Dtype::kBf16, 1.0), 8 * gradient_tolerance(Dtype::kFp16, 1.0));
  EXPECT_DOUBLE_EQ(gradient_tolerance(Dtype::kBf16, 3.0), 3 * gradient_tolerance(Dtype::kBf16, 1.0));
  EXPECT_LT(gradient_agreement_tolerance(Dtype::kFp16, 0.5, 1.0), gradient_agreement_tolerance(Dtype::kBf16, 0.5, 1.0));
}

TEST(StepInputsBwd, MismatchFindsTheFirstBadElementNaNIncluded) {
  const int hd = 64;
  std::vector<float> want(4 * hd);
  for (size_t i = 0; i < want.size(); ++i) want[i] = std::sin(0.37 * static_cast<double>(i)) * 0.01f;
  double tol = -1;
  EXPECT_EQ(first_gradient_mismatch(want, want, hd, Dtype::kBf16, &tol), -1);
  // Half an ulp of rounding on every element is accepted.
  std::vector<float> rounded = want;
  for (float& x : rounded) x *= 1.0f + std::ldexp(1.0f, -9);
  EXPECT_EQ(first_gradient_mismatch(rounded, want, hd, Dtype::kBf16, &tol), -1);
  // A tile's worth of error (a tenth of the row's size) is not, and the first one is reported.
  std::vector<float> wrong = want;
  wrong[3 * hd + 5] += 0.001f;
  wrong[2 * hd + 7] += 0.001f;
  EXPECT_EQ(first_gradient_mismatch(wrong, want, hd, Dtype::kBf16, &tol), 2 * hd + 7);
  EXPECT_GT(tol, 0);
  EXPECT_LT(tol, 0.001);
  // An element never written keeps its NaN poison.
  std::vector<float> unwritten = want;
  unwritten[hd + 1] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(first_gradient_mismatch(unwritten, want, hd, Dtype::kFp16, &tol), hd + 1);
  // An all-zero reference row demands exact zeros.
  std::vector<float> zeros(hd, 0.0f), tiny(hd, 0.0f);
  tiny[9] = 1e-30f;
  EXPECT_EQ(first_gradient_mismatch(zeros, zeros, hd, Dtype::kBf16, &tol), -1);
  EXPECT_EQ(first_gradient_mismatch(tiny, zeros, hd, Dtype::kBf16, &tol), 9);
}

TEST(StepInputsBwd, UsefulFlopsAreTwoAndAHalfForwards) {
  const WorkloadKey w = small_backward(StepType::kBwdDiagonal);
  const StepPositions pos = step_positions(w);
  const double forward = 4.0 * static_cast<double>(visible_pairs(pos, true)) * w.head_dim * w.batch * w.q_heads;
  EXPECT_DOUBLE_EQ(backward_useful_flops(w, pos), 2.5 * forward);
}

}  // namespace
}  // namespace cpgen::testing
