// The backward tuning checks against the real backward step kernel (templates/step_bwd.cuh), run
// on the CPU by the CUDA emulator with the tuner's own inputs and launch params: the default
// config is within gradient_tolerance of the float64 rows on every row (so the GPU harness does
// not reject a correct reference), another tile config agrees with it within the agreement
// tolerance (so a correct candidate is kept), and a kernel that ignores the causal mask does not
// (so a wrong one is rejected); the GPU's comparison kernel (templates/compare.cuh), emulated
// too, gives the host check's answer on each.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "../cache/cache_fixtures.h"
#include "tuner/step_inputs_bwd.h"

// Last: defines __CUDACC__ and the CUDA keywords for the template headers below.
#include "emulation/cuda_emulation.h"
#include "cpgen/step_bwd.cuh"
#include "cpgen/compare.cuh"

namespace cpgen {
namespace {

struct Gradients {
  std::vector<float> dq, dk, dv;
  std::string failure;
};

std::vector<uint16_t> encode_all(const std::vector<double>& values, Dtype dtype) {
  std::vector<uint16_t> bits(values.size());
  for (size_t i = 0; i < values.size(); ++i) bits[i] = encode_exact(values[i], dtype);
  return bits;
}

// One launch as GpuBackwardTimer::run_checked makes it: dq zeroed, dk and dv poisoned, the
// chunk's first step (accumulate_dkv 0), params from backward_step_params.
template <typename Traits>
Gradients run_step(const BackwardStepInputs& in, const StepKeyIntervals* intervals = nullptr) {
  const WorkloadKey& w = in.workload;
  const std::vector<uint16_t> q = encode_all(in.q, w.dtype), k = encode_all(in.k, w.dtype),
                              v = encode_all(in.v, w.dtype), dout = encode_all(in.dout, w.dtype);
  Gradients g;
  g.dq.assign(in.q.size(), 0.0f);
  g.dk.assign(in.k.size(), std::numeric_limits<float>::quiet_NaN());
  g.dv.assign(in.k.size(), std::numeric_limits<float>::quiet_NaN());
  BackwardStepBuffers b;
  b.q = q.data();
  b.k = k.data();
  b.v = v.data();
  b.dout = dout.data();
  b.lse = in.lse.data();
  b.delta = in.delta.data();
  b.dq_acc = g.dq.data();
  b.dk_acc = g.dk.data();
  b.dv_acc = g.dv.data();
  b.q_positions = in.positions.q.data();
  b.kv_positions = in.positions.kv.data();
  if (intervals) {
    b.q_key_first = intervals->first.data();
    b.q_key_last = intervals->last.data();
  }
  const RingBwdParams params = backward_step_params(w, b, /*accumulate_dkv=*/false);
  const unsigned grid_x = static_cast<unsigned>((w.kv_len + Traits::kBlockN - 1) / Traits::kBlockN);
  const device::FoldedPairs pairs = device::fold_pairs(static_cast<long long>(w.batch) * w.kv_heads);
  g.failure = emulation::launch(grid_x, pairs.y, pairs.z, Traits::kThreads, Traits::kSharedBytes,
                                [&] { device::ring_bwd_step<Traits>(params); });
  return g;
}

// The tuner's check as the GPU makes it (GpuCompare::run_gradient): the first disagreeing flat
// index, or -1. Two CTAs of two warps, so warps stride over the rows.
int64_t device_first_mismatch(const std::vector<float>& got, const std::vector<float>& want, int head_dim, Dtype dtype) {
  unsigned long long first = want.size();
  GradientCompareParams p{};
  p.got = got.data();
  p.want = want.data();
  p.rows = static_cast<long long>(want.size()) / head_dim;
  p.head_dim = head_dim;
  p.relative = static_cast<float>(gradient_agreement_relative(dtype));
  p.want_scale = 1.0f;
  p.first = &first;
  EXPECT_EQ(emulation::launch(2, 1, 64, 0, [&] { device::compare_gradients(p); }), "");
  return first < want.size() ? static_cast<int64_t>(first) : -1;
}

WorkloadKey diagonal_workload(Dtype dtype) {
  WorkloadKey w = testing::test_workload(64, StepType::kBwdDiagonal);
  w.dtype = dtype;
  w.head_dim = 64;
  w.q_heads = 4;
  w.kv_heads = 1;  // GQA group 4: dk and dv sum over four query heads
  w.batch = 1;
  return w;
}

// Every row of dq, dk and dv against float64; returns the first failure.
std::string check_every_row(const BackwardStepInputs& in, const Gradients& g) {
  const WorkloadKey& w = in.workload;
  const int hd = w.head_dim;
  auto check = [&](const GradientRow& want, const std::vector<float>& got, size_t row, const char* what) -> std::string {
    for (int d = 0; d < hd; ++d) {
      const double tol = gradient_tolerance(w.dtype, want.magnitude[d]);
      if (!(std::abs(got[row * hd + d] - want.value[d]) <= tol)) {
        return std::string(what) + " row " + std::to_string(row) + " d" + std::to_string(d) + ": " +
               std::to_string(got[row * hd + d]) + ", float64 " + std::to_string(want.value[d]) + ", tolerance " +
               std::to_string(tol);
      }
    }
    return "";
  };
  for (int h = 0; h < w.q_heads; ++h)
    for (int64_t i = 0; i < w.q_len; ++i) {
      const std::string f = check(reference_dq_row(in, 0, h, i), g.dq, h * w.q_len + i, "dq");
      if (!f.empty()) return f;
    }
  for (int kvh = 0; kvh < w.kv_heads; ++kvh)
    for (int64_t j = 0; j < w.kv_len; ++j) {
      GradientRow dk, dv;
      reference_dkv_row(in, 0, kvh, j, &dk, &dv);
      std::string f = check(dk, g.dk, kvh * w.kv_len + j, "dk");
      if (f.empty()) f = check(dv, g.dv, kvh * w.kv_len + j, "dv");
      if (!f.empty()) return f;
    }
  return "";
}

template <typename E>
void check_dtype(Dtype dtype) {
  // The hd64 backward default (KernelSpec::backward_default_for), another tile config of the
  // tuner's space, and the default without the causal mask.
  using Default = device::BwdTraits<E, 64, 64, 64, 4, 2, true, 4>;
  using Other = device::BwdTraits<E, 64, 32, 32, 4, 1, true, 4>;
  using Unmasked = device::BwdTraits<E, 64, 64, 64, 4, 2, false, 4>;
  const BackwardStepInputs in = backward_step_inputs(diagonal_workload(dtype), 5);
  const Gradients reference = run_step<Default>(in);
  ASSERT_EQ(reference.failure, "");
  EXPECT_EQ(check_every_row(in, reference), "") << dtype_name(dtype);

  const Gradients other = run_step<Other>(in);
  ASSERT_EQ(other.failure, "");
  double tol = 0;
  EXPECT_EQ(first_gradient_mismatch(other.dq, reference.dq, 64, dtype, &tol), -1);
  EXPECT_EQ(first_gradient_mismatch(other.dk, reference.dk, 64, dtype, &tol), -1);
  EXPECT_EQ(first_gradient_mismatch(other.dv, reference.dv, 64, dtype, &tol), -1);
  EXPECT_EQ(device_first_mismatch(other.dq, reference.dq, 64, dtype), -1);
  EXPECT_EQ(device_first_mismatch(other.dk, reference.dk, 64, dtype), -1);
  EXPECT_EQ(device_first_mismatch(other.dv, reference.dv, 64, dtype), -1);

  const Gradients unmasked = run_step<Unmasked>(in);
  ASSERT_EQ(unmasked.failure, "");
  const int64_t dq_at = first_gradient_mismatch(unmasked.dq, reference.dq, 64, dtype, &tol);
  const int64_t dv_at = first_gradient_mismatch(unmasked.dv, reference.dv, 64, dtype, &tol);
  EXPECT_GE(dq_at, 0) << "a kernel ignoring the causal mask agreed with the reference config on dq";
  EXPECT_GE(dv_at, 0);
  EXPECT_EQ(device_first_mismatch(unmasked.dq, reference.dq, 64, dtype), dq_at);
  EXPECT_EQ(device_first_mismatch(unmasked.dv, reference.dv, 64, dtype), dv_at);
}

TEST(StepInputsBwdEmulated, Bf16DefaultMatchesFloat64AndTheToleranceSeparatesRightFromWrong) {
  check_dtype<device::Bf16>(Dtype::kBf16);
}

TEST(StepInputsBwdEmulated, Fp16DefaultMatchesFloat64AndTheToleranceSeparatesRightFromWrong) {
  check_dtype<device::Fp16>(Dtype::kFp16);
}

// A masked workload as the GPU backward timer runs it: the interval arrays and softcap of its
// step_mask reach the kernel specialized on both, and the float64 rows under the same mask (the
// softcap's slope in dS included) agree with it on every row. Rank 0's zigzag diagonal holds
// positions [0, 32) and [96, 128): 16-token documents split both halves, and an 8-key window
// cuts inside each document.
TEST(StepInputsBwdEmulated, MaskedWorkloadMatchesFloat64UnderItsMask) {
  WorkloadKey w = diagonal_workload(Dtype::kBf16);
  w.mask.window_left = 8;
  w.mask.document_len = 16;
  w.mask.softcap = true;
  const BackwardStepInputs in = backward_step_inputs(w, 7);
  ASSERT_EQ(in.mask.softcap, kTuneSoftcap);
  const StepKeyIntervals intervals = step_key_intervals(in.mask, in.positions);
  using Masked = device::BwdTraits<device::Bf16, 64, 64, 64, 4, 2, true, 4, true, true>;
  const Gradients g = run_step<Masked>(in, &intervals);
  ASSERT_EQ(g.failure, "");
  EXPECT_EQ(check_every_row(in, g), "");
}

}  // namespace
}  // namespace cpgen
