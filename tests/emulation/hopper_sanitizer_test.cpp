// The sanitizer's findings about the sm_90a primitives (emulation/hopper_emulation.h), each
// triggered by a deliberately broken tiny kernel, next to the kernel done right where that is not
// already a test of its own: mbarrier misuse (uninitialized, transaction underflow or out of
// range, re-init of a pending phase or of any valid barrier without inval, an arrive in the next
// phase before any wait observed the last), TMA (on a barrier whose init no proxy fence orders
// before it, a read of landed bytes before the wait that observes their phase, a read outside the
// launch's buffers, copies whose phase never completes, a destination over an mbarrier, a refill
// of a stage a wgmma still reads), a shared store over a wgmma operand before its wait, wgmma (no
// fence, operations never retired, operands never written, a base offset, its accumulator or A
// registers touched before its wait, accumulators overlapping another shape's) and setmaxnreg (its
// range, its direction, the same sequence across a warpgroup). The cross-proxy fence of operands
// has its own file (proxy_fence_test.cpp).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "hopper_test_util.h"  // first: defines __CUDACC__ and the CUDA keywords
#include "cpgen/shared_access.cuh"

namespace cpgen {
namespace {

using testing::expect_finding;

constexpr uint32_t kBar = 0, kTile = 1024;

TEST(HopperSanitizer, ArriveOnAnUninitializedBarrier) {
  const std::string error = emulation::launch(1, 1, 32, 64, [] {
    if (threadIdx.x == 5) emulation::mbarrier_arrive(kBar + 8);
  });
  expect_finding(error, {"thread 5 of block (0, 0, 0)", "mbarrier.arrive on shared address 0x8",
                         "which no mbarrier.init initialized"});
}

TEST(HopperSanitizer, TransactionCountUnderflow) {
  // One arrival expecting 64 bytes, then 96 completed: 32 more than the phase can take.
  const std::string error = emulation::launch(1, 1, 32, 64, [] {
    if (threadIdx.x != 0) return;
    emulation::mbarrier_init(kBar, 1);
    emulation::mbarrier_arrive_expect_tx(kBar, 64);
    emulation::mbarrier_complete_tx(kBar, 96);
  });
  expect_finding(error, {"thread 0 of", "transaction count underflow, 32 bytes more completed than phase 0 expected"});
  // The same bytes in two phases: clean.
  EXPECT_EQ(emulation::launch(1, 1, 32, 64,
                              [] {
                                if (threadIdx.x != 0) return;
                                emulation::mbarrier_init(kBar, 1);
                                emulation::mbarrier_arrive_expect_tx(kBar, 64);
                                emulation::mbarrier_complete_tx(kBar, 64);
                                emulation::mbarrier_wait_parity(kBar, 0);
                                emulation::mbarrier_arrive_expect_tx(kBar, 32);
                                emulation::mbarrier_complete_tx(kBar, 32);
                              }),
            "");
}

TEST(HopperSanitizer, TransactionCountOutOfRangeAndTheDeadlockItCauses) {
  // 2^20 bytes is past the ISA's count: the arrival is refused, so the waiter can never go on;
  // the deadlock report carries the finding that caused it.
  const std::string error = emulation::launch(1, 1, 32, 64, [] {
    if (threadIdx.x == 0) emulation::mbarrier_init(kBar, 1);
    __syncthreads();
    if (threadIdx.x == 0) emulation::mbarrier_arrive_expect_tx(kBar, 1u << 20);
    emulation::mbarrier_wait_parity(kBar, 0);
  });
  EXPECT_EQ(error.rfind("deadlock in block (0, 0, 0)", 0), 0u) << error;
  EXPECT_NE(error.find("after the sanitizer's finding: thread 0 of block (0, 0, 0): mbarrier at 0x0: transaction count "
                       "1048576 outside the ISA's range"),
            std::string::npos)
      << error;
}

TEST(HopperSanitizer, ReinitializedWhileAPhaseIsPending) {
  const std::string error = emulation::launch(1, 1, 32, 64, [] {
    if (threadIdx.x != 0) return;
    emulation::mbarrier_init(kBar, 2);
    emulation::mbarrier_arrive(kBar);  // one of two arrivals: phase 0 pending
    emulation::mbarrier_init(kBar, 1);
  });
  expect_finding(error, {"mbarrier.init of the barrier at 0x0 while its phase 0 is pending (1 arrivals"});
}

// The ISA leaves an init over a valid mbarrier undefined, its phase complete or not: mbarrier.inval
// first, after which the old object is gone (an arrive on it is a finding) and init is clean.
TEST(HopperSanitizer, ReinitializedWithoutInvalidating) {
  expect_finding(emulation::launch(1, 1, 32, 64,
                                   [] {
                                     if (threadIdx.x != 0) return;
                                     emulation::mbarrier_init(kBar, 1);
                                     emulation::mbarrier_arrive(kBar);
                                     emulation::mbarrier_init(kBar, 4);
                                   }),
                 {"thread 0 of", "mbarrier.init of the barrier at 0x0, which holds a valid mbarrier (mbarrier.inval "
                                 "it first)"});
  EXPECT_EQ(emulation::launch(1, 1, 32, 64,
                              [] {
                                if (threadIdx.x != 0) return;
                                emulation::mbarrier_init(kBar, 1);
                                emulation::mbarrier_arrive(kBar);
                                emulation::mbarrier_inval(kBar);
                                emulation::mbarrier_init(kBar, 4);
                              }),
            "");
  expect_finding(emulation::launch(1, 1, 32, 64,
                                   [] {
                                     if (threadIdx.x != 0) return;
                                     emulation::mbarrier_init(kBar, 1);
                                     emulation::mbarrier_inval(kBar);
                                     emulation::mbarrier_arrive(kBar);
                                   }),
                 {"mbarrier.arrive on shared address 0x0, which no mbarrier.init initialized"});
}

// An 8 x 8 bf16 tensor, loaded whole as one box (128 bytes, no swizzle).
alignas(128) uint16_t g_tile[64];
emulation::TensorMap g_map;

void encode_tile_map(const void* address) { testing::encode_tile_map(g_map, g_tile, address); }

// Thread 0 loads the tile; warp 1 reads it with ldmatrix, after waiting for the phase or not.
template <bool kWait>
void load_then_read() {
  const unsigned t = threadIdx.x;
  if (t == 0) {
    emulation::mbarrier_init(kBar, 1);
    emulation::fence_proxy_async();  // the async proxy sees the initialized barrier
  }
  __syncthreads();
  if (t == 0) {
    const int32_t origin[2] = {0, 0};
    emulation::mbarrier_arrive_expect_tx(kBar, 128);
    emulation::tma_load(kTile, &g_map, origin, 2, kBar);
  }
  if (t >= 32) {
    if (kWait) emulation::mbarrier_wait_parity(kBar, 0);
    uint32_t r[4];
    emulation::ldmatrix_x4(r, kTile + 16 * (t % 8), false);
  }
}

TEST(HopperSanitizer, ReadOfTmaDataBeforeTheWaitThatObservesIt) {
  encode_tile_map(g_tile);
  testing::LaunchBuffers buffers({{g_tile, sizeof g_tile}});
  const std::string error = emulation::launch(1, 1, 64, 2048, load_then_read<false>);
  // Some lane of warp 1 (the tile is shared bytes 0x400-0x47f) is the first to report.
  expect_finding(error, {"of block (0, 0, 0): ldmatrix reads shared byte 0x4",
                         "that a TMA copy landed through the mbarrier at 0x0 in its phase 0",
                         "before this thread's wait observed that phase"});
  EXPECT_EQ(emulation::launch(1, 1, 64, 2048, load_then_read<true>), "");
}

// mbarrier.init writes the barrier through the generic proxy; the copy's complete_tx reaches it
// through the async proxy. Thread 0 initializes, fences (before the init, after it, or not at
// all), and after the barrier thread 32 issues the copy.
enum class InitFence { kNone, kBeforeInit, kAfterInit };
template <InitFence kFence>
void init_then_copy() {
  const unsigned t = threadIdx.x;
  if (t == 0) {
    if (kFence == InitFence::kBeforeInit) emulation::fence_proxy_async();
    emulation::mbarrier_init(kBar, 1);
    if (kFence == InitFence::kAfterInit) emulation::fence_proxy_async();
  }
  __syncthreads();
  if (t == 32) {
    const int32_t origin[2] = {0, 0};
    emulation::mbarrier_arrive_expect_tx(kBar, 128);
    emulation::tma_load(kTile, &g_map, origin, 2, kBar);
  }
  emulation::mbarrier_wait_parity(kBar, 0);
}

TEST(HopperSanitizer, TmaOnABarrierWhoseInitNoProxyFenceOrders) {
  encode_tile_map(g_tile);
  testing::LaunchBuffers buffers({{g_tile, sizeof g_tile}});
  for (const std::string& error : {emulation::launch(1, 1, 64, 2048, init_then_copy<InitFence::kNone>),
                                   emulation::launch(1, 1, 64, 2048, init_then_copy<InitFence::kBeforeInit>)})
    expect_finding(error, {"thread 32 of block (0, 0, 0): cp.async.bulk.tensor completes on the mbarrier at 0x0, "
                           "whose mbarrier.init by thread 0 no fence.proxy.async orders before this copy"});
  EXPECT_EQ(emulation::launch(1, 1, 64, 2048, init_then_copy<InitFence::kAfterInit>), "");
}

// PTX ISA: every phase needs a wait that returns true before an arrive-on in the next phase.
template <bool kWait>
void arrive_twice() {
  if (threadIdx.x != 0) return;
  emulation::mbarrier_init(kBar, 1);
  emulation::mbarrier_arrive(kBar);  // completes phase 0
  if (kWait) emulation::mbarrier_wait_parity(kBar, 0);
  emulation::mbarrier_arrive(kBar);
  emulation::mbarrier_wait_parity(kBar, 1);
}

TEST(HopperSanitizer, ArriveInTheNextPhaseBeforeAnyWaitObservedThePhase) {
  expect_finding(emulation::launch(1, 1, 32, 64, arrive_twice<false>),
                 {"thread 0 of", "mbarrier.arrive on the barrier at 0x0 in its phase 1 before any wait observed "
                                 "phase 0 complete"});
  EXPECT_EQ(emulation::launch(1, 1, 32, 64, arrive_twice<true>), "");
}

TEST(HopperSanitizer, TmaReadOutsideTheLaunchBuffers) {
  encode_tile_map(g_tile);
  // Only the first half of the tensor is a buffer of the launch: rows 4-7 lie outside.
  testing::LaunchBuffers buffers({{g_tile, sizeof g_tile / 2}});
  const std::string error = emulation::launch(1, 1, 64, 2048, load_then_read<true>);
  expect_finding(error,
                 {"thread 0 of", "cp.async.bulk.tensor reads global bytes", "outside every buffer of the launch"});
}

// initcheck for the TMA unit's reads: a box row of a poisoned buffer (GlobalBuffer::poisoned)
// still holding the allocation's fill is reported; the same tile written whole is clean.
TEST(HopperSanitizer, TmaReadOfNeverWrittenGlobalMemory) {
  encode_tile_map(g_tile);
  emulation::GlobalBuffer tile{g_tile, sizeof g_tile};
  tile.poisoned = true;
  testing::LaunchBuffers buffers({tile});
  g_tile[8 * 5 + 2] = 0xFFFF;  // row 5, elements 2 and 3: one 4-byte word as allocated
  g_tile[8 * 5 + 3] = 0xFFFF;
  expect_finding(emulation::launch(1, 1, 64, 2048, load_then_read<true>),
                 {"thread 0 of", "cp.async.bulk.tensor reads global bytes", "bytes 84..87 of the 128-byte buffer",
                  "(uninitialized read)"});
  g_tile[8 * 5 + 3] = 0x3f80;  // one half written: the word is no longer the fill
  EXPECT_EQ(emulation::launch(1, 1, 64, 2048, load_then_read<true>), "");
}

TEST(HopperSanitizer, TmaDestinationOverAnMbarrier) {
  encode_tile_map(g_tile);
  testing::LaunchBuffers buffers({{g_tile, sizeof g_tile}});
  // The barrier sits at 0x440, inside the 128 bytes the box lands in.
  const std::string error = emulation::launch(1, 1, 32, 2048, [] {
    if (threadIdx.x != 0) return;
    const int32_t origin[2] = {0, 0};
    emulation::mbarrier_init(kTile + 0x40, 1);
    emulation::fence_proxy_async();
    emulation::mbarrier_arrive_expect_tx(kTile + 0x40, 128);
    emulation::tma_load(kTile, &g_map, origin, 2, kTile + 0x40);
    emulation::mbarrier_wait_parity(kTile + 0x40, 0);
  });
  expect_finding(error,
                 {"thread 0 of", "cp.async.bulk.tensor destination [0x400, 0x480) overlaps the mbarrier at 0x440"});
}

TEST(HopperSanitizer, TmaCopyWhosePhaseNeverCompletes) {
  encode_tile_map(g_tile);
  testing::LaunchBuffers buffers({{g_tile, sizeof g_tile}});
  // 256 bytes expected, 128 copied: the phase never completes and nobody waits for it.
  const std::string error = emulation::launch(1, 1, 32, 2048, [] {
    if (threadIdx.x != 0) return;
    const int32_t origin[2] = {0, 0};
    emulation::mbarrier_init(kBar, 1);
    emulation::fence_proxy_async();
    emulation::mbarrier_arrive_expect_tx(kBar, 256);
    emulation::tma_load(kTile, &g_map, origin, 2, kBar);
  });
  expect_finding(error,
                 {"the CTA ends with 1 TMA copies waiting on the mbarrier at 0x0 for a phase that never completed"});
}

// A stage refilled by TMA while the consumer's wgmma on it is still in flight: warpgroup 1
// releases the stage (arrives on `empty`) before or after its wgmma.wait_group; thread 0 then
// loads the stage again. A 64 x 16 bf16 tile, K-major with the 32-byte swizzle (rows of 32 bytes,
// SBO 256), is both A and B. The orders: the wgmma retired before the release (right); released,
// then the refill waited for before the retiring wait_group; released and retired at once, with
// no wait between (the emulator then runs the retirement before the producer's next step, and
// only the order of the release and the retirement tells that the refill may race the MMA).
alignas(128) uint16_t g_stage_data[64 * 16];
emulation::TensorMap g_stage_map;
constexpr uint32_t kFull = 0, kEmpty = 8;

enum class Release { kAfterRetire, kBeforeRetireWaiting, kBeforeRetireAtOnce };

template <Release kOrder>
void refill_stage() {
  const unsigned t = threadIdx.x;
  if (t == 0) {
    emulation::mbarrier_init(kFull, 1);
    emulation::mbarrier_init(kEmpty, 128);
    emulation::fence_proxy_async();
  }
  __syncthreads();
  const int32_t origin[2] = {0, 0};
  if (t == 0) {
    emulation::mbarrier_arrive_expect_tx(kFull, 2048);
    emulation::tma_load(kTile, &g_stage_map, origin, 2, kFull);
    emulation::mbarrier_wait_parity(kEmpty, 0);
    emulation::mbarrier_arrive_expect_tx(kFull, 2048);
    emulation::tma_load(kTile, &g_stage_map, origin, 2, kFull);
  }
  if (t < 128) return;
  emulation::mbarrier_wait_parity(kFull, 0);
  const uint64_t desc = uint64_t{kTile >> 4} | uint64_t{256 >> 4} << 32 | uint64_t{emulation::kWgmmaSwizzle32B} << 62;
  float d[4];
  emulation::wgmma_fence();
  emulation::wgmma_mma_async_ss(d, 8, true, desc, desc, false, 1, 1, false, false);
  emulation::wgmma_commit_group();
  if (kOrder == Release::kAfterRetire) emulation::wgmma_wait_group(0);
  emulation::mbarrier_arrive(kEmpty);
  if (kOrder == Release::kBeforeRetireAtOnce) emulation::wgmma_wait_group(0);
  emulation::mbarrier_wait_parity(kFull, 1);
  emulation::wgmma_wait_group(0);
}

TEST(HopperSanitizer, TmaRefillsAStageAWgmmaStillReads) {
  for (int i = 0; i < 64 * 16; ++i) g_stage_data[i] = static_cast<uint16_t>(0x3f80 + i % 7);
  const uint64_t dims[2] = {16, 64}, strides[1] = {32};
  const uint32_t box[2] = {16, 64}, ones[2] = {1, 1};
  ASSERT_EQ(emulation::encode_tensor_map_tiled(&g_stage_map, emulation::kTensorMapBfloat16, 2, g_stage_data, dims,
                                               strides, box, ones, 0, emulation::kTensorMapSwizzle32B, 0, 0),
            "");
  testing::LaunchBuffers buffers({{g_stage_data, sizeof g_stage_data}});
  expect_finding(emulation::launch(1, 1, 256, 4096, refill_stage<Release::kBeforeRetireWaiting>),
                 {"thread 0 of", "a TMA copy lands in shared bytes [0x400, 0xc00) that thread 1",
                  "'s wgmma.mma_async still reads (no wgmma.wait_group retired it)"});
  expect_finding(emulation::launch(1, 1, 256, 4096, refill_stage<Release::kBeforeRetireAtOnce>),
                 {"a TMA copy lands in shared bytes [0x400, 0xc00) that thread 1",
                  "'s wgmma.mma_async read until the wgmma.wait_group that retired it, and that wait_group is not "
                  "ordered before this write (was the stage released before its wgmma retired?)"});
  EXPECT_EQ(emulation::launch(1, 1, 256, 4096, refill_stage<Release::kAfterRetire>), "");
}

// wgmma.fence, commit_group and wait_group are .sync.aligned: one warp of a warpgroup running an
// extra commit_group and wait_group (after the same wgmma as the others) is reported at the CTA's
// end; the same sequence in every warp is not.
template <bool kOneWarpDiffers>
void group_ops_by_warp() {
  if (threadIdx.x == 0) memset(cpgen::device::shared_storage, 0, 4096);
  __syncthreads();
  float d[4] = {};
  testing::issue_small_wgmma(d);
  if (kOneWarpDiffers && threadIdx.x / 32 == 1) {
    emulation::wgmma_commit_group();
    emulation::wgmma_wait_group(1);
  }
  emulation::wgmma_wait_group(0);
}

TEST(HopperSanitizer, WgmmaGroupOpsDifferingBetweenWarpsOfAWarpgroup) {
  expect_finding(emulation::launch(1, 1, 128, 4096, group_ops_by_warp<true>),
                 {"thread 32 ran 5 wgmma.fence/commit_group/wait_group but thread 0 of its warpgroup ran 3",
                  "they are .sync.aligned"});
  EXPECT_EQ(emulation::launch(1, 1, 128, 4096, group_ops_by_warp<false>), "");
}

// testing::issue_small_wgmma; `zero_operands` writes its operands first (with plain stores, which
// the emulator does not see).
template <bool kFence, bool kWait, bool kZeroOperands, uint32_t kBaseOffset = 0>
void one_wgmma() {
  if (kZeroOperands && threadIdx.x == 0) memset(cpgen::device::shared_storage, 0, 4096);
  __syncthreads();
  float d[4] = {};
  testing::issue_small_wgmma(d, kFence, kBaseOffset);
  if (kWait) emulation::wgmma_wait_group(0);
}

// A plain shared store over operand B of a wgmma that no wait_group has retired yet (every
// thread of the warpgroup issued and committed it; thread 5 then stores), and the same store once
// the wait retired it. The ISA forbids changing operands before the wait, whoever changes them.
template <bool kWaitFirst>
void store_over_operand() {
  if (threadIdx.x == 0) memset(cpgen::device::shared_storage, 0, 4096);
  __syncthreads();
  float d[4] = {};
  testing::issue_small_wgmma(d);
  if (kWaitFirst) emulation::wgmma_wait_group(0);
  __syncthreads();
  if (threadIdx.x == 5) device::store_shared(reinterpret_cast<uint32_t*>(cpgen::device::shared_storage + 2048), 1u);
  if (!kWaitFirst) emulation::wgmma_wait_group(0);
}

TEST(HopperSanitizer, AStoreOverAWgmmaOperandBeforeItsWait) {
  expect_finding(emulation::launch(1, 1, 128, 4096, store_over_operand<false>),
                 {"thread 5 of block (0, 0, 0): a shared store writes shared bytes [0x800, 0x804) that thread ",
                  "'s wgmma.mma_async still reads (no wgmma.wait_group retired it)"});
  EXPECT_EQ(emulation::launch(1, 1, 128, 4096, store_over_operand<true>), "");
}

TEST(HopperSanitizer, WgmmaWithoutAFence) {
  expect_finding(emulation::launch(1, 1, 128, 4096, one_wgmma<false, true, true>),
                 {"of block (0, 0, 0): wgmma.mma_async with no wgmma.fence"});
  EXPECT_EQ(emulation::launch(1, 1, 128, 4096, one_wgmma<true, true, true>), "");
}

TEST(HopperSanitizer, WgmmaNeverRetired) {
  expect_finding(emulation::launch(1, 1, 128, 4096, one_wgmma<true, false, true>),
                 {"ends with wgmma.mma_async operations that no wgmma.wait_group retired"});
}

TEST(HopperSanitizer, WgmmaOperandsNeverWritten) {
  expect_finding(emulation::launch(1, 1, 128, 4096, one_wgmma<true, true, false>),
                 {"wgmma.mma_async reads A from shared byte", "never written in this CTA"});
}

TEST(HopperSanitizer, WgmmaBaseOffsetIsNotModelled) {
  expect_finding(emulation::launch(1, 1, 128, 4096, one_wgmma<true, true, true, 3>), {"nonzero base offset"});
}

// Registers of a wgmma in flight (ISA: accessing the accumulators, or the A registers of the
// register form, before the wgmma.wait_group that retires it is undefined). Thread 9 writes one
// accumulator register, or one A register, between the commit and the wait; the kernel done right
// touches them only after the wait.
enum class Touch { kNothing, kAccumulator, kARegister };

// A register-form m64n8k16 wgmma's operands: this thread's accumulators and A registers, and B
// (zeroed shared bytes at 2048: the zeroing is the caller's, with a CTA barrier after it).
struct RegisterForm {
  float d[4] = {1, 2, 3, 4};
  uint32_t a[4] = {0x3f803f80u, 0x3f803f80u, 0x3f803f80u, 0x3f803f80u};
  uint64_t b = testing::isa_descriptor(2048, 128, 256, emulation::kWgmmaSwizzleNone);
};
void zero_shared_operands() {
  if (threadIdx.x == 0) memset(cpgen::device::shared_storage, 0, 4096);
  __syncthreads();
}

template <Touch kTouch>
void touch_in_flight_registers() {
  zero_shared_operands();
  RegisterForm r;
  float(&d)[4] = r.d;
  uint32_t(&a)[4] = r.a;
  const uint64_t b = r.b;
  emulation::wgmma_fence();
  emulation::wgmma_mma_async_rs(d, 8, true, a, b, true, 1, 1, false);
  emulation::wgmma_commit_group();
  if (threadIdx.x == 9 && kTouch == Touch::kAccumulator) d[2] = 0.5f;  // e.g. a rescale too early
  if (threadIdx.x == 9 && kTouch == Touch::kARegister) a[1] = 0;        // e.g. the next tile's P packed too early
  emulation::wgmma_wait_group(0);
  if (threadIdx.x == 9) d[2] *= 0.5f;  // after the wait: the kernel's own again
}

TEST(HopperSanitizer, RegistersOfAWgmmaInFlightAreTheWgmmasUntilItsWait) {
  expect_finding(emulation::launch(1, 1, 128, 4096, touch_in_flight_registers<Touch::kAccumulator>),
                 {"thread 9 of block (0, 0, 0): wrote accumulator register 2 of a wgmma.mma_async before the "
                  "wgmma.wait_group that retires it"});
  expect_finding(emulation::launch(1, 1, 128, 4096, touch_in_flight_registers<Touch::kARegister>),
                 {"thread 9 of block (0, 0, 0): changed the A registers of a wgmma.mma_async before the "
                  "wgmma.wait_group that retires it"});
  EXPECT_EQ(emulation::launch(1, 1, 128, 4096, touch_in_flight_registers<Touch::kNothing>), "");
}

// Registers changed between the wgmma.fence and the wgmma that uses them (ISA: the fence goes
// between a register access and a wgmma that accesses the same register). Two rounds of fence,
// two chained k-steps, commit and wait on the same registers, which the kernel changes after each
// wait (legal: before the next fence); in the second round thread 9 also writes an accumulator
// register after the fence (a rescale moved below it) or an A register (P packed after it).
template <Touch kTouch>
void touch_after_fence() {
  zero_shared_operands();
  RegisterForm r;
  float(&d)[4] = r.d;
  uint32_t(&a)[4] = r.a;
  const uint64_t b = r.b;
  for (int round = 0; round < 2; ++round) {
    emulation::wgmma_fence();
    if (round == 1 && threadIdx.x == 9 && kTouch == Touch::kAccumulator) d[1] *= 0.5f;
    if (round == 1 && threadIdx.x == 9 && kTouch == Touch::kARegister) a[3] = 0x3f803f00u;
    emulation::wgmma_mma_async_rs(d, 8, true, a, b, true, 1, 1, false);
    emulation::wgmma_mma_async_rs(d, 8, true, a, b, true, 1, 1, false);  // chains on the in-flight d
    emulation::wgmma_commit_group();
    emulation::wgmma_wait_group(0);
    d[0] *= 0.5f;  // after the wait and before the next fence: the kernel's own
    a[0] ^= 1u;
  }
}

TEST(HopperSanitizer, RegistersChangedBetweenTheFenceAndTheWgmma) {
  expect_finding(emulation::launch(1, 1, 128, 4096, touch_after_fence<Touch::kAccumulator>),
                 {"thread 9 of block (0, 0, 0): changed the accumulator registers of a wgmma.mma_async after the "
                  "wgmma.fence before it"});
  expect_finding(emulation::launch(1, 1, 128, 4096, touch_after_fence<Touch::kARegister>),
                 {"thread 9 of block (0, 0, 0): changed the A registers of a wgmma.mma_async after the "
                  "wgmma.fence before it"});
  EXPECT_EQ(emulation::launch(1, 1, 128, 4096, touch_after_fence<Touch::kNothing>), "");
}

// Accumulators of one in-flight wgmma partly reused by another of a different N: which registers
// the second chains on is not defined.
TEST(HopperSanitizer, AccumulatorsOverlappingAnInFlightWgmmaOfAnotherShape) {
  expect_finding(emulation::launch(1, 1, 128, 4096,
                                   [] {
                                     if (threadIdx.x == 0) memset(cpgen::device::shared_storage, 0, 4096);
                                     __syncthreads();
                                     float d[8] = {};
                                     const uint64_t a = testing::isa_descriptor(0, 128, 256, emulation::kWgmmaSwizzleNone);
                                     const uint64_t b = testing::isa_descriptor(2048, 128, 256, emulation::kWgmmaSwizzleNone);
                                     emulation::wgmma_fence();
                                     emulation::wgmma_mma_async_ss(d, 16, true, a, b, false, 1, 1, false, false);
                                     emulation::wgmma_mma_async_ss(d + 4, 8, true, a, b, false, 1, 1, false, false);
                                     emulation::wgmma_commit_group();
                                     emulation::wgmma_wait_group(0);
                                   }),
                 {"accumulator registers overlap those of an in-flight wgmma.mma_async of another shape"});
}

TEST(HopperSanitizer, SetmaxnregOutOfRange) {
  expect_finding(emulation::launch(1, 1, 32, 0, [] { emulation::setmaxnreg(threadIdx.x == 7 ? 20 : 240, true); }),
                 {"thread 7 of", "setmaxnreg.inc 20: must be a multiple of 8 from 24 to 256"});
  expect_finding(emulation::launch(1, 1, 32, 0, [] { emulation::setmaxnreg(100, false); }), {"setmaxnreg.dec 100"});
}

// The ISA: every warp of a warpgroup runs the same setmaxnreg; .dec lowers and .inc raises the count.
TEST(HopperSanitizer, SetmaxnregDiffersAcrossAWarpgroupOrGoesTheWrongWay) {
  // Two warpgroups, each the same throughout: the producer/consumer split of the wgmma kernels.
  EXPECT_EQ(emulation::launch(1, 1, 256, 0,
                              [] {
                                if (threadIdx.x < 128) emulation::setmaxnreg(24, false);
                                else emulation::setmaxnreg(240, true);
                              }),
            "");
  expect_finding(emulation::launch(1, 1, 128, 0,
                                   [] {
                                     emulation::setmaxnreg(24, false);
                                     if (threadIdx.x >= 32) emulation::setmaxnreg(240, true);
                                   }),
                 {"block (0, 0, 0): thread 32 ran setmaxnreg dec 24, inc 240 but thread 0 of its warpgroup ran dec 24; "
                  "every warp of a warpgroup must run the same setmaxnreg"});
  expect_finding(emulation::launch(1, 1, 128, 0,
                                   [] {
                                     emulation::setmaxnreg(24, false);
                                     emulation::setmaxnreg(40, false);
                                   }),
                 {"thread 0 of", "setmaxnreg.dec 40 after a setmaxnreg to 24: .dec must not raise the count"});
  expect_finding(emulation::launch(1, 1, 128, 0,
                                   [] {
                                     emulation::setmaxnreg(240, true);
                                     emulation::setmaxnreg(232, true);
                                   }),
                 {"setmaxnreg.inc 232 after a setmaxnreg to 240: .inc must not lower the count"});
}

TEST(HopperSanitizer, FenceProxyAsyncIsCounted) {
  const long before = emulation::async_proxy_fence_count();
  ASSERT_EQ(emulation::launch(1, 1, 64, 0, [] { emulation::fence_proxy_async(); }), "");
  EXPECT_EQ(emulation::async_proxy_fence_count(), before + 64);
}

}  // namespace
}  // namespace cpgen
