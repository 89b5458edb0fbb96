// A workload's lengths: the rows of the largest rank, whether or not the length divides.
#include <gtest/gtest.h>

#include "cache/workload.h"
#include "cpgen/problem.h"
#include "test_util.h"

namespace cpgen::testing {
namespace {

Problem problem(int64_t seq_len, int64_t cp_size, Scheme scheme) {
  return ring_problem(scheme, seq_len, cp_size, /*causal=*/true, /*q_heads=*/8, /*kv_heads=*/8, /*batch=*/1);
}

// Where the length divides nothing moves: the lengths every tuned record is keyed by stay.
TEST(WorkloadLengths, DividingLengthsKeepTheirRowsPerRank) {
  const Problem p = problem(32768, 8, Scheme::kZigzag);
  EXPECT_EQ(workload_for(p, StepType::kDiagonal, DeviceClass{}).q_len, 4096);
  EXPECT_EQ(workload_for(p, StepType::kZigzagKvHalf, DeviceClass{}).kv_len, 2048);
  EXPECT_EQ(workload_for(p, StepType::kZigzagQHalf, DeviceClass{}).q_len, 2048);
  EXPECT_EQ(workload_for(p, StepType::kZigzagQHalf, DeviceClass{}).kv_len, 4096);
}

// Ranks that differ key the step by the largest (the floor of seq_len / cp_size keyed 4097 tokens
// over 4 ranks as 1024 rows, and 3 tokens over 4 as 0, a workload db import refuses).
TEST(WorkloadLengths, UnevenLengthsKeyTheLargestRank) {
  EXPECT_EQ(workload_for(problem(4097, 4, Scheme::kContiguous), StepType::kFull, DeviceClass{}).q_len, 1025);
  EXPECT_EQ(workload_for(problem(1000, 7, Scheme::kStriped), StepType::kDiagonal, DeviceClass{}).q_len, 143);
  const Problem tiny = problem(3, 4, Scheme::kZigzag);
  for (StepType step : {StepType::kDiagonal, StepType::kZigzagKvHalf, StepType::kZigzagQHalf}) {
    const WorkloadKey w = workload_for(tiny, step, DeviceClass{});
    EXPECT_GE(w.q_len, 1) << step_type_name(step);
    EXPECT_GE(w.kv_len, 1) << step_type_name(step);
  }
  // 4097 over 8 zigzag chunks: chunk 0 has 513 tokens, so a half step covers up to 513.
  EXPECT_EQ(workload_for(problem(4097, 4, Scheme::kZigzag), StepType::kZigzagKvHalf, DeviceClass{}).kv_len, 513);
}

// With packed documents the ring runs the zigzag half steps at full size (each document is split
// on its own, so a rank's chunks are not the halves of its rows): the workloads are keyed so, and
// the tuner times what runs (they were keyed at half size, and tuned and selected for a launch
// that never ran).
TEST(WorkloadLengths, ZigzagHalfStepsOfDocumentsAreKeyedAtTheSizeTheyRun) {
  Problem p = problem(8192, 4, Scheme::kZigzag);
  p.documents = {4096, 4096};
  for (StepType step : {StepType::kZigzagKvHalf, StepType::kZigzagQHalf}) {
    const WorkloadKey w = workload_for(p, step, DeviceClass{});
    EXPECT_EQ(w.q_len, 2048) << step_type_name(step);
    EXPECT_EQ(w.kv_len, 2048) << step_type_name(step);
  }
  p.documents = {8192};  // one document: the halves run
  EXPECT_EQ(workload_for(p, StepType::kZigzagKvHalf, DeviceClass{}).kv_len, 1024);
  EXPECT_EQ(workload_for(p, StepType::kZigzagQHalf, DeviceClass{}).q_len, 1024);
}

}  // namespace
}  // namespace cpgen::testing
