#include <gtest/gtest.h>

#include "cache/database.h"
#include "cache/records.h"
#include "cache_fixtures.h"
#include "cpgen/error.h"
#include "generator/kernel_spec.h"

namespace cpgen::testing {
namespace {

class RecordsTest : public TempDirTest {};

TEST_F(RecordsTest, RecordRoundTripsThroughTheTable) {
  Database db(path("r.db"));
  Record r = test_record(test_workload(), 128, 64, 4, 2, 0.8125);
  r.detail = "note";
  ASSERT_EQ(put_record(db, r), StoreResult::kAdded);
  std::vector<Record> back = records_for(db, r.workload);
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].workload, r.workload);
  EXPECT_EQ(back[0].kernel_uri, r.kernel_uri);
  EXPECT_EQ(back[0].disposition, Disposition::kOk);
  EXPECT_EQ(back[0].median_ms, r.median_ms);
  EXPECT_EQ(back[0].samples_ms, r.samples_ms);
  EXPECT_EQ(back[0].env, r.env);
  EXPECT_EQ(back[0].registers, 168);
  EXPECT_EQ(back[0].detail, "note");
  EXPECT_EQ(back[0].created_at, r.created_at);
}

TEST_F(RecordsTest, KeepTheBetterRecordOfOneIdentity) {
  Database db(path("r.db"));
  WorkloadKey w = test_workload();
  EXPECT_EQ(put_record(db, test_record(w, 128, 64, 4, 2, 0)), StoreResult::kAdded);         // compile failed
  EXPECT_EQ(put_record(db, test_record(w, 128, 64, 4, 2, 2.0)), StoreResult::kReplaced);    // valid beats failed
  EXPECT_EQ(put_record(db, test_record(w, 128, 64, 4, 2, 3.0)), StoreResult::kKept);        // slower loses
  EXPECT_EQ(put_record(db, test_record(w, 128, 64, 4, 2, 0, Disposition::kWrongResult)), StoreResult::kKept);
  EXPECT_EQ(put_record(db, test_record(w, 128, 64, 4, 2, 1.5)), StoreResult::kReplaced);    // faster wins
  std::vector<Record> back = records_for(db, w);
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].median_ms, 1.5);
  // Of two failures the newer stands, but a not-timed record (it says nothing of the kernel)
  // never replaces a wrong result, and a measured failure replaces a not-timed one.
  const WorkloadKey v = test_workload(8192);
  EXPECT_EQ(put_record(db, test_record(v, 128, 64, 4, 2, 0, Disposition::kWrongResult)), StoreResult::kAdded);
  Record later = test_record(v, 128, 64, 4, 2, 0, Disposition::kNotTimed);
  later.created_at += 100;
  EXPECT_EQ(put_record(db, later), StoreResult::kKept);
  EXPECT_EQ(records_for(db, v).at(0).disposition, Disposition::kWrongResult);
  const WorkloadKey u = test_workload(32768);
  EXPECT_EQ(put_record(db, test_record(u, 128, 64, 4, 2, 0, Disposition::kNotTimed)), StoreResult::kAdded);
  EXPECT_EQ(put_record(db, test_record(u, 128, 64, 4, 2, 0, Disposition::kInfeasible)), StoreResult::kReplaced);
  // A different environment is a different identity: both are kept.
  EXPECT_EQ(put_record(db, test_record(w, 128, 64, 4, 2, 9.0, Disposition::kOk, test_env("12.8"))), StoreResult::kAdded);
  EXPECT_EQ(records_for(db, w).size(), 2u);
}

// What a tune measures now replaces what it measured before for the same kernel and environment:
// a pinned kernel that fails today loses its ok record and its pin (under the keep-the-better
// rule both stayed and jobs kept running it, a reviewer's find); a not-timed record (a budget
// that ran out) changes nothing.
TEST_F(RecordsTest, AMeasuredFailureReplacesTheOkRecordAndItsPin) {
  Database db(path("r.db"));
  const WorkloadKey w = test_workload();
  const Record ok = test_record(w, 128, 64, 4, 2, 1.0), other = test_record(w, 128, 128, 8, 2, 1.5);
  put_record(db, ok);
  put_record(db, other);
  db.transaction([&] { pin_winner(db, w, {ok.kernel_uri, 1.0, ok.env.key(), "tune"}); });

  Record untimed = test_record(w, 128, 64, 4, 2, 0, Disposition::kNotTimed);
  EXPECT_EQ(put_measured_record(db, untimed), StoreResult::kKept);
  ASSERT_TRUE(pinned_winner(db, w));
  EXPECT_EQ(best_record(db, w, test_env()).record->kernel_uri, ok.kernel_uri);

  EXPECT_EQ(put_measured_record(db, test_record(w, 128, 64, 4, 2, 0, Disposition::kWrongResult)), StoreResult::kReplaced);
  EXPECT_FALSE(pinned_winner(db, w)) << "the failing kernel's pin is gone";
  const BestRecord best = best_record(db, w, test_env());
  ASSERT_TRUE(best.record);
  EXPECT_EQ(best.record->kernel_uri, other.kernel_uri);

  // A slower ok measurement replaces a faster old one of the same kernel; a failure of a kernel
  // that is not the pinned one leaves the pin.
  db.transaction([&] { pin_winner(db, w, {other.kernel_uri, 1.5, other.env.key(), "tune"}); });
  EXPECT_EQ(put_measured_record(db, test_record(w, 128, 64, 4, 2, 2.5)), StoreResult::kReplaced);
  EXPECT_EQ(put_measured_record(db, test_record(w, 128, 64, 4, 2, 0, Disposition::kLaunchFailed)), StoreResult::kReplaced);
  ASSERT_TRUE(pinned_winner(db, w));
  EXPECT_EQ(pinned_winner(db, w)->kernel_uri, other.kernel_uri);
  // Import and merge keep the better record, as before.
  EXPECT_EQ(put_record(db, test_record(w, 128, 128, 8, 2, 0, Disposition::kWrongResult)), StoreResult::kKept);
}

TEST_F(RecordsTest, BestRecordIgnoresOtherEnvironmentsAndFailures) {
  Database db(path("r.db"));
  WorkloadKey w = test_workload();
  put_record(db, test_record(w, 64, 64, 4, 2, 0.5, Disposition::kOk, test_env("12.8")));  // fastest, stale
  put_record(db, test_record(w, 128, 64, 4, 2, 0, Disposition::kWrongResult));
  put_record(db, test_record(w, 128, 128, 8, 2, 1.25));
  put_record(db, test_record(w, 128, 64, 4, 3, 1.0));
  BestRecord best = best_record(db, w, test_env());
  ASSERT_TRUE(best.record);
  EXPECT_EQ(best.record->kernel_uri, "ring_fwd_bf16_hd128_causal_gqa4_bm128_bn64_w4_s3");
  EXPECT_EQ(best.other_environment, 1);
  // The stale row is still there: ignored, never deleted.
  EXPECT_EQ(records_for(db, w).size(), 4u);
}

TEST_F(RecordsTest, PinnedWinnerIsPreferredOverLocalTimings) {
  Database db(path("r.db"));
  WorkloadKey w = test_workload();
  Record rank0_choice = test_record(w, 128, 128, 8, 2, 1.25);
  put_record(db, rank0_choice);
  put_record(db, test_record(w, 128, 64, 4, 3, 1.0));
  db.transaction([&] { pin_winner(db, w, {rank0_choice.kernel_uri, 1.25, rank0_choice.env.key(), "tune-rank0"}); });
  BestRecord best = best_record(db, w, test_env());
  ASSERT_TRUE(best.record);
  EXPECT_EQ(best.record->kernel_uri, rank0_choice.kernel_uri);
  // A pin made in another environment does not bind this one.
  BestRecord other = best_record(db, w, test_env("12.8"));
  EXPECT_FALSE(other.record);
  EXPECT_EQ(other.other_environment, 2);
}

TEST_F(RecordsTest, WorkloadsOfAProblemFollowItsSchedule) {
  Problem p;
  p.q_heads = 32;
  p.kv_heads = 8;
  p.head_dim = 128;
  p.seq_len = 131072;
  p.cp_size = 8;
  p.causal = true;
  p.scheme = Scheme::kZigzag;
  DeviceClass dc{"NVIDIA H200", "sm_90a", 132};
  auto ws = workloads_for(p, dc);
  ASSERT_EQ(ws.size(), 3u);
  EXPECT_EQ(ws[0].step, StepType::kDiagonal);
  EXPECT_EQ(ws[0].q_len, 16384);
  EXPECT_EQ(ws[1].step, StepType::kZigzagKvHalf);
  EXPECT_EQ(ws[1].kv_len, 8192);
  EXPECT_EQ(ws[2].step, StepType::kZigzagQHalf);
  EXPECT_EQ(ws[2].q_len, 8192);
  EXPECT_EQ(ws[2].kv_len, 16384);
  // Rank 3 receives rank 2's chunk in step 1 (earlier: kv half) and rank 4's in step 7 (later: q half).
  EXPECT_EQ(step_type_at(p, 3, 0), StepType::kDiagonal);
  EXPECT_EQ(step_type_at(p, 3, 1), StepType::kZigzagKvHalf);
  EXPECT_EQ(step_type_at(p, 3, 7), StepType::kZigzagQHalf);
  p.scheme = Scheme::kContiguous;
  EXPECT_EQ(step_types_for(p).size(), 2u);
  p.causal = false;
  ASSERT_EQ(step_types_for(p).size(), 1u);
  EXPECT_EQ(step_types_for(p)[0], StepType::kFull);
  EXPECT_EQ(test_workload(12000).seq_bucket(), 16384);
  EXPECT_EQ(test_workload(16384).seq_bucket(), 16384);
}

// A backward step of a shape is its own workload: its records are stored and read apart from the
// forward records of the same shape, and its step type survives the JSON round trip.
TEST_F(RecordsTest, BackwardRecordsAreKeyedApartFromForwardOnes) {
  Database db(path("r.db"));
  const WorkloadKey fwd = test_workload();
  WorkloadKey bwd = fwd;
  bwd.step = backward_of(fwd.step);
  EXPECT_EQ(step_type_name(bwd.step), "bwd-diagonal");
  EXPECT_EQ(WorkloadKey::from_json(bwd.to_json()), bwd);
  EXPECT_NE(bwd, fwd);
  Record f = test_record(fwd, 128, 64, 4, 2, 1.0);
  Record b = test_record(bwd, 128, 64, 4, 2, 2.0);
  b.kernel_uri = KernelSpec::backward_default_for(bwd.dtype, bwd.head_dim, bwd.causal, bwd.gqa_group()).uri();
  ASSERT_EQ(put_record(db, f), StoreResult::kAdded);
  ASSERT_EQ(put_record(db, b), StoreResult::kAdded);
  std::vector<Record> forward_back = records_for(db, fwd), backward_back = records_for(db, bwd);
  ASSERT_EQ(forward_back.size(), 1u);
  ASSERT_EQ(backward_back.size(), 1u);
  EXPECT_EQ(forward_back[0].kernel_uri, f.kernel_uri);
  EXPECT_EQ(backward_back[0].kernel_uri, b.kernel_uri);
  EXPECT_EQ(best_record(db, fwd, test_env()).record->kernel_uri, f.kernel_uri);
  EXPECT_EQ(best_record(db, bwd, test_env()).record->kernel_uri, b.kernel_uri);
}

TEST_F(RecordsTest, BackwardStepTypesHaveTheForwardShapes) {
  Problem p;
  p.q_heads = 32;
  p.kv_heads = 8;
  p.head_dim = 128;
  p.seq_len = 131072;
  p.cp_size = 8;
  p.causal = true;
  p.scheme = Scheme::kZigzag;
  DeviceClass dc{"NVIDIA H200", "sm_90a", 132};
  const std::vector<StepType> steps = backward_step_types_for(p);
  ASSERT_EQ(steps.size(), 3u);
  const std::vector<StepType> forward = step_types_for(p);
  for (size_t i = 0; i < steps.size(); ++i) {
    EXPECT_TRUE(is_backward(steps[i]));
    EXPECT_FALSE(is_backward(forward[i]));
    EXPECT_EQ(forward_shape(steps[i]), forward[i]);
    const WorkloadKey b = workload_for(p, steps[i], dc), f = workload_for(p, forward[i], dc);
    EXPECT_EQ(b.q_len, f.q_len) << step_type_name(steps[i]);
    EXPECT_EQ(b.kv_len, f.kv_len) << step_type_name(steps[i]);
  }
  EXPECT_EQ(parse_step_type("bwd-zigzag-q-half"), StepType::kBwdZigzagQHalf);
  EXPECT_THROW(backward_of(StepType::kBwdFull), Error);
}

}  // namespace
}  // namespace cpgen::testing
