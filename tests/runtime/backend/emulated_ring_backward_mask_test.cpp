// The backward step kernel's masks (issue 11) run by the CUDA emulator under KernelRingBackend
// and the ring driver: packed documents, sliding windows (causal left-only and two-sided), the
// logit softcap, and all of them at once, on zigzag rings of 2 and 4 ranks. The forward's out and
// lse come from the float64 reference (rounded to what a forward hands over: out in the input
// dtype, lse in fp32), so the backward kernels are checked on their own; gradients start as NaN
// and dq, dk, dv must be within the dtype's limit (relative Frobenius, tests/error_limit.h) of the
// float64 reference backward.
// Single launches of the same kernels: emulated_device_backward_mask_test.cpp.
//
// Few distinct kernels (each is a host compile of seconds on a clean kernel store): four specs
// (dtype, causal, intervals, softcap) for the head dim 64 cases and two at head dim 256, GQA
// group 2.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "runtime/backend/emulated_ring.h"
#include "runtime/core/attention_shape.h"
#include "runtime/core/half_convert.h"
#include "runtime/ring/kernel_support.h"
#include "runtime/ring/reference.h"
#include "runtime/ring/sampled_check.h"
#include "test_util.h"
#include "tests/runtime/backend/emulated_test_util.h"

namespace cpgen {
namespace {

constexpr const char* kArch = testing::kEmulatedArch;
using testing::as_float;
using testing::relative;
KernelStore* test_store() { return testing::emulated_store(); }
using testing::expect_within_limit;

struct MaskCase {
  Dtype dtype;
  int ranks;
  bool causal;
  std::vector<int64_t> documents;  // any lengths: the ring splits each document on its own
  int64_t window_left, window_right;
  double softcap;
  int head_dim = 64;
  int group = 2;      // query heads per kv head
  int kv_heads = 1;
  int batch = 1;
  Scheme scheme = Scheme::kZigzag;
  int64_t seq_len = 0;  // without documents: the one document's length
};

Problem problem_of(const MaskCase& c) {
  return testing::ring_case_problem({c.dtype, c.scheme, c.ranks, c.causal, c.batch, c.kv_heads, c.group, c.head_dim,
                                     "", c.documents, c.seq_len, c.window_left, c.window_right, c.softcap},
                                    "emulated-backward-mask");
}

std::string describe(const MaskCase& c) {
  std::string s = std::string(dtype_name(c.dtype)) + " hd" + std::to_string(c.head_dim) + (c.causal ? " causal" : " full") +
                  " gqa" + std::to_string(c.group) + " kv_heads " + std::to_string(c.kv_heads) + " batch " +
                  std::to_string(c.batch) + " " + std::string(scheme_name(c.scheme)) + " ranks " + std::to_string(c.ranks) +
                  " seq_len " + std::to_string(c.seq_len) + " documents";
  for (int64_t length : c.documents) s += " " + std::to_string(length);
  return s + " window " + std::to_string(c.window_left) + "," + std::to_string(c.window_right) + " softcap " +
         std::to_string(c.softcap);
}

double round_to(Dtype dtype, double x) {
  const float f = static_cast<float>(x);
  return dtype == Dtype::kBf16 ? bf16_to_float(float_to_bf16(f)) : fp16_to_float(float_to_fp16(f));
}

// The case through the emulated backward ring; fails the test on an error above the limit.
void check(const MaskCase& c, uint64_t seed) {
  const Problem p = problem_of(c);
  const AttentionShape shape = attention_shape_of(p);
  const AttentionVectors vec = random_vectors(p, seed);
  std::vector<int64_t> positions(static_cast<size_t>(p.seq_len));
  for (int64_t i = 0; i < p.seq_len; ++i) positions[static_cast<size_t>(i)] = i;
  ReferenceForward fwd = reference_forward(shape, vec.q, vec.k, vec.v, positions, positions);
  for (double& x : fwd.out) x = round_to(p.dtype, x);
  for (double& x : fwd.lse) x = static_cast<float>(x);
  const ReferenceGrads grads =
      reference_backward(shape, vec.q, vec.k, vec.v, fwd.out, vec.dout, fwd.lse, positions, positions);

  // Every backward step type runs the one spec: the intervals carry the whole mask, causal
  // included, so no step type needs a kernel of its own.
  KernelSpec spec = KernelSpec::backward_default_for_arch(p.dtype, c.head_dim, p.causal, c.group, kArch);
  spec.key_intervals = kernel_needs_key_intervals(p);
  spec.softcap = kernel_needs_softcap(p);
  EmulatedBackward backward;
  for (StepType step : backward_step_types_for(p)) backward.steps.emplace_back(step, spec);
  backward.pre = KernelSpec::backward_pre(p.dtype, c.head_dim);
  backward.convert = KernelSpec::backward_convert(p.dtype, c.head_dim);
  backward.dout = as_float(vec.dout);
  backward.out = as_float(fwd.out);
  backward.lse = as_float(fwd.lse);
  const EmulatedRingResult got =
      run_emulated_ring(p, {}, kArch, as_float(vec.q), as_float(vec.k), as_float(vec.v), test_store(), &backward);
  const std::string what = describe(c) + " (" + spec.uri() + ")";
  expect_within_limit(relative(got.dq, grads.dq), p.dtype, what + " dq");
  expect_within_limit(relative(got.dk, grads.dk), p.dtype, what + " dk");
  expect_within_limit(relative(got.dv, grads.dv), p.dtype, what + " dv");
}

// bf16, causal: documents, a left-only window, a softcap on the causal kernel without intervals,
// and everything at once (three kernels).
TEST(EmulatedBackwardMasks, Bf16DocumentsWindowSoftcapAndAllCombined) {
  check({Dtype::kBf16, 2, true, {40, 56}, -1, -1, 0}, 501);  // 96 packed rows: 2 query tiles
  check({Dtype::kBf16, 4, true, {40}, 5, -1, 0}, 502);
  check({Dtype::kBf16, 2, true, {24}, -1, -1, 2.0}, 503);
  check({Dtype::kBf16, 4, true, {16, 8, 24}, 6, -1, 1.5}, 504);
}

// fp16, not causal: a two-sided window with documents and a softcap on rings of 2 and 4 (one
// kernel).
// Chunks long enough for several 64-key blocks per launch (about 300 rows a rank, parts of 150 keys),
// with query tiles that see every key of a block and tiles whose all-keys run starts or ends
// inside them: every case above has at most 57 keys a launch, so no interval launch ran a second
// key block or an unmasked tile. A reviewer's mutations (the full-tile range rounded the other
// way at either end; the block's last key position read from key 0) passed every other test with
// dq errors of 0.24 to 31.
TEST(EmulatedBackwardMasks, Bf16LongChunksRunFullTilesAndSeveralKeyBlocks) {
  check({Dtype::kBf16, 2, true, {150, 450}, -1, -1, 0}, 507);
  check({Dtype::kBf16, 2, true, {600}, 100, -1, 0}, 508);
}

TEST(EmulatedBackwardMasks, Fp16TwoSidedWindowDocumentsAndSoftcap) {
  check({Dtype::kFp16, 2, false, {8, 16}, 4, 3, 2.5}, 505);
  check({Dtype::kFp16, 4, false, {32, 16}, 2, 5, 2.0}, 506);
}

// Head dim 256 (32-key blocks, one Q/dO stage: the tests above run 64), documents, a window and a
// softcap at once, causal bf16 and two-sided fp16 (two kernels).
TEST(EmulatedBackwardMasks, HeadDim256DocumentsWindowAndSoftcap) {
  check({Dtype::kBf16, 2, true, {40, 56}, 7, -1, 1.5, 256}, 509);
  check({Dtype::kFp16, 2, false, {24, 20}, 3, 4, 2.0, 256}, 510);
}

// The backward's softcap with ex2 and rcp (its tanh and slope) at an edge of the PTX ISA's error
// bound (emulation/cuda_emulation.h, "The .approx instructions"), as a GPU may return them, under
// caps small enough that most scores saturate, where the slope 1 - t^2 is small: the gradients
// still meet the dtype's limit. With the slope taken as 1 - t^2 from tanh.approx, fp16's dq and dk
// were 1.1 of the limit's units at cap 1 and 3.2 at cap 0.25 (0.3 correctly rounded); from
// sech^2 (softmax.cuh tanh_and_slope) they are 0.3.
TEST(EmulatedBackwardMasks, SoftcapWithinTheIsasApproximationBounds) {
  for (EmulatedApproximation mode : testing::kApproximationEdges) {
    SCOPED_TRACE(approximation_name(mode));
    testing::ScopedApproximation approximation(mode);
    check({Dtype::kBf16, 2, true, {24}, -1, -1, 0.5}, 503);
    check({Dtype::kFp16, 2, false, {8, 16}, 4, 3, 1.0}, 505);
    check({Dtype::kFp16, 2, true, {128}, -1, -1, 0.25, 128}, 507);
  }
}

// What the cases above leave out, each once (a reviewer's list): GQA groups past 2 with several kv
// heads and batch entries (the packed rows of more than one head per launch, the dK/dV sums over a
// group), the contiguous and zigzag-token schemes, rings of 1 and 3, ranks that hold no row,
// head dims 96 and 128 under intervals and a softcap, and the non-causal softcap kernel without
// intervals (_full_cap).
TEST(EmulatedBackwardMasks, GqaBatchSchemesRingSizesAndEmptyRanks) {
  // GQA 8 over 2 kv heads, batch 2, zigzag-token over 3 ranks: documents (one empty), a left
  // window and a softcap, head dim 128.
  check({Dtype::kBf16, 3, true, {20, 0, 30, 14}, 9, -1, 1.5, 128, 8, 2, 2, Scheme::kZigzagToken}, 511);
  // The non-causal softcap kernel alone (no intervals), head dim 96, GQA 4 over 2 kv heads, a
  // contiguous ring of 3.
  check({Dtype::kFp16, 3, false, {}, -1, -1, 2.0, 96, 4, 2, 1, Scheme::kContiguous, 70}, 512);
  // One rank: GQA 16, causal intervals and a softcap at head dim 128.
  check({Dtype::kFp16, 1, true, {30, 34}, 11, -1, 2.5, 128, 16, 1, 1}, 513);
  // Fewer tokens than ranks hold rows (five over four contiguous, three over four zigzag-token):
  // ranks with no rows, under a window.
  check({Dtype::kBf16, 4, true, {}, 2, -1, 0, 64, 2, 1, 1, Scheme::kContiguous, 5}, 514);
  check({Dtype::kBf16, 4, true, {}, 2, -1, 0, 64, 2, 1, 1, Scheme::kZigzagToken, 3}, 515);
}

}  // namespace
}  // namespace cpgen
