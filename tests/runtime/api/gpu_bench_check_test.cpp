// The benchmark's own output check (runtime/api/gpu_bench.h, check_slice), on the CPU: outputs
// from the float64 reference pass it, and a wrong value in any checked slice fails it, the last
// batch's included (the check once read batch 0 only, so a kernel that got the batch stride wrong
// passed the benchmark's check).
#include "runtime/api/gpu_bench.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "cpgen/error.h"
#include "runtime/core/attention_shape.h"
#include "runtime/ring/reference.h"

namespace cpgen::gpu {
namespace {

// Two batches, two query heads over one kv head, one rank: every slice check_slice reads.
Problem small_problem() {
  return Problem{.batch = 2, .q_heads = 2, .kv_heads = 1, .head_dim = 64, .seq_len = 64, .cp_size = 1,
                 .causal = true, .scheme = Scheme::kContiguous};
}

// The whole problem's outputs by the float64 reference, as one rank's float shard.
void reference_outputs(const Problem& p, const BenchInputs& in, std::vector<std::vector<float>>& outs,
                       std::vector<std::vector<float>>& lses) {
  const AttentionShape shape = attention_shape_of(p);
  std::vector<int64_t> positions(static_cast<size_t>(p.seq_len));
  for (size_t i = 0; i < positions.size(); ++i) positions[i] = static_cast<int64_t>(i);
  const ReferenceForward ref = reference_forward(shape, std::vector<double>(in.q.begin(), in.q.end()),
                                                 std::vector<double>(in.k.begin(), in.k.end()),
                                                 std::vector<double>(in.v.begin(), in.v.end()), positions, positions);
  outs = {std::vector<float>(ref.out.begin(), ref.out.end())};
  lses = {std::vector<float>(ref.lse.begin(), ref.lse.end())};
}

TEST(BenchCheck, ReferenceOutputsPassAndAWrongValueInTheLastBatchFails) {
  const Problem p = small_problem();
  const BenchInputs in = bench_inputs(p, 7);
  std::vector<std::vector<float>> outs, lses;
  reference_outputs(p, in, outs, lses);
  const std::vector<int64_t> rows = check_positions(p.seq_len, 8);
  const SliceErrors clean = check_slice(p, in, outs, lses, -1, rows);
  EXPECT_TRUE(clean.passed()) << clean.relative() << " " << clean.lse_max;
  EXPECT_EQ(clean.rows, static_cast<int>(rows.size()) * 4) << "two batches, two heads";
  // The last batch's last head, at the last checked row: output and lse each off by 0.5.
  const size_t at = static_cast<size_t>((1 * p.q_heads + 1) * p.seq_len + rows.back());
  std::vector<std::vector<float>> bad_out = outs, bad_lse = lses;
  for (int64_t d = 0; d < p.head_dim; ++d) bad_out[0][at * p.head_dim + d] += 0.5f;
  EXPECT_FALSE(check_slice(p, in, bad_out, lses, -1, rows).passed());
  bad_lse[0][at] += 0.5f;
  const SliceErrors lse_off = check_slice(p, in, outs, bad_lse, -1, rows);
  EXPECT_FALSE(lse_off.passed());
  EXPECT_NEAR(lse_off.lse_max, 0.5, 1e-3);
  // An unwritten (NaN) output in the last batch fails too.
  bad_out = outs;
  bad_out[0][at * p.head_dim] = NAN;
  EXPECT_FALSE(check_slice(p, in, bad_out, lses, -1, rows).passed());
}

// Rows the check does not sample are still scanned for what the kernel never wrote: the outputs
// start as NaN, so an unwritten element anywhere (here a whole head of both batches, and one lse
// off the sampled rows) fails the check, where it passed when only the sampled rows were read.
TEST(BenchCheck, AnUnwrittenElementOutsideTheSampledRowsFails) {
  Problem p = small_problem();
  p.q_heads = 4;
  p.kv_heads = 2;
  const BenchInputs in = bench_inputs(p, 7);
  std::vector<std::vector<float>> outs, lses;
  reference_outputs(p, in, outs, lses);
  const std::vector<int64_t> rows = check_positions(p.seq_len, 8);
  ASSERT_TRUE(check_slice(p, in, outs, lses, -1, rows).passed());
  std::vector<std::vector<float>> bad_out = outs;
  for (int64_t batch = 0; batch < p.batch; ++batch) {  // head 1: never a checked slice (heads 0 and 3 are)
    const size_t first = static_cast<size_t>((batch * p.q_heads + 1) * p.seq_len * p.head_dim);
    std::fill(bad_out[0].begin() + first, bad_out[0].begin() + first + p.seq_len * p.head_dim, NAN);
  }
  const SliceErrors heads = check_slice(p, in, bad_out, lses, -1, rows);
  EXPECT_FALSE(heads.passed());
  EXPECT_EQ(heads.nonfinite, 2 * p.seq_len * p.head_dim);
  EXPECT_LE(heads.relative(), 1e-6) << "the sampled slices themselves are right";
  int64_t unsampled = 1;
  while (std::find(rows.begin(), rows.end(), unsampled) != rows.end()) ++unsampled;
  std::vector<std::vector<float>> bad_lse = lses;
  bad_lse[0][static_cast<size_t>(unsampled)] = NAN;
  EXPECT_EQ(check_slice(p, in, outs, bad_lse, -1, rows).nonfinite, 1);
  EXPECT_FALSE(check_slice(p, in, outs, bad_lse, -1, rows).passed());
  // One rank's check (an NCCL rank's) scans its own shard only.
  EXPECT_EQ(check_slice(p, in, {outs[0], bad_out[0]}, {lses[0], lses[0]}, 0, rows).nonfinite, 0);
}

// The ring benchmark counts the FLOPs and checks the rows of causal or full attention over one
// sequence: a problem with documents or a window is refused before any device is asked for. A
// softcap changes neither the FLOPs nor which rows are checked, so it goes on (to the device).
TEST(BenchCheck, DocumentsOrAWindowAreRefusedAsBadInputASoftcapIsNot) {
  Problem packed = small_problem();
  packed.documents = {40, 24};
  Problem windowed = small_problem();
  windowed.window_left = 8;
  for (const Problem& p : {packed, windowed}) {
    try {
      bench_loopback(p, BenchOptions{});
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kBadInput) << e.what();
      EXPECT_NE(std::string(e.what()).find("times causal and full attention only (with or without a softcap)"),
                std::string::npos)
          << e.what();
    }
  }
  Problem capped = small_problem();
  capped.softcap = 30;
  try {
    bench_loopback(capped, BenchOptions{});
  } catch (const Error& e) {
    EXPECT_NE(e.kind(), ErrorKind::kBadInput) << e.what();  // here: no device
  }
}

// The check applies the problem's softcap: the capped reference's outputs pass it, the plain
// attention's outputs on the same inputs (what a kernel that ignored the cap would write) fail it.
TEST(BenchCheck, TheCheckAppliesTheSoftcap) {
  Problem capped = small_problem();
  capped.softcap = 1.5;  // bends the scores of these inputs far from plain attention
  const BenchInputs in = bench_inputs(capped, 7);
  std::vector<std::vector<float>> outs, lses, plain_outs, plain_lses;
  reference_outputs(capped, in, outs, lses);
  reference_outputs(small_problem(), in, plain_outs, plain_lses);
  const std::vector<int64_t> rows = check_positions(capped.seq_len, 8);
  const SliceErrors clean = check_slice(capped, in, outs, lses, -1, rows);
  EXPECT_TRUE(clean.passed()) << clean.relative() << " " << clean.lse_max;
  EXPECT_FALSE(check_slice(capped, in, plain_outs, plain_lses, -1, rows).passed());
}

}  // namespace
}  // namespace cpgen::gpu
