// The emulator's mbarrier (emulation/hopper_emulation.h) against the PTX ISA's definition: a phase
// completes when its pending arrivals reach zero and its transaction count is zero, then the
// phase flips and the arrival count resets; try_wait.parity answers whether the phase of that
// parity has completed; waiting threads let the others run, and a wait that can never end is a
// deadlock, not a hang. Tiny kernels that call the emulated operations directly, as
// templates/hopper.cuh does under the emulator.
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <vector>

#include "hopper_test_util.h"

namespace cpgen {
namespace {

constexpr uint32_t kBar = 0;  // the barrier's shared address in these kernels

TEST(Mbarrier, PhaseCompletesWhenEveryArrivalIsInAndFlips) {
  static uint64_t tokens[64];
  static int order[8];
  static std::atomic<int> step{0};
  step = 0;
  // Three arrivals per phase: threads 0-2 arrive in phase 0, threads 3-5 in phase 1; thread 31
  // watches the parities. Nobody waits on a barrier that others still have to reach except 31.
  const std::string error = emulation::launch(1, 1, 32, 64, [] {
    const unsigned t = threadIdx.x;
    if (t == 0) emulation::mbarrier_init(kBar, 3);
    __syncthreads();
    if (t < 3) {
      // Before any arrival phase 0 is incomplete: parity 0 is not done, and the previous phase
      // (parity 1) counts as done.
      if (t == 0) {
        order[0] = emulation::mbarrier_try_wait_parity(kBar, 0);
        order[1] = emulation::mbarrier_try_wait_parity(kBar, 1);
      }
      tokens[t] = emulation::mbarrier_arrive(kBar);
    }
    if (t == 31) {
      emulation::mbarrier_wait_parity(kBar, 0);                 // phase 0 done
      order[2] = emulation::mbarrier_try_wait_parity(kBar, 1);  // phase 1 not yet
      step = 1;
    }
    __syncthreads();
    if (t >= 3 && t < 6) tokens[t] = emulation::mbarrier_arrive(kBar);
    if (t == 31) {
      emulation::mbarrier_wait_parity(kBar, 1);                 // phase 1 done
      order[3] = emulation::mbarrier_try_wait_parity(kBar, 0);  // phase 2 (parity 0) not yet
    }
  });
  ASSERT_EQ(error, "");
  EXPECT_EQ(order[0], 0);
  EXPECT_EQ(order[1], 1);
  EXPECT_EQ(order[2], 0);
  EXPECT_EQ(order[3], 0);
  EXPECT_EQ(step.load(), 1);
  for (int t = 0; t < 3; ++t) EXPECT_EQ(tokens[t], 0u) << "arrivals of phase 0 get its token";
  for (int t = 3; t < 6; ++t) EXPECT_EQ(tokens[t], 1u) << "arrivals of phase 1 get its token";
}

TEST(Mbarrier, TransactionBytesHoldThePhaseUntilTheyComplete) {
  static int seen[6];
  const std::string error = emulation::launch(1, 1, 32, 64, [] {
    if (threadIdx.x != 0) return;
    emulation::mbarrier_init(kBar, 1);
    // The only arrival expects 96 bytes: the phase waits for them.
    emulation::mbarrier_arrive_expect_tx(kBar, 96);
    seen[0] = emulation::mbarrier_try_wait_parity(kBar, 0);
    emulation::mbarrier_complete_tx(kBar, 64);
    seen[1] = emulation::mbarrier_try_wait_parity(kBar, 0);
    emulation::mbarrier_complete_tx(kBar, 32);
    seen[2] = emulation::mbarrier_try_wait_parity(kBar, 0);
    // Phase 1: bytes may complete before the arrival that expects them (the count dips below
    // zero while an arrival is still pending), and the phase completes at that arrival.
    emulation::mbarrier_complete_tx(kBar, 48);
    seen[3] = emulation::mbarrier_try_wait_parity(kBar, 1);
    emulation::mbarrier_arrive_expect_tx(kBar, 48);
    seen[4] = emulation::mbarrier_try_wait_parity(kBar, 1);
    // Phase 2 with no bytes at all: a plain arrival completes it.
    emulation::mbarrier_arrive(kBar);
    seen[5] = emulation::mbarrier_try_wait_parity(kBar, 0);
  });
  ASSERT_EQ(error, "");
  EXPECT_EQ(seen[0], 0);
  EXPECT_EQ(seen[1], 0);
  EXPECT_EQ(seen[2], 1);
  EXPECT_EQ(seen[3], 0);
  EXPECT_EQ(seen[4], 1);
  EXPECT_EQ(seen[5], 1);
}

TEST(Mbarrier, WaitersYieldToTheThreadsTheyWaitFor) {
  // Warp 1 waits before warp 0 has arrived; warp 0 does its work first, then arrives (32
  // arrivals). The wait must let warp 0 run, and end once it has.
  static int value[32];
  static int copied[32];
  const std::string error = emulation::launch(1, 1, 64, 64, [] {
    const unsigned t = threadIdx.x;
    if (t == 0) emulation::mbarrier_init(kBar, 32);
    __syncthreads();
    if (t >= 32) {
      emulation::mbarrier_wait_parity(kBar, 0);
      copied[t - 32] = value[t - 32];
    } else {
      value[t] = 100 + static_cast<int>(t);
      emulation::mbarrier_arrive(kBar);
    }
  });
  ASSERT_EQ(error, "");
  for (int i = 0; i < 32; ++i) EXPECT_EQ(copied[i], 100 + i);
}

TEST(Mbarrier, AWaitThatCanNeverEndIsADeadlock) {
  // Two arrivals expected, one made: the waiter can never go on.
  const std::string error = emulation::launch(1, 1, 32, 64, [] {
    if (threadIdx.x == 0) emulation::mbarrier_init(kBar, 2);
    __syncthreads();
    if (threadIdx.x == 0) emulation::mbarrier_arrive(kBar);
    if (threadIdx.x == 1) emulation::mbarrier_wait_parity(kBar, 0);
  });
  EXPECT_NE(error.find("deadlock in block (0, 0, 0)"), std::string::npos) << error;
  EXPECT_NE(error.find("mbarrier phases that never complete"), std::string::npos) << error;
}

// An mbarrier is an 8-byte object at an 8-byte boundary of shared memory (PTX ISA, "Size and
// alignment of mbarrier object"); one at offset 4 is refused before it is used.
TEST(Mbarrier, ABarrierOffItsEightByteBoundaryIsCaught) {
  const std::string error = emulation::launch(1, 1, 32, 64, [] {
    if (threadIdx.x == 0) emulation::mbarrier_init(4, 1);
  });
  EXPECT_NE(error.find("thread 0 of block (0, 0, 0): mbarrier.init on shared address 0x4, not aligned to 8 bytes"),
            std::string::npos)
      << error;
}

}  // namespace
}  // namespace cpgen
