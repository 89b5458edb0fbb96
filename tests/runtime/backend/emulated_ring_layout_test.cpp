// Issue 11 on the emulated kernel ring: layouts by strides, unequal shards and the zigzag
// half-size steps, with the real forward and backward kernels run by the CUDA emulator. One
// problem (seq_len 40 over 3 ranks: 13, 13 and 14 rows) and the default kernels the other
// emulated tests compile too, so a clean store compiles nothing extra for this file.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "runtime/backend/emulated_device.h"
#include "runtime/backend/emulated_ring.h"
#include "runtime/backend/kernel_ring_backend.h"
#include "runtime/ring/reference.h"
#include "runtime/ring/sampled_check.h"

#include "tests/runtime/backend/emulated_test_util.h"

namespace cpgen {
namespace {

constexpr const char* kArch = testing::kEmulatedArch;
using testing::as_float;
using testing::relative;
KernelStore* test_store() { return testing::emulated_store(); }

// Zigzag over 3 ranks cuts 40 rows into 6 chunks of 7, 7, 7, 7, 6, 6: no rank holds 40 / 3.
Problem unequal_problem(const std::string& layout) {
  Problem p;
  p.name = "emulated-layout";
  p.batch = 2;
  p.q_heads = 1;
  p.kv_heads = 1;
  p.head_dim = 64;
  p.seq_len = 40;
  p.cp_size = 3;
  p.dtype = Dtype::kBf16;
  p.causal = true;
  p.scheme = Scheme::kZigzag;
  p.layout = layout;
  p.validate();
  return p;
}

std::vector<std::pair<StepType, KernelSpec>> forward_defaults(const Problem& p) {
  std::vector<std::pair<StepType, KernelSpec>> per_step;
  for (StepType step : step_types_for(p))
    per_step.emplace_back(step, KernelSpec::default_for_arch(p.dtype, static_cast<int>(p.head_dim), p.causal,
                                                             static_cast<int>(p.gqa_group()), kArch));
  return per_step;
}

EmulatedBackward backward_defaults(const Problem& p, const std::vector<double>& dout) {
  EmulatedBackward b;
  const int hd = static_cast<int>(p.head_dim);
  for (StepType step : backward_step_types_for(p))
    b.steps.emplace_back(step, KernelSpec::backward_default_for_arch(p.dtype, hd, p.causal,
                                                                     static_cast<int>(p.gqa_group()), kArch));
  b.pre = KernelSpec::backward_pre(p.dtype, hd);
  b.convert = KernelSpec::backward_convert(p.dtype, hd);
  b.dout = as_float(dout);
  return b;
}

// Each step launches its real size: a key-half step the sender's first chunk of keys (7 rows
// here, whoever sent it), a query-half step this rank's second chunk of queries (a view from its
// first chunk's end, with the state's row pitch), except on the last step, which must write
// every row's out and lse.
TEST(EmulatedRing, ZigzagHalfStepsLaunchTheirRealSizeOnUnequalShards) {
  const Problem p = unequal_problem("bshd");
  EmulatedDevice device(forward_defaults(p), kArch, test_store());
  const RingPositions positions(p, device);
  const int64_t first_chunk[3] = {7, 7, 7}, rows[3] = {13, 13, 14};
  for (int rank = 0; rank < 3; ++rank) {
    ASSERT_EQ(positions.rank_len(rank), rows[rank]);
    KernelRingBackend backend(p, rank, device, positions);
    DeviceAllocation q = device.allocate(2 * rows[rank] * 64 * 2), k = device.allocate(2 * rows[rank] * 64 * 2);
    DeviceAllocation v = device.allocate(k.bytes()), out = device.allocate(q.bytes());
    DeviceAllocation lse = device.allocate(2 * rows[rank] * 4);
    backend.bind({q.data(), k.data(), v.data(), out.data(), lse.as<float>()});
    for (int s = 0; s < 3; ++s) {
      SCOPED_TRACE("rank " + std::to_string(rank) + " step " + std::to_string(s));
      RingStep step;
      step.step = s;
      step.kv_slot = s % 2;
      step.kv_rank = (rank - s + 3) % 3;
      step.is_first = s == 0;
      step.is_last = s == 2;
      const StepType type = step_type_at(p, rank, s);
      const RingFwdParams w = backend.step_params(step);
      const bool q_view = type == StepType::kZigzagQHalf && !step.is_last;
      const int64_t q0 = q_view ? first_chunk[rank] : 0;
      EXPECT_EQ(w.q_len, rows[rank] - q0) << step_type_name(type);
      EXPECT_EQ(w.state_len, rows[rank]);
      EXPECT_EQ(w.kv_len, type == StepType::kZigzagKvHalf ? first_chunk[step.kv_rank] : rows[step.kv_rank]);
      // bshd: a row is one head of 64 elements past the previous; batch entries rows apart.
      EXPECT_EQ(w.q, static_cast<const char*>(q.data()) + q0 * 64 * 2);
      EXPECT_EQ(w.out, static_cast<char*>(out.data()) + q0 * 64 * 2);
      EXPECT_EQ(w.lse, lse.as<float>() + q0);
      EXPECT_EQ(w.q_positions, positions.rank_positions(rank) + q0);
      EXPECT_EQ(w.k_batch_stride, rows[step.kv_rank] * 64);
      EXPECT_EQ(w.q_batch_stride, rows[rank] * 64);
    }
  }
}

// The forward and backward rings of one problem of unequal shards from bhsd, bshd and sbhd
// inputs: bhsd against the float64 reference, the others bit for bit against bhsd (the kernels
// sum in the same order whatever the strides).
TEST(EmulatedRing, EveryLayoutAndUnequalShardsForwardAndBackward) {
  const Problem bhsd = unequal_problem("bhsd");
  const AttentionVectors vec = random_vectors(bhsd, 41);
  std::vector<int64_t> positions(static_cast<size_t>(bhsd.seq_len));
  for (int64_t i = 0; i < bhsd.seq_len; ++i) positions[static_cast<size_t>(i)] = i;
  const ReferenceForward fwd = reference_forward(vec.shape, vec.q, vec.k, vec.v, positions, positions);
  const ReferenceGrads grads =
      reference_backward(vec.shape, vec.q, vec.k, vec.v, fwd.out, vec.dout, fwd.lse, positions, positions);
  const EmulatedBackward backward = backward_defaults(bhsd, vec.dout);
  const EmulatedRingResult want = run_emulated_ring(bhsd, forward_defaults(bhsd), kArch, as_float(vec.q),
                                                    as_float(vec.k), as_float(vec.v), test_store(), &backward);
  testing::expect_within_limit(relative(want.out, fwd.out), bhsd.dtype, "out", testing::kOutputUlps);
  testing::expect_within_limit(relative(want.lse, fwd.lse), bhsd.dtype, "lse");
  testing::expect_within_limit(relative(want.dq, grads.dq), bhsd.dtype, "dq");
  testing::expect_within_limit(relative(want.dk, grads.dk), bhsd.dtype, "dk");
  testing::expect_within_limit(relative(want.dv, grads.dv), bhsd.dtype, "dv");
  for (const char* layout : {"bshd", "sbhd"}) {
    SCOPED_TRACE(layout);
    const Problem p = unequal_problem(layout);
    const EmulatedRingResult got = run_emulated_ring(p, forward_defaults(p), kArch, as_float(vec.q), as_float(vec.k),
                                                     as_float(vec.v), test_store(), &backward);
    EXPECT_EQ(got.out, want.out);
    EXPECT_EQ(got.lse, want.lse);
    EXPECT_EQ(got.dq, want.dq);
    EXPECT_EQ(got.dk, want.dk);
    EXPECT_EQ(got.dv, want.dv);
  }
}

// Fewer tokens than ranks: 5 over 8 zigzag ranks leaves ranks 5..7 without rows, so rank 4 ends
// the forward on an empty chunk (a last-step launch over no keys, which must still write out and
// lse) and ranks 5..7 launch nothing.
TEST(EmulatedRing, RanksWithoutRowsForward) {
  Problem p = unequal_problem("bhsd");
  p.batch = 1;
  p.seq_len = 5;
  p.cp_size = 8;
  p.validate();
  const AttentionVectors vec = random_vectors(p, 43);
  std::vector<int64_t> positions(static_cast<size_t>(p.seq_len));
  for (int64_t i = 0; i < p.seq_len; ++i) positions[static_cast<size_t>(i)] = i;
  const ReferenceForward fwd = reference_forward(vec.shape, vec.q, vec.k, vec.v, positions, positions);
  const EmulatedRingResult got =
      run_emulated_ring(p, forward_defaults(p), kArch, as_float(vec.q), as_float(vec.k), as_float(vec.v), test_store());
  testing::expect_within_limit(relative(got.out, fwd.out), p.dtype, "out", testing::kOutputUlps);
  testing::expect_within_limit(relative(got.lse, fwd.lse), p.dtype, "lse");
  // Rank r < 5 holds one row (chunk r; its second chunk, 15 - r, is empty). It launches its own
  // chunk, the key-half steps of the r earlier ranks' chunks, and the last step (rank r + 1's
  // chunk, seen by no row but the one that writes out and lse); its other query-half steps view
  // its empty second chunk and launch nothing: r + 2 launches.
  long expected = 0;
  for (int r = 0; r < 5; ++r) expected += r + 2;
  EXPECT_EQ(got.launches, expected);
}

}  // namespace
}  // namespace cpgen
