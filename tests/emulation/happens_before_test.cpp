// The order the sanitizer's race checks follow (emulation/happens_before.h): vector clocks, and
// the synchronization of a CTA that orders shared-memory accesses, against the PTX ISA's memory
// consistency model: barrier.sync and barrier.arrive release, only barrier.sync acquires, and only
// the threads counted in a phase take part in it; an mbarrier.arrive releases into its phase and a
// try_wait that observes the phase acquires it; TMA bytes become visible through the wait that
// observes their phase, or through a chain of synchronization from a thread that made one; and a
// TMA copy may land any time after its issue, so what its destination held must be done with by
// then. Tiny kernels: warps write rows with cp.async and read them with ldmatrix (shared_rows.h),
// thread 0 loads an 8 x 8 tile with TMA.
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "emulation/happens_before.h"
#include "hopper_test_util.h"  // first of the emulator's: defines __CUDACC__ and the CUDA keywords
#include "cpgen/named_barrier.cuh"
#include "shared_rows.h"

namespace cpgen {
namespace {

using device::named_barrier_arrive;
using device::named_barrier_sync;
using testing::expect_finding;
using testing::load_rows;

// The clocks themselves: a release by one thread and an acquire by another order the first's
// earlier accesses before the second's later ones, transitively, and nothing else.
TEST(HappensBefore, FollowsReleaseAndAcquireChains) {
  emulation::HappensBefore order;
  order.reset(3);
  const uint32_t first = order.stamp(0);
  EXPECT_FALSE(emulation::happens_before(0, first, order.view(1)));
  EXPECT_TRUE(emulation::happens_before(0, first, order.view(0)));  // a thread's own past
  emulation::SyncClock a, b;
  order.release(0, a);
  const uint32_t after_release = order.stamp(0);
  EXPECT_GT(after_release, first);
  order.acquire(1, a);
  EXPECT_TRUE(emulation::happens_before(0, first, order.view(1)));
  EXPECT_FALSE(emulation::happens_before(0, after_release, order.view(1)));  // after the release
  EXPECT_FALSE(emulation::happens_before(0, first, order.view(2)));
  order.release(1, b);  // 0 -> 1 -> 2
  order.acquire(2, b);
  EXPECT_TRUE(emulation::happens_before(0, first, order.view(2)));
  // An asynchronous actor past the threads: seen only through a clock that carries its stamp.
  const int actor = order.add_actor();
  EXPECT_FALSE(order.is_thread(actor));
  EXPECT_FALSE(emulation::happens_before(actor, 1, order.view(2)));
  emulation::SyncClock landed;
  landed.order.assign(static_cast<size_t>(actor) + 1, 0);
  landed.order[static_cast<size_t>(actor)] = 1;
  order.acquire(2, landed);
  EXPECT_TRUE(emulation::happens_before(actor, 1, order.view(2)));
  EXPECT_FALSE(emulation::happens_before(actor, 2, order.view(2)));
}

// The fenced clocks: a fence covers its thread's accesses before it (not after), reaches other
// threads only along release/acquire chains, and is never forgotten however many fences follow
// (the emulator once kept the latest 1024 fences and could then report a fenced write as unfenced).
TEST(HappensBefore, FencedClocksFollowTheOrderAndForgetNoFence) {
  emulation::HappensBefore order;
  order.reset(3);
  const uint32_t write = order.stamp(0);  // thread 0 writes ...
  EXPECT_FALSE(emulation::happens_before(0, write, order.fenced_view(0)));
  order.fence(0);  // ... and fences
  EXPECT_TRUE(emulation::happens_before(0, write, order.fenced_view(0)));
  const uint32_t after = order.stamp(0);  // a write after the fence is not covered by it
  EXPECT_FALSE(emulation::happens_before(0, after, order.fenced_view(0)));
  EXPECT_FALSE(emulation::happens_before(0, write, order.fenced_view(1)));  // not yet ordered before 1
  emulation::SyncClock phase;
  order.release(0, phase);
  order.acquire(1, phase);
  EXPECT_TRUE(emulation::happens_before(0, write, order.fenced_view(1)));
  EXPECT_FALSE(emulation::happens_before(0, after, order.fenced_view(1)));
  EXPECT_FALSE(emulation::happens_before(0, write, order.fenced_view(2)));
  // A fence by the reader after it acquired covers what it acquired, too.
  const uint32_t late = order.stamp(0);
  emulation::SyncClock second;
  order.release(0, second);
  order.acquire(2, second);
  EXPECT_FALSE(emulation::happens_before(0, late, order.fenced_view(2)));
  order.fence(2);
  EXPECT_TRUE(emulation::happens_before(0, late, order.fenced_view(2)));
  // Thousands of fences by another thread afterwards leave thread 0's fenced write fenced for 1.
  for (int i = 0; i < 5000; ++i) order.fence(2);
  EXPECT_TRUE(emulation::happens_before(0, write, order.fenced_view(1)));
}

alignas(16) unsigned char g_rows[128];

// A race finding of an ldmatrix by a thread in [reader_first, reader_first + 32) against an
// access by a thread in [writer_first, writer_first + 8) (which of them reports first is the
// fiber schedule's choice).
void expect_row_race(const std::string& error, int reader_first, int writer_first) {
  std::smatch m;
  const std::regex finding(
      "^sanitizer: thread ([0-9]+) of block \\(0, 0, 0\\): ldmatrix reads shared byte 0x[0-9a-f]+ that thread ([0-9]+) "
      "accessed with no barrier between them \\(race\\)");
  ASSERT_TRUE(std::regex_search(error, m, finding)) << error;
  const int reader = std::stoi(m[1].str()), writer = std::stoi(m[2].str());
  EXPECT_TRUE(reader >= reader_first && reader < reader_first + 32) << error;
  EXPECT_TRUE(writer >= writer_first && writer < writer_first + 8) << error;
}

// ---- CTA barriers by id ----

// Warp 0 writes the rows, warp 1 reads them, ordered through barrier 9 (64 threads) when warp 1
// syncs there, whether warp 0 syncs or only arrives; a write warp 0 makes after its arrive is not.
TEST(HappensBefore, ASubsetBarrierOrdersItsArrivalsBeforeItsWaiters) {
  EXPECT_EQ(emulation::launch(1, 1, 64, 128, [] {
              testing::copy_rows_in(g_rows);
              named_barrier_sync(9, 64);
              load_rows();
            }),
            "");
  EXPECT_EQ(emulation::launch(1, 1, 64, 128, [] {
              if (threadIdx.x < 32) {
                testing::copy_rows_in(g_rows);
                named_barrier_arrive(9, 64);
              } else {
                named_barrier_sync(9, 64);
                load_rows();
              }
            }),
            "");
  expect_row_race(emulation::launch(1, 1, 64, 128,
                                    [] {
                                      if (threadIdx.x < 32) {
                                        named_barrier_arrive(9, 64);
                                        testing::copy_rows_in(g_rows);
                                      } else {
                                        named_barrier_sync(9, 64);
                                        load_rows();
                                      }
                                    }),
                  32, 0);
}

// An arriving thread acquires nothing: warp 1 writes, then syncs on barrier 9 where warp 0 only
// arrives; warp 0 then waits on barrier 10 for warp 2 (which knows nothing of the write) and
// reads. Syncing on barrier 9 instead orders the write before the read.
template <bool kWarp0Syncs>
void arrive_then_read() {
  const int warp = threadIdx.x / 32;
  if (warp == 0) {
    if (kWarp0Syncs)
      named_barrier_sync(9, 64);
    else
      named_barrier_arrive(9, 64);
    named_barrier_sync(10, 64);
    load_rows();
  } else if (warp == 1) {
    testing::copy_rows_in(g_rows, 32);
    named_barrier_sync(9, 64);
  } else {
    named_barrier_arrive(10, 64);
  }
}

TEST(HappensBefore, AnArriveAcquiresNothing) {
  expect_row_race(emulation::launch(1, 1, 96, 128, arrive_then_read<false>), 0, 32);
  EXPECT_EQ(emulation::launch(1, 1, 96, 128, arrive_then_read<true>), "");
}

// Barrier 3 joins warps 0 and 1, barrier 4 warps 1 and 2: warp 2 reads what warp 0 wrote in
// order only through warp 1, and a warp no phase joined to the writer reads it out of order.
template <bool kChain>
void chain_then_read() {
  const int warp = threadIdx.x / 32;
  testing::copy_rows_in(g_rows);
  if (warp <= 1) named_barrier_sync(3, 64);
  if (kChain && warp >= 1) named_barrier_sync(4, 64);
  if (warp == 2) load_rows();
}

TEST(HappensBefore, OrderIsTransitiveAcrossBarriersAndStopsAtTheirParticipants) {
  EXPECT_EQ(emulation::launch(1, 1, 96, 128, chain_then_read<true>), "");
  expect_row_race(emulation::launch(1, 1, 96, 128, chain_then_read<false>), 64, 0);
}

// Regression: four warps read the rows, then warp 4 overwrites them after a barrier that only
// warps 0 and 3 join. The shadow used to keep two reads per byte (here the first and the latest,
// warps 0 and 3), so the race with warps 1 and 2 went unseen; every reader counts now. With all
// four readers in the barrier (160 threads) the overwrite is clean.
template <int kBarrierThreads>
void overwrite_after_some_readers() {
  const int warp = threadIdx.x / 32;
  testing::copy_rows_in(g_rows, 128);
  __syncthreads();
  if (warp < 4) load_rows();
  if (kBarrierThreads == 160 || warp == 0 || warp >= 3) named_barrier_sync(5, kBarrierThreads);
  if (warp == 4) testing::copy_rows_in(g_rows, 128);
}

TEST(HappensBefore, AnOverwriteIsOrderedAfterEveryReaderNotOnlyTheFirstAndLatest) {
  const std::string error = emulation::launch(1, 1, 160, 128, overwrite_after_some_readers<96>);
  std::smatch m;
  const std::regex finding(
      "^sanitizer: thread (1[2-3][0-9]) of block \\(0, 0, 0\\): cp.async lands in shared byte 0x[0-9a-f]+ that "
      "thread ([0-9]+) accessed with no barrier between them \\(race\\)");
  ASSERT_TRUE(std::regex_search(error, m, finding)) << error;
  const int reader = std::stoi(m[2].str());
  EXPECT_TRUE(reader >= 32 && reader < 96) << error;  // warp 1 or 2
  EXPECT_EQ(emulation::launch(1, 1, 160, 128, overwrite_after_some_readers<160>), "");
}

// ---- mbarriers ----

// Shared layout of these kernels: the rows at 0-127, the barriers, the TMA tile.
constexpr uint32_t kFull = 512, kEmpty = 520, kTile = 1024;

// Warp 0 writes the rows and arrives on an mbarrier of 32 arrivals; warp 1 waits for the phase
// and reads. Writing after the arrive is writing after the release.
template <bool kWriteFirst>
void write_arrive_wait_read() {
  const int warp = threadIdx.x / 32;
  if (threadIdx.x == 0) {
    emulation::mbarrier_init(kFull, 32);
    emulation::fence_proxy_async();  // the async proxy sees the initialized barrier
  }
  __syncthreads();
  if (warp == 0) {
    if (kWriteFirst) testing::copy_rows_in(g_rows);
    emulation::mbarrier_arrive(kFull);
    if (!kWriteFirst) testing::copy_rows_in(g_rows);
  } else {
    emulation::mbarrier_wait_parity(kFull, 0);
    load_rows();
  }
}

TEST(HappensBefore, AnMbarrierPhaseOrdersItsArrivalsBeforeItsObservers) {
  EXPECT_EQ(emulation::launch(1, 1, 64, 2048, write_arrive_wait_read<true>), "");
  expect_row_race(emulation::launch(1, 1, 64, 2048, write_arrive_wait_read<false>), 32, 0);
}

alignas(128) uint16_t g_tile[64];
emulation::TensorMap g_map;

void load_tile(uint32_t barrier) {
  const int32_t origin[2] = {0, 0};
  emulation::mbarrier_arrive_expect_tx(barrier, 128);
  emulation::tma_load(kTile, &g_map, origin, 2, barrier);
}

// Thread 0 loads the tile (its phase completes at once here); warp 1 observes the phase or not;
// after a __syncthreads warp 2 reads. The landing is visible to warp 2 through warp 1's wait and
// the barrier; with no thread that observed the phase, the barrier alone does not make it so.
template <bool kObserved>
void land_sync_read() {
  const int warp = threadIdx.x / 32;
  if (threadIdx.x == 0) {
    emulation::mbarrier_init(kFull, 1);
    emulation::fence_proxy_async();
  }
  __syncthreads();
  if (threadIdx.x == 0) load_tile(kFull);
  if (kObserved && warp == 1) emulation::mbarrier_wait_parity(kFull, 0);
  __syncthreads();
  if (warp == 2) {
    uint32_t r[4];
    emulation::ldmatrix_x4(r, kTile + 16 * (threadIdx.x % 8), false);
  }
}

TEST(HappensBefore, TmaBytesAreVisibleThroughAChainFromAnObserverOfTheirPhase) {
  testing::encode_tile_map(g_map, g_tile, g_tile);
  testing::LaunchBuffers buffers({{g_tile, sizeof g_tile}});
  EXPECT_EQ(emulation::launch(1, 1, 96, 2048, land_sync_read<true>), "");
  expect_finding(emulation::launch(1, 1, 96, 2048, land_sync_read<false>),
                 {"ldmatrix reads shared byte 0x4",
                  "that a TMA copy landed through the mbarrier at 0x200 in its phase 0, before this thread's wait observed "
                  "that phase (race)"});
}

// A stage handed back too early: warp 1 waits for the tile, arrives on the empty barrier and only
// then reads; thread 0, seeing the stage empty, loads the next tile over it. Reading before the
// arrive is the correct hand-over.
template <bool kReadFirst>
void refill_after_release() {
  const int warp = threadIdx.x / 32;
  if (threadIdx.x == 0) {
    emulation::mbarrier_init(kFull, 1);
    emulation::mbarrier_init(kEmpty, 32);
    emulation::fence_proxy_async();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    load_tile(kFull);
    emulation::mbarrier_wait_parity(kEmpty, 0);
    load_tile(kFull);
  }
  if (warp == 1) {
    uint32_t r[4];
    emulation::mbarrier_wait_parity(kFull, 0);
    if (kReadFirst) emulation::ldmatrix_x4(r, kTile + 16 * (threadIdx.x % 8), false);
    emulation::mbarrier_arrive(kEmpty);
    if (!kReadFirst) emulation::ldmatrix_x4(r, kTile + 16 * (threadIdx.x % 8), false);
  }
}

TEST(HappensBefore, ATmaCopyMustBeIssuedAfterTheReadsOfItsDestination) {
  testing::encode_tile_map(g_map, g_tile, g_tile);
  testing::LaunchBuffers buffers({{g_tile, sizeof g_tile}});
  EXPECT_EQ(emulation::launch(1, 1, 64, 2048, refill_after_release<true>), "");
  expect_finding(emulation::launch(1, 1, 64, 2048, refill_after_release<false>), {"(race)"});
}

}  // namespace
}  // namespace cpgen
