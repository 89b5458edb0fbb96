// The emulator's CTA barriers by id (barrier{.cta}.sync / .arrive, emulation/cuda_emulation.h)
// through the templates' wrappers (templates/named_barrier.cuh), against what the PTX ISA says
// they do: a sync waits until the phase's thread count has arrived, an arrive counts and goes on,
// a completed phase leaves the barrier ready for the next, counts are whole warps; and the
// findings and deadlocks of uses the ISA leaves undefined or that can never complete.
#include <gtest/gtest.h>

#include <string>
#include <vector>

// Last: defines __CUDACC__ and the CUDA keywords.
#include "emulation/cuda_emulation.h"
#include "cpgen/named_barrier.cuh"
#include "finding_test_util.h"

namespace cpgen {
namespace {

using device::named_barrier_arrive;
using device::named_barrier_sync;

using testing::expect_finding;

// What a warpgroup saw and did, in launch order (the fibers of a CTA run one at a time, so plain
// host variables are safe here).
int g_arrived = 0;
std::vector<int> g_seen;
std::string g_log;

// Warps 0-3 count themselves and arrive at barrier 1; warps 4-7 sync there (256 threads in all),
// then read the count: all 128 arrivals happened before any of them went on. The arriving warps
// then sync on barrier 2, which only the waiting warps' arrivals open: an arrive that blocked
// would deadlock.
TEST(NamedBarrier, SyncWaitsForEveryCountedArrivalAndArriveDoesNotWait) {
  g_arrived = 0;
  g_seen.clear();
  const std::string error = emulation::launch(1, 1, 256, 0, [] {
    if (threadIdx.x < 128) {
      ++g_arrived;
      named_barrier_arrive(1, 256);
      named_barrier_sync(2, 256);
    } else {
      named_barrier_sync(1, 256);
      g_seen.push_back(g_arrived);
      named_barrier_arrive(2, 256);
    }
  });
  ASSERT_EQ(error, "");
  ASSERT_EQ(g_seen.size(), 128u);
  for (int seen : g_seen) EXPECT_EQ(seen, 128);
}

// Two warpgroups take turns five times through barriers 1 and 2, each phase one warpgroup's sync
// and the other's arrive (the schedule the ping-pong kernel uses): the log alternates strictly.
// Without the barriers a fiber runs until it waits somewhere, so group 0 logs all its turns first.
void take_turns(bool ordered) {
  const int group = threadIdx.x / 128;
  if (ordered && group == 1) named_barrier_arrive(1, 256);  // group 0 goes first
  for (int turn = 0; turn < 5; ++turn) {
    if (ordered) named_barrier_sync(1 + group, 256);
    if (threadIdx.x % 128 == 0) g_log += static_cast<char>('A' + group);
    if (ordered && !(group == 1 && turn == 4)) named_barrier_arrive(2 - group, 256);
  }
}

TEST(NamedBarrier, PhasesAreReusedAndTwoBarriersAlternateTwoWarpgroups) {
  g_log.clear();
  ASSERT_EQ(emulation::launch(1, 1, 256, 0, [] { take_turns(true); }), "");
  EXPECT_EQ(g_log, "ABABABABAB");
  g_log.clear();
  ASSERT_EQ(emulation::launch(1, 1, 256, 0, [] { take_turns(false); }), "");
  EXPECT_EQ(g_log, "AAAAABBBBB");  // the test can tell ordered from not
}

// A barrier of two warps completes three phases while the CTA's other warps finish without ever
// touching it; and every thread syncing on barrier 7 with no count is a CTA-wide barrier.
TEST(NamedBarrier, SubsetBarrierCompletesWithoutTheOtherWarps) {
  g_arrived = 0;
  ASSERT_EQ(emulation::launch(1, 1, 128, 0, [] {
              if (threadIdx.x >= 64) return;
              for (int i = 0; i < 3; ++i) named_barrier_sync(3, 64);
              ++g_arrived;
            }),
            "");
  EXPECT_EQ(g_arrived, 64);
  ASSERT_EQ(emulation::launch(1, 2, 96, 0, [] {
              named_barrier_sync(7, 0);
              named_barrier_sync(7, 96);  // the same barrier with the CTA's count: the same phase size
            }),
            "");
}

TEST(NamedBarrier, UndefinedUsesAreFindings) {
  expect_finding(emulation::launch(1, 1, 64, 0, [] { named_barrier_sync(1, 48); }),
                 {"thread 0 of block (0, 0, 0)", "barrier.sync on barrier 1 with a thread count of 48",
                  "a multiple of 32 up to the CTA's 64 threads"});
  expect_finding(emulation::launch(1, 1, 64, 0, [] { named_barrier_arrive(2, 96); }),
                 {"barrier.arrive on barrier 2 with a thread count of 96"});
  expect_finding(emulation::launch(1, 1, 32, 0, [] { named_barrier_sync(16, 32); }),
                 {"barrier.sync on barrier 16; a CTA has barriers 0 to 15"});
  expect_finding(emulation::launch(1, 1, 32, 0, [] { named_barrier_arrive(1, 0); }),
                 {"barrier.arrive on barrier 1 with no thread count"});
  // Warp 0 begins a phase of 64 threads, warp 1 joins it counting 96: the phase still completes
  // at 64, and the mismatch is reported.
  expect_finding(emulation::launch(1, 1, 128, 0, [] {
                   if (threadIdx.x < 64) named_barrier_sync(4, threadIdx.x < 32 ? 64 : 96);
                 }),
                 {"thread 32 of block (0, 0, 0)", "barrier.sync on barrier 4 counts 96 threads",
                  "its current phase began with 64"});
  // Half of warp 0 and half of warp 1 fill a 32-thread phase: the hardware counts whole warps.
  expect_finding(emulation::launch(1, 1, 64, 0, [] {
                   if (threadIdx.x % 32 < 16) named_barrier_arrive(5, 32);
                 }),
                 {"barrier 5 completed a phase with 16 of warp 0's 32 lanes"});
  // Warp 0 arrives twice in one phase of 64 (two turns taken without the other warp's).
  expect_finding(emulation::launch(1, 1, 64, 0, [] {
                   if (threadIdx.x < 32) {
                     named_barrier_arrive(8, 64);
                     named_barrier_arrive(8, 64);
                   }
                 }),
                 {"barrier 8 completed a phase in which warp 0 arrived more than once (64 lane arrivals"});
  // An arrive no sync pairs with: the CTA ends with the phase open.
  expect_finding(emulation::launch(1, 1, 128, 0, [] {
                   if (threadIdx.x < 64) named_barrier_arrive(6, 128);
                 }),
                 {"block (0, 0, 0): the CTA ends with arrivals of barrier phases that never completed",
                  "barrier 6 (64 of 128 threads)"});
}

// Too few threads ever reach the barrier: the launch reports a deadlock naming it, not a hang.
TEST(NamedBarrier, PhaseThatCannotCompleteIsAReportedDeadlock) {
  const std::string error = emulation::launch(1, 1, 256, 0, [] {
    if (threadIdx.x < 128) named_barrier_sync(1, 256);
  });
  EXPECT_EQ(error.rfind("deadlock in block (0, 0, 0)", 0), 0u) << error;
  EXPECT_NE(error.find("barrier 1 (128 of 256 threads)"), std::string::npos) << error;
  // Both warpgroups sync on their own barrier first, each waiting for the other's arrive.
  const std::string crossed = emulation::launch(1, 1, 256, 0, [] {
    const int group = threadIdx.x / 128;
    named_barrier_sync(1 + group, 256);
    named_barrier_arrive(2 - group, 256);
  });
  EXPECT_EQ(crossed.rfind("deadlock in block (0, 0, 0)", 0), 0u) << crossed;
}

// __syncthreads (barrier.sync.aligned 0) reached by the lanes of one warp from two different
// call sites in one phase: a finding naming both lines. Two warps at two different call sites
// are fine: the phase counts threads, and each warp executes one instruction.
int g_first_line = 0;

TEST(NamedBarrier, LanesOfAWarpAtDifferentBarrierInstructionsAreAFinding) {
  const std::string error = emulation::launch(1, 1, 32, 0, [] {
    if (threadIdx.x < 16) {
      g_first_line = __LINE__ + 1;
      __syncthreads();
    } else {
      __syncthreads();
    }
  });
  expect_finding(error, {"thread 16 of block (0, 0, 0): barrier.sync on barrier 0 from another instruction than the "
                         "first of warp 0's lanes in this phase (",
                         "named_barrier_test.cpp:" + std::to_string(g_first_line) + ")",
                         "every lane of a warp must execute the same barrier instruction (.aligned) at "});
  EXPECT_EQ(emulation::launch(1, 1, 64, 0,
                              [] {
                                if (threadIdx.x < 32) {
                                  __syncthreads();
                                } else {
                                  __syncthreads();
                                }
                              }),
            "");
}

}  // namespace
}  // namespace cpgen
