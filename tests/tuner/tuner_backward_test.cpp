// Tuning the backward ring's step types with the tuner's fakes (no NVRTC, no GPU): which
// workloads a tune covers in each direction, that backward records name backward kernels under
// the bwd- step types only, and that verification and pruning hold for backward candidates as
// they do for forward ones.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "../cache/cache_fixtures.h"
#include "cache/lookup.h"
#include "cache/records.h"
#include "tuner/candidates.h"
#include "tuner/tuner.h"
#include "tuner_fakes.h"

namespace cpgen::testing {
namespace {

class TunerBackwardTest : public TempDirTest {};

const DeviceClass kH200{"NVIDIA H200", "sm_90a", 132};

Problem zigzag_problem(int head_dim = 128) {
  Problem p;
  p.name = "zigzag";
  p.q_heads = 8;
  p.kv_heads = 2;
  p.head_dim = head_dim;
  p.seq_len = 4096;
  p.cp_size = 2;
  p.causal = true;
  p.scheme = Scheme::kZigzag;
  return p;
}

TuneOptions quiet_options(bool forward = true, bool backward = true) {
  TuneOptions o;
  o.quiet = true;
  o.jobs = 2;
  o.forward = forward;
  o.backward = backward;
  return o;
}

std::map<Disposition, int> dispositions(Database& db, const WorkloadKey& w) {
  std::map<Disposition, int> counts;
  for (const Record& r : records_for(db, w)) ++counts[r.disposition];
  return counts;
}

std::vector<StepType> steps_of(const TuneReport& report) {
  std::vector<StepType> steps;
  for (const WorkloadResult& r : report.workloads) steps.push_back(r.workload.step);
  return steps;
}

TEST_F(TunerBackwardTest, DefaultRunTunesBothDirectionsAndKeepsTheirRecordsApart) {
  Database db(path("t.db"));
  FakeCompiler compiler;
  FakeTimer timer;
  Tuner tuner(db, quiet_options(), compiler.fn(), &timer, nullptr, test_env());
  TuneReport report = tuner.tune({zigzag_problem()}, kH200);
  const std::vector<StepType> expected = {StepType::kDiagonal, StepType::kZigzagKvHalf, StepType::kZigzagQHalf,
                                          StepType::kBwdDiagonal, StepType::kBwdZigzagKvHalf, StepType::kBwdZigzagQHalf};
  ASSERT_EQ(steps_of(report), expected);
  for (const WorkloadResult& r : report.workloads) {
    const bool backward = is_backward(r.workload.step);
    EXPECT_STREQ(direction_name(r.workload), backward ? "backward" : "forward");
    const KernelKind kind = backward ? KernelKind::kBackwardStep : KernelKind::kForwardStep;
    const std::vector<Record> records = records_for(db, r.workload);
    const CandidateSet set = enumerate_candidates(r.workload);
    EXPECT_EQ(records.size(), set.viable.size() + set.pruned.size()) << r.workload.describe();
    for (const Record& rec : records) {
      // A forward workload on sm_90a searches both forward families (mma.sync and wgmma).
      const KernelKind got = KernelSpec::parse(rec.kernel_uri).kind;
      EXPECT_TRUE(got == kind || (!backward && got == KernelKind::kForwardWgmma))
          << r.workload.describe() << ": " << rec.kernel_uri;
    }
    ASSERT_TRUE(r.winner) << r.workload.describe();
    EXPECT_GT(r.timed, 1) << r.workload.describe();
    EXPECT_EQ(KernelSpec::parse(r.winner->kernel_uri).kind, kind);
    // The winner is pinned under this step type and selected for it, never for the other
    // direction's workload of the same shape.
    auto pin = pinned_winner(db, r.workload);
    ASSERT_TRUE(pin) << r.workload.describe();
    EXPECT_EQ(pin->kernel_uri, r.winner->kernel_uri);
    Selection s = select_config(r.workload, &db, test_env(), PretunedCaches{});
    EXPECT_EQ(s.source, ConfigSource::kDatabaseExact) << s.reason;
    EXPECT_EQ(s.spec.uri(), r.winner->kernel_uri);
  }
  // The backward reference is the backward default that fits the arch; it is timed first.
  const WorkloadKey bwd_diag = report.workloads[3].workload;
  const KernelSpec bwd_default = KernelSpec::backward_default_for_arch(Dtype::kBf16, 128, true, 4, "sm_90a");
  EXPECT_EQ(tuning_default(bwd_diag), bwd_default);
  EXPECT_NE(std::find(timer.measured.begin(), timer.measured.end(), bwd_default.uri()), timer.measured.end());
  const auto first_bwd = std::find_if(timer.measured.begin(), timer.measured.end(),
                                      [](const std::string& uri) { return uri.rfind("ring_bwd_", 0) == 0; });
  ASSERT_NE(first_bwd, timer.measured.end());
  EXPECT_EQ(*first_bwd, bwd_default.uri()) << "the backward reference is timed before its candidates";
}

TEST_F(TunerBackwardTest, OnlyBackwardTunesNoForwardWorkload) {
  Database db(path("t.db"));
  FakeCompiler compiler;
  FakeTimer timer;
  Tuner tuner(db, quiet_options(false, true), compiler.fn(), &timer, nullptr, test_env());
  TuneReport report = tuner.tune({zigzag_problem()}, kH200);
  ASSERT_EQ(steps_of(report), backward_step_types_for(zigzag_problem()));
  for (const std::string& uri : timer.measured) EXPECT_EQ(uri.rfind("ring_bwd_", 0), 0u) << uri;
  for (const WorkloadKey& w : workloads_for(zigzag_problem(), kH200)) {
    EXPECT_TRUE(records_for(db, w).empty()) << w.describe();
    EXPECT_FALSE(pinned_winner(db, w)) << w.describe();
  }
  for (const WorkloadResult& r : report.workloads) EXPECT_TRUE(pinned_winner(db, r.workload)) << r.workload.describe();
}

TEST_F(TunerBackwardTest, OnlyForwardTunesNoBackwardWorkload) {
  Database db(path("t.db"));
  FakeCompiler compiler;
  FakeTimer timer;
  Tuner tuner(db, quiet_options(true, false), compiler.fn(), &timer, nullptr, test_env());
  TuneReport report = tuner.tune({zigzag_problem()}, kH200);
  ASSERT_EQ(steps_of(report), step_types_for(zigzag_problem()));
  for (const std::string& uri : timer.measured) EXPECT_EQ(uri.rfind("ring_fwd_", 0), 0u) << uri;
  for (StepType step : backward_step_types_for(zigzag_problem())) {
    EXPECT_TRUE(records_for(db, workload_for(zigzag_problem(), step, kH200)).empty()) << step_type_name(step);
  }
}

TEST_F(TunerBackwardTest, NeitherDirectionIsRefused) {
  Database db(path("t.db"));
  FakeCompiler compiler;
  try {
    Tuner tuner(db, quiet_options(false, false), compiler.fn(), nullptr, nullptr, test_env());
    FAIL() << "a tune of nothing was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadInput);
  }
}

TEST_F(TunerBackwardTest, VerificationMismatchRejectsABackwardCandidate) {
  Database db(path("t.db"));
  FakeCompiler compiler;
  FakeTimer timer;
  const WorkloadKey w = workload_for(zigzag_problem(), StepType::kBwdDiagonal, kH200);
  // The fastest backward candidate by the fake's formula disagrees with the reference config.
  std::vector<KernelSpec> viable = enumerate_candidates(w).viable;
  ASSERT_GE(viable.size(), 3u);
  const KernelSpec fastest = *std::min_element(viable.begin() + 1, viable.end(), [&](const KernelSpec& a, const KernelSpec& b) {
    return timer.ms_of(a) < timer.ms_of(b);
  });
  timer.wrong = {fastest.uri()};
  Tuner tuner(db, quiet_options(false, true), compiler.fn(), &timer, nullptr, test_env());
  TuneReport report = tuner.tune({zigzag_problem()}, kH200);
  ASSERT_EQ(report.workloads.front().workload, w);
  const WorkloadResult& r = report.workloads.front();
  ASSERT_TRUE(r.winner);
  EXPECT_NE(r.winner->kernel_uri, fastest.uri());
  EXPECT_GE(r.rejected, 1);
  bool seen = false;
  for (const Record& rec : records_for(db, w)) {
    if (rec.kernel_uri != fastest.uri()) continue;
    seen = true;
    EXPECT_EQ(rec.disposition, Disposition::kWrongResult);
    EXPECT_NE(rec.detail.find("reference config"), std::string::npos) << rec.detail;
    EXPECT_FALSE(rec.median_ms) << "a rejected candidate claims no timing";
  }
  EXPECT_TRUE(seen) << fastest.uri() << " has no record";
}

TEST_F(TunerBackwardTest, InfeasibleAndSpillingBackwardCandidatesArePruned) {
  Database db(path("t.db"));
  FakeCompiler compiler;
  // Head dim 256: many backward tiles do not fit the model's shared memory or register budget.
  const Problem p = zigzag_problem(256);
  const WorkloadKey w = workload_for(p, StepType::kBwdDiagonal, kH200);
  const CandidateSet set = enumerate_candidates(w);
  ASSERT_GE(set.viable.size(), 3u);
  ASSERT_FALSE(set.pruned.empty());
  const KernelSpec spilling = set.viable[1], broken = set.viable[2];
  compiler.spill = {spilling.uri()};
  compiler.fail = {broken.uri()};
  Tuner tuner(db, quiet_options(false, true), compiler.fn(), nullptr, nullptr, test_env());
  TuneReport report = tuner.tune({p}, kH200);
  ASSERT_EQ(report.workloads.front().workload, w);
  const WorkloadResult& r = report.workloads.front();
  EXPECT_EQ(r.pruned, static_cast<int>(set.pruned.size()));
  EXPECT_EQ(r.compile_failed, 2);
  std::map<Disposition, int> counts = dispositions(db, w);
  EXPECT_EQ(counts[Disposition::kInfeasible], static_cast<int>(set.pruned.size()) + 1);  // + the spilling one
  EXPECT_EQ(counts[Disposition::kCompileFailed], 1);
  EXPECT_EQ(counts[Disposition::kNotTimed], static_cast<int>(set.viable.size()) - 2);
  std::set<std::string> pruned_uris;
  for (const PrunedCandidate& c : set.pruned) pruned_uris.insert(c.spec.uri());
  for (const Record& rec : records_for(db, w)) {
    if (rec.kernel_uri == spilling.uri()) EXPECT_NE(rec.detail.find("spill"), std::string::npos) << rec.detail;
    if (pruned_uris.count(rec.kernel_uri)) {
      EXPECT_EQ(rec.disposition, Disposition::kInfeasible);
      EXPECT_FALSE(check_feasibility(KernelSpec::parse(rec.kernel_uri), "sm_90a").feasible ||
                   rec.detail.find("exceeds the step") != std::string::npos)
          << rec.kernel_uri << ": " << rec.detail;
    }
  }
}

}  // namespace
}  // namespace cpgen::testing
